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

} // namespace kiln::ir
