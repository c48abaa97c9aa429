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

// mm: [n, k] @ [k, m]; bmm: [b, n, k] @ [b, k, m]. Same dtypes, as torch requires.
template <size_t rank> Value inferMatmul(const OpCall& call) {
  requireRank(call, "self", rank);
  requireRank(call, "mat2", rank);
  const TensorMeta& a = call.tensor("self");
  const TensorMeta& b = call.tensor("mat2");
  if (a.dtype != b.dtype)
    call.fail("mat2", "expected dtype " + std::string(name(a.dtype)) + ", got " +
                          std::string(name(b.dtype)));
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
  for (std::string_view arg : {"mat1", "mat2"})
    if (call.tensor(arg).dtype != self.dtype)
      call.fail(arg, "expected dtype " + std::string(name(self.dtype)) + ", got " +
                         std::string(name(call.tensor(arg).dtype)));
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
  if (a.dtype != b.dtype)
    call.fail("other", "expected dtype " + std::string(name(a.dtype)) + ", got " +
                           std::string(name(b.dtype)));
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

// linear: input [..., in] with weight [out, in] and an optional bias [out].
Value inferLinear(const OpCall& call) {
  const TensorMeta& in = call.tensor("input");
  requireRank(call, "weight", 2);
  const TensorMeta& w = call.tensor("weight");
  if (in.dim() == 0) call.fail("input", "must not be 0-d");
  if (in.dtype != w.dtype)
    call.fail("weight", "expected dtype " + std::string(name(in.dtype)) + ", got " +
                            std::string(name(w.dtype)));
  requireEqual(call, "weight", in.sizes.back(), w.sizes[1], "in_features differ");
  Shape sizes(in.sizes.begin(), in.sizes.end() - 1);
  sizes.push_back(w.sizes[0]);
  if (call.has("bias")) {
    const TensorMeta& bias = call.tensor("bias");
    if (bias.dtype != in.dtype) call.fail("bias", "expected dtype " + std::string(name(in.dtype)));
    if (bias.dim() > 1) call.fail("bias", "must be 0-d or 1-d");
    if (bias.dim() == 1 && !provable(sym::eq(bias.sizes[0], 1)))
      requireEqual(call, "bias", bias.sizes[0], w.sizes[0], "out_features differ");
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
  }
  return fresh(call, self.dtype, sizes, commonDevice(call, {"self", "index"}), self.requiresGrad);
}

// gather(dim, index): the result has the index's sizes.
Value inferGather(const OpCall& call) {
  const TensorMeta& self = call.tensor("self");
  const TensorMeta& index = call.tensor("index");
  if (index.dtype != DType::Int64)
    call.fail("index", "expected dtype i64, got " + std::string(name(index.dtype)));
  if (std::max<size_t>(index.dim(), 1) != std::max<size_t>(self.dim(), 1))
    call.fail("index", "must have as many dims as self");
  wrapDim(call, "dim", call.intArg("dim"), self.dim());
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
  // TODO(issue 3): gather's index sizes checked against self's.
}

} // namespace kiln::ir::detail
