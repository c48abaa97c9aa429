// Derivative rules of the pointwise ops: each a few lines over x (the input),
// y (the result) and g (the grad of y). backward() sums broadcast grads back to
// the inputs' sizes and casts them to the inputs' dtypes.
#include "rules_impl.h"

namespace kiln::autograd::detail {
namespace {

// A rule of a unary op: dx from (ops, x, y, g).
template <typename F> Grads unary(RuleContext& c, F f) {
  Ops o{c.g};
  return {f(o, c.in(0), c.out, *c.grad)};
}
#define UNARY(body)                                                                                \
  [](RuleContext& c) { return unary(c, [](Ops& o, ValueId x, ValueId y, ValueId g) { body; }); }

constexpr double kTwoOverSqrtPi = 1.1283791670955126; // 2 / sqrt(pi)

// torch's gelu_backward, one op (its decomposition computes in f32 for
// f16/bf16 and rounds once, as torch's kernel).
Grads gelu(RuleContext& c) {
  Ops o{c.g};
  const AttrValue* approximate = c.attr("approximate");
  std::vector<Attr> attrs;
  if (approximate) attrs.push_back({"approximate", *approximate});
  return {o.call("gelu_backward", {*c.grad, c.in(0)}, std::move(attrs))};
}

// silu'(x) = s (1 + x (1 - s)), s = sigmoid(x).
Grads silu(RuleContext& c) {
  Ops o{c.g};
  ValueId x = c.in(0), s = o.unary("sigmoid", x);
  return {o.mul(*c.grad, o.mul(s, o.add(o.mul(x, o.add(o.neg(s), 1.0)), 1.0)))};
}

// The value of a Scalar argument: its input, or its attribute.
struct Operand {
  std::optional<size_t> input;
  const AttrValue* attr;
};
Operand operand(RuleContext& c, std::string_view arg) {
  return {c.arg(arg), c.attr(arg)};
}
ValueId mulBy(Ops& o, RuleContext& c, ValueId a, const Operand& v) {
  return v.input ? o.mul(a, c.in(*v.input)) : o.mul(a, *v.attr);
}
ValueId divBy(Ops& o, RuleContext& c, ValueId a, const Operand& v) {
  return v.input ? o.div(a, c.in(*v.input)) : o.div(a, *v.attr);
}

double alpha(RuleContext& c) {
  return c.attr("alpha") ? number(*c.attr("alpha")) : 1.0;
}

Grads add(RuleContext& c) {
  Ops o{c.g};
  ValueId g = *c.grad;
  return {g, c.arg("other") ? std::optional(alpha(c) == 1 ? g : o.mul(g, alpha(c))) : std::nullopt};
}

Grads sub(RuleContext& c) {
  Ops o{c.g};
  ValueId g = *c.grad;
  return {g, c.arg("other") ? std::optional(o.mul(g, -alpha(c))) : std::nullopt};
}

Grads mul(RuleContext& c) {
  Ops o{c.g};
  ValueId g = *c.grad;
  Operand other = operand(c, "other");
  Grads r = {c.needs[0] ? std::optional(mulBy(o, c, g, other)) : std::nullopt};
  if (other.input && c.needs[*other.input]) r.push_back(o.mul(g, c.in(0)));
  return r;
}

// x / y: dx = g / y, dy = -g x / y^2; with a rounding mode, zeros (as torch).
Grads div(RuleContext& c) {
  Ops o{c.g};
  ValueId g = *c.grad;
  Operand other = operand(c, "other");
  if (c.attr("rounding_mode")) return {o.zerosLike(c.in(0)), std::nullopt};
  Grads r = {c.needs[0] ? std::optional(divBy(o, c, g, other)) : std::nullopt};
  if (other.input) {
    ValueId y = c.in(*other.input);
    r.push_back(o.neg(o.div(o.mul(g, c.in(0)), o.mul(y, y))));
  }
  return r;
}

// torch's pow_backward_self and pow_backward_exponent, zeros where the exponent is 0
// and, for the exponent, where the base is 0 and the exponent >= 0.
Grads pow(RuleContext& c) {
  Ops o{c.g};
  ValueId x = c.in(0), g = *c.grad;
  Operand e = operand(c, "other");
  if (!e.input) {
    double n = number(*e.attr);
    if (n == 0) return {o.zerosLike(x)};
    return {o.mul(g, o.mul(withScalar(c.g, "pow", x, n - 1), n))};
  }
  ValueId ex = c.in(*e.input);
  Grads r(2);
  if (c.needs[0]) {
    ValueId d = o.mul(g, o.mul(ex, o.call("pow", {x, o.add(ex, -1.0)})));
    r[0] = o.drop(o.cmp("eq", ex, 0.0), d);
  }
  if (c.needs[1]) {
    ValueId zeroBase = o.both(o.cmp("eq", x, 0.0), o.cmp("ge", ex, 0.0));
    r[1] = o.mul(g, o.drop(zeroBase, o.mul(c.out, o.unary("log", x))));
  }
  return r;
}

// fmod and remainder: dx = g, dy = -g * trunc(x / y) (floor for remainder).
template <bool kFloor> Grads modulo(RuleContext& c) {
  Ops o{c.g};
  ValueId g = *c.grad;
  if (!c.arg("other")) return {g};
  ValueId q = o.call("div", {c.in(0), c.in(1)},
                     {{"rounding_mode", std::string(kFloor ? "floor" : "trunc")}});
  return {g, o.neg(o.mul(g, q))};
}

// maximum (kMax) and minimum: ties split the grad in halves.
template <bool kMax> Grads extremum(RuleContext& c) {
  Ops o{c.g};
  ValueId x = c.in(0), y = c.in(1), g = *c.grad;
  ValueId half = o.call("where", {o.cmp("eq", x, y), o.mul(g, 0.5), g});
  return {o.drop(o.cmp(kMax ? "lt" : "gt", x, y), half),
          o.drop(o.cmp(kMax ? "gt" : "lt", x, y), half)};
}

// clamp: self's grad where min <= x <= max; tensor bounds as torch's clamp_backward_min_max.
Grads clamp(RuleContext& c) {
  Ops o{c.g};
  ValueId x = c.in(0), g = *c.grad;
  Operand lo = operand(c, "min"), hi = operand(c, "max");
  bool hasLo = lo.input || (lo.attr && !std::holds_alternative<std::monostate>(*lo.attr));
  bool hasHi = hi.input || (hi.attr && !std::holds_alternative<std::monostate>(*hi.attr));
  auto compare = [&](const char* op, const Operand& b) {
    return b.input ? o.cmp(op, x, c.in(*b.input)) : o.cmp(op, x, *b.attr);
  };
  std::optional<ValueId> inside;
  if (hasLo) inside = compare("ge", lo);
  if (hasHi) inside = inside ? o.both(*inside, compare("le", hi)) : compare("le", hi);
  Grads r = {o.keep(*inside, g)};
  if (lo.input) {
    ValueId below = compare("lt", lo);
    if (hi.input) below = o.both(below, o.cmp("lt", c.in(*lo.input), c.in(*hi.input)));
    r.push_back(o.keep(below, g));
  }
  if (hi.input) {
    ValueId above = compare("gt", hi);
    if (lo.input)
      above = o.call("logical_or", {above, o.cmp("lt", c.in(*hi.input), c.in(*lo.input))});
    r.push_back(o.keep(above, g));
  }
  return r;
}

// where(cond, a, b): the grad goes to a where cond holds, to b elsewhere.
Grads where(RuleContext& c) {
  Ops o{c.g};
  ValueId cond = c.in(0), g = *c.grad;
  Grads r(c.node.inputs.size());
  if (auto a = c.arg("self")) r[*a] = o.keep(cond, g);
  if (auto b = c.arg("other")) r[*b] = o.drop(cond, g);
  return r;
}

Grads zeros(RuleContext& c) {
  return {Ops{c.g}.zerosLike(c.in(0))};
}
Grads identity(RuleContext& c) {
  return {*c.grad};
}

} // namespace

void addPointwiseRules(RuleTable& r) {
  r["exp"] = UNARY(return o.mul(g, y));
  r["exp2"] = UNARY(return o.mul(o.mul(g, y), M_LN2));
  r["log"] = UNARY(return o.div(g, x));
  r["log1p"] = UNARY(return o.div(g, o.add(x, 1.0)));
  r["expm1"] = UNARY(return o.mul(g, o.add(y, 1.0)));
  r["sqrt"] = UNARY(return o.div(g, o.mul(y, 2.0)));
  r["rsqrt"] = UNARY(return o.mul(g, o.mul(o.mul(o.mul(y, y), y), -0.5)));
  r["sin"] = UNARY(return o.mul(g, o.unary("cos", x)));
  r["cos"] = UNARY(return o.mul(g, o.neg(o.unary("sin", x))));
  r["tan"] = UNARY(return o.mul(g, o.add(o.mul(y, y), 1.0)));
  r["tanh"] = UNARY(return o.mul(g, o.add(o.neg(o.mul(y, y)), 1.0)));
  r["sigmoid"] = UNARY(return o.mul(g, o.mul(y, o.add(o.neg(y), 1.0))));
  r["erf"] = UNARY(return o.mul(g, o.mul(o.unary("exp", o.neg(o.mul(x, x))), kTwoOverSqrtPi)));
  r["reciprocal"] = UNARY(return o.mul(g, o.neg(o.mul(y, y))));
  r["neg"] = UNARY(return o.neg(g));
  r["abs"] = UNARY(return o.mul(g, o.unary("sign", x)));
  r["relu"] = UNARY(return o.keep(o.cmp("gt", y, 0.0), g)); // torch's threshold_backward
  r["silu"] = opmath<silu>;
  r["gelu"] = gelu;
  for (const char* n : {"sign", "floor", "ceil", "round", "trunc"}) r[n] = zeros;
  for (const char* n : {"to_dtype", "contiguous", "clone"}) r[n] = identity;
  r["add"] = add;
  r["sub"] = sub;
  r["mul"] = mul;
  r["div"] = div;
  r["pow"] = pow;
  r["fmod"] = modulo<false>;
  r["remainder"] = modulo<true>;
  r["maximum"] = extremum<true>;
  r["minimum"] = extremum<false>;
  r["clamp"] = clamp;
  r["where"] = where;
}

} // namespace kiln::autograd::detail
