// Matrix products and normalisations along a dim.
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
  // TODO(issue 3): addmm, matmul, linear; layer_norm, rms_norm, cross_entropy (decomposed);
  // embedding, index_select, gather, scatter_add; dropout (explicit seed/offset input);
  // scaled_dot_product_attention (causal flag, extern).
}

} // namespace kiln::ir::detail
