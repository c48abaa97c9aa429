#include "blas.h"

#include "matrix_product.h"

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

template <class T> Matrix<T> matrix(const void* data, const MatrixLayout& m, int64_t offset) {
  return {static_cast<const T*>(data) + offset, m.rows, m.cols, m.rowStride, m.colStride};
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

template <class T> void product(const ProductShape& p) {
  T alpha = static_cast<T>(p.alpha), beta = static_cast<T>(p.beta);
  int64_t m = p.c.matrix.rows, n = p.c.matrix.cols;
  int64_t cRow = p.c.matrix.rowStride, cCol = p.c.matrix.colStride;
  std::vector<T> scratchA, scratchB;
  forEachEntry(p, [&](int64_t offA, int64_t offB, int64_t offC) {
    Matrix<T> ma = matrix<T>(p.a.data, p.a.matrix, offA),
              mb = matrix<T>(p.b.data, p.b.matrix, offB);
    T* c = static_cast<T*>(p.c.data) + offC;
    T betaHere = 0;
    if (p.bias && beta != T(0)) { // c = the bias, broadcast
      Matrix<T> s = matrix<T>(p.bias->data, biasLayout(*p.bias, m, n), 0);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) c[i * cRow + j * cCol] = s(i, j);
      betaHere = beta;
    }
    bool done = false;
#ifdef KILN_HAVE_CBLAS
    done = m == 0 || n == 0 || gemm(ma, mb, c, cRow, cCol, alpha, betaHere, scratchA, scratchB);
#endif
    if (!done) loop(ma, mb, c, cRow, cCol, alpha, betaHere);
  });
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
  std::optional<ProductShape> p = productShape(op, inputs, alpha, beta, out);
  if (!p) return false;
  if (out.dtype == ir::DType::Float32)
    product<float>(*p);
  else
    product<double>(*p);
  return true;
}

} // namespace kiln::runtime::detail
