// The joint graph: a forward graph and its backward in one graph, as
// AOTAutograd traces it. Nodes: the forward's (composites decomposed, but for
// those with their own rule), then one grad placeholder ("tangent") per forward
// output that carries grad, then the backward's nodes in reverse topological
// order of the forward, grads of values used several times added up.
// Outputs: the forward's outputs, then the grads of the inputs that require grad.
#pragma once

#include <vector>

#include "kiln/ir/graph.h"

namespace kiln::autograd {

using ir::ValueId;

struct JointGraph {
  ir::Graph graph;
  size_t forwardNodes = 0;       // ids below it are the forward's nodes
  size_t forwardOutputs = 0;     // the first outputs are the forward's
  std::vector<size_t> tangentOf; // per tangent placeholder (in order): its forward output
  std::vector<size_t> gradOf;    // per grad output (in order): its input (placeholder index)
};

// Differentiates `forward` with respect to the placeholders marked in
// `requiresGrad` (one flag per placeholder). Error{InvalidArgument} for a mask
// of the wrong length or a marked input that is not a floating-point tensor;
// Error{Unsupported} naming an op without a derivative rule on a path that
// needs one (mutation ops: functionalize first). An input no grad reaches gets zeros.
JointGraph backward(const ir::Graph& forward, const std::vector<bool>& requiresGrad);

} // namespace kiln::autograd
