// Neural-network ops with inference of their own (some decompose: decompose.cpp):
// normalisations, losses, dropout, attention, scatter_add.
#include <algorithm>
#include <cmath>
#include <string>

#include "infer.h"
#include "kiln/common/error.h"
#include "kiln/sym/print.h"

namespace kiln::ir::detail {
namespace {

void requireFloating(const OpCall& call, std::string_view arg) {
  DType t = call.tensor(arg).dtype;
  if (!isFloating(t)) call.fail(arg, "needs a floating dtype, got " + std::string(name(t)));
}

void requireSameDType(const OpCall& call, std::string_view arg, DType expected) {
  if (call.has(arg) && call.tensor(arg).dtype != expected)
    call.fail(arg, "expected dtype " + std::string(name(expected)) + ", got " +
                       std::string(name(call.tensor(arg).dtype)));
}

// layer_norm and rms_norm: normalized_shape names the input's trailing sizes;
// weight and bias, when given, have exactly those sizes.
Value inferNorm(const OpCall& call) {
  const TensorMeta& in = call.tensor("input");
  requireFloating(call, "input");
  Shape normalized = call.symIntList("normalized_shape");
  if (normalized.empty()) call.fail("normalized_shape", "must have at least one dim");
  if (normalized.size() > in.dim()) call.fail("normalized_shape", "has more dims than the input");
  size_t shift = in.dim() - normalized.size();
  for (size_t i = 0; i < normalized.size(); ++i)
    requireEqual(call, "normalized_shape", normalized[i], in.sizes[shift + i],
                 "input size at dim " + std::to_string(shift + i) + " differs");
  bool grad = in.requiresGrad;
  for (std::string_view arg : {"weight", "bias"}) {
    if (!call.takes(arg) || !call.has(arg)) continue;
    const TensorMeta& p = call.tensor(arg);
    grad = grad || p.requiresGrad;
    requireSameDType(call, arg, in.dtype);
    if (p.dim() != normalized.size()) call.fail(arg, "must have normalized_shape's sizes");
    for (size_t i = 0; i < p.dim(); ++i)
      requireEqual(call, arg, p.sizes[i], normalized[i],
                   "size at dim " + std::to_string(i) + " differs");
  }
  // Both kernels write a contiguous result, as torch's.
  return fresh(call, in.dtype, in.sizes, in.device, grad);
}

// cross_entropy(input [N, C] or [C], target): class indices (i64, [N] or []) or
// class probabilities (input's sizes, a floating dtype promoting with input's). The loss is 0-d
// unless reduction is 'none', where it has the batch sizes.
Value inferCrossEntropy(const OpCall& call) {
  const TensorMeta& in = call.tensor("input");
  const TensorMeta& target = call.tensor("target");
  requireFloating(call, "input");
  if (in.dim() == 0) call.fail("input", "must have a class dim");
  Shape batch = in.sizes;
  batch.erase(batch.begin() + (in.dim() == 1 ? 0 : 1));
  if (target.dtype == DType::Int64) {
    if (target.dim() != batch.size()) call.fail("target", "must have the input's batch dims");
    for (size_t i = 0; i < batch.size(); ++i)
      requireEqual(call, "target", target.sizes[i], batch[i],
                   "size at dim " + std::to_string(i) + " differs");
  } else {
    requireFloating(call, "target");
    if (call.intArg("ignore_index") != -100)
      call.fail("ignore_index", "is not supported for probability targets");
    if (target.dim() != in.dim()) call.fail("target", "probabilities must have the input's sizes");
    for (size_t i = 0; i < in.dim(); ++i)
      requireEqual(call, "target", target.sizes[i], in.sizes[i],
                   "size at dim " + std::to_string(i) + " differs");
  }
  if (call.has("weight")) {
    requireSameDType(call, "weight", in.dtype);
    const TensorMeta& w = call.tensor("weight");
    sym::Expr classes = in.sizes[in.dim() == 1 ? 0 : 1];
    if (w.dim() != 1) call.fail("weight", "must be 1-d");
    requireEqual(call, "weight", w.sizes[0], classes, "one weight per class");
  }
  std::string reduction = call.string("reduction");
  if (reduction != "mean" && reduction != "sum" && reduction != "none")
    call.fail("reduction", "expected 'mean', 'sum' or 'none', got '" + reduction + "'");
  double smoothing = call.floatArg("label_smoothing");
  if (smoothing < 0 || smoothing > 1) call.fail("label_smoothing", "must lie in [0, 1]");
  // Probabilities multiply the log-probabilities: their dtypes promote, as in torch.
  DType out = target.dtype == DType::Int64 ? in.dtype : promoteTypes(in.dtype, target.dtype);
  return fresh(call, out, reduction == "none" ? batch : Shape{}, in.device,
               anyRequiresGrad(call, {"input", "target", "weight"}));
}

// dropout(input, seed, offset, p, train): the random stream is explicit, a 0-d
// i64 seed and offset each, so the graph stays pure and replayable (the
// interpreter's stream: docs/ir.md). train=False is the identity.
Value inferDropout(const OpCall& call) {
  const TensorMeta& in = call.tensor("input");
  requireFloating(call, "input");
  for (std::string_view arg : {"seed", "offset"}) {
    const TensorMeta& t = call.tensor(arg);
    if (t.dtype != DType::Int64 || t.dim() != 0) call.fail(arg, "must be a 0-d i64 tensor");
  }
  double p = call.floatArg("p");
  if (p < 0 || p > 1) call.fail("p", "must lie in [0, 1]");
  return freshLike(call, {"input"}, in.dtype, in.sizes, in.device, in.requiresGrad);
}

// scaled_dot_product_attention(query [..., L, E], key [..., S, E], value [..., S, Ev]):
// [..., L, Ev]. Batch dims must match exactly (no broadcasting, as the fused kernels);
// attn_mask is bool or query's dtype and broadcasts to [..., L, S]. With dropout_p
// in (0, 1) the weights are dropped as dropout(weights, seed, offset, dropout_p)
// drops them (element i of the [..., L, S] weights, row-major, kept when its
// draw from counter offset + i is >= dropout_p, scaled by 1 / (1 - dropout_p)):
// the random stream is explicit, a 0-d i64 seed and offset, given exactly then.
// dropout_p in [0, 1), with a seed and offset exactly when above 0.
void checkAttentionStream(const OpCall& call) {
  double p = call.floatArg("dropout_p");
  if (!(p >= 0 && p < 1)) call.fail("dropout_p", "must lie in [0, 1)");
  for (std::string_view arg : {"seed", "offset"}) {
    if (call.has(arg) != (p > 0))
      call.fail(arg, p > 0 ? "is needed with a dropout_p above 0 (the dropout's random stream)"
                           : "goes with a dropout_p above 0 only");
    if (!call.has(arg)) continue;
    const TensorMeta& t = call.tensor(arg);
    if (t.dtype != DType::Int64 || t.dim() != 0) call.fail(arg, "must be a 0-d i64 tensor");
  }
}

// query [..., L, E], key [..., S, E] and value [..., S, Ev] of one floating dtype.
void checkAttentionOperands(const OpCall& call) {
  const TensorMeta& q = call.tensor("query");
  const TensorMeta& k = call.tensor("key");
  const TensorMeta& v = call.tensor("value");
  requireFloating(call, "query");
  requireSameDType(call, "key", q.dtype);
  requireSameDType(call, "value", q.dtype);
  if (q.dim() < 2) call.fail("query", "must have at least 2 dims");
  for (std::string_view arg : {"key", "value"})
    if (call.tensor(arg).dim() != q.dim()) call.fail(arg, "must have as many dims as query");
  size_t n = q.dim();
  for (size_t i = 0; i + 2 < n; ++i) {
    requireEqual(call, "key", k.sizes[i], q.sizes[i], "batch size at dim " + std::to_string(i));
    requireEqual(call, "value", v.sizes[i], q.sizes[i], "batch size at dim " + std::to_string(i));
  }
  requireEqual(call, "key", k.sizes[n - 1], q.sizes[n - 1], "embedding sizes differ");
  requireEqual(call, "value", v.sizes[n - 2], k.sizes[n - 2], "sequence sizes differ");
}

// attn_mask, when given: bool or query's dtype, broadcasting to the scores [..., L, S].
void checkAttentionMask(const OpCall& call) {
  if (!call.has("attn_mask")) return;
  const TensorMeta& q = call.tensor("query");
  const TensorMeta& k = call.tensor("key");
  const TensorMeta& mask = call.tensor("attn_mask");
  size_t n = q.dim();
  if (call.boolArg("is_causal")) call.fail("attn_mask", "cannot be given with is_causal");
  if (mask.dtype != DType::Bool && mask.dtype != q.dtype)
    call.fail("attn_mask", "expected dtype bool or " + std::string(name(q.dtype)) + ", got " +
                               std::string(name(mask.dtype)));
  Shape scores = q.sizes;
  scores[n - 1] = k.sizes[n - 2];
  if (mask.dim() > n) call.fail("attn_mask", "has more dims than the scores [..., L, S]");
  for (size_t i = 0; i < mask.dim(); ++i) {
    sym::Expr have = mask.sizes[i], want = scores[n - mask.dim() + i];
    if (!provable(sym::eq(have, 1)))
      requireEqual(call, "attn_mask", have, want,
                   "does not broadcast to the scores [..., L, S] at dim " + std::to_string(i));
  }
}

Value inferAttention(const OpCall& call) {
  checkAttentionOperands(call);
  const TensorMeta& q = call.tensor("query");
  const TensorMeta& v = call.tensor("value");
  size_t n = q.dim();
  checkAttentionMask(call);
  checkAttentionStream(call);
  if (call.has("scale") && !std::isfinite(call.floatArg("scale")))
    call.fail("scale", "must be finite");
  Shape sizes = q.sizes;
  sizes[n - 1] = v.sizes[n - 1];
  return fresh(call, q.dtype, sizes, q.device, anyRequiresGrad(call, {"query", "key", "value"}));
}

// The pieces of attention's backward (the derivative rule of
// scaled_dot_product_attention, as flash attention's):
// attention_lse(query, key, value[, attn_mask]): [..., L] in opmath (f32; f64
// for f64), each query row's logsumexp of its scaled (and masked) scores;
// attention_grad_query and attention_grad_key_value(grad [..., L, Ev], query,
// key, value, out, lse[, attn_mask]): dq [..., L, E] and dk, dv side by side
// [..., S, E + Ev], in query's dtype, where out [..., L, Ev] is the forward's
// result (flash attention's backward takes each row's sum of grad * out). The
// grads of a forward with dropout take its dropout_p, seed and offset: the
// weights it dropped get no grad, the others theirs scaled by 1 / (1 - p).
void requireRowStat(const OpCall& call, std::string_view arg) {
  const TensorMeta& q = call.tensor("query");
  const TensorMeta& t = call.tensor(arg);
  if (t.dtype != opmath(q.dtype))
    call.fail(arg, "must be " + std::string(name(opmath(q.dtype))) + " (query's opmath)");
  if (t.dim() + 1 != q.dim()) call.fail(arg, "must have the dims of query but the last");
  for (size_t i = 0; i < t.dim(); ++i)
    requireEqual(call, arg, t.sizes[i], q.sizes[i], "size at dim " + std::to_string(i));
}

void checkAttentionPiece(const OpCall& call) {
  checkAttentionOperands(call);
  checkAttentionMask(call);
  if (call.has("scale") && !std::isfinite(call.floatArg("scale")))
    call.fail("scale", "must be finite");
  if (call.op().name == "attention_lse") return;
  checkAttentionStream(call);
  const TensorMeta& q = call.tensor("query");
  const TensorMeta& g = call.tensor("grad");
  requireSameDType(call, "grad", q.dtype);
  if (g.dim() != q.dim()) call.fail("grad", "must have as many dims as query");
  size_t n = q.dim();
  for (size_t i = 0; i + 1 < n; ++i)
    requireEqual(call, "grad", g.sizes[i], q.sizes[i], "size at dim " + std::to_string(i));
  requireEqual(call, "grad", g.sizes[n - 1], call.tensor("value").sizes[n - 1],
               "its last size is not value's");
  const TensorMeta& out = call.tensor("out");
  requireSameDType(call, "out", q.dtype);
  if (out.dim() != n) call.fail("out", "must have as many dims as query");
  for (size_t i = 0; i < n; ++i)
    requireEqual(call, "out", out.sizes[i], g.sizes[i], "size at dim " + std::to_string(i));
  requireRowStat(call, "lse");
}

Value inferAttentionLse(const OpCall& call) {
  checkAttentionPiece(call);
  const TensorMeta& q = call.tensor("query");
  Shape sizes(q.sizes.begin(), q.sizes.end() - 1);
  return fresh(call, opmath(q.dtype), sizes, q.device, anyRequiresGrad(call, {"query", "key"}));
}

Value inferAttentionGrad(const OpCall& call) {
  checkAttentionPiece(call);
  const TensorMeta& q = call.tensor("query");
  bool grad = anyRequiresGrad(call, {"grad", "query", "key", "value", "out", "lse"});
  if (call.op().name == "attention_grad_query") return fresh(call, q.dtype, q.sizes, q.device, grad);
  Shape sizes = call.tensor("key").sizes;
  sizes.back() = sizes.back() + call.tensor("value").sizes.back();
  return fresh(call, q.dtype, sizes, q.device, grad);
}

// scatter_add(self, dim, index, src): self's meta; index and src of self's rank.
Value inferScatterAdd(const OpCall& call) {
  const TensorMeta& self = call.tensor("self");
  requireSameDType(call, "src", self.dtype);
  checkScatterIndex(call, "src");
  // Contiguous whatever self's layout: torch's structured scatter_add allocates it so.
  return fresh(call, self.dtype, self.sizes, self.device, anyRequiresGrad(call, {"self", "src"}));
}

} // namespace

void addNnOps(std::vector<OpInfo>& ops) {
  ArgSpec input{"input", ArgKind::Tensor};
  ArgSpec shape{"normalized_shape", ArgKind::SymIntList};
  ArgSpec weight{"weight", ArgKind::Tensor, true}, bias{"bias", ArgKind::Tensor, true};
  ops.push_back({"layer_norm",
                 {input, shape, weight, bias, {"eps", ArgKind::Float, false, 1e-5}},
                 inferNorm});
  ops.push_back({"rms_norm", {input, shape, weight, {"eps", ArgKind::Float, true}}, inferNorm});
  ops.push_back({"cross_entropy",
                 {input,
                  {"target", ArgKind::Tensor},
                  weight,
                  {"reduction", ArgKind::String, false, std::string("mean")},
                  {"ignore_index", ArgKind::Int, false, int64_t{-100}},
                  {"label_smoothing", ArgKind::Float, false, 0.0}},
                 inferCrossEntropy});
  ops.push_back({"dropout",
                 {input,
                  {"seed", ArgKind::Tensor},
                  {"offset", ArgKind::Tensor},
                  {"p", ArgKind::Float, false, 0.5},
                  {"train", ArgKind::Bool, false, true}},
                 inferDropout});
  ops.push_back({"scaled_dot_product_attention",
                 {{"query", ArgKind::Tensor},
                  {"key", ArgKind::Tensor},
                  {"value", ArgKind::Tensor},
                  {"attn_mask", ArgKind::Tensor, true},
                  {"dropout_p", ArgKind::Float, false, 0.0},
                  {"is_causal", ArgKind::Bool, false, false},
                  {"scale", ArgKind::Float, true},
                  {"seed", ArgKind::Tensor, true},
                  {"offset", ArgKind::Tensor, true}},
                 inferAttention});
  std::vector<ArgSpec> piece = {{"query", ArgKind::Tensor},
                                {"key", ArgKind::Tensor},
                                {"value", ArgKind::Tensor},
                                {"attn_mask", ArgKind::Tensor, true},
                                {"is_causal", ArgKind::Bool, false, false},
                                {"scale", ArgKind::Float, true}};
  ops.push_back({"attention_lse", piece, inferAttentionLse});
  std::vector<ArgSpec> grad = {{"grad", ArgKind::Tensor}};
  grad.insert(grad.end(), piece.begin(), piece.begin() + 3);
  grad.push_back({"out", ArgKind::Tensor});
  grad.push_back({"lse", ArgKind::Tensor});
  grad.insert(grad.end(), piece.begin() + 3, piece.end());
  grad.push_back({"dropout_p", ArgKind::Float, false, 0.0});
  grad.push_back({"seed", ArgKind::Tensor, true});
  grad.push_back({"offset", ArgKind::Tensor, true});
  ops.push_back({"attention_grad_query", grad, inferAttentionGrad});
  ops.push_back({"attention_grad_key_value", grad, inferAttentionGrad});
  ops.push_back({"scatter_add",
                 {{"self", ArgKind::Tensor},
                  {"dim", ArgKind::Int},
                  {"index", ArgKind::Tensor},
                  {"src", ArgKind::Tensor}},
                 inferScatterAdd});
  // dropout's seed is a graph input the SDK draws from torch's generator at each
  // call (the tracer's randomStream), its offset a constant: no RNG state op.
}

} // namespace kiln::ir::detail
