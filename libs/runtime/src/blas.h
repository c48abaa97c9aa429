// Internal to libs/runtime: matrix products of f32 and f64 on host memory, for
// extern calls: through BLAS (OpenBLAS from Debian) where kiln was built with
// it, else through a plain loop.
#pragma once

#include <string>
#include <vector>

#include "kiln/runtime/runtime.h"

namespace kiln::runtime::detail {

// Computes `op` into `out`: mm, bmm, addmm (of 2-d mat1 and mat2; `alpha` and
// `beta` are addmm's) or matmul in every form torch.matmul has (1-d operands,
// batch dims broadcast). False when `op` is none of them or a dtype is not f32
// or f64 (the caller lowers those products to loops).
bool matrixProduct(const std::string& op, const std::vector<Tensor>& inputs, double alpha,
                   double beta, const Tensor& out);

bool haveBlas(); // whether kiln was built with BLAS

} // namespace kiln::runtime::detail
