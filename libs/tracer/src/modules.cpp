// nn modules and functions computed as their compositions (modules.h), with
// the torch calls a traced forward would make (callTorch), so autocast,
// dropout's random streams and symbolic sizes work as for user code.
#include "modules.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kiln::tracer {
namespace {

constexpr double kMinusInf = -std::numeric_limits<double>::infinity();

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

// A call's arguments bound to a signature's names: positional first, then
// keywords; an absent one is nullptr. Unsupported for an unknown keyword or
// too many arguments.
class Arguments {
public:
  Arguments(const std::string& what, std::vector<const char*> names, const std::vector<Var>& args,
            const Kwargs& kwargs)
      : names_(std::move(names)), values_(names_.size()) {
    if (args.size() > names_.size()) unsupported(what + "() with too many arguments");
    std::copy(args.begin(), args.end(), values_.begin());
    for (const auto& [key, value] : kwargs) values_.at(indexOf(key, what)) = value;
  }

  Var operator[](const char* name) const { return values_[indexOf(name, "")]; }
  bool flag(TraceState& s, const char* name, bool otherwise) const {
    Var v = (*this)[name];
    return isNone(v) ? otherwise : s.concrete(v) != 0;
  }
  double number(TraceState& s, const char* name, double otherwise) const {
    Var v = (*this)[name];
    return isNone(v) ? otherwise : s.number(v);
  }

private:
  size_t indexOf(const std::string& name, const std::string& what) const {
    auto at = std::find_if(names_.begin(), names_.end(), [&](const char* n) { return name == n; });
    if (at == names_.end()) unsupported(what + "() got an unexpected keyword " + name);
    return static_cast<size_t>(at - names_.begin());
  }

