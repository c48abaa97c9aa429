// Graph-to-graph passes. Each returns a new graph over the same SymbolTable,
// renumbered densely; placeholders are always kept (they are the signature).
#pragma once

#include "kiln/ir/graph.h"

namespace kiln::ir {

// Drops the call nodes no output depends on.
Graph eliminateDeadCode(const Graph& graph);

// Merges call nodes with the same op, inputs and attributes (every op so far
// is pure) into the first of them.
Graph eliminateCommonSubexpressions(const Graph& graph);

// Replaces every composite op (one with a decomposition in the registry:
// gelu, silu, softmax, log_softmax, linear, var, std, layer_norm, rms_norm,
// cross_entropy) by core ops computing the same value, until none is left.
// Error{Unsupported} for a form without a decomposition yet; Error{Internal}
// if a decomposition's result differs from the composite's inferred value.
Graph decompose(const Graph& graph);

} // namespace kiln::ir
