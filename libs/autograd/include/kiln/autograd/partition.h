// The partition of a joint graph into a forward graph and a backward graph:
// which forward values the forward saves for the backward, and which the
// backward recomputes from saved ones. A min cut (Boost.Graph's
// Boykov-Kolmogorov max flow) over the forward's values, each split into an
// in and an out vertex joined by its cost of saving (bytes), with its cost of
// recomputing on the source edge; expensive ops (the matrix products,
// attention) and the inputs are never recomputed.
#pragma once

#include <string_view>
#include <vector>

#include "kiln/autograd/backward.h"

namespace kiln::autograd {

struct PartitionOptions {
  // 0: save nothing recomputable (least memory, most recomputation); 1: recompute
  // nothing (save every forward value the backward reads). In between, the
  // saved bytes may go that fraction of the way from the first plan's to the
  // second's, recomputing as little as that allows.
  double memoryBudget = 0.25;
};

struct Partition {
  // The forward's inputs -> its outputs, then the saved values, then (as sym_int outputs) the
  // symbols the backward computes with that no saved value's or tangent's layout gives.
  ir::Graph forward;
  ir::Graph backward;                  // the saved values and symbols, then the tangents -> the grads
  std::vector<ir::ValueId> saved;      // joint-graph ids of the saved values, in order
  std::vector<ir::ValueId> recomputed; // joint-graph ids of forward nodes the backward recomputes
  size_t forwardOutputs = 0;           // the forward graph's first outputs are the user's
  std::vector<size_t> tangentOf;       // as JointGraph's: per tangent input of the backward
  std::vector<size_t> gradOf;          // as JointGraph's: per output of the backward
};

// Whether the backward may recompute a value of this op (pointwise, views,
// reductions, indexing, creation, dropout replayed by its seed) rather than
// save it: not the matrix products nor attention, nor mutation ops.
bool isRecomputable(std::string_view op);

// Error{InvalidArgument} for a memory budget outside [0, 1].
// The partitioner service's verb wraps functionalize(), backward() and this (train.h).
Partition partition(const JointGraph& joint, const PartitionOptions& options = {});

} // namespace kiln::autograd
