// Derivative rules: for each differentiable op of the IR registry, how to append
// the nodes computing the grads of its inputs from the grad of its result, as
// IR over the forward's values. Rules are keyed by op name; an op is either
// differentiable (it has a rule), differentiated through its decomposition
// (composites: layer_norm, cross_entropy, ...), or not differentiable
// (comparisons, integer ops, argmax, creation ops, sym_size).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/ir/graph.h"

namespace kiln::autograd {

using ir::Graph;
using ir::ValueId;

// What a rule sees. `node` is the forward node with its inputs renumbered to
// values of `g` (the joint graph being built); `out` is its value there.
struct RuleContext {
  Graph& g;
  const ir::Node& node;
  ValueId out;
  // The grad of the result: one value for a tensor result, one per piece for a
  // tuple result (split, chunk, unbind; a piece nobody used has none).
  std::optional<ValueId> grad;
  std::vector<std::optional<ValueId>> pieceGrads;
  std::vector<bool> needs; // per input: whether its grad is wanted

  ValueId in(size_t i) const { return node.inputs.at(i); }
  const ir::TensorMeta& meta(size_t i) const { return g.meta(node.inputs.at(i)); }
  const ir::TensorMeta& outMeta() const { return g.meta(out); }
  // The input index bound to a Tensor/Scalar argument of the op's schema, or
  // none when the argument is absent or an attribute.
  std::optional<size_t> arg(std::string_view name) const;
  const ir::AttrValue* attr(std::string_view name) const { return node.attr(name); }
};

// Per input: the grad (any shape that broadcasts to the input's, any floating
// dtype; backward() sums it to the input's sizes and casts it) or none.
using Grads = std::vector<std::optional<ValueId>>;
using RuleFn = Grads (*)(RuleContext& ctx);

enum class Differentiability {
  Rule,        // a derivative rule below
  Decompose,   // differentiated through ir::decompose
  None,        // its result carries no grad (bool/integer results, creation ops)
  Unsupported, // differentiable in torch, no rule yet (mutation ops before functionalization)
};

Differentiability differentiability(std::string_view op);
// The rule of an op; nullptr when it has none.
RuleFn findRule(std::string_view op);
// Ops with a rule, sorted (for the conformance suite's "ops without cases").
std::vector<std::string> differentiableOps();

} // namespace kiln::autograd
