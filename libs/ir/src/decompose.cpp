// Decompositions of composite ops into core ops, and the pass applying them.
#include <cmath>
#include <optional>
#include <string>

#include "infer.h"
#include "kiln/common/error.h"
#include "kiln/ir/attention.h"
#include "kiln/ir/passes.h"

namespace kiln::ir {
namespace detail {
namespace {

template <typename T> T attrOr(const Node& node, std::string_view name, T fallback) {
  const AttrValue* v = node.attr(name);
  if (!v) return fallback;
  if (auto* x = std::get_if<T>(v)) return *x;
  if constexpr (std::is_same_v<T, double>)
    if (auto* i = std::get_if<int64_t>(v)) return static_cast<double>(*i);
  throw Error(ErrorCode::Internal, node.target + ": attribute '" + std::string(name) + "'");
}

// The dims a reduction-like node works on: its `dim` list, or all of them.
std::vector<int64_t> dimsOf(const Graph& g, const Node& node, ValueId x) {
  if (const AttrValue* v = node.attr("dim")) {
    if (auto* i = std::get_if<int64_t>(v)) return {*i};
    if (!std::get<std::vector<int64_t>>(*v).empty()) return std::get<std::vector<int64_t>>(*v);
  }
  std::vector<int64_t> all;
  for (size_t i = 0; i < g.meta(x).dim(); ++i) all.push_back(static_cast<int64_t>(i));
  return all;
}

ValueId scalarOp(Graph& g, std::string_view op, ValueId x, AttrValue other) {
  return g.call(op, {x}, {{"other", std::move(other)}});
}

ValueId geluOf(Graph& g, const Node& node, ValueId x) {
  ValueId inner;
  if (attrOr<std::string>(node, "approximate", "none") == "tanh") {
    ValueId cube = scalarOp(g, "pow", x, int64_t{3});
    ValueId sum = g.call("add", {x, scalarOp(g, "mul", cube, 0.044715)});
    inner = g.call("tanh", {scalarOp(g, "mul", sum, std::sqrt(2.0 / M_PI))});
  } else {
    inner = g.call("erf", {scalarOp(g, "mul", x, M_SQRT1_2)});
  }
  // x * ((1 + inner) * 0.5), not torch's (x * 0.5) * (1 + inner): the same value (a halving
  // is exact), with the normal cdf whole, as the backward has it (CUDA computes it in one).
  return g.call("mul", {x, scalarOp(g, "mul", scalarOp(g, "add", inner, 1.0), 0.5)});
}

// A composite of f16/bf16 computed in f32 and rounded once, as torch's
// kernels (and Inductor) compute it: `body` gets x in opmath.
template <class Body> ValueId inOpmath(Graph& g, ValueId x, Body body) {
  DType t = g.meta(x).dtype;
  if (t != DType::Float16 && t != DType::BFloat16) return body(x);
  ValueId y = body(g.call("to_dtype", {x}, {{"dtype", DType::Float32}}));
  return g.call("to_dtype", {y}, {{"dtype", t}});
}

ValueId gelu(Graph& g, const Node& node, const std::vector<ValueId>& in) {
  return inOpmath(g, in[0], [&](ValueId x) { return geluOf(g, node, x); });
}

// grad * gelu'(x): Phi(x) + x phi(x), or the tanh form's derivative, in f32
// for f16/bf16 and rounded once (torch's gelu_backward kernels).
ValueId geluBackward(Graph& g, const Node& node, const std::vector<ValueId>& in) {
  DType dtype = node.value.tensor().dtype;
  bool half = dtype == DType::Float16 || dtype == DType::BFloat16;
  DType compute = half ? DType::Float32 : dtype;
  auto as = [&](ValueId v) {
    return g.meta(v).dtype == compute ? v : g.call("to_dtype", {v}, {{"dtype", compute}});
  };
  ValueId grad = as(in[0]), x = as(in[1]);
  auto mul = [&](ValueId a, ValueId b) { return g.call("mul", {a, b}); };
  auto times = [&](ValueId a, double k) { return scalarOp(g, "mul", a, k); };
  auto plus = [&](ValueId a, double k) { return scalarOp(g, "add", a, k); };
  ValueId xx = mul(x, x), derivative;
  if (attrOr<std::string>(node, "approximate", "none") == "tanh") {
    // 0.5 (1 + t) + 0.5 x (1 - t^2) beta (1 + 3 kappa x^2), t = tanh(beta (x + kappa x^3))
    const double beta = std::sqrt(2.0 / M_PI), kappa = 0.044715;
    ValueId t = g.call("tanh", {times(g.call("add", {x, times(mul(xx, x), kappa)}), beta)});
    ValueId dtanh = plus(g.call("neg", {mul(t, t)}), 1.0);
    ValueId dinner = times(plus(times(xx, 3 * kappa), 1.0), beta);
    derivative = g.call("add", {times(plus(t, 1.0), 0.5), mul(mul(times(x, 0.5), dtanh), dinner)});
  } else {
    // Phi(x) + x phi(x)
    constexpr double kInvSqrt2Pi = 0.3989422804014327; // 1 / sqrt(2 pi)
    ValueId cdf = times(plus(g.call("erf", {times(x, M_SQRT1_2)}), 1.0), 0.5);
    ValueId pdf = times(g.call("exp", {times(xx, -0.5)}), kInvSqrt2Pi);
    derivative = g.call("add", {cdf, mul(x, pdf)});
  }
  ValueId r = g.call("mul", {grad, derivative});
  return g.meta(r).dtype == dtype ? r : g.call("to_dtype", {r}, {{"dtype", dtype}});
}

ValueId silu(Graph& g, const Node&, const std::vector<ValueId>& in) {
  return inOpmath(g, in[0], [&](ValueId x) { return g.call("mul", {x, g.call("sigmoid", {x})}); });
}

// softmax: exp(x - max) / sum; log_softmax: (x - max) - log(sum(exp(x - max))).
ValueId softmaxOf(Graph& g, const Node& node, ValueId x) {
  std::vector<Attr> along = {{"dim", std::vector<int64_t>{attrOr<int64_t>(node, "dim", 0)}},
                             {"keepdim", true}};
  // Over an empty dim there is no max (nor any element): skip the shift.
  const TensorMeta& m = g.meta(x);
  int64_t d = attrOr<int64_t>(node, "dim", 0);
  size_t at =
      static_cast<size_t>(d < 0 ? d + static_cast<int64_t>(std::max<size_t>(m.dim(), 1)) : d);
  bool empty = m.dim() > 0 && m.sizes.at(at).asInteger() == 0;
  ValueId shifted = empty ? x : g.call("sub", {x, g.call("amax", {x}, along)});
  ValueId e = g.call("exp", {shifted});
  ValueId total = g.call("sum", {e}, along);
  if (node.target == "softmax") {
    // torch's CPU kernels multiply by the sum's reciprocal: a multiply per element where a divide
    // costs several times more. Half types keep the divide (a rounded reciprocal adds an error).
    return g.call("mul", {e, g.call("reciprocal", {total})});
  }
  return g.call("sub", {shifted, g.call("log", {total})});
}

ValueId softmax(Graph& g, const Node& node, const std::vector<ValueId>& in) {
  ValueId x = in[0];
  if (const AttrValue* t = node.attr("dtype")) x = g.call("to_dtype", {x}, {{"dtype", *t}});
  return inOpmath(g, x, [&](ValueId v) { return softmaxOf(g, node, v); });
}

// addmm: alpha * (mat1 @ mat2) + beta * self, where a factor of 0 drops its
// term (NaNs included), as torch.
ValueId addmm(Graph& g, const Node& node, const std::vector<ValueId>& in) {
  ValueId product = g.call("mm", {in[1], in[2]});
  const AttrValue* alpha = node.attr("alpha");
  const AttrValue* beta = node.attr("beta");
  auto isZero = [](const AttrValue* v) {
    return v && std::visit(
                    [](const auto& x) {
                      using V = std::decay_t<decltype(x)>;
                      if constexpr (std::is_same_v<V, int64_t> || std::is_same_v<V, double>)
                        return x == 0;
                      return false;
                    },
                    *v);
  };
  if (isZero(alpha))
    product = g.call("zeros_like", {product});
  else if (alpha)
    product = scalarOp(g, "mul", product, *alpha);
  if (isZero(beta)) return product;
  ValueId self = beta ? scalarOp(g, "mul", in[0], *beta) : in[0];
  return g.call("add", {product, self});
}

ValueId linear(Graph& g, const Node&, const std::vector<ValueId>& in) {
  ValueId w = in[1];
  if (g.meta(w).dim() == 2)
    w = g.call("transpose", {w}, {{"dim0", int64_t{0}}, {"dim1", int64_t{1}}});
  // A matrix and a bias: addmm, which a GPU library adds in the product's
  // epilogue (one rounding, as torch's linear); elsewhere it decomposes further.
  if (in.size() > 2 && g.meta(in[0]).dim() == 2 && g.meta(w).dim() == 2 && g.meta(in[2]).dim() == 1)
    return g.call("addmm", {in[2], in[0], w});
  ValueId y = g.call("matmul", {in[0], w});
  return in.size() > 2 ? g.call("add", {y, in[2]}) : y;
}

// var: sum((x - mean)^2) / max(n - correction, 0) over the reduced dims.
ValueId variance(Graph& g, const Node& node, const std::vector<ValueId>& in) {
  ValueId x = in[0];
  std::vector<int64_t> dims = dimsOf(g, node, x);
  double correction = attrOr<double>(node, "correction", 1.0);
  if (correction != std::floor(correction))
    throw Error(ErrorCode::Unsupported, node.target + ": a fractional correction");
  const TensorMeta& m = g.meta(x);
  sym::Expr count = g.symbols().integer(1);
  for (int64_t d : dims)
    if (m.dim()) count = count * m.sizes[d < 0 ? d + static_cast<int64_t>(m.dim()) : d];
  sym::Expr divisor = sym::max(count - static_cast<int64_t>(correction), 0);
  bool keepdim = attrOr<bool>(node, "keepdim", false);
  ValueId mean = g.call("mean", {x}, {{"dim", dims}, {"keepdim", true}});
  ValueId diff = g.call("sub", {x, mean});
  ValueId sq = g.call("sum", {g.call("mul", {diff, diff})}, {{"dim", dims}, {"keepdim", keepdim}});
  ValueId var = scalarOp(g, "div", sq, divisor);
  return node.target == "std" ? g.call("sqrt", {var}) : var;
}

// layer_norm: (x - mean) * rsqrt(var + eps) * weight + bias over the trailing dims;
// rms_norm: x * rsqrt(mean(x^2) + eps) * weight.
ValueId normOf(Graph& g, const Node& node, const std::vector<ValueId>& in, ValueId x) {
  const TensorMeta m = g.meta(x); // a copy: calls grow the graph
  size_t k = std::visit(
      [](const auto& v) -> size_t {
        using V = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<V, std::vector<int64_t>> ||
                      std::is_same_v<V, std::vector<sym::Expr>>)
          return v.size();
        return 0;
      },
      *node.attr("normalized_shape"));
  std::vector<int64_t> dims;
  for (size_t i = m.dim() - k; i < m.dim(); ++i) dims.push_back(static_cast<int64_t>(i));
  std::vector<Attr> along = {{"dim", dims}, {"keepdim", true}};
  bool layer = node.target == "layer_norm";
  // rms_norm's default eps, as torch's: that of the dtype it computes in (f32 for halves)
  double eps = attrOr<double>(node, "eps", layer ? 1e-5 : epsilon(opmath(g.meta(in[0]).dtype)));
  ValueId centred = layer ? g.call("sub", {x, g.call("mean", {x}, along)}) : x;
  ValueId power = g.call("mean", {g.call("mul", {centred, centred})}, along);
  ValueId y = g.call("mul", {centred, g.call("rsqrt", {scalarOp(g, "add", power, eps)})});
  // The optional weight and bias follow x among the inputs; an absent weight
  // before a given bias is marked (weight=None), so the bias is not taken for it.
  size_t next = 1;
  auto marked = [&](const char* arg) {
    const AttrValue* a = node.attr(arg);
    return a && std::holds_alternative<std::monostate>(*a);
  };
  if (!marked("weight") && next < in.size()) y = g.call("mul", {y, in[next++]});
  if (layer && next < in.size()) y = g.call("add", {y, in[next++]});
  return y;
}

ValueId norm(Graph& g, const Node& node, const std::vector<ValueId>& in) {
  return inOpmath(g, in[0], [&](ValueId x) { return normOf(g, node, in, x); });
}

// weight [C] viewed to broadcast along the class dim of an input of `rank` dims.
ValueId alongClasses(Graph& g, ValueId weight, size_t rank) {
  for (size_t i = 2; i < rank; ++i) weight = g.call("unsqueeze", {weight}, {{"dim", int64_t{-1}}});
  return weight;
}

// cross_entropy as torch computes it (interpreter_linalg.cpp says the formulas):
// from logp = log_softmax(input) along the class dim, with class indices the
// nll of the target class (weighted, ignore_index zeroed) mixed with the
// weighted sum over classes by label_smoothing, 'mean' dividing by the summed
// weights of the targets kept; with class probabilities the smoothed targets'
// weighted cross entropy, 'mean' dividing by the number of samples.
ValueId crossEntropy(Graph& g, const Node& node, const std::vector<ValueId>& in) {
  ValueId x = in[0], target = in[1];
  std::optional<ValueId> weight;
  if (in.size() > 2) weight = in[2];
  const TensorMeta m = g.meta(x); // a copy: calls grow the graph
  int64_t classDim = m.dim() == 1 ? 0 : 1;
  sym::Expr classes = m.sizes[classDim];
  double smoothing = attrOr<double>(node, "label_smoothing", 0.0);
  std::string reduction = attrOr<std::string>(node, "reduction", "mean");
  std::vector<Attr> overClasses = {{"dim", std::vector<int64_t>{classDim}}};
  ValueId logp = g.call("log_softmax", {x}, {{"dim", classDim}});
  ValueId weighted = weight ? g.call("mul", {logp, alongClasses(g, *weight, m.dim())}) : logp;
  // -sum_c w[c] * logp[c] * t[c] per sample, t a tensor or 1.
  auto perSample = [&](std::optional<ValueId> t) {
    return g.call("neg",
                  {g.call("sum", {t ? g.call("mul", {weighted, *t}) : weighted}, overClasses)});
  };
  if (g.meta(target).dtype != DType::Int64) {
    ValueId t = target;
    if (smoothing != 0) {
      ValueId uniform = g.call("full_like", {t}, {{"fill_value", smoothing}});
      t = g.call("add",
                 {scalarOp(g, "mul", t, 1 - smoothing), scalarOp(g, "div", uniform, classes)});
    }
    ValueId loss = perSample(t);
    if (reduction == "none") return loss;
    ValueId total = g.call("sum", {loss});
    if (reduction == "sum") return total;
    sym::Expr samples = g.symbols().integer(1);
    for (size_t i = 0; i < m.dim(); ++i)
      if (static_cast<int64_t>(i) != classDim) samples = samples * m.sizes[i];
    return scalarOp(g, "div", total, samples);
  }
  int64_t ignore = attrOr<int64_t>(node, "ignore_index", -100);
  ValueId kept = scalarOp(g, "ne", target, ignore);
  ValueId safe = g.call("where", {kept, target}, {{"other", int64_t{0}}});
  ValueId index = g.call("unsqueeze", {safe}, {{"dim", classDim}});
  ValueId picked = g.call("gather", {weighted, index}, {{"dim", classDim}});
  ValueId loss = g.call("neg", {g.call("squeeze", {picked}, {{"dim", classDim}})});
  if (smoothing != 0) {
    ValueId smooth = scalarOp(g, "div", perSample(std::nullopt), classes);
    loss = g.call("add",
                  {scalarOp(g, "mul", loss, 1 - smoothing), scalarOp(g, "mul", smooth, smoothing)});
  }
  loss = g.call("where", {kept, loss}, {{"other", 0.0}});
  if (reduction == "none") return loss;
  ValueId total = g.call("sum", {loss});
  if (reduction == "sum") return total;
  ValueId counted = kept;
  if (weight) {
    ValueId table = g.call("unsqueeze", {*weight}, {{"dim", int64_t{1}}});
    ValueId wy = g.call("squeeze", {g.call("embedding", {table, safe})}, {{"dim", int64_t{-1}}});
    counted = g.call("where", {kept, wy}, {{"other", 0.0}});
  }
  return g.call("div", {total, g.call("sum", {counted})});
}

// Attention's scores times its scale: the `scale` attribute, else 1 / sqrt(E). As torch
// (which scales q and k before their product), scores over an empty embedding are 0
// whatever the scale.
ValueId scaled(Graph& g, const Node& node, ValueId scores, sym::Expr embed) {
  std::optional<int64_t> e = embed.asInteger();
  if (e == 0) return scores;
  if (const AttrValue* scale = node.attr("scale")) return scalarOp(g, "mul", scores, *scale);
  if (e) return scalarOp(g, "mul", scores, 1 / std::sqrt(static_cast<double>(*e)));
  // max(E, 1): an empty embedding's scores stay 0
  ValueId width = g.call("full_like", {scores}, {{"fill_value", sym::max(embed, 1)}});
  return g.call("mul", {scores, g.call("rsqrt", {width})});
}

// Scores [..., l, s] with those past each row's position (is_causal's upper
// triangle) set to -inf.
ValueId causallyMasked(Graph& g, ValueId scores, sym::Expr l, sym::Expr s, Device device) {
  const std::string on = toString(device);
  ValueId rows = g.call("unsqueeze", {g.call("arange", {}, {{"end", l}, {"device", on}})},
                        {{"dim", int64_t{1}}});
  ValueId keep = g.call("ge", {rows, g.call("arange", {}, {{"end", s}, {"device", on}})});
  return g.call("where", {keep, scores}, {{"other", -INFINITY}});
}

// Scores with an attn_mask: a bool one sets those it drops to -inf, a float one is added.
ValueId withMask(Graph& g, ValueId scores, ValueId mask) {
  if (g.meta(mask).dtype == DType::Bool)
    return g.call("where", {mask, scores}, {{"other", -INFINITY}});
  return g.call("add", {scores, mask});
}

// The [..., L, S] weights (or their grads) as an attention node with dropout
// drops them: dropout of its random stream (attention.h); else as they are.
ValueId dropped(Graph& g, const Node& node, ValueId weights) {
  std::optional<std::pair<ValueId, ValueId>> stream = attentionStream(node);
  if (!stream) return weights;
  return g.call("dropout", {weights, stream->first, stream->second},
                {{"p", attentionDropout(node)}, {"train", true}});
}

// scaled_dot_product_attention: softmax(q @ k^T * scale + mask) @ v, where a
// bool mask (and is_causal's lower triangle) sets the scores it drops to -inf.
// With a mask, a row whose every score is -inf attends to nothing (weights 0,
// torch's safe softmax), where a plain softmax would give NaN.
ValueId attention(Graph& g, const Node& node, const std::vector<ValueId>& in) {
  const TensorMeta q = g.meta(in[0]); // a copy: calls grow the graph
  int64_t n = static_cast<int64_t>(q.dim());
  ValueId kt = g.call("transpose", {in[1]}, {{"dim0", n - 2}, {"dim1", n - 1}});
  ValueId scores = scaled(g, node, g.call("matmul", {in[0], kt}), q.sizes[n - 1]);
  bool masked = attrOr<bool>(node, "is_causal", false);
  if (masked) scores = causallyMasked(g, scores, q.sizes[n - 2], g.meta(in[1]).sizes[n - 2], q.device);
  if (std::optional<ValueId> mask = attentionMask(node)) {
    scores = withMask(g, scores, *mask);
    masked = true;
  }
  ValueId weights = g.call("softmax", {scores}, {{"dim", int64_t{-1}}});
  if (masked) {
    ValueId max = g.call("amax", {scores}, {{"dim", std::vector<int64_t>{-1}}, {"keepdim", true}});
    ValueId attends = g.call("ne", {max}, {{"other", -INFINITY}});
    weights = g.call("where", {attends, weights}, {{"other", 0.0}});
  }
  return g.call("matmul", {dropped(g, node, weights), in[2]});
}

// The pieces of attention's backward (ops_nn.cpp): the scores recomputed in
// opmath (f32, f64 for f64), their row logsumexp, and the grads from the
// probabilities exp(scores - lse) and each row's sum of grad * out.
ValueId attentionPiece(Graph& g, const Node& node, const std::vector<ValueId>& in) {
  bool lseOnly = node.target == "attention_lse";
  ValueId q = lseOnly ? in[0] : in[1], k = lseOnly ? in[1] : in[2];
  const TensorMeta qm = g.meta(q); // a copy: calls grow the graph
  int64_t n = static_cast<int64_t>(qm.dim());
  auto wide = [&](ValueId x) { return g.call("to_dtype", {x}, {{"dtype", opmath(qm.dtype)}}); };
  auto narrow = [&](ValueId x) { return g.call("to_dtype", {x}, {{"dtype", qm.dtype}}); };
  auto mT = [&](ValueId x) {
    return g.call("transpose", {x}, {{"dim0", n - 2}, {"dim1", n - 1}});
  };
  auto lastDim = [&](ValueId x) { return g.call("unsqueeze", {x}, {{"dim", int64_t{-1}}}); };
  ValueId scores = scaled(g, node, wide(g.call("matmul", {q, mT(k)})), qm.sizes[n - 1]);
  if (attrOr<bool>(node, "is_causal", false))
    scores = causallyMasked(g, scores, qm.sizes[n - 2], g.meta(k).sizes[n - 2], qm.device);
  if (std::optional<ValueId> mask = attentionMask(node)) scores = withMask(g, scores, *mask);
  const std::vector<int64_t> last = {-1};
  if (lseOnly) {
    ValueId max = g.call("amax", {scores}, {{"dim", last}, {"keepdim", true}});
    ValueId total = g.call("sum", {g.call("exp", {g.call("sub", {scores, max})})},
                           {{"dim", last}, {"keepdim", false}});
    return g.call("add", {g.call("log", {total}), g.call("squeeze", {max}, {{"dim", last}})});
  }
  ValueId grad = in[0], v = in[3], out = in[4], lse = in[5];
  ValueId delta = g.call("sum", {g.call("mul", {wide(grad), wide(out)})},
                         {{"dim", last}, {"keepdim", false}});
  ValueId p = g.call("exp", {g.call("sub", {scores, lastDim(lse)})});
  // With dropout, out = dropped(P) @ v: dP reaches the kept weights scaled, and
  // delta (grad . out) is already the sum over the dropped weights.
  ValueId dp = dropped(g, node, wide(g.call("matmul", {grad, mT(v)})));
  ValueId ds =
      scaled(g, node, g.call("mul", {p, g.call("sub", {dp, lastDim(delta)})}), qm.sizes[n - 1]);
  if (node.target == "attention_grad_query") return g.call("matmul", {narrow(ds), k});
  ValueId dk = g.call("matmul", {narrow(mT(ds)), q});
  ValueId dv = g.call("matmul", {narrow(mT(dropped(g, node, p))), grad});
  return g.call("cat", {dk, dv}, {{"dim", int64_t{-1}}});
}

} // namespace

void addDecompositions(std::vector<OpInfo>& ops) {
  auto set = [&](std::initializer_list<const char*> names, DecomposeFn fn) {
    for (const char* n : names)
      for (OpInfo& op : ops)
        if (op.name == n) op.decompose = fn;
  };
  set({"gelu"}, gelu);
  set({"gelu_backward"}, geluBackward);
  set({"silu"}, silu);
  set({"softmax", "log_softmax"}, softmax);
  set({"linear"}, linear);
  set({"var", "std"}, variance);
  set({"layer_norm", "rms_norm"}, norm);
  set({"cross_entropy"}, crossEntropy);
  set({"addmm"}, addmm);
  set({"scaled_dot_product_attention"}, attention);
  set({"attention_lse", "attention_grad_query", "attention_grad_key_value"}, attentionPiece);
}

} // namespace detail

