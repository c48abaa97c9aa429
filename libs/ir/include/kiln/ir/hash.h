// Structural hashing: equal for graphs built the same way, whatever their
// placeholders are called; stable across processes and runs (symbols count by
// name, as in sym::Expr::hash).
#pragma once

#include <cstdint>

#include "kiln/ir/graph.h"

namespace kiln::ir {

uint64_t structuralHash(const Graph& graph);

// One node's hash from its op, inputs, attributes and value (not a
// placeholder's name): what CSE looks up.
uint64_t nodeHash(const Node& node);

} // namespace kiln::ir
