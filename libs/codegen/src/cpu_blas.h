// Internal to libs/codegen: matrix products on host memory through BLAS
// (OpenBLAS from Debian), for extern calls of f32 and f64 tensors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/ir/dtype.h"

namespace kiln::codegen::detail {

// A tensor in host memory: element 0 at `data`, sizes and strides in elements.
struct HostView {
  ir::DType dtype;
  std::byte* data;
  std::vector<int64_t> sizes, strides;
};

// Computes `op` (mm, bmm, addmm, or matmul of 2-d/3-d operands) into `out`
// with BLAS; false when this op, dtype or rank is not one it covers (the
// caller computes it another way). `alpha`/`beta`: addmm's.
bool blasMatmul(const std::string& op, const std::vector<HostView>& inputs, double alpha,
                double beta, const HostView& out);

bool haveBlas(); // whether kiln was built with BLAS

} // namespace kiln::codegen::detail
