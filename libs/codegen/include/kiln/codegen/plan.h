// The launch plan of a scheduled program (kiln/runtime/plan.h): its buffers,
// one step per kernel or extern call, a Free after each intermediate's last
// use, and the outputs as views.
#pragma once

#include "kiln/codegen/loop_ir.h"
#include "kiln/codegen/schedule.h"
#include "kiln/ir/graph.h"
#include "kiln/runtime/plan.h"

namespace kiln::codegen {

// What an emitter says of its kernels: their function names, their symbol
// slots, and (CUDA) how each is launched.
struct KernelSet {
  std::vector<std::string> names;
  std::vector<sym::Expr> symbols;
  std::vector<runtime::Launch> launches;
};

// `graph` is the graph `program` was lowered from (its placeholders are the
// plan's inputs).
runtime::Plan buildPlan(const ir::Graph& graph, const Program& program, const Schedule& schedule,
                        const KernelSet& kernels);

} // namespace kiln::codegen
