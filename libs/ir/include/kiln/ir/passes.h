// Graph-to-graph passes. Each returns a new graph over the same SymbolTable,
// renumbered densely; placeholders are always kept (they are the signature).
#pragma once

#include <functional>

#include <set>
#include <string>

#include "kiln/ir/graph.h"

namespace kiln::ir {

// Drops the call nodes no output depends on, but for effects (mutations,
// runtime asserts) and the nodes binding unbacked symbols.
Graph eliminateDeadCode(const Graph& graph);

// A copy of `graph` node by node, in order: `map` gets each node with its
// inputs already mapped into `out` (and the map of every earlier value),
// appends what stands for it to `out` and returns that value
// (`out.append(std::move(node))` keeps it); the outputs follow.
using NodeMap =
    std::function<ValueId(Graph& out, ValueId id, Node node, const std::vector<ValueId>& mapped)>;
Graph mapNodes(const Graph& graph, const NodeMap& map);

// Merges call nodes with the same op, inputs and attributes (every op so far
// is pure) into the first of them.
Graph eliminateCommonSubexpressions(const Graph& graph);

// Replaces every composite op (one with a decomposition in the registry:
// gelu, silu, softmax, log_softmax, linear, var, std, layer_norm, rms_norm,
// cross_entropy, addmm, scaled_dot_product_attention and its backward's
// pieces) by core ops computing
// the same value, until none is left.
// Error{Unsupported} for a form without a decomposition yet; Error{Internal}
// if a decomposition's result differs from the composite's inferred value.
// The ops in `keep` stay as they are (a target with a routine of its own for
// them).
Graph decompose(const Graph& graph, const std::set<std::string>& keep = {});
// The same, keeping the composite nodes `keep` says, given the graph their
// inputs are values of (a target's library calls may depend on a node's
// operands: cuBLASLt's addmm of floats, flash attention of half-precision
// operands with a small head size).
Graph decompose(const Graph& graph,
                const std::function<bool(const Graph&, const Node&)>& keep);

} // namespace kiln::ir
