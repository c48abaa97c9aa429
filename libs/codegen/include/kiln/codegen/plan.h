// The launch plan of a scheduled program (kiln/runtime/plan.h): its buffers,
// one step per kernel or extern call, a Free after each intermediate's last
// use, and the outputs as views.
#pragma once

#include <map>

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
  // Buffers that may take an input's memory (PlanBuffer::reuses): written
  // buffer -> input buffer. The emitter's kernels read such an input through a
  // pointer that may alias the written one (no __restrict__).
  std::map<BufferId, BufferId> inPlace;
};

// The pairs (written buffer -> input buffer) where a kernel may write a buffer
// over an input's memory: the kernel is the input's last reader, reads it only
// in that buffer's own pointwise loop at the element it stores, directly (no
// indirect load), and the input lies inside the buffer at the same positions
// (same dtype and strides, offset 0, sizes within the buffer's; the buffer
// dense). Neither is an output or a mutation's memory.
std::map<BufferId, BufferId> inPlaceCandidates(const Program& program, const Schedule& schedule);

// `graph` is the graph `program` was lowered from (its placeholders are the
// plan's inputs).
runtime::Plan buildPlan(const ir::Graph& graph, const Program& program, const Schedule& schedule,
                        const KernelSet& kernels);

} // namespace kiln::codegen
