// nn.MultiheadAttention computed from its parameters (modules.h), with the
// torch calls a traced forward would make (callTorch), so autocast, dropout's
// random streams and symbolic sizes work as for user code.
#include "modules.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string_view>

namespace kiln::tracer {
namespace {

Var call(TraceState& s, const std::string& name, std::vector<Var> args, const Kwargs& kwargs = {}) {
  if (auto r = callTorch(s, name, std::move(args), kwargs)) return *r;
  unsupported("calling " + name);
}

bool isNone(const Var& v) { return !v || v->kind == Kind::None; }

Var shape(const std::vector<sym::Expr>& sizes) {
  std::vector<Var> items;
  for (sym::Expr e : sizes) items.push_back(integer(e));
  return sequence(Kind::Tuple, items);
}

// Argument `index` of the call, or its keyword `name`; nullptr when absent.
Var argument(const std::vector<Var>& args, const Kwargs& kwargs, size_t index, const char* name) {
  if (args.size() > index) return args[index];
  for (const auto& [key, value] : kwargs)
    if (key == name) return value;
  return nullptr;
}

} // namespace

Var multiheadAttention(TraceState& s, const MultiheadAttentionModule& m, const std::vector<Var>& args,
                       const Kwargs& kwargs) {
  for (const auto& [key, value] : kwargs)
    if (key != "query" && key != "key" && key != "value" && key != "key_padding_mask" && key != "need_weights" &&
        key != "attn_mask" && key != "average_attn_weights" && key != "is_causal")
      unsupported("nn.MultiheadAttention() got an unexpected keyword " + key);
  Var query = argument(args, kwargs, 0, "query"), key = argument(args, kwargs, 1, "key"),
      value = argument(args, kwargs, 2, "value");
  if (isNone(query) || isNone(key) || isNone(value) || query->kind != Kind::Tensor || key->kind != Kind::Tensor ||
      value->kind != Kind::Tensor)
    unsupported("nn.MultiheadAttention without query, key and value tensors");
  Var keyPadding = argument(args, kwargs, 3, "key_padding_mask");
  Var needWeightsArg = argument(args, kwargs, 4, "need_weights");
  Var mask = argument(args, kwargs, 5, "attn_mask");
  Var averageArg = argument(args, kwargs, 6, "average_attn_weights");
  Var causalArg = argument(args, kwargs, 7, "is_causal");
  bool needWeights = isNone(needWeightsArg) || s.concrete(needWeightsArg) != 0;
  bool average = isNone(averageArg) || s.concrete(averageArg) != 0;
  bool causal = !isNone(causalArg) && s.concrete(causalArg) != 0;
  auto i = [&](int64_t k) { return integer(s.table.integer(k)); };

  // Batch first, [B, L, E]; an unbatched call ([L, E]) as a batch of one.
  bool unbatched = s.meta(query).dim() == 2;
  if (!unbatched && s.meta(query).dim() != 3)
    unsupported("nn.MultiheadAttention of a " + std::to_string(s.meta(query).dim()) + "-d query");
  auto batchFirst = [&](Var x) {
    if (unbatched) return call(s, "Tensor.unsqueeze", {x, i(0)});
    return m.batchFirst ? x : call(s, "Tensor.transpose", {x, i(0), i(1)});
  };
  query = batchFirst(query);
  key = batchFirst(key);
  value = batchFirst(value);
  if (!isNone(keyPadding) && unbatched) keyPadding = call(s, "Tensor.unsqueeze", {keyPadding, i(0)});

  // The in-projections: in_proj_weight's three row blocks (and its bias's), or
  // separate weights where key and value have dims of their own.
  Var qw = m.qWeight, kw = m.kWeight, vw = m.vWeight, qb = none(), kb = none(), vb = none();
  if (!isNone(m.inProjWeight)) {
    Var parts = call(s, "Tensor.chunk", {m.inProjWeight, i(3)});
    qw = parts->items.at(0), kw = parts->items.at(1), vw = parts->items.at(2);
  }
  if (!isNone(m.inProjBias)) {
    Var parts = call(s, "Tensor.chunk", {m.inProjBias, i(3)});
    qb = parts->items.at(0), kb = parts->items.at(1), vb = parts->items.at(2);
  }
  Var q = call(s, "torch.nn.functional.linear", {query, qw, qb});
  Var k = call(s, "torch.nn.functional.linear", {key, kw, kb});
  Var v = call(s, "torch.nn.functional.linear", {value, vw, vb});

  // Heads: [B, L, E] -> [B, H, L, D].
  const ir::TensorMeta qm = s.meta(q), km = s.meta(k);
  sym::Expr batch = qm.sizes[0], targets = qm.sizes[1], sources = km.sizes[1], width = qm.sizes[2];
  sym::Expr heads = s.table.integer(m.heads);
  std::optional<int64_t> embed = width.asInteger();
  if (!embed || *embed % m.heads != 0) unsupported("nn.MultiheadAttention: embed_dim not divisible by num_heads");
  int64_t headDim = *embed / m.heads;
  auto split = [&](Var x) { // each by its own sizes: q, k and v may be one tensor or three
    const ir::Shape& sizes = s.meta(x).sizes;
    Var heads4 = call(s, "Tensor.view", {x, shape({sizes[0], sizes[1], heads, s.table.integer(headDim)})});
    return call(s, "Tensor.transpose", {heads4, i(1), i(2)});
  };
  q = split(q);
  k = split(k);
  v = split(v);

  // Scores, scaled on q first as torch's math path does, then the masks.
  q = call(s, "Tensor.mul", {q, floating(1.0 / std::sqrt(static_cast<double>(headDim)))});
  Var scores = call(s, "torch.matmul", {q, call(s, "Tensor.transpose", {k, i(-2), i(-1)})});
  auto applyMask = [&](Var to, Var mask) {
    if (s.meta(mask).dtype == DType::Bool)
      return call(s, "Tensor.masked_fill", {to, mask, floating(-std::numeric_limits<double>::infinity())});
    return call(s, "Tensor.add", {to, mask});
  };
  if (!isNone(mask)) {
    if (s.meta(mask).dim() == 3) // [B * H, L, S]
      mask = call(s, "Tensor.view", {mask, shape({batch, heads, targets, sources})});
    else if (s.meta(mask).dim() != 2)
      unsupported("nn.MultiheadAttention: an attn_mask of " + std::to_string(s.meta(mask).dim()) + " dims");
    scores = applyMask(scores, mask);
  } else if (causal) { // is_causal without a mask: the causal one
    Var device = make(Kind::Device);
    device->device = qm.device;
    Var columns = call(s, "torch.arange", {integer(sources)}, {{"device", device}});
    Var rows = call(s, "torch.arange", {integer(targets)}, {{"device", device}});
    scores = applyMask(scores, call(s, "Tensor.gt", {columns, call(s, "Tensor.unsqueeze", {rows, i(-1)})}));
  }
  if (!isNone(keyPadding)) // [B, S]: excluded keys of each batch
    scores = applyMask(scores, call(s, "Tensor.view", {keyPadding, shape({batch, s.table.integer(1),
                                                                           s.table.integer(1), sources})}));
  Var weights = call(s, "torch.softmax", {scores, i(-1)});
  weights = call(s, "torch.nn.functional.dropout", {weights, floating(m.dropout), boolean(m.training)});

  // The weighted values, heads merged back, out_proj.
  Var out = call(s, "Tensor.transpose", {call(s, "torch.matmul", {weights, v}), i(1), i(2)});
  out = call(s, "Tensor.view", {call(s, "Tensor.contiguous", {out}), shape({batch, targets, width})});
  out = call(s, "torch.nn.functional.linear", {out, m.outWeight, m.outBias});
  if (unbatched)
    out = call(s, "Tensor.squeeze", {out, i(0)});
  else if (!m.batchFirst)
    out = call(s, "Tensor.transpose", {out, i(0), i(1)});
  if (!needWeights) return sequence(Kind::Tuple, {out, none()});
  if (average) weights = call(s, "Tensor.mean", {weights, i(1)});
  if (unbatched) weights = call(s, "Tensor.squeeze", {weights, i(0)});
  return sequence(Kind::Tuple, {out, weights});
}

Var multiHeadAttentionForward(TraceState& s, const std::vector<Var>& args, const Kwargs& kwargs) {
  static const char* const names[] = {
      "query", "key", "value", "embed_dim_to_check", "num_heads", "in_proj_weight", "in_proj_bias", "bias_k",
      "bias_v", "add_zero_attn", "dropout_p", "out_proj_weight", "out_proj_bias", "training",
      "key_padding_mask", "need_weights", "attn_mask", "use_separate_proj_weight", "q_proj_weight",
      "k_proj_weight", "v_proj_weight", "static_k", "static_v", "average_attn_weights", "is_causal"};
  constexpr size_t count = sizeof(names) / sizeof(names[0]);
  for (const auto& [key, value] : kwargs)
    if (std::find_if(names, names + count, [&](const char* n) { return key == n; }) == names + count)
      unsupported("multi_head_attention_forward() got an unexpected keyword " + key);
  if (args.size() > count) unsupported("multi_head_attention_forward() with too many arguments");
  auto get = [&](const char* name) {
    size_t index = static_cast<size_t>(std::find_if(names, names + count, [&](const char* n) {
                     return std::string_view(n) == name;
                   }) - names);
    return argument(args, kwargs, index, name);
  };
  auto flag = [&](const char* name, bool otherwise) {
    Var v = get(name);
    return isNone(v) ? otherwise : s.concrete(v) != 0;
  };
  for (const char* absent : {"bias_k", "bias_v", "static_k", "static_v"})
    if (!isNone(get(absent))) unsupported(std::string("multi_head_attention_forward with ") + absent);
  if (flag("add_zero_attn", false)) unsupported("multi_head_attention_forward with add_zero_attn");
  MultiheadAttentionModule m;
  if (flag("use_separate_proj_weight", false)) {
    m.qWeight = get("q_proj_weight");
    m.kWeight = get("k_proj_weight");
    m.vWeight = get("v_proj_weight");
    m.inProjWeight = none();
  } else {
    m.inProjWeight = get("in_proj_weight");
  }
  m.inProjBias = isNone(get("in_proj_bias")) ? none() : get("in_proj_bias");
  m.outWeight = get("out_proj_weight");
  m.outBias = isNone(get("out_proj_bias")) ? none() : get("out_proj_bias");
  Var heads = get("num_heads"), dropout = get("dropout_p");
  if (isNone(heads) || isNone(dropout) || isNone(m.outWeight) ||
      (isNone(m.inProjWeight) && isNone(m.qWeight)))
    unsupported("multi_head_attention_forward without its heads, dropout or weights");
  m.heads = s.concrete(heads);
  m.dropout = s.number(dropout);
  m.training = flag("training", true);
  m.batchFirst = false; // torch's functional form is sequence-first
  Kwargs call;
  for (const char* name : {"query", "key", "value", "key_padding_mask", "need_weights", "attn_mask",
                           "average_attn_weights", "is_causal"})
    if (Var v = get(name)) call.emplace_back(name, v);
  return multiheadAttention(s, m, {}, call);
}

namespace {

// The arguments of a call bound to `names` (positional first, then keywords); nullptr where
// absent. Unsupported for an unknown keyword or too many arguments.
std::vector<Var> bind(const std::string& what, const std::vector<const char*>& names, const std::vector<Var>& args,
                      const Kwargs& kwargs) {
  if (args.size() > names.size()) unsupported(what + "() with too many arguments");
  std::vector<Var> bound(names.size());
  for (size_t k = 0; k < args.size(); ++k) bound[k] = args[k];
  for (const auto& [key, value] : kwargs) {
    auto at = std::find_if(names.begin(), names.end(), [&](const char* n) { return key == n; });
    if (at == names.end()) unsupported(what + "() got an unexpected keyword " + key);
    bound[static_cast<size_t>(at - names.begin())] = value;
  }
  return bound;
}

// [1, C, 1, ...]: a per-channel tensor `v` ([C]) seen against an input of `rank` dims.
Var perChannel(TraceState& s, const Var& v, const ir::Shape& sizes) {
  std::vector<sym::Expr> shape(sizes.size(), s.table.integer(1));
  shape[1] = sizes[1];
  return call(s, "Tensor.view", {v, sequence(Kind::Tuple, [&] {
                                   std::vector<Var> items;
                                   for (sym::Expr e : shape) items.push_back(integer(e));
                                   return items;
                                 }())});
}

// (x - mean) / sqrt(var + eps), then weight and bias where given (already shaped to x).
Var normalized(TraceState& s, Var x, const Var& mean, const Var& var, double eps, const Var& weight,
               const Var& bias) {
  Var scale = call(s, "torch.rsqrt", {call(s, "Tensor.add", {var, floating(eps)})});
  Var y = call(s, "Tensor.mul", {call(s, "Tensor.sub", {x, mean}), scale});
  if (!isNone(weight)) y = call(s, "Tensor.mul", {y, weight});
  if (!isNone(bias)) y = call(s, "Tensor.add", {y, bias});
  return y;
}

} // namespace

Var attentionWithDropout(TraceState& s, const std::vector<Var>& args, const Kwargs& kwargs) {
  std::vector<Var> a = bind("scaled_dot_product_attention", {"query", "key", "value", "attn_mask", "dropout_p",
                                                             "is_causal", "scale", "enable_gqa"},
                            args, kwargs);
  Var q = a[0], k = a[1], v = a[2], mask = a[3];
  for (const Var& t : {q, k, v})
    if (isNone(t) || t->kind != Kind::Tensor) unsupported("scaled_dot_product_attention of non-tensors");
  if (!isNone(a[7]) && s.concrete(a[7]) != 0) unsupported("scaled_dot_product_attention with enable_gqa and dropout");
  bool causal = !isNone(a[5]) && s.concrete(a[5]) != 0;
  if (causal && !isNone(mask)) unsupported("scaled_dot_product_attention with both attn_mask and is_causal");
  const ir::Shape qs = s.meta(q).sizes, ks = s.meta(k).sizes;
  if (qs.size() < 2 || ks.size() < 2) unsupported("scaled_dot_product_attention of fewer than 2 dims");
  double scale;
  if (!isNone(a[6])) {
    scale = s.number(a[6]);
  } else {
    std::optional<int64_t> width = qs.back().asInteger();
    if (!width || *width <= 0) unsupported("scaled_dot_product_attention of a symbolic head size");
    scale = 1.0 / std::sqrt(static_cast<double>(*width));
  }
  auto i = [&](int64_t n) { return integer(s.table.integer(n)); };
  Var scores = call(s, "torch.matmul", {call(s, "Tensor.mul", {q, floating(scale)}),
                                        call(s, "Tensor.transpose", {k, i(-2), i(-1)})});
  const double minusInf = -std::numeric_limits<double>::infinity();
  if (causal) { // the top-left-aligned lower triangle takes part
    Var device = make(Kind::Device);
    device->device = s.meta(q).device;
    Var rows = call(s, "torch.arange", {integer(qs[qs.size() - 2])}, {{"device", device}});
    Var columns = call(s, "torch.arange", {integer(ks[ks.size() - 2])}, {{"device", device}});
    Var later = call(s, "Tensor.gt", {columns, call(s, "Tensor.unsqueeze", {rows, i(-1)})});
    scores = call(s, "Tensor.masked_fill", {scores, later, floating(minusInf)});
  } else if (!isNone(mask)) {
    scores = s.meta(mask).dtype == DType::Bool
                 ? call(s, "Tensor.masked_fill", {scores, call(s, "Tensor.logical_not", {mask}), floating(minusInf)})
                 : call(s, "Tensor.add", {scores, mask});
  }
  Var weights = call(s, "torch.softmax", {scores, i(-1)});
  weights = call(s, "torch.nn.functional.dropout", {weights, floating(s.number(a[4])), boolean(true)});
  return call(s, "torch.matmul", {weights, v});
}

Var batchNorm(TraceState& s, const std::vector<Var>& args, const Kwargs& kwargs) {
  std::vector<Var> a = bind("batch_norm", {"input", "running_mean", "running_var", "weight", "bias", "training",
                                           "momentum", "eps"},
                            args, kwargs);
  Var x = a[0], runningMean = a[1], runningVar = a[2], weight = a[3], bias = a[4];
  if (isNone(x) || x->kind != Kind::Tensor) unsupported("batch_norm of a non-tensor");
  bool training = !isNone(a[5]) && s.concrete(a[5]) != 0;
  double momentum = isNone(a[6]) ? 0.1 : s.number(a[6]);
  double eps = isNone(a[7]) ? 1e-5 : s.number(a[7]);
  const ir::Shape sizes = s.meta(x).sizes;
  if (sizes.size() < 2) unsupported("batch_norm of a tensor of fewer than 2 dims");
  std::vector<Var> dims = {integer(s.table.integer(0))};
  for (size_t d = 2; d < sizes.size(); ++d) dims.push_back(integer(s.table.integer(static_cast<int64_t>(d))));
  Var over = sequence(Kind::Tuple, dims);
  Var mean, var;
  if (training) {
    mean = call(s, "Tensor.mean", {x, over});
    var = call(s, "Tensor.var", {x, over}, {{"correction", integer(s.table.integer(0))}});
    // The running stats move towards the batch's (the variance's unbiased), outside autograd.
    sym::Expr count = s.table.integer(1);
    for (size_t d = 0; d < sizes.size(); ++d)
      if (d != 1) count = count * sizes[d];
    if (!isNone(runningMean)) {
      Var step = call(s, "Tensor.mul", {call(s, "Tensor.detach", {mean}), floating(momentum)});
      call(s, "Tensor.add_", {call(s, "Tensor.mul_", {runningMean, floating(1 - momentum)}), step});
    }
    if (!isNone(runningVar)) {
      std::optional<int64_t> n = count.asInteger();
      if (!n) unsupported("batch_norm's running variance over a symbolic count");
      if (*n < 2) unsupported("batch_norm in training over one value per channel");
      Var unbiased = call(s, "Tensor.mul", {call(s, "Tensor.detach", {var}),
                                            floating(momentum * static_cast<double>(*n) / static_cast<double>(*n - 1))});
      call(s, "Tensor.add_", {call(s, "Tensor.mul_", {runningVar, floating(1 - momentum)}), unbiased});
    }
  } else {
    if (isNone(runningMean) || isNone(runningVar)) unsupported("batch_norm in eval without running stats");
    mean = runningMean;
    var = runningVar;
  }
  return normalized(s, x, perChannel(s, mean, sizes), perChannel(s, var, sizes), eps,
                    isNone(weight) ? weight : perChannel(s, weight, sizes),
                    isNone(bias) ? bias : perChannel(s, bias, sizes));
}

Var groupNorm(TraceState& s, const std::vector<Var>& args, const Kwargs& kwargs) {
  std::vector<Var> a = bind("group_norm", {"input", "num_groups", "weight", "bias", "eps"}, args, kwargs);
  Var x = a[0], weight = a[2], bias = a[3];
  if (isNone(x) || x->kind != Kind::Tensor || isNone(a[1])) unsupported("group_norm without an input and groups");
  int64_t groups = s.concrete(a[1]);
  double eps = isNone(a[4]) ? 1e-5 : s.number(a[4]);
  const ir::Shape sizes = s.meta(x).sizes;
  if (sizes.size() < 2) unsupported("group_norm of a tensor of fewer than 2 dims");
  std::optional<int64_t> channels = sizes[1].asInteger();
  if (!channels || groups <= 0 || *channels % groups != 0)
    unsupported("group_norm: the channels are not a multiple of num_groups");
  // [N, G, C/G * rest]: each row one group of one sample.
  sym::Expr rest = s.table.integer(*channels / groups);
  for (size_t d = 2; d < sizes.size(); ++d) rest = rest * sizes[d];
  Var rows = call(s, "Tensor.reshape", {x, sequence(Kind::Tuple, {integer(sizes[0]),
                                                                   integer(s.table.integer(groups)), integer(rest)})});
  Var last = sequence(Kind::Tuple, {integer(s.table.integer(-1))});
  Kwargs kept = {{"keepdim", boolean(true)}};
  Var mean = call(s, "Tensor.mean", {rows, last}, kept);
  Var var = call(s, "Tensor.var", {rows, last}, {{"keepdim", boolean(true)}, {"correction", integer(s.table.integer(0))}});
  Var y = normalized(s, rows, mean, var, eps, none(), none());
  std::vector<Var> back;
  for (sym::Expr e : sizes) back.push_back(integer(e));
  y = call(s, "Tensor.reshape", {y, sequence(Kind::Tuple, back)});
  if (!isNone(weight)) y = call(s, "Tensor.mul", {y, perChannel(s, weight, sizes)});
  if (!isNone(bias)) y = call(s, "Tensor.add", {y, perChannel(s, bias, sizes)});
  return y;
}

} // namespace kiln::tracer
