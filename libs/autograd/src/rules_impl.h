// Shared by the rule files: the Ops shorthand and each family's table.
#pragma once

#include <cmath>
#include <map>
#include <string>

#include "kiln/autograd/grad_builder.h"
#include "kiln/autograd/rules.h"

namespace kiln::autograd::detail {

// Short spellings of the calls rules make.
struct Ops {
  Graph& g;
  ValueId call(std::string_view op, std::vector<ValueId> in, std::vector<Attr> attrs = {}) {
    return g.call(op, std::move(in), std::move(attrs));
  }
  ValueId mul(ValueId a, ValueId b) { return call("mul", {a, b}); }
  // A number operand is a double (an int would convert to a ValueId silently).
  ValueId mul(ValueId a, double s) { return withScalar(g, "mul", a, s); }
  ValueId mul(ValueId a, const AttrValue& s) { return withScalar(g, "mul", a, s); }
  ValueId add(ValueId a, ValueId b) { return call("add", {a, b}); }
  ValueId add(ValueId a, double s) { return withScalar(g, "add", a, s); }
  ValueId sub(ValueId a, ValueId b) { return call("sub", {a, b}); }
  ValueId div(ValueId a, ValueId b) { return call("div", {a, b}); }
  ValueId div(ValueId a, double s) { return withScalar(g, "div", a, s); }
  ValueId div(ValueId a, const AttrValue& s) { return withScalar(g, "div", a, s); }
  ValueId neg(ValueId a) { return call("neg", {a}); }
  ValueId unary(std::string_view op, ValueId a) { return call(op, {a}); }
  ValueId cmp(std::string_view op, ValueId a, ValueId b) { return call(op, {a, b}); }
  ValueId cmp(std::string_view op, ValueId a, double s) { return withScalar(g, op, a, s); }
  ValueId cmp(std::string_view op, ValueId a, const AttrValue& s) {
    return withScalar(g, op, a, s);
  }
  ValueId both(ValueId a, ValueId b) { return call("logical_and", {a, b}); }
  // where(cond, a, 0) and where(cond, 0, a)
  ValueId keep(ValueId cond, ValueId a) { return call("where", {cond, a}, {{"other", 0.0}}); }
  ValueId drop(ValueId cond, ValueId a) { return call("where", {cond, a}, {{"self", 0.0}}); }
  ValueId zerosLike(ValueId a) { return call("zeros_like", {a}); }
};

// A number attribute as double (alpha, other=2).
double number(const AttrValue& v);

// Runs `rule` with half-precision (f16, bf16) inputs, result and grad cast to f32, as torch's
// fused backward kernels compute them (gelu, silu, softmax): one rounding at the end, which
// backward() does when it casts the grads to the inputs' dtypes.
Grads inOpmath(RuleContext& c, RuleFn rule);
template <RuleFn kRule> Grads opmath(RuleContext& c) {
  return inOpmath(c, kRule);
}

using RuleTable = std::map<std::string, RuleFn, std::less<>>;
void addPointwiseRules(RuleTable& rules);
void addShapeRules(RuleTable& rules); // reductions, views, matmul, indexing, dropout

} // namespace kiln::autograd::detail
