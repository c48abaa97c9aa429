#include "kiln/autograd/train.h"

#include <algorithm>

#include "kiln/autograd/functionalize.h"
#include "kiln/common/error.h"

namespace kiln::autograd {

TrainingGraphs partitionForTraining(const ir::Graph& graph, const std::vector<bool>& requiresGrad,
                                    const PartitionOptions& options) {
  if (std::none_of(requiresGrad.begin(), requiresGrad.end(), [](bool b) { return b; }))
    throw Error(ErrorCode::InvalidArgument, "partition: no input requires grad");
  Functionalized pure = functionalize(graph);
  JointGraph joint = backward(pure.graph, requiresGrad);
  return {partition(joint, options), pure.userOutputs, std::move(pure.mutatedInputs)};
}

} // namespace kiln::autograd
