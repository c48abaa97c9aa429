// Functionalization: a graph that mutates (in-place and out= ops, on its inputs
// or on intermediates, directly or through views) rewritten as a pure graph
// with the same results, plus an epilogue: one extra output per mutated input,
// its new value, which the caller copies into the input (as AOTAutograd's
// runtime wrapper does). backward() needs pure graphs.
//
// Aliasing is tracked: a view (view ops; reshape, flatten and contiguous of a
// provably contiguous value; the pieces of split, chunk, unbind) shares its
// base's storage. A write to a view writes its base (scattered back through the
// view's element positions), and every alias read after a write of its base is
// regenerated from the base's new value, so results equal eager's.
#pragma once

#include <vector>

#include "kiln/ir/graph.h"

namespace kiln::autograd {

struct Functionalized {
  ir::Graph graph;                   // pure: no op with OpInfo::mutates
  size_t userOutputs = 0;            // the first outputs are the original graph's
  std::vector<size_t> mutatedInputs; // then one per mutated input: its placeholder index
};

// Error{Unsupported} for a write through an as_strided view, or through a
// reshape whose view-ness depends on strides not known to be contiguous.
Functionalized functionalize(const ir::Graph& graph);

// Whether the graph has a mutation op.
bool mutates(const ir::Graph& graph);

} // namespace kiln::autograd
