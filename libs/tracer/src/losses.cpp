// F's losses and the vector norms as torch computes them, from ops the IR has: autograd and
// both backends take them as they are. Losses run in f32 under autocast, as on torch's
// autocast f32 list (both device types).
#include "losses.h"

#include <cmath>
#include <limits>

#include "kiln/ir/dtype.h"
#include "kiln/sym/expr.h"

namespace kiln::tracer {

namespace {

bool given(const std::optional<Var>& v) {
  return v && (*v)->kind != Kind::None;
}

std::string textOf(const std::string& what, const std::optional<Var>& v,
                   const std::string& otherwise) {
  if (!v) return otherwise;
  if ((*v)->kind != Kind::Str) unsupported(what + ": expected a str");
  return (*v)->name;
}

// A floating tensor where autocast is on for its device, as autocast's f32 policy casts it.
Var inFloat32(TraceState& s, const Var& x) {
  ir::TensorMeta m = s.meta(x);
  if (!s.autocast.of(m.device.type) || !ir::isFloating(m.dtype) || m.dtype == DType::Float32 ||
      m.dtype == DType::Float64)
    return x;
  return s.tensor(s.graph.call("to_dtype", {x->value}, {{"dtype", DType::Float32}}));
}

// The legacy size_average/reduce arguments, refused unless None.
void noLegacy(const std::string& name, const Params& p) {
  for (const char* legacy : {"size_average", "reduce"})
    if (given(p[legacy]))
      unsupported(name + "(" + legacy + "=...): the legacy reduction arguments");
}

// A loss's elementwise values reduced as `reduction` says.
Var reduce(TraceState& s, const std::string& name, const std::string& reduction, const Var& loss) {
  if (reduction == "none") return loss;
  if (reduction == "sum") return s.callOp("sum", {loss}, {});
  if (reduction == "mean") return s.callOp("mean", {loss}, {});
  unsupported(name + "(reduction='" + reduction + "')");
}

Var mul(TraceState& s, const Var& a, const Var& b) {
  return s.callOp("mul", {a, b}, {});
}
Var add(TraceState& s, const Var& a, const Var& b) {
  return s.callOp("add", {a, b}, {});
}
Var sub(TraceState& s, const Var& a, const Var& b) {
  return s.callOp("sub", {a, b}, {});
}
Var unary(TraceState& s, const std::string& op, const Var& a) {
  return s.callOp(op, {a}, {});
}

// |x|^p summed over `dim` (None: all), to the 1/p: torch's vector norm for a number p.
Var vectorNorm(TraceState& s, const std::string& name, const Var& x, double p,
               const std::optional<Var>& dim, bool keepdim) {
  if (!ir::isFloating(s.meta(x).dtype))
    unsupported(name + " of a " + std::string(ir::name(s.meta(x).dtype)) + " tensor");
  // The derivative of these forms is NaN at a zero vector, where torch's is 0.
  if (s.gradEnabled && s.meta(x).requiresGrad)
    unsupported(name + " of a tensor that requires grad");
  if (s.autocast.of(s.meta(x).device.type) && s.meta(x).device.type == ir::DeviceType::Cuda)
    unsupported(name + " under CUDA autocast");
  Kwargs along;
  if (given(dim)) along.emplace_back("dim", *dim);
  along.emplace_back("keepdim", boolean(keepdim));
  Var magnitude = unary(s, "abs", x);
  double inf = std::numeric_limits<double>::infinity();
  if (p == inf) return s.callOp("amax", {magnitude}, along);
  if (p == -inf) return s.callOp("amin", {magnitude}, along);
  if (p == 0) unsupported(name + " of order 0");
  if (p == 1) return s.callOp("sum", {magnitude}, along);
  if (p == 2) return unary(s, "sqrt", s.callOp("sum", {mul(s, x, x)}, along));
  Var powered = s.callOp("pow", {magnitude, floating(p)}, {});
  return s.callOp("pow", {s.callOp("sum", {powered}, along), floating(1.0 / p)}, {});
}

} // namespace

std::optional<Var> callLoss(TraceState& s, const std::string& name, const std::string& m,
                            bool method, const std::vector<Var>& args, const Kwargs& kwargs) {
  bool functional = name.rfind("torch.nn.functional.", 0) == 0;
  if (functional &&
      (m == "mse_loss" || m == "l1_loss" || m == "smooth_l1_loss" || m == "huber_loss")) {
    Params p =
        m == "huber_loss"
            ? bindParams(name, args, kwargs, {"input", "target", "reduction", "delta", "weight"})
        : m == "smooth_l1_loss"
            ? bindParams(name, args, kwargs,
                         {"input", "target", "size_average", "reduce", "reduction", "beta"})
            : bindParams(name, args, kwargs,
                         {"input", "target", "size_average", "reduce", "reduction", "weight"});
    noLegacy(name, p);
    if (given(p["weight"])) unsupported(name + "(weight=...)");
    Var diff = sub(s, inFloat32(s, tensorArg(name, p["input"])),
                   inFloat32(s, tensorArg(name, p["target"])));
    Var loss;
    if (m == "mse_loss") {
      loss = mul(s, diff, diff);
    } else if (m == "l1_loss") {
      loss = unary(s, "abs", diff);
    } else { // quadratic below the threshold, linear above it
      bool huber = m == "huber_loss";
      double t =
          numberArg(s, name + (huber ? "'s delta" : "'s beta"), p[huber ? "delta" : "beta"], 1.0);
      if (t < 0) unsupported(name + " with a negative " + (huber ? "delta" : "beta"));
      Var magnitude = unary(s, "abs", diff);
      if (t == 0) {
        loss = magnitude;
      } else {
        Var quadratic = mul(s, mul(s, diff, diff), floating(huber ? 0.5 : 0.5 / t));
        Var linear = huber ? mul(s, sub(s, magnitude, floating(0.5 * t)), floating(t))
                           : sub(s, magnitude, floating(0.5 * t));
        loss = s.callOp("where", {s.callOp("lt", {magnitude, floating(t)}, {}), quadratic, linear},
                        {});
      }
    }
    return reduce(s, name, textOf(name + "'s reduction", p["reduction"], "mean"), loss);
  }
  if (functional && (m == "binary_cross_entropy_with_logits" || m == "binary_cross_entropy")) {
    Params p = bindParams(
        name, args, kwargs,
        {"input", "target", "weight", "size_average", "reduce", "reduction", "pos_weight"});
    if (m == "binary_cross_entropy" && p["pos_weight"])
      unsupported(name + ": an unexpected keyword pos_weight");
    noLegacy(name, p);
    Var x = tensorArg(name, p["input"]);
    if (m == "binary_cross_entropy" && s.autocast.of(s.meta(x).device.type) &&
        s.meta(x).device.type == ir::DeviceType::Cuda)
      unsupported(name + " under CUDA autocast (torch refuses it there)");
    x = inFloat32(s, x);
    Var t = inFloat32(s, tensorArg(name, p["target"]));
    Var one = integer(s.table.integer(1));
    auto oneMinus = [&](const Var& v) { return add(s, unary(s, "neg", v), one); };
    Var loss;
    if (m == "binary_cross_entropy") { // -(t log x + (1 - t) log(1 - x)), each log at least -100
      auto clampedLog = [&](const Var& v) {
        return s.callOp("clamp", {unary(s, "log", v)}, {{"min", floating(-100.0)}});
      };
      loss = unary(s, "neg",
                   add(s, mul(s, t, clampedLog(x)), mul(s, oneMinus(t), clampedLog(oneMinus(x)))));
    } else { // (1 - t) x + w (log1p(exp(-|x|)) + max(-x, 0)), w = 1 + (pos_weight - 1) t
      Var softplusOfMinus =
          add(s, unary(s, "log1p", unary(s, "exp", unary(s, "neg", unary(s, "abs", x)))),
              s.callOp("clamp", {unary(s, "neg", x)}, {{"min", integer(s.table.integer(0))}}));
      if (given(p["pos_weight"])) {
        Var pw = inFloat32(s, tensorArg(name + "'s pos_weight", p["pos_weight"]));
        softplusOfMinus = mul(s, add(s, mul(s, sub(s, pw, one), t), one), softplusOfMinus);
      }
      loss = add(s, mul(s, oneMinus(t), x), softplusOfMinus);
    }
    if (given(p["weight"]))
      loss = mul(s, loss, inFloat32(s, tensorArg(name + "'s weight", p["weight"])));
    return reduce(s, name, textOf(name + "'s reduction", p["reduction"], "mean"), loss);
  }
  if (functional && m == "nll_loss") { // -input[n, target[n]] (weighted), ignore_index left out
    Params p = bindParams(
        name, args, kwargs,
        {"input", "target", "weight", "size_average", "ignore_index", "reduce", "reduction"});
    noLegacy(name, p);
    Var x = inFloat32(s, tensorArg(name, p["input"])),
        target = tensorArg(name + "'s target", p["target"]);
    if (s.meta(x).dim() != 2 || s.meta(target).dim() != 1)
      unsupported(name + " beyond a 2-d input and 1-d target");
    if (!ir::isIntegral(s.meta(target).dtype, false))
      unsupported(name + " of a target that is not integral");
    if (!s.decide(sym::eq(s.meta(x).sizes[0], s.meta(target).sizes[0])))
      unsupported(name + " of an input and target of other batch sizes (torch raises)");
    int64_t ignore =
        p["ignore_index"] ? intArg(s, name + "'s ignore_index", *p["ignore_index"]) : -100;
    Var kept = s.callOp("ne", {target, integer(s.table.integer(ignore))}, {});
    Var safe = s.callOp("where", {kept, target, integer(s.table.integer(0))}, {});
    Var column = s.callOp("unsqueeze", {safe, integer(s.table.integer(1))}, {});
    Var picked = s.callOp("squeeze",
                          {s.callOp("gather", {x, integer(s.table.integer(1)), column}, {}),
                           integer(s.table.integer(1))},
                          {});
    Var zero = floating(0.0);
    Var w = s.callOp("where", {kept, s.callOp("ones_like", {picked}, {}), zero}, {});
    if (given(p["weight"])) {
      Var classes = inFloat32(s, tensorArg(name + "'s weight", p["weight"]));
      w = s.callOp(
          "where",
          {kept, s.callOp("index_select", {classes, integer(s.table.integer(0)), safe}, {}), zero},
          {});
    }
    Var loss = unary(s, "neg", mul(s, picked, w));
    std::string reduction = textOf(name + "'s reduction", p["reduction"], "mean");
    if (reduction == "mean")
      return s.callOp("div", {s.callOp("sum", {loss}, {}), s.callOp("sum", {w}, {})}, {});
    return reduce(s, name, reduction, loss);
  }
  if (functional && m == "kl_div") { // target (log target - input), 0 where target is 0
    Params p = bindParams(name, args, kwargs,
                          {"input", "target", "size_average", "reduce", "reduction", "log_target"});
    noLegacy(name, p);
    Var x = inFloat32(s, tensorArg(name, p["input"])),
        t = inFloat32(s, tensorArg(name, p["target"]));
    Var loss;
    if (boolArg(name + "'s log_target", p["log_target"], false)) {
      loss = mul(s, unary(s, "exp", t), sub(s, t, x));
    } else {
      Var xlogx = s.callOp(
          "where",
          {s.callOp("eq", {t, floating(0.0)}, {}), floating(0.0), mul(s, t, unary(s, "log", t))},
          {});
      loss = sub(s, xlogx, mul(s, t, x));
    }
    std::string reduction = textOf(name + "'s reduction", p["reduction"], "mean");
    if (reduction != "batchmean") return reduce(s, name, reduction, loss);
    if (s.meta(x).dim() == 0) return s.callOp("sum", {loss}, {});
    return s.callOp("div", {s.callOp("sum", {loss}, {}), integer(s.meta(x).sizes.at(0))}, {});
  }
  if (functional && m == "normalize") { // input / max(norm(input, p, dim), eps)
    Params p = bindParams(name, args, kwargs, {"input", "p", "dim", "eps", "out"});
    if (given(p["out"])) unsupported(name + "(out=...)");
    Var x = tensorArg(name, p["input"]);
    Var dim = p["dim"] ? *p["dim"] : integer(s.table.integer(1));
    Var norm = vectorNorm(s, name, x, numberArg(s, name + "'s p", p["p"], 2.0), dim, true);
    Var floor = s.callOp("clamp", {norm},
                         {{"min", floating(numberArg(s, name + "'s eps", p["eps"], 1e-12))}});
    return s.callOp("div", {x, floor}, {});
  }
  bool norm =
      name == "torch.linalg.vector_norm" || (m == "norm" && (method || name == "torch.norm"));
  if (norm) {
    bool vector = name == "torch.linalg.vector_norm";
    Params p =
        vector
            ? bindParams(name, args, kwargs, {"x", "ord", "dim", "keepdim", "dtype", "out"}, 4)
            : bindParams(name, args, kwargs, {"input", "p", "dim", "keepdim", "dtype", "out"}, 4);
    for (const char* refused : {"dtype", "out"})
      if (given(p[refused])) unsupported(name + "(" + refused + "=...)");
    Var x = tensorArg(name, p[vector ? "x" : "input"]);
    std::optional<Var> order = p[vector ? "ord" : "p"];
    double value = 2.0;
    if (given(order)) {
      if ((*order)->kind == Kind::Str && (*order)->name == "fro")
        value = 2.0; // of a vector or over all dims
      else
        value = numberArg(s, name + "'s " + (vector ? "ord" : "p"), order, 2.0);
      if ((*order)->kind == Kind::Str && given(p["dim"])) {
        Var d = *p["dim"];
        bool oneOrTwo = d->kind == Kind::Int ||
                        ((d->kind == Kind::Tuple || d->kind == Kind::List) && d->items.size() <= 2);
        if (!oneOrTwo) unsupported(name + "(p='fro') over more than two dims");
      }
    }
    std::optional<Var> dim = p["dim"];
    return vectorNorm(s, name, x, value, dim, boolArg(name + "'s keepdim", p["keepdim"], false));
  }
  return std::nullopt;
}

} // namespace kiln::tracer
