// The whole codegen pipeline for one graph: lower, schedule, emit, compile,
// plan — into an artifact (kiln/runtime/artifact.h) that libs/runtime loads
// and runs for every binding of the graph's symbols.
#pragma once

#include <string>

#include "kiln/ir/graph.h"
#include "kiln/runtime/artifact.h"

namespace kiln::codegen {

// The content key of a graph compiled for `target`: a 128-bit hash of the
// graph's structure (placeholder names excluded), the target, the compiler's
// command line and version, and kiln's build — all that decides the artifact.
std::string artifactKey(const ir::Graph& graph, const std::string& target);

// Compiles `graph` for `target` ("cpu"), using `workDir` for the compiler's
// files. Error{Unsupported} for an unknown target or an op without a
// lowering; Error{Internal} when the compiler fails (its messages and the
// source in the error's detail).
runtime::Artifact compileArtifact(const ir::Graph& graph, const std::string& target,
                                  const std::string& workDir);

} // namespace kiln::codegen
