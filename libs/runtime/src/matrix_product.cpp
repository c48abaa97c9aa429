#include "matrix_product.h"

#include "kiln/common/error.h"

namespace kiln::runtime::detail {
namespace {

[[noreturn]] void invalid(const std::string& op, const std::string& message) {
  throw Error(ErrorCode::InvalidArgument, "runtime: extern " + op + ": " + message);
}

std::string shapeText(const std::vector<int64_t>& sizes) {
  std::string out = "[";
  for (size_t d = 0; d < sizes.size(); ++d) out += (d ? ", " : "") + std::to_string(sizes[d]);
  return out + "]";
}

// An operand as a batch: a 1-d operand is one row (`row`) or one column; the
// dims before its last two align with the result's last batch dims.
ProductOperand operand(const std::string& op, const Tensor& t, bool row,
                       const std::vector<int64_t>& batchSizes) {
  size_t r = t.sizes.size(), dims = batchSizes.size();
  if (t.strides.size() != r)
    invalid(op, "an operand with " + std::to_string(r) + " sizes and " +
                    std::to_string(t.strides.size()) + " strides");
  ProductOperand p{t.data, {}, std::vector<int64_t>(dims, 0)};
  MatrixLayout& m = p.matrix;
  if (r == 0) invalid(op, "a 0-d operand");
  if (r == 1 && row) m.cols = t.sizes[0], m.colStride = t.strides[0];
  if (r == 1 && !row) m.rows = t.sizes[0], m.rowStride = t.strides[0];
  if (r >= 2) {
    m.rows = t.sizes[r - 2], m.cols = t.sizes[r - 1];
    m.rowStride = t.strides[r - 2], m.colStride = t.strides[r - 1];
  }
  size_t own = r >= 2 ? r - 2 : 0;
  if (own > dims)
    invalid(op, "operand " + shapeText(t.sizes) + " has more batch dims than the result");
  for (size_t d = 0; d < own; ++d) {
    int64_t size = t.sizes[d], want = batchSizes[dims - own + d];
    if (size != want && size != 1)
      invalid(op, "operand " + shapeText(t.sizes) + " does not broadcast to the batch " +
                      shapeText(batchSizes));
    p.batchStrides[dims - own + d] = size == 1 ? 0 : t.strides[d];
  }
  return p;
}

} // namespace

int64_t ProductShape::entries() const {
  int64_t n = 1;
  for (int64_t s : batchSizes) n *= s;
  return n;
}

double numberAttr(const std::vector<ir::Attr>& attrs, const char* name, double otherwise) {
  for (const ir::Attr& a : attrs) {
    if (a.name != name) continue;
    if (auto* d = std::get_if<double>(&a.value)) return *d;
    if (auto* i = std::get_if<int64_t>(&a.value)) return static_cast<double>(*i);
  }
  return otherwise;
}

std::optional<ProductShape> productShape(const std::string& op, const std::vector<Tensor>& inputs,
                                         double alpha, double beta, const Tensor& out) {
  ProductShape p;
  const Tensor *a, *b;
  if (op == "addmm" && inputs.size() == 3) {
    p.bias = &inputs[0], a = &inputs[1], b = &inputs[2];
    p.alpha = alpha, p.beta = beta;
  } else if ((op == "mm" || op == "bmm" || op == "matmul") && inputs.size() == 2) {
    a = &inputs[0], b = &inputs[1];
  } else {
    return std::nullopt;
  }
  p.dtype = out.dtype;
  for (const Tensor& t : inputs)
    if (t.dtype != out.dtype)
      invalid(op, std::string("operands of ") + std::string(ir::name(t.dtype)) +
                      " for a result of " + std::string(ir::name(out.dtype)));
  size_t ra = a->sizes.size(), rb = b->sizes.size();
  if ((op == "mm" || op == "addmm") && (ra != 2 || rb != 2))
    invalid(op, "takes 2-d operands, got " + shapeText(a->sizes) + " and " + shapeText(b->sizes));
  if (op == "bmm" && (ra != 3 || rb != 3))
    invalid(op, "takes 3-d operands, got " + shapeText(a->sizes) + " and " + shapeText(b->sizes));
  if (p.bias && p.bias->sizes.size() > 2) invalid(op, "a bias of rank > 2");
  bool rowA = ra == 1, columnB = rb == 1;
  size_t matrixDims = (rowA ? 0 : 1) + (columnB ? 0 : 1);
  if (out.sizes.size() < matrixDims || out.strides.size() != out.sizes.size())
    invalid(op, "a result of shape " + shapeText(out.sizes));
  size_t batchDims = out.sizes.size() - matrixDims;
  p.batchSizes.assign(out.sizes.begin(), out.sizes.begin() + static_cast<long>(batchDims));
  p.a = operand(op, *a, true, p.batchSizes);
  p.b = operand(op, *b, false, p.batchSizes);
  // The result's matrix: rows and columns its dims have, or 1.
  p.c.data = out.data;
  p.c.batchStrides.assign(out.strides.begin(), out.strides.begin() + static_cast<long>(batchDims));
  MatrixLayout& c = p.c.matrix;
  if (!rowA) c.rows = out.sizes[batchDims], c.rowStride = out.strides[batchDims];
  if (!columnB) c.cols = out.sizes.back(), c.colStride = out.strides.back();
  if (p.a.matrix.cols != p.b.matrix.rows || c.rows != p.a.matrix.rows || c.cols != p.b.matrix.cols)
    invalid(op, shapeText(a->sizes) + " @ " + shapeText(b->sizes) + " does not make " +
                    shapeText(out.sizes));
  if (p.bias) {
    const std::vector<int64_t>& s = p.bias->sizes;
    size_t r = s.size();
    bool fits =
        (r < 1 || s[r - 1] == 1 || s[r - 1] == c.cols) && (r < 2 || s[0] == 1 || s[0] == c.rows);
    if (!fits || p.bias->strides.size() != r)
      invalid(op, "a bias " + shapeText(s) + " for a result " + shapeText(out.sizes));
  }
  return p;
}

MatrixLayout biasLayout(const Tensor& bias, int64_t rows, int64_t cols) {
  size_t r = bias.sizes.size();
  MatrixLayout m{rows, cols, 0, 0};
  if (r >= 1 && bias.sizes[r - 1] != 1) m.colStride = bias.strides[r - 1];
  if (r == 2 && bias.sizes[0] != 1) m.rowStride = bias.strides[0];
  return m;
}

} // namespace kiln::runtime::detail
