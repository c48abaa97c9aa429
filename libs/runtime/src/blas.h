// Internal to libs/runtime: matrix products on host memory through BLAS
// (OpenBLAS from Debian), for extern calls of f32 and f64 tensors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/runtime/runtime.h"

namespace kiln::runtime::detail {

// Computes `op` (mm, bmm, addmm, or matmul of 2-d/3-d operands) into `out`
// with BLAS; false when this op, dtype or rank is not one it covers (the
// caller computes it another way). `alpha`/`beta`: addmm's.
bool blasMatmul(const std::string& op, const std::vector<Tensor>& inputs, double alpha,
                double beta, const Tensor& out);

bool haveBlas(); // whether kiln was built with BLAS

} // namespace kiln::runtime::detail
