#include "kiln/codegen/compile.h"

#include "flash_attention.h"
#include "fnv.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <string_view>

#include "kiln/codegen/cpu_compiler.h"
#include "kiln/codegen/cpu_emitter.h"
#include "kiln/codegen/cuda_compiler.h"
#include "kiln/codegen/cuda_emitter.h"
#include "kiln/ir/pad_products.h"
#include "kiln/codegen/lower.h"
#include "kiln/codegen/plan.h"
#include "kiln/codegen/schedule.h"
#include "kiln/common/clock.h"
#include "kiln/common/error.h"
#include "kiln/common/log.h"
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
  Target parsed = parseTarget(target);
  std::string text =
      structureText(graph) + "\n" + parsed.name() + "\n" + std::string(buildId()) + "\n";
  if (parsed.cuda) {
    text += nvrtcVersion();
    for (const std::string& part : cudaCompilerOptions(parsed.arch)) text += " " + part;
  } else {
    text += compilerVersion();
    for (const std::string& part : cpuCompilerCommand()) text += " " + part;
  }
  char key[33];
  std::snprintf(key, sizeof key, "%016llx%016llx",
                // two bases: two independent 64-bit halves
                static_cast<unsigned long long>(detail::fnv1a(text)),
                static_cast<unsigned long long>(detail::fnv1a(text, 0x84222325cbf29ce4ULL)));
  return key;
}

Target parseTarget(const std::string& target) {
  std::string name = target;
  auto strip = [&name](const std::string& suffix) {
    bool has = name.size() > suffix.size() &&
               name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
    if (has) name.resize(name.size() - suffix.size());
    return has;
  };
  bool emulate = strip("+emulate-precision-casts");
  bool deterministic = strip("+deterministic");
  if (name == "cpu") return {false, "", false, emulate}; // the CPU's scatters are in order
  if (name == "cuda") return {true, "sm_90", deterministic, emulate};
  if (name.rfind("cuda:sm_", 0) == 0 && name.size() > 8 &&
      name.find_first_not_of("0123456789a", 8) == std::string::npos)
    return {true, name.substr(5), deterministic, emulate};
  throw Error(ErrorCode::Unsupported,
              "codegen: unknown target '" + target +
                  "' (have: cpu, cuda, cuda:sm_NN, each with an optional "
                  "+deterministic, then any with an optional +emulate-precision-casts)");
}

LowerOptions lowerOptions(const Target& target) {
  LowerOptions options;
  options.emulatePrecisionCasts = target.emulatePrecisionCasts;
  if (target.cuda) { // cuBLASLt multiplies every floating dtype; addmm's bias in its epilogue
    options.externOps.insert("addmm");
    options.externProductDTypes = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16};
    // 2^30 multiply-adds: ~4 us padded on an H100, where the sm75 fallback
    // costs more than a fused pad; smaller products are not worth a kernel.
    options.padProductsFrom = ir::kPadProductsFrom;
    options.biasEpilogues = true;
    options.biasGradsInKernels = true;
    // Scatters (embedding's grad) add atomically: 4.3 ms -> tens of us for
    // GPT-2's, as torch's CUDA index_add_; in order where torch is asked to
    // be deterministic.
    options.unorderedScatter = !target.deterministic;
    options.flashAttention = true;
    // GPT-2's bias and layer_norm weight grads (768 to 3072 sums of 8192
    // rows): 72-144 us each on an H100 as one kernel.
    options.splitReductions = true;
  }
  return options;
}

ScheduleOptions scheduleOptions(const Target& target) {
  ScheduleOptions options;
  options.columnPartials = target.cuda;
  return options;
}

Scheduled lowerAndSchedule(const ir::Graph& graph, const Target& target) {
  LowerOptions options = lowerOptions(target);
  Scheduled out{lower(graph, options), {}};
  out.schedule = schedule(out.program, scheduleOptions(target));
  std::set<BufferId> joined; // column sums in a columns kernel
  for (const Kernel& k : out.schedule.kernels)
    if (k.columns) joined.insert(k.buffers.begin(), k.buffers.end());
  for (auto [sum, reads] : out.program.kernelBiasGrads)
    if (!joined.count(reads)) options.biasGradEpilogues.insert(sum);
  if (options.biasGradEpilogues.empty()) return out;
  out.program = lower(graph, options);
  out.schedule = schedule(out.program, scheduleOptions(target));
  return out;
}

runtime::Artifact compileArtifact(const ir::Graph& graph, const std::string& target,
                                  const std::string& workDir) {
  // Each phase's milliseconds go to the log: where a cold compile's time goes.
  Clock::time_point start = Clock::now(), phase = start;
  std::string phases;
  auto lap = [&](const char* name) {
    phases += std::string(phases.empty() ? "" : ", ") + name + " " + std::to_string(millisSince(phase));
    phase = Clock::now();
  };
  Target parsed = parseTarget(target);
  auto [program, schedule] = lowerAndSchedule(graph, parsed);
  lap("lower and schedule");
  runtime::Artifact artifact;
  artifact.target = parsed.name();
  artifact.key = artifactKey(graph, artifact.target);
  artifact.explain = explain(schedule, program);
  auto done = [&](size_t kernels) {
    log().info("codegen: {} nodes, {} kernels for {} in {} ms ({})", graph.size(), kernels,
               artifact.target, millisSince(start), phases);
  };
  if (parsed.cuda) {
    CudaSource source = emitCuda(program, schedule);
    artifact.plan = buildPlan(graph, program, schedule,
                              {source.kernels, source.symbols, source.launches, source.inPlace});
    artifact.source = source.code;
    lap("emit");
    std::string groups;
    if (!source.kernels.empty()) {
      // Flash kernels kiln's build compiled for this arch are linked, the rest compiled.
      std::vector<std::string> units;
      std::set<size_t> alone;
      std::vector<std::string_view> prebuilt;
      for (size_t u = 0; u < source.units.size(); ++u) {
        auto flash = source.flashUnits.find(u);
        std::string_view cubin = flash == source.flashUnits.end()
                                     ? std::string_view()
                                     : prebuiltFlashKernel(flash->second, parsed.arch);
        if (!cubin.empty()) {
          prebuilt.push_back(cubin);
          continue;
        }
        if (flash != source.flashUnits.end()) alone.insert(units.size());
        units.push_back(source.units[u]);
      }
      artifact.library = compileCuda(source.prelude, units, parsed.arch, &groups, alone, prebuilt);
    }
    lap("nvrtc");
    if (!groups.empty()) phases += " in " + groups;
    done(source.kernels.size());
    return artifact;
  }
  CpuSource source = emitCpu(program, schedule);
  artifact.plan =
      buildPlan(graph, program, schedule, {source.kernels, source.symbols, source.launches, {}});
  artifact.source = source.code;
  lap("emit");
  if (!source.kernels.empty()) {
    std::string so = workDir + "/build-" + artifact.key + "-" + std::to_string(::getpid()) + ".so";
    compileCpu(source.code, so);
    artifact.library = readBytes(so);
    std::remove(so.c_str());
  }
  lap("c++");
  done(source.kernels.size());
  return artifact;
}

} // namespace kiln::codegen
