// The launch plan of a scheduled program (kiln/runtime/plan.h): its buffers,
// one step per kernel or extern call, a Free after each intermediate's last
// use, and the outputs as views.
#pragma once

#include "kiln/codegen/cpu_emitter.h"
#include "kiln/codegen/loop_ir.h"
#include "kiln/codegen/schedule.h"
#include "kiln/ir/graph.h"
#include "kiln/runtime/plan.h"

namespace kiln::codegen {

// `graph` is the graph `program` was lowered from (its placeholders are the
// plan's inputs); `source` names the kernels and their symbol slots.
runtime::Plan buildPlan(const ir::Graph& graph, const Program& program, const Schedule& schedule,
                        const CpuSource& source);

} // namespace kiln::codegen
