#include "blas.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#ifdef KILN_HAVE_CBLAS
#include <cblas.h>
#endif

namespace kiln::runtime::detail {
namespace {

// One matrix of a batch entry: element (i, j) at data[i * rowStride + j * colStride].
template <class T> struct Matrix {
  const T* data;
  int64_t rows, cols, rowStride, colStride;
  T operator()(int64_t i, int64_t j) const { return data[i * rowStride + j * colStride]; }
};

// An operand or the result as a batch of matrices: its matrix, and its
// strides along the result's batch dims (0 where it broadcasts or lacks one).
// A 1-d operand is one row (`row`) or one column.
template <class T> struct Batch {
  Matrix<T> matrix;
  std::vector<int64_t> strides;
};

template <class T> Batch<T> asBatch(const Tensor& t, bool row, size_t batchDims) {
  size_t r = t.sizes.size();
  Batch<T> b{{static_cast<const T*>(t.data), 1, 1, 0, 0}, std::vector<int64_t>(batchDims, 0)};
  Matrix<T>& m = b.matrix;
  if (r == 1 && row) m.cols = t.sizes[0], m.colStride = t.strides[0];
  if (r == 1 && !row) m.rows = t.sizes[0], m.rowStride = t.strides[0];
  if (r >= 2) {
    m.rows = t.sizes[r - 2], m.cols = t.sizes[r - 1];
    m.rowStride = t.strides[r - 2], m.colStride = t.strides[r - 1];
  }
  size_t own = r >= 2 ? r - 2 : 0;
  for (size_t d = 0; d < own; ++d)
    b.strides[batchDims - own + d] = t.sizes[d] == 1 ? 0 : t.strides[d];
  return b;
}

#ifdef KILN_HAVE_CBLAS
// A matrix as BLAS takes it (one unit stride: row-major, or transposed), else nothing.
template <class T> bool blasForm(const Matrix<T>& m, bool& transposed, int64_t& ld) {
  transposed = false;
  if (m.colStride == 1 || m.cols == 1) {
    ld = m.rows == 1 ? std::max<int64_t>(m.cols, 1) : m.rowStride;
    return ld >= std::max<int64_t>(m.cols, 1);
  }
  transposed = true;
  ld = m.cols == 1 ? std::max<int64_t>(m.rows, 1) : m.colStride;
  return (m.rowStride == 1 || m.rows == 1) && ld >= std::max<int64_t>(m.rows, 1);
}

template <class T> Matrix<T> dense(const Matrix<T>& m, std::vector<T>& into) {
  into.resize(static_cast<size_t>(m.rows * m.cols));
  for (int64_t i = 0; i < m.rows; ++i)
    for (int64_t j = 0; j < m.cols; ++j) into[i * m.cols + j] = m(i, j);
  return {into.data(), m.rows, m.cols, m.cols, 1};
}

// c = alpha * a @ b + beta * c through BLAS; false when c's layout is not one it writes.
template <class T>
bool gemm(Matrix<T> a, Matrix<T> b, T* c, int64_t cRow, int64_t cCol, T alpha, T beta,
          std::vector<T>& scratchA, std::vector<T>& scratchB) {
  int64_t m = a.rows, n = b.cols, k = a.cols;
  if (cCol != 1 && n > 1) return false;
  int64_t ldc = m > 1 ? cRow : std::max<int64_t>(n, 1);
  if (ldc < n || k == 0) return false;
  bool ta, tb;
  int64_t lda, ldb;
  if (!blasForm(a, ta, lda)) a = dense(a, scratchA), blasForm(a, ta, lda);
  if (!blasForm(b, tb, ldb)) b = dense(b, scratchB), blasForm(b, tb, ldb);
  auto opA = ta ? CblasTrans : CblasNoTrans, opB = tb ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, opA, opB, int(m), int(n), int(k), alpha, a.data, int(lda), b.data,
                int(ldb), beta, c, int(ldc));
  else
    cblas_dgemm(CblasRowMajor, opA, opB, int(m), int(n), int(k), alpha, a.data, int(lda), b.data,
                int(ldb), beta, c, int(ldc));
  return true;
}
#endif

// c = alpha * a @ b + beta * c, where a factor of 0 drops its term (NaNs included), as torch.
template <class T>
void loop(const Matrix<T>& a, const Matrix<T>& b, T* c, int64_t cRow, int64_t cCol, T alpha,
          T beta) {
  for (int64_t i = 0; i < a.rows; ++i)
    for (int64_t j = 0; j < b.cols; ++j) {
      T dot = 0;
      for (int64_t k = 0; k < a.cols; ++k) dot += a(i, k) * b(k, j);
      T& out = c[i * cRow + j * cCol];
      out = (alpha != T(0) ? alpha * dot : T(0)) + (beta != T(0) ? beta * out : T(0));
    }
}

template <class T>
void product(const Tensor& a, const Tensor& b, const Tensor* bias, T alpha, T beta,
             const Tensor& out) {
  bool rowA = a.sizes.size() == 1, columnB = b.sizes.size() == 1;
  size_t batchDims = out.sizes.size() - (rowA ? 0 : 1) - (columnB ? 0 : 1);
  Batch<T> ba = asBatch<T>(a, true, batchDims), bb = asBatch<T>(b, false, batchDims);
  // The result's matrix: rows and columns its dims have, or 1.
  int64_t cRow = rowA ? 0 : out.strides[batchDims], cCol = columnB ? 0 : out.strides.back();
  int64_t entries = 1;
  for (size_t d = 0; d < batchDims; ++d) entries *= out.sizes[d];
  std::vector<int64_t> idx(batchDims, 0);
  std::vector<T> scratchA, scratchB;
  for (int64_t e = 0; e < entries; ++e) {
    int64_t offA = 0, offB = 0, offC = 0;
    for (size_t d = 0; d < batchDims; ++d) {
      offA += idx[d] * ba.strides[d];
      offB += idx[d] * bb.strides[d];
      offC += idx[d] * out.strides[d];
    }
    Matrix<T> ma = ba.matrix, mb = bb.matrix;
    ma.data += offA;
    mb.data += offB;
    T* c = static_cast<T*>(out.data) + offC;
    int64_t m = ma.rows, n = mb.cols;
    T betaHere = 0;
    if (bias && beta != T(0)) { // c = the bias, broadcast
      size_t rb = bias->sizes.size();
      const T* s = static_cast<const T*>(bias->data);
      int64_t si = rb == 2 && bias->sizes[0] != 1 ? bias->strides[0] : 0;
      int64_t sj = rb >= 1 && bias->sizes[rb - 1] != 1 ? bias->strides[rb - 1] : 0;
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) c[i * cRow + j * cCol] = s[i * si + j * sj];
      betaHere = beta;
    }
    bool done = false;
#ifdef KILN_HAVE_CBLAS
    done = m == 0 || n == 0 || gemm(ma, mb, c, cRow, cCol, alpha, betaHere, scratchA, scratchB);
#endif
    if (!done) loop(ma, mb, c, cRow, cCol, alpha, betaHere);
    for (size_t d = batchDims; d-- > 0;) {
      if (++idx[d] < out.sizes[d]) break;
      idx[d] = 0;
    }
  }
}

} // namespace

bool haveBlas() {
#ifdef KILN_HAVE_CBLAS
  return true;
#else
  return false;
#endif
}

bool matrixProduct(const std::string& op, const std::vector<Tensor>& inputs, double alpha,
                   double beta, const Tensor& out) {
  if (out.dtype != ir::DType::Float32 && out.dtype != ir::DType::Float64) return false;
  for (const Tensor& v : inputs)
    if (v.dtype != out.dtype) return false;
  const Tensor* bias = nullptr;
  const Tensor *a, *b;
  if (op == "addmm" && inputs.size() == 3) {
    bias = &inputs[0];
    a = &inputs[1];
    b = &inputs[2];
  } else if ((op == "mm" || op == "bmm" || op == "matmul") && inputs.size() == 2) {
    a = &inputs[0];
    b = &inputs[1];
    alpha = 1;
    beta = 0;
  } else {
    return false;
  }
  if (out.dtype == ir::DType::Float32)
    product<float>(*a, *b, bias, static_cast<float>(alpha), static_cast<float>(beta), out);
  else
    product<double>(*a, *b, bias, alpha, beta, out);
  return true;
}

} // namespace kiln::runtime::detail
