// F's losses and torch's vector norms, written as graph ops (losses.cpp).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tracer_state.h"

namespace kiln::tracer {

// `name` (`m` its short name) as graph ops: F.mse_loss, l1_loss, smooth_l1_loss, huber_loss,
// binary_cross_entropy(_with_logits), nll_loss, kl_div and normalize; torch.linalg.vector_norm,
// torch.norm / Tensor.norm of a number p. nullopt for other names.
std::optional<Var> callLoss(TraceState& s, const std::string& name, const std::string& m,
                            bool method, const std::vector<Var>& args, const Kwargs& kwargs);

} // namespace kiln::tracer