  std::vector<const char*> names_;
  std::vector<Var> values_;
};

// [rows, columns] bool, true where the column lies past the row: what a causal
// mask excludes (top-left aligned, as torch's is_causal).
Var laterPositions(TraceState& s, sym::Expr rows, sym::Expr columns, ir::Device on) {
  Var device = make(Kind::Device);
  device->device = on;
  Var row = call(s, "torch.arange", {integer(rows)}, {{"device", device}});
  Var column = call(s, "torch.arange", {integer(columns)}, {{"device", device}});
  return call(s, "Tensor.gt", {column, call(s, "Tensor.unsqueeze", {row, integer(s.table.integer(-1))})});
}

// [1, C, 1, ...]: a per-channel tensor ([C]) against an input of these sizes.
Var perChannel(TraceState& s, const Var& v, const ir::Shape& sizes) {
  std::vector<sym::Expr> seen(sizes.size(), s.table.integer(1));
  seen[1] = sizes[1];
  return call(s, "Tensor.view", {v, shape(seen)});
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

Var multiheadAttention(TraceState& s, const MultiheadAttentionModule& m, const std::vector<Var>& args,
                       const Kwargs& kwargs) {
  Arguments a("nn.MultiheadAttention", {"query", "key", "value", "key_padding_mask", "need_weights", "attn_mask",
                                         "average_attn_weights", "is_causal"},
              args, kwargs);
  Var query = a["query"], key = a["key"], value = a["value"];
  for (const Var& t : {query, key, value})
    if (isNone(t) || t->kind != Kind::Tensor) unsupported("nn.MultiheadAttention without query, key and value tensors");
  Var keyPadding = a["key_padding_mask"], mask = a["attn_mask"];
  bool needWeights = a.flag(s, "need_weights", true);
  bool average = a.flag(s, "average_attn_weights", true);
  bool causal = a.flag(s, "is_causal", false);
  // is_causal hints that attn_mask is the causal mask, as in torch's
  // multi_head_attention_forward: without a mask torch refuses the call (eager
  // raises it); with no padding mask and no weights asked for, the causal mask
  // replaces the given one; otherwise the given mask counts.
  if (causal && isNone(mask))
    unsupported("nn.MultiheadAttention: is_causal without an attn_mask (torch refuses the call)");
  if (causal && isNone(keyPadding) && !needWeights)
    mask = none();
  else
    causal = false;
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
    if (s.meta(mask).dtype == DType::Bool) return call(s, "Tensor.masked_fill", {to, mask, floating(kMinusInf)});
    return call(s, "Tensor.add", {to, mask});
  };
  if (!isNone(mask)) {
    if (s.meta(mask).dim() == 3) // [B * H, L, S]
      mask = call(s, "Tensor.view", {mask, shape({batch, heads, targets, sources})});
    else if (s.meta(mask).dim() != 2)
      unsupported("nn.MultiheadAttention: an attn_mask of " + std::to_string(s.meta(mask).dim()) + " dims");
    scores = applyMask(scores, mask);
  } else if (causal) {
    scores = applyMask(scores, laterPositions(s, targets, sources, qm.device));
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
  Arguments a("multi_head_attention_forward",
              {"query", "key", "value", "embed_dim_to_check", "num_heads", "in_proj_weight", "in_proj_bias", "bias_k",
               "bias_v", "add_zero_attn", "dropout_p", "out_proj_weight", "out_proj_bias", "training",
               "key_padding_mask", "need_weights", "attn_mask", "use_separate_proj_weight", "q_proj_weight",
               "k_proj_weight", "v_proj_weight", "static_k", "static_v", "average_attn_weights", "is_causal"},
              args, kwargs);
  for (const char* absent : {"bias_k", "bias_v", "static_k", "static_v"})
    if (!isNone(a[absent])) unsupported(std::string("multi_head_attention_forward with ") + absent);
  if (a.flag(s, "add_zero_attn", false)) unsupported("multi_head_attention_forward with add_zero_attn");
  MultiheadAttentionModule m;
  auto orNone = [](const Var& v) { return isNone(v) ? none() : v; };
  if (a.flag(s, "use_separate_proj_weight", false)) {
    m.qWeight = a["q_proj_weight"];
    m.kWeight = a["k_proj_weight"];
    m.vWeight = a["v_proj_weight"];
    m.inProjWeight = none();
  } else {
    m.inProjWeight = a["in_proj_weight"];
  }
  m.inProjBias = orNone(a["in_proj_bias"]);
  m.outWeight = a["out_proj_weight"];
  m.outBias = orNone(a["out_proj_bias"]);
  if (isNone(a["num_heads"]) || isNone(a["dropout_p"]) || isNone(m.outWeight) ||
      (isNone(m.inProjWeight) && isNone(m.qWeight)))
    unsupported("multi_head_attention_forward without its heads, dropout or weights");
  m.heads = s.concrete(a["num_heads"]);
  m.dropout = s.number(a["dropout_p"]);
  m.training = a.flag(s, "training", true);
  m.batchFirst = false; // torch's functional form is sequence-first
  Kwargs passed;
  for (const char* name : {"query", "key", "value", "key_padding_mask", "need_weights", "attn_mask",
                           "average_attn_weights", "is_causal"})
    if (Var v = a[name]) passed.emplace_back(name, v);
  return multiheadAttention(s, m, {}, passed);
}

Var attentionWithDropout(TraceState& s, const std::vector<Var>& args, const Kwargs& kwargs) {
  Arguments a("scaled_dot_product_attention",
              {"query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa"}, args, kwargs);
  Var q = a["query"], k = a["key"], v = a["value"], mask = a["attn_mask"];
  for (const Var& t : {q, k, v})
    if (isNone(t) || t->kind != Kind::Tensor) unsupported("scaled_dot_product_attention of non-tensors");
  if (a.flag(s, "enable_gqa", false)) unsupported("scaled_dot_product_attention with enable_gqa and dropout");
  bool causal = a.flag(s, "is_causal", false);
  if (causal && !isNone(mask)) unsupported("scaled_dot_product_attention with both attn_mask and is_causal");
  double p = s.number(a["dropout_p"]);
  if (p >= 1) return attentionDroppingAll(s, q, k, v, mask, causal, a["scale"]);
  // A fresh random stream per call, as dropout's (torch_calls.cpp).
  auto [seed, offset] = s.randomStream(s.meta(q).device);
  Kwargs given = {{"query", q}, {"key", k}, {"value", v}, {"dropout_p", a["dropout_p"]}};
  if (!isNone(mask)) given.emplace_back("attn_mask", mask);
  if (causal) given.emplace_back("is_causal", a["is_causal"]);
  if (!isNone(a["scale"])) given.emplace_back("scale", a["scale"]);
  given.emplace_back("seed", s.tensor(seed));
  given.emplace_back("offset", s.tensor(offset));
  return s.callOp("scaled_dot_product_attention", {}, given);
}

Var attentionDroppingAll(TraceState& s, const Var& q, const Var& k, const Var& v, const Var& mask,
                         bool causal, const Var& scaleArg) {
  const ir::Shape qs = s.meta(q).sizes, ks = s.meta(k).sizes;
  if (qs.size() < 2 || ks.size() < 2) unsupported("scaled_dot_product_attention of fewer than 2 dims");
  double scale;
  if (!isNone(scaleArg)) {
    scale = s.number(scaleArg);
  } else {
    std::optional<int64_t> width = qs.back().asInteger();
    if (!width || *width <= 0) unsupported("scaled_dot_product_attention of a symbolic head size");
    scale = 1.0 / std::sqrt(static_cast<double>(*width));
  }
  auto i = [&](int64_t n) { return integer(s.table.integer(n)); };
  Var scores = call(s, "torch.matmul", {call(s, "Tensor.mul", {q, floating(scale)}),
                                        call(s, "Tensor.transpose", {k, i(-2), i(-1)})});
  if (causal) {
    Var later = laterPositions(s, qs[qs.size() - 2], ks[ks.size() - 2], s.meta(q).device);
    scores = call(s, "Tensor.masked_fill", {scores, later, floating(kMinusInf)});
  } else if (!isNone(mask)) { // bool: True takes part (unlike MultiheadAttention's)
    scores = s.meta(mask).dtype == DType::Bool
                 ? call(s, "Tensor.masked_fill", {scores, call(s, "Tensor.logical_not", {mask}), floating(kMinusInf)})
                 : call(s, "Tensor.add", {scores, mask});
  }
  Var weights = call(s, "torch.softmax", {scores, i(-1)});
  weights = call(s, "torch.nn.functional.dropout", {weights, floating(1.0), boolean(true)});
  return call(s, "torch.matmul", {weights, v});
}

Var embedding(TraceState& s, const std::vector<Var>& args, const Kwargs& kwargs) {
  Arguments a("F.embedding",
              {"input", "weight", "padding_idx", "max_norm", "norm_type", "scale_grad_by_freq", "sparse"}, args,
              kwargs);
  Var indices = a["input"], weight = a["weight"];
  if (isNone(indices) || isNone(weight)) unsupported("F.embedding without input and weight");
  if (!isNone(a["max_norm"])) unsupported("F.embedding with max_norm (it renormalises the weight in place)");
  if (a.flag(s, "scale_grad_by_freq", false)) unsupported("F.embedding with scale_grad_by_freq");
  if (a.flag(s, "sparse", false)) unsupported("F.embedding with sparse grads");
  Var out = s.callOp("embedding", {weight, indices}, {});
  if (isNone(a["padding_idx"]) || !s.meta(weight).requiresGrad) return out;
  // padding_idx: that row gets no grad. The lookups of it read the output
  // through detach, so the backward scatters nothing there; values unchanged.
  int64_t pad = s.concrete(a["padding_idx"]);
  std::optional<int64_t> rows = s.meta(weight).sizes.at(0).asInteger();
  if (pad < 0 && rows) pad += *rows;
  auto i = [&](int64_t n) { return integer(s.table.integer(n)); };
  Var atPad = call(s, "Tensor.unsqueeze", {call(s, "Tensor.eq", {indices, i(pad)}), i(-1)});
  return call(s, "torch.where", {atPad, call(s, "Tensor.detach", {out}), out});
}

Var batchNorm(TraceState& s, const std::vector<Var>& args, const Kwargs& kwargs) {
  Arguments a("batch_norm", {"input", "running_mean", "running_var", "weight", "bias", "training", "momentum", "eps"},
              args, kwargs);
  Var x = a["input"], runningMean = a["running_mean"], runningVar = a["running_var"], weight = a["weight"],
      bias = a["bias"];
  if (isNone(x) || x->kind != Kind::Tensor) unsupported("batch_norm of a non-tensor");
  bool training = a.flag(s, "training", false);
  double momentum = a.number(s, "momentum", 0.1);
  double eps = a.number(s, "eps", 1e-5);
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
  Arguments a("group_norm", {"input", "num_groups", "weight", "bias", "eps"}, args, kwargs);
  Var x = a["input"], weight = a["weight"], bias = a["bias"];
  if (isNone(x) || x->kind != Kind::Tensor || isNone(a["num_groups"]))
    unsupported("group_norm without an input and groups");
  int64_t groups = s.concrete(a["num_groups"]);
  double eps = a.number(s, "eps", 1e-5);
  const ir::Shape sizes = s.meta(x).sizes;
  if (sizes.size() < 2) unsupported("group_norm of a tensor of fewer than 2 dims");
  std::optional<int64_t> channels = sizes[1].asInteger();
  if (!channels || groups <= 0 || *channels % groups != 0)
    unsupported("group_norm: the channels are not a multiple of num_groups");
  // [N, G, C/G * rest]: each row one group of one sample.
  sym::Expr rest = s.table.integer(*channels / groups);
  for (size_t d = 2; d < sizes.size(); ++d) rest = rest * sizes[d];
  Var rows = call(s, "Tensor.reshape", {x, shape({sizes[0], s.table.integer(groups), rest})});
  Var last = sequence(Kind::Tuple, {integer(s.table.integer(-1))});
  Kwargs kept = {{"keepdim", boolean(true)}};
  Var mean = call(s, "Tensor.mean", {rows, last}, kept);
  Var var = call(s, "Tensor.var", {rows, last}, {{"keepdim", boolean(true)}, {"correction", integer(s.table.integer(0))}});
  Var y = normalized(s, rows, mean, var, eps, none(), none());
  y = call(s, "Tensor.reshape", {y, shape(sizes)});
  if (!isNone(weight)) y = call(s, "Tensor.mul", {y, perChannel(s, weight, sizes)});
  if (!isNone(bias)) y = call(s, "Tensor.add", {y, perChannel(s, bias, sizes)});
  return y;
}

} // namespace kiln::tracer
