// Convolutions and pooling as graph ops (convolution.cpp).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tracer_state.h"

namespace kiln::tracer {

// `name` (`m` its short name) as graph ops: conv1d/2d/3d (torch.* and F.*, padding as numbers
// or 'same'/'valid') and torch.convolution (not transposed) as the IR's convolution;
// max_pool1d/2d/3d, avg_pool1d/2d/3d, adaptive_avg_pool1d/2d/3d and adaptive_max_pool1d/2d/3d
// (sizes that divide the input's) from windows of the input. nullopt for other names.
std::optional<Var> callConvolution(TraceState& s, const std::string& name, const std::string& m,
                                   const std::vector<Var>& args, const Kwargs& kwargs);

} // namespace kiln::tracer
