// Convolutions, pooling and resampling as graph ops (convolution.cpp).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tracer_state.h"

namespace kiln::tracer {

// `name` (`m` its short name) as graph ops: conv1d/2d/3d (torch.* and F.*, padding as numbers
// or 'same'/'valid'), conv_transpose1d/2d/3d and torch.convolution as the IR's convolution;
// max_pool1d/2d/3d, avg_pool1d/2d/3d, adaptive_avg_pool1d/2d/3d and adaptive_max_pool1d/2d/3d
// (sizes that divide the input's) from windows of the input; F.interpolate (nearest, linear
// modes, area); torch.nn's _single/_pair/_triple/_quadruple. nullopt for other names.
std::optional<Var> callConvolution(TraceState& s, const std::string& name, const std::string& m,
                                   const std::vector<Var>& args, const Kwargs& kwargs);

} // namespace kiln::tracer
