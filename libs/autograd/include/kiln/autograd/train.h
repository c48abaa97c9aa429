// What the partitioner service answers for a traced forward graph: the graph
// functionalized (functionalize.h), its joint graph (backward.h) and its
// partition (partition.h), with the map from the pieces back to the call.
#pragma once

#include <vector>

#include "kiln/autograd/partition.h"

namespace kiln::autograd {

struct TrainingGraphs {
  // forward: the inputs -> the graph's outputs (`userOutputs`), the new value of each
  // mutated input (`mutatedInputs`), then the saved values; backward: the saved
  // values, then the tangents -> the grads (partition.tangentOf, partition.gradOf).
  Partition partition;
  size_t userOutputs = 0;
  std::vector<size_t> mutatedInputs;
};

// Error{InvalidArgument}: a mask of the wrong length, no input marked, a marked
// input that is not a floating tensor, a budget outside [0, 1]; Error{Unsupported}:
// an op without a derivative rule on a path that needs one, a write functionalize()
// cannot follow.
TrainingGraphs partitionForTraining(const ir::Graph& graph, const std::vector<bool>& requiresGrad,
                                    const PartitionOptions& options = {});

} // namespace kiln::autograd
