// The rule registry and which ops are differentiable at all.
#include <algorithm>
#include <set>

#include "kiln/common/error.h"
#include "kiln/ir/op_registry.h"
#include "rules_impl.h"

namespace kiln::autograd {
namespace detail {

double number(const AttrValue& v) {
  if (auto* d = std::get_if<double>(&v)) return *d;
  if (auto* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
  if (auto* b = std::get_if<bool>(&v)) return *b ? 1.0 : 0.0;
  throw Error(ErrorCode::Unsupported, "autograd: a symbolic scalar where a number is needed");
}

Grads inOpmath(RuleContext& c, RuleFn rule) {
  auto half = [&](ValueId v) {
    const ir::Value& value = c.g.value(v);
    return value.isTensor() &&
           (value.tensor().dtype == DType::Float16 || value.tensor().dtype == DType::BFloat16);
  };
  if (!half(c.out)) return rule(c);
  auto up = [&](ValueId v) {
    return half(v) ? c.g.call("to_dtype", {v}, {{"dtype", DType::Float32}}) : v;
  };
  ir::Node node = c.node;
  for (ValueId& in : node.inputs) in = up(in);
  RuleContext wide{c.g, node, up(c.out), up(*c.grad), {}, c.needs};
  return rule(wide);
}

namespace {
const RuleTable& rules() {
  static const RuleTable table = [] {
    RuleTable r;
    addPointwiseRules(r);
    addShapeRules(r);
    return r;
  }();
  return table;
}

// Ops whose result carries no grad: bool and integer results, creation ops, sizes.
const std::set<std::string, std::less<>> kNone = {
    "eq",          "ne",          "lt",         "le",     "gt",     "ge",
    "logical_not", "logical_and", "logical_or", "isnan",  "isinf",  "bitwise_and",
    "bitwise_or",  "bitwise_xor", "argmax",     "argmin", "any",    "all",
    "sym_size",    "full",        "zeros",      "ones",   "empty",  "full_like",
    "zeros_like",  "ones_like",   "empty_like", "arange", "getitem", "sym_int",
    "item",        "nonzero",     "_assert_scalar", "detach"};
} // namespace
} // namespace detail

std::optional<size_t> RuleContext::arg(std::string_view name) const {
  const ir::OpInfo& op = ir::getOp(node.target);
  // Bind the schema with pointers into a copy of the inputs' values, then map back.
  std::vector<ir::Value> values;
  for (ValueId id : node.inputs) values.push_back(g.value(id));
  std::vector<const ir::Value*> ptrs;
  for (const ir::Value& v : values) ptrs.push_back(&v);
  ir::OpCall call(op, ptrs, node.attrs, g.symbols());
  const ir::Value* v = call.input(name);
  if (!v) return std::nullopt;
  return static_cast<size_t>(v - values.data());
}

RuleFn findRule(std::string_view op) {
  auto it = detail::rules().find(op);
  return it == detail::rules().end() ? nullptr : it->second;
}

Differentiability differentiability(std::string_view op) {
  if (findRule(op)) return Differentiability::Rule;
  if (detail::kNone.count(op)) return Differentiability::None;
  const ir::OpInfo& info = ir::getOp(op);
  if (info.decompose && !info.mutates) return Differentiability::Decompose;
  return Differentiability::Unsupported; // mutation ops: functionalize() first (train.h)
}

std::vector<std::string> differentiableOps() {
  std::vector<std::string> out;
  for (const std::string& op : ir::opNames()) {
    Differentiability d = differentiability(op);
    if (d == Differentiability::Rule || d == Differentiability::Decompose) out.push_back(op);
  }
  return out;
}

} // namespace kiln::autograd
