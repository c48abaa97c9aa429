#include "kiln/codegen/compile.h"

#include "fnv.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "kiln/codegen/cpu_compiler.h"
#include "kiln/codegen/cpu_emitter.h"
#include "kiln/codegen/lower.h"
#include "kiln/codegen/plan.h"
#include "kiln/codegen/schedule.h"
#include "kiln/common/error.h"
#include "kiln/common/version.h"
#include "kiln/ir/hash.h"
#include "kiln/ir/print.h"

namespace kiln::codegen {
namespace {

// What `c++ --version` says, once per process.
const std::string& compilerVersion() {
  static const std::string version = [] {
    std::string command = cpuCompilerCommand().front() + " --version 2>&1";
    std::string out;
    if (FILE* p = ::popen(command.c_str(), "r")) {
      char buffer[256];
      while (std::fgets(buffer, sizeof buffer, p)) out += buffer;
      ::pclose(p);
    }
    return out;
  }();
  return version;
}

// The graph's text with placeholder names replaced by their position, so a
// renamed input compiles to the same artifact, and without the symbols' hints:
// they are one call's sizes, nothing compiled depends on them, and calls (or
// the ranks of a job) with other sizes must share the artifact.
std::string structureText(const ir::Graph& graph) {
  ir::Graph copy(graph.symbols());
  uint32_t k = 0;
  for (ir::Node node : graph.nodes()) {
    if (node.kind == ir::NodeKind::Placeholder) node.target = "in" + std::to_string(k++);
    copy.append(std::move(node));
  }
  copy.setOutputs(graph.outputs());
  std::istringstream text(ir::print(copy));
  std::string out;
  for (std::string line; std::getline(text, line);) {
    if (line.rfind("symbol ", 0) == 0) line = line.substr(0, line.find(" hint "));
    out += line + "\n";
  }
  return out;
}

std::string readBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream out;
  out << in.rdbuf();
  return out.str();
}

} // namespace

std::string artifactKey(const ir::Graph& graph, const std::string& target) {
  std::string text = structureText(graph) + "\n" + target + "\n" + compilerVersion() + "\n" +
                     std::string(buildId());
  for (const std::string& part : cpuCompilerCommand()) text += " " + part;
  char key[33];
  std::snprintf(key, sizeof key, "%016llx%016llx",
                // two bases: two independent 64-bit halves
                static_cast<unsigned long long>(detail::fnv1a(text)),
                static_cast<unsigned long long>(detail::fnv1a(text, 0x84222325cbf29ce4ULL)));
  return key;
}

runtime::Artifact compileArtifact(const ir::Graph& graph, const std::string& target,
                                  const std::string& workDir) {
  if (target != "cpu")
    throw Error(ErrorCode::Unsupported, "codegen: unknown target '" + target + "' (have: cpu)");
  Program program = lower(graph);
  Schedule schedule = codegen::schedule(program);
  CpuSource source = emitCpu(program, schedule);
  runtime::Artifact artifact;
  artifact.target = target;
  artifact.key = artifactKey(graph, target);
  artifact.plan = buildPlan(graph, program, schedule, source);
  artifact.source = source.code;
  artifact.explain = explain(schedule, program);
  if (!source.kernels.empty()) {
    std::string so = workDir + "/build-" + artifact.key + "-" + std::to_string(::getpid()) + ".so";
    compileCpu(source.code, so);
    artifact.library = readBytes(so);
    std::remove(so.c_str());
  }
  return artifact;
}

} // namespace kiln::codegen
