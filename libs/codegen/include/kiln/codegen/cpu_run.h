// Running a scheduled program with its compiled CPU kernels on host tensors,
// in process: its plan (plan.h) run by libs/runtime, outputs copied out. For
// tests; applications load artifacts (runtime::LoadedArtifact).
#pragma once

#include <vector>

#include "kiln/codegen/cpu_compiler.h"
#include "kiln/codegen/cpu_emitter.h"
#include "kiln/codegen/schedule.h"
#include "kiln/ir/interpreter.h"
#include "kiln/runtime/artifact.h"

namespace kiln::codegen {

// `inputs`: one per placeholder of `graph` (the graph `program` was lowered
// from). Error{InvalidArgument} for inputs that disagree with the graph, and
// for a kernel's integer division by zero or index out of range.
std::vector<ir::HostTensor> runCpu(const Program& program, const Schedule& schedule,
                                   const CpuSource& source, const runtime::Library& library,
                                   const ir::Graph& graph, std::vector<ir::HostTensor> inputs);

} // namespace kiln::codegen
