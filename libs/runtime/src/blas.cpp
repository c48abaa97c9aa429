#include "blas.h"

#include <cstring>

#ifdef KILN_HAVE_CBLAS
#include <cblas.h>
#endif

namespace kiln::runtime::detail {
namespace {

// One matrix operand of a gemm: rows x cols at `data` with a leading
// dimension, transposed or not (BLAS needs one unit stride).
struct Matrix {
  const std::byte* data;
  int64_t rows, cols, ld;
  bool transposed;
};

// A row-major or column-major view of a 2-d slice, else nothing.
bool asMatrix(const std::byte* data, int64_t rows, int64_t cols, int64_t rowStride,
              int64_t colStride, Matrix& m) {
  m = {data, rows, cols, 0, false};
  if (colStride == 1 || cols == 1) {
    m.ld = rows == 1 ? std::max<int64_t>(cols, 1) : rowStride;
    return m.ld >= std::max<int64_t>(cols, 1);
  }
  if (rowStride == 1 || rows == 1) {
    m.transposed = true;
    m.ld = cols == 1 ? std::max<int64_t>(rows, 1) : colStride;
    return m.ld >= std::max<int64_t>(rows, 1);
  }
  return false;
}

template <class T> void copyDense(const Tensor& v, size_t batchDims, int64_t batch, std::vector<T>& into) {
  // A contiguous copy of one batch entry of `v` (its last two dims).
  size_t r = v.sizes.size();
  int64_t rows = v.sizes[r - 2], cols = v.sizes[r - 1];
  const T* base = reinterpret_cast<const T*>(v.data) + (batchDims ? batch * v.strides[0] : 0);
  into.resize(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) into[i * cols + j] = base[i * v.strides[r - 2] + j * v.strides[r - 1]];
}

#ifdef KILN_HAVE_CBLAS
template <class T>
void gemm(const Matrix& a, const Matrix& b, T* c, int64_t ldc, T alpha, T beta) {
  auto ta = a.transposed ? CblasTrans : CblasNoTrans, tb = b.transposed ? CblasTrans : CblasNoTrans;
  int m = static_cast<int>(a.rows), n = static_cast<int>(b.cols), k = static_cast<int>(a.cols);
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, alpha, reinterpret_cast<const float*>(a.data),
                static_cast<int>(a.ld), reinterpret_cast<const float*>(b.data),
                static_cast<int>(b.ld), beta, c, static_cast<int>(ldc));
  else
    cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, alpha, reinterpret_cast<const double*>(a.data),
                static_cast<int>(a.ld), reinterpret_cast<const double*>(b.data),
                static_cast<int>(b.ld), beta, c, static_cast<int>(ldc));
}

// One gemm per batch entry; operands of rank 2 are shared by every entry.
template <class T>
bool batched(const Tensor& a, const Tensor& b, const Tensor* bias, T alpha, T beta,
             const Tensor& out) {
  size_t ro = out.sizes.size();
  int64_t batches = ro == 3 ? out.sizes[0] : 1;
  int64_t m = out.sizes[ro - 2], n = out.sizes[ro - 1];
  if (out.strides[ro - 1] != 1 && n > 1) return false;
  int64_t ldc = m > 1 ? out.strides[ro - 2] : std::max<int64_t>(n, 1);
  if (ldc < n) return false;
  std::vector<T> denseA, denseB;
  for (int64_t e = 0; e < batches; ++e) {
    T* c = reinterpret_cast<T*>(out.data) + (ro == 3 ? e * out.strides[0] : 0);
    T betaHere = 0;
    if (bias && beta != T(0)) { // C = bias, broadcast
      size_t rb = bias->sizes.size();
      const T* s = reinterpret_cast<const T*>(bias->data);
      int64_t si = rb == 2 && bias->sizes[0] != 1 ? bias->strides[0] : 0;
      int64_t sj = rb >= 1 && bias->sizes[rb - 1] != 1 ? bias->strides[rb - 1] : 0;
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = s[i * si + j * sj];
      betaHere = beta;
    }
    auto operand = [&](const Tensor& v, std::vector<T>& dense, Matrix& mat) {
      size_t r = v.sizes.size();
      int64_t off = r == 3 ? e * v.strides[0] : 0;
      const std::byte* at = static_cast<const std::byte*>(v.data) + off * static_cast<int64_t>(sizeof(T));
      if (asMatrix(at, v.sizes[r - 2], v.sizes[r - 1], v.strides[r - 2], v.strides[r - 1], mat)) return;
      copyDense<T>(v, r == 3, e, dense);
      mat = {reinterpret_cast<const std::byte*>(dense.data()), v.sizes[r - 2], v.sizes[r - 1],
             std::max<int64_t>(v.sizes[r - 1], 1), false};
    };
    Matrix ma, mb;
    operand(a, denseA, ma);
    operand(b, denseB, mb);
    if (m == 0 || n == 0) continue;
    if (ma.cols == 0) { // an empty sum: beta * C (or 0)
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = betaHere == T(0) ? T(0) : c[i * ldc + j] * betaHere;
      continue;
    }
    gemm<T>(ma, mb, c, ldc, alpha, betaHere);
  }
  return true;
}
#endif

} // namespace

bool haveBlas() {
#ifdef KILN_HAVE_CBLAS
  return true;
#else
  return false;
#endif
}

bool blasMatmul(const std::string& op, const std::vector<Tensor>& inputs, double alpha,
                double beta, const Tensor& out) {
#ifdef KILN_HAVE_CBLAS
  if (out.dtype != ir::DType::Float32 && out.dtype != ir::DType::Float64) return false;
  for (const Tensor& v : inputs)
    if (v.dtype != out.dtype) return false;
  const Tensor* bias = nullptr;
  const Tensor *a, *b;
  if (op == "addmm") {
    if (inputs.size() != 3 || inputs[1].sizes.size() != 2 || inputs[2].sizes.size() != 2) return false;
    bias = &inputs[0];
    a = &inputs[1];
    b = &inputs[2];
  } else if (op == "mm" || op == "bmm" || op == "matmul") {
    if (inputs.size() != 2) return false;
    a = &inputs[0];
    b = &inputs[1];
    alpha = 1;
    beta = 0;
    size_t ra = a->sizes.size(), rb = b->sizes.size();
    // matmul: only the forms that are one gemm per batch entry
    if (!((ra == 2 && rb == 2) || (ra == 3 && rb == 3 && a->sizes[0] == b->sizes[0]) ||
          (ra == 3 && rb == 2)))
      return false;
    if (ra == 3 && rb == 2 && out.sizes.size() != 3) return false;
  } else {
    return false;
  }
  if (out.dtype == ir::DType::Float32)
    return batched<float>(*a, *b, bias, static_cast<float>(alpha), static_cast<float>(beta), out);
  return batched<double>(*a, *b, bias, alpha, beta, out);
#else
  (void)op, (void)inputs, (void)alpha, (void)beta, (void)out;
  return false;
#endif
}

} // namespace kiln::runtime::detail