Graph decompose(const Graph& graph, const std::set<std::string>& keep) {
  return decompose(graph, [&](const Graph&, const Node& n) { return keep.count(n.target) > 0; });
}

Graph decompose(const Graph& graph,
                const std::function<bool(const Graph&, const Node&)>& keep) {
  Graph current = graph;
  for (int round = 0; round < 8; ++round) {
    Graph out(graph.symbols());
    std::vector<ValueId> remap(current.size());
    bool changed = false;
    for (ValueId id = 0; id < current.size(); ++id) {
      Node n = current.node(id);
      for (ValueId& in : n.inputs) in = remap[in];
      const OpInfo* op = n.kind == NodeKind::Call ? findOp(n.target) : nullptr;
      if (!op || !op->decompose || keep(out, n)) {
        remap[id] = out.append(std::move(n));
        continue;
      }
      ValueId result = op->decompose(out, n, n.inputs);
      // Core pointwise ops follow their inputs' layout; a composite whose result is
      // contiguous (softmax, layer_norm, ...) copies into it.
      if (out.value(result) != n.value && n.value.isTensor() && n.value.tensor().isContiguous() &&
          out.meta(result).sizes == n.value.tensor().sizes)
        result = out.call("contiguous", {result});
      if (out.value(result) != n.value)
        throw Error(ErrorCode::Internal, n.target + ": decomposition gives " +
                                             toString(out.value(result)) + ", not " +
                                             toString(n.value));
      remap[id] = result;
      changed = true;
    }
    std::vector<ValueId> outputs;
    for (ValueId o : current.outputs()) outputs.push_back(remap[o]);
    out.setOutputs(std::move(outputs));
    if (!changed) return out;
    current = std::move(out);
  }
  throw Error(ErrorCode::Internal, "decompose: composite ops left after 8 rounds");
}

} // namespace kiln::ir
