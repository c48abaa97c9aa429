// Internal to libs/runtime: the shape of an extern matrix product (mm, bmm,
// addmm, and matmul in every form torch.matmul has), shared by the CPU (BLAS)
// and CUDA (cuBLASLt) routines: a batch of `c = alpha * a @ b + beta * bias`
// matrix products, each operand seen as a strided matrix plus its strides
// along the result's batch dims.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kiln/runtime/runtime.h"

namespace kiln::runtime::detail {

// Element (i, j) lies `i * rowStride + j * colStride` elements from the base.
struct MatrixLayout {
  int64_t rows = 1, cols = 1, rowStride = 0, colStride = 0;
  MatrixLayout transposed() const { return {cols, rows, colStride, rowStride}; }
};

// An operand (or the result): its data at batch index 0, its matrix, and its
// strides along the result's batch dims (0 where it broadcasts or lacks the dim).
struct ProductOperand {
  void* data = nullptr;
  MatrixLayout matrix;
  std::vector<int64_t> batchStrides;
};

struct ProductShape {
  ir::DType dtype = ir::DType::Float32; // of every operand
  std::vector<int64_t> batchSizes;      // the result's batch dims
  ProductOperand a, b, c;               // c = alpha * a @ b (+ beta * bias)
  const Tensor* bias = nullptr;         // addmm's `self`, broadcast to c's matrix; null otherwise
  double alpha = 1, beta = 0;
  int64_t entries() const; // the number of matrices in the batch
};

// The product `op` computes into `out`, or nothing when `op` is not one of mm,
// bmm, addmm (with `alpha` and `beta`) and matmul. Error{InvalidArgument} when
// the operands' ranks, dtypes or sizes do not make `out`.
std::optional<ProductShape> productShape(const std::string& op, const std::vector<Tensor>& inputs,
                                         double alpha, double beta, const Tensor& out);

// addmm's bias (0-d, 1-d or 2-d) as a rows x cols matrix: broadcast dims stride 0.
MatrixLayout biasLayout(const Tensor& bias, int64_t rows, int64_t cols);

// Calls `fn(offsetA, offsetB, offsetC)` (in elements) for each batch entry, in row-major order.
template <class Fn> void forEachEntry(const ProductShape& p, Fn&& fn) {
  size_t dims = p.batchSizes.size();
  std::vector<int64_t> index(dims, 0);
  for (int64_t e = 0, n = p.entries(); e < n; ++e) {
    int64_t offA = 0, offB = 0, offC = 0;
    for (size_t d = 0; d < dims; ++d) {
      offA += index[d] * p.a.batchStrides[d];
      offB += index[d] * p.b.batchStrides[d];
      offC += index[d] * p.c.batchStrides[d];
    }
    fn(offA, offB, offC);
    for (size_t d = dims; d-- > 0;) {
      if (++index[d] < p.batchSizes[d]) break;
      index[d] = 0;
    }
  }
}

// Reads a number attribute (alpha, beta), or `otherwise` when absent.
double numberAttr(const std::vector<ir::Attr>& attrs, const char* name, double otherwise = 1.0);

} // namespace kiln::runtime::detail
