// torch's autocast as the tracer applies it: before an op is added to the graph,
// its floating inputs on a device type where autocast is on are cast as torch's
// autocast would (ATen's autocast_mode.h lists, for the ops kiln has).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "kiln/ir/graph.h"

namespace kiln::tracer {

struct AutocastState {
  std::optional<ir::DType> cpu, cuda; // the lower-precision dtype where autocast is on
  std::optional<ir::DType>& of(ir::DeviceType device) {
    return device == ir::DeviceType::Cuda ? cuda : cpu;
  }
};

// Rewrites `inputs` (adding to_dtype nodes) and `attrs` (a reduction's dtype) of a
// call of `op`.
void applyAutocast(ir::Graph& graph, const AutocastState& state, const std::string& op,
                   std::vector<ir::ValueId>& inputs, std::vector<ir::Attr>& attrs);

} // namespace kiln::tracer
