// The whole codegen pipeline for one graph: lower, schedule, emit, compile,
// plan — into an artifact (kiln/runtime/artifact.h) that libs/runtime loads
// and runs for every binding of the graph's symbols.
#pragma once

#include <string>

#include "kiln/codegen/lower.h"
#include "kiln/codegen/schedule.h"
#include "kiln/ir/graph.h"
#include "kiln/runtime/artifact.h"

namespace kiln::codegen {

// A target by name: "cpu", "cuda" (sm_90, the H100) or "cuda:sm_NN".
struct Target {
  bool cuda = false;
  std::string arch; // CUDA: "sm_90"
  // "+deterministic" (torch.use_deterministic_algorithms): scatters add in
  // order on CUDA (LowerOptions::unorderedScatter off). The CPU always does.
  bool deterministic = false;
  // "+emulate-precision-casts" (Inductor's option of that name): a fused
  // kernel rounds each f16/bf16 op's result as eager does between ops
  // (LowerOptions::emulatePrecisionCasts).
  bool emulatePrecisionCasts = false;
  std::string name() const {
    return (cuda ? "cuda:" + arch + (deterministic ? "+deterministic" : "") : "cpu") +
           (emulatePrecisionCasts ? "+emulate-precision-casts" : "");
  }
};
// "cpu", "cuda" (sm_90) or "cuda:sm_NN", each optionally followed by
// "+deterministic", then any of them by "+emulate-precision-casts".
// Error{Unsupported} for an unknown name.
Target parseTarget(const std::string& target);

// What `target` runs as library calls (lower.h).
LowerOptions lowerOptions(const Target& target);

// How `target`'s kernels are scheduled (schedule.h).
ScheduleOptions scheduleOptions(const Target& target);

// A graph lowered for a target and its schedule. A bias grad lowered as a
// column sum (LowerOptions::biasGradsInKernels) that did not join its dy's
// kernel is lowered again as its product's epilogue, which is faster than a
// sum's kernel of its own.
struct Scheduled {
  Program program;
  Schedule schedule;
};
Scheduled lowerAndSchedule(const ir::Graph& graph, const Target& target);

// The content key of a graph compiled for `target`: a 128-bit hash of the
// graph's structure (placeholder names excluded), the target, the compiler's
// command line and version, and kiln's build — all that decides the artifact.
std::string artifactKey(const ir::Graph& graph, const std::string& target);

// Compiles `graph` for `target`, using `workDir` for the C++ compiler's files
// (NVRTC needs none). Error{Unsupported} for an unknown target or an op
// without a lowering; Error{Internal} when the compiler fails (its messages
// and the source in the error's detail). The artifact's target is the
// canonical name ("cuda:sm_90" for "cuda").
runtime::Artifact compileArtifact(const ir::Graph& graph, const std::string& target,
                                  const std::string& workDir);

} // namespace kiln::codegen
