// Matrix products, indexing along a dim, and normalisations along a dim.
#include <algorithm>
#include <string>

#include "infer.h"
#include "kiln/sym/print.h"

namespace kiln::ir::detail {
namespace {

void requireRank(const OpCall& call, std::string_view arg, size_t rank) {
  size_t got = call.tensor(arg).dim();
  if (got != rank)
    call.fail(arg, "expected a " + std::to_string(rank) + "-d tensor, got " + std::to_string(got) +
                       "-d");
}

// The operands of a matrix product: equal dtypes, not bool (torch has no bool
// kernel for them on any device).
void requireProductDType(const OpCall& call, std::string_view first,
                         std::initializer_list<std::string_view> others) {
  DType t = call.tensor(first).dtype;
  if (t == DType::Bool) call.fail(first, "dtype bool is not supported by matrix products");
  for (std::string_view arg : others)
    if (call.has(arg) && call.tensor(arg).dtype != t)
      call.fail(arg, "expected dtype " + std::string(name(t)) + ", got " +
                         std::string(name(call.tensor(arg).dtype)));
}

// mm: [n, k] @ [k, m]; bmm: [b, n, k] @ [b, k, m]. Same dtypes, as torch requires.
template <size_t rank> Value inferMatmul(const OpCall& call) {
  requireRank(call, "self", rank);
  requireRank(call, "mat2", rank);
  const TensorMeta& a = call.tensor("self");
  const TensorMeta& b = call.tensor("mat2");
  requireProductDType(call, "self", {"mat2"});
  if (rank == 3) requireEqual(call, "mat2", a.sizes[0], b.sizes[0], "batch sizes differ");
  requireEqual(call, "mat2", a.sizes[rank - 1], b.sizes[rank - 2], "inner sizes differ");
  Shape sizes(a.sizes.begin(), a.sizes.end() - 1);
  sizes.push_back(b.sizes[rank - 1]);
  return fresh(call, a.dtype, sizes, commonDevice(call, {"self", "mat2"}),
               anyRequiresGrad(call, {"self", "mat2"}));
}

// addmm(self, mat1, mat2, beta, alpha): beta * self + alpha * (mat1 @ mat2),
// self broadcasting to [n, m].
Value inferAddmm(const OpCall& call) {
  requireRank(call, "mat1", 2);
  requireRank(call, "mat2", 2);
  const TensorMeta& self = call.tensor("self");
  const TensorMeta& a = call.tensor("mat1");
  const TensorMeta& b = call.tensor("mat2");
  requireProductDType(call, "self", {"mat1", "mat2"});
  requireEqual(call, "mat2", a.sizes[1], b.sizes[0], "inner sizes differ");
  Shape sizes = {a.sizes[0], b.sizes[1]};
  if (self.dim() > 2) call.fail("self", "must have at most 2 dims");
  for (size_t i = 0; i < self.dim(); ++i) {
    sym::Expr have = self.sizes[i], want = sizes[2 - self.dim() + i];
    if (!provable(sym::eq(have, 1)))
      requireEqual(call, "self", have, want, "does not broadcast to the product");
  }
  if (isIntegral(self.dtype, true))
    for (std::string_view arg : {"beta", "alpha"})
      if (std::holds_alternative<double>(call.attr(arg)))
        call.fail(arg, "must not be a floating point number for integral inputs");
  return fresh(call, self.dtype, sizes, commonDevice(call, {"self", "mat1", "mat2"}),
               anyRequiresGrad(call, {"self", "mat1", "mat2"}));
}

// matmul: torch.matmul's cases. 1-d operands gain a dim of 1 (in front of the
// first, behind the second) that the result drops; batch dims broadcast.
Value inferMatmulGeneral(const OpCall& call) {
  const TensorMeta& a = call.tensor("self");
  const TensorMeta& b = call.tensor("other");
  if (a.dim() == 0 || b.dim() == 0) call.fail(a.dim() == 0 ? "self" : "other", "must not be 0-d");
  requireProductDType(call, "self", {"other"});
  sym::Expr one = call.table().integer(1);
  Shape x = a.sizes, y = b.sizes;
  bool vectorA = x.size() == 1, vectorB = y.size() == 1;
  if (vectorA) x.insert(x.begin(), one);
  if (vectorB) y.push_back(one);
  requireEqual(call, "other", x.back(), y[y.size() - 2], "inner sizes differ");
  size_t batch = std::max(x.size(), y.size()) - 2;
  Shape sizes;
  for (size_t i = 0; i < batch; ++i) { // right-aligned batch dims
    size_t fromEnd = batch - i;        // 1 for the innermost batch dim
    sym::Expr p = fromEnd + 2 <= x.size() ? x[x.size() - 2 - fromEnd] : one;
    sym::Expr q = fromEnd + 2 <= y.size() ? y[y.size() - 2 - fromEnd] : one;
    if (provable(sym::eq(p, 1)))
      sizes.push_back(q);
    else if (provable(sym::eq(q, 1)))
      sizes.push_back(p);
    else
      requireEqual(call, "other", p, q, "batch sizes differ"), sizes.push_back(p);
  }
  if (!vectorA) sizes.push_back(x[x.size() - 2]);
  if (!vectorB) sizes.push_back(y.back());
  return fresh(call, a.dtype, sizes, commonDevice(call, {"self", "other"}),
               anyRequiresGrad(call, {"self", "other"}));
}

// linear: input [..., in] with weight [out, in] (or [in]: the out dim drops, as
// torch's matmul) and an optional bias broadcasting to the result.
Value inferLinear(const OpCall& call) {
  const TensorMeta& in = call.tensor("input");
  const TensorMeta& w = call.tensor("weight");
  if (w.dim() != 1 && w.dim() != 2) call.fail("weight", "must be 1-d or 2-d");
  if (in.dim() == 0) call.fail("input", "must not be 0-d");
  requireProductDType(call, "input", {"weight", "bias"});
  requireEqual(call, "weight", in.sizes.back(), w.sizes.back(), "in_features differ");
  Shape sizes(in.sizes.begin(), in.sizes.end() - 1);
  if (w.dim() == 2) sizes.push_back(w.sizes[0]);
  if (call.has("bias")) {
    const TensorMeta& bias = call.tensor("bias");
    if (w.dim() == 1) call.fail("bias", "needs a 2-d weight"); // as torch's addmm path
    if (bias.dim() > sizes.size()) call.fail("bias", "does not broadcast to the result");
    for (size_t i = 0; i < bias.dim(); ++i) {
      sym::Expr have = bias.sizes[i], want = sizes[sizes.size() - bias.dim() + i];
      if (!provable(sym::eq(have, 1)))
        requireEqual(call, "bias", have, want, "does not broadcast to the result");
    }
  }
  return fresh(call, in.dtype, sizes, commonDevice(call, {"input", "weight", "bias"}),
               anyRequiresGrad(call, {"input", "weight", "bias"}));
}

void requireIndex(const OpCall& call, std::string_view arg) {
  DType t = call.tensor(arg).dtype;
  if (t != DType::Int64 && t != DType::Int32)
    call.fail(arg, "expected dtype i64 or i32, got " + std::string(name(t)));
}

// index_select(dim, index): along dim, the entries the 1-d index names.
Value inferIndexSelect(const OpCall& call) {
  const TensorMeta& self = call.tensor("self");
  const TensorMeta& index = call.tensor("index");
  requireIndex(call, "index");
  if (index.dim() > 1) call.fail("index", "must be 0-d or 1-d");
  Shape sizes = self.sizes;
  if (self.dim()) {
    auto d = static_cast<size_t>(wrapDim(call, "dim", call.intArg("dim"), self.dim()));
    sizes[d] = index.dim() ? index.sizes[0] : call.table().integer(1);
  } else if (index.dim()) { // as torch: a 0-d self takes one index
    require(call, "index", sym::eq(index.sizes[0], 1),
            "of a 0-d self must have one value, got " + sym::toString(index.sizes[0]));
  }
  return fresh(call, self.dtype, sizes, commonDevice(call, {"self", "index"}), self.requiresGrad);
}

} // namespace

// gather's and scatter_add's index (torch's gather_shape_check and
// scatter_shape_check): i64 or i32, as many dims as self, and unless it is empty,
// index.size(d) <= self.size(d) for d != dim and, when `src` is given,
// index.size(d) <= src.size(d) for every d (a 0-d tensor counts as size 1).
void checkScatterIndex(const OpCall& call, std::string_view src) {
  const TensorMeta& self = call.tensor("self");
  const TensorMeta& index = call.tensor("index");
  requireIndex(call, "index");
  size_t d = static_cast<size_t>(wrapDim(call, "dim", call.intArg("dim"), self.dim()));
  for (std::string_view arg : {std::string_view("index"), src})
    if (!arg.empty() &&
        std::max<size_t>(call.tensor(arg).dim(), 1) != std::max<size_t>(self.dim(), 1))
      call.fail(arg, "must have as many dims as self");
  for (const sym::Expr& size : index.sizes)
    if (provable(sym::eq(size, 0))) return;
  auto sizeAt = [&](const TensorMeta& t, size_t i) {
    return t.dim() ? t.sizes[i] : call.table().integer(1);
  };
  for (size_t i = 0; i < index.dim(); ++i) {
    std::string at = "size " + std::to_string(i) + " exceeds that of ";
    if (i != d) require(call, "index", sym::le(index.sizes[i], sizeAt(self, i)), at + "self");
    if (!src.empty())
      require(call, "index", sym::le(index.sizes[i], sizeAt(call.tensor(src), i)), at + "src");
  }
}

namespace {

// gather(dim, index): the result has the index's sizes.
Value inferGather(const OpCall& call) {
  const TensorMeta& self = call.tensor("self");
  const TensorMeta& index = call.tensor("index");
  checkScatterIndex(call, "");
  return fresh(call, self.dtype, index.sizes, commonDevice(call, {"self", "index"}),
               self.requiresGrad);
}

// embedding(weight [n, d], indices): indices' sizes + [d].
Value inferEmbedding(const OpCall& call) {
  requireRank(call, "weight", 2);
  requireIndex(call, "indices");
  const TensorMeta& w = call.tensor("weight");
  Shape sizes = call.tensor("indices").sizes;
  sizes.push_back(w.sizes[1]);
  return fresh(call, w.dtype, sizes, commonDevice(call, {"weight", "indices"}), w.requiresGrad);
}

Value inferSoftmax(const OpCall& call) {
  const TensorMeta& self = call.tensor("self");
  wrapDim(call, "dim", call.intArg("dim"), self.dim());
  DType out = call.has("dtype") ? call.dtype("dtype") : self.dtype;
  if (!isFloating(out))
    call.fail(call.has("dtype") ? "dtype" : "self",
              "needs a floating dtype, got " + std::string(name(out)));
  return fresh(call, out, self.sizes, self.device, self.requiresGrad);
}

} // namespace

void addMatmulOps(std::vector<OpInfo>& ops) {
  ArgSpec self{"self", ArgKind::Tensor}, mat2{"mat2", ArgKind::Tensor};
  ops.push_back({"mm", {self, mat2}, inferMatmul<2>});
  ops.push_back({"bmm", {self, mat2}, inferMatmul<3>});
  for (const char* n : {"softmax", "log_softmax"})
    ops.push_back(
        {n, {self, {"dim", ArgKind::Int}, {"dtype", ArgKind::DType, true}}, inferSoftmax});
  ops.push_back({"matmul", {self, {"other", ArgKind::Tensor}}, inferMatmulGeneral});
  ops.push_back({"addmm",
                 {self,
                  {"mat1", ArgKind::Tensor},
                  {"mat2", ArgKind::Tensor},
                  {"beta", ArgKind::Float, false, int64_t{1}},
                  {"alpha", ArgKind::Float, false, int64_t{1}}},
                 inferAddmm});
  ops.push_back(
      {"linear",
       {{"input", ArgKind::Tensor}, {"weight", ArgKind::Tensor}, {"bias", ArgKind::Tensor, true}},
       inferLinear});
  ArgSpec index{"index", ArgKind::Tensor}, dim{"dim", ArgKind::Int};
  ops.push_back({"index_select", {self, dim, index}, inferIndexSelect});
  ops.push_back({"gather", {self, dim, index}, inferGather});
  ops.push_back(
      {"embedding", {{"weight", ArgKind::Tensor}, {"indices", ArgKind::Tensor}}, inferEmbedding});
}

} // namespace kiln::ir::detail
