// Calls of ATen ops the SDK described (torch.ops.aten.<op>[.<overload>]).
#pragma once

#include <functional>

#include "tracer_state.h"

namespace kiln::tracer {

// The op's name in Python: "torch.ops.aten.add.Tensor".
std::string atenName(schema::AtenOp::Reader op);

// `op(*args, **kwargs)` as the graph ops of its torch form. An overload binds its
// arguments by its schema first (each must be of the schema's type, or the call is
// refused); a packet is called as its torch form, which picks among the same overloads.
// `constant` makes a schema default's variable. ATen ops return plain tuples.
Var callAten(TraceState& s, schema::AtenOp::Reader op, std::vector<Var> args, const Kwargs& kwargs,
             const std::function<Var(schema::Constant::Reader)>& constant);

} // namespace kiln::tracer
