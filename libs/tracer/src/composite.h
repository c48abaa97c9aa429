// Torch calls the tracer writes as several graph ops (composite.cpp).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tracer_state.h"

namespace kiln::tracer {

// `name` (a torch function, F function or "Tensor.<m>" method, `m` its short name) as graph
// ops: clamp_min/max, lerp, addcmul/addcdiv (and their in-place forms), bitwise_not, sgn,
// element_size, is_contiguous, cumsum/cumprod, F.softplus/mish/hardswish/hardtanh/relu6, nan_to_num, repeat, outer,
// view_as/reshape_as/expand_as, fill_/zero_,
// repeat_interleave with int repeats, torch.where(condition) and nonzero(as_tuple=True).
// nullopt for other names.
std::optional<Var> callComposite(TraceState& s, const std::string& name, const std::string& m, bool method,
                                 const std::vector<Var>& args, const Kwargs& kwargs);

// torch.finfo(dtype) / torch.iinfo(dtype) (`name`), answered at trace time.
Var typeInfoOf(TraceState& s, const std::string& name, const std::vector<Var>& args, const Kwargs& kwargs);
// A field of a finfo/iinfo (max, min, eps, tiny, bits, ...); nullopt when `info` is neither.
std::optional<Var> typeInfoAttribute(const Var& info, const std::string& name);

// x with each of `dims` (non-negative) read backwards, as x.flip(dims).
Var flipped(TraceState& s, const Var& x, const std::vector<int64_t>& dims);

// Key and value with their heads repeated to the query's (SDPA's enable_gqa=True).
std::pair<Var, Var> groupedKeyValue(TraceState& s, const Var& query, const Var& key, const Var& value);

} // namespace kiln::tracer
