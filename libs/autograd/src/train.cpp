#include "kiln/autograd/train.h"

#include <algorithm>

#include "kiln/autograd/functionalize.h"
#include "kiln/common/error.h"
#include "kiln/ir/pad_products.h"

namespace kiln::autograd {
namespace {

bool onCuda(const ir::Graph& graph) {
  for (const ir::Node& n : graph.nodes())
    if (n.kind == ir::NodeKind::Placeholder && n.value.isTensor() &&
        n.value.tensor().device.type == ir::DeviceType::Cuda)
      return true;
  return false;
}

} // namespace

TrainingGraphs partitionForTraining(const ir::Graph& graph, const std::vector<bool>& requiresGrad,
                                    const PartitionOptions& options) {
  if (std::none_of(requiresGrad.begin(), requiresGrad.end(), [](bool b) { return b; }))
    throw Error(ErrorCode::InvalidArgument, "partition: no input requires grad");
  Functionalized pure = functionalize(graph);
  // CUDA pads its odd-sized half-precision products before differentiating
  // (as lowering would after): their grads' products come out padded too, and
  // a value saved from a padded product is a view of it, rows 16-byte aligned,
  // where padded after the partition it was a contiguous copy (GPT-2's
  // logits: 0.57 ms a step, and the backward read rows of 50257 unaligned).
  if (onCuda(pure.graph))
    pure.graph = ir::padProducts(pure.graph, ir::kPadProductsFrom, ir::PaddedLayout::Viewed);
  JointGraph joint = backward(pure.graph, requiresGrad);
  return {partition(joint, options), pure.userOutputs, std::move(pure.mutatedInputs)};
}

} // namespace kiln::autograd
