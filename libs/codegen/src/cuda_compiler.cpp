#include "kiln/codegen/cuda_compiler.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <numeric>
#include <thread>

#include "kiln/common/error.h"

#ifdef KILN_HAVE_NVRTC
#include <nvrtc.h>
#endif
#ifdef KILN_HAVE_NVJITLINK
#include <nvJitLink.h>
#endif

namespace kiln::codegen {

std::vector<std::string> cudaCompilerOptions(const std::string& arch) {
  // No fast math: NaN, infinities and rounding must be torch's.
  // --split-compile=0: optimise the kernels on every CPU at once (one thread per CPU).
  // --minimal: without the texture, surface and device-runtime declarations kernels never
  // use (a shorter parse: ~10 ms of each program's ~20-40 ms front end).
  return {"--gpu-architecture=" + arch, "-std=c++17", "--device-as-default-execution-space",
          "--split-compile=0", "--minimal"};
}

std::vector<std::string> groupsOf(const std::vector<std::string>& units, size_t groups,
                                  const std::set<size_t>& alone) {
  size_t total = 0;
  for (const std::string& u : units) total += u.size();
  std::vector<size_t> weight;
  for (size_t k = 0; k < units.size(); ++k)
    weight.push_back(alone.count(k) ? std::max(units[k].size(), total) : units[k].size());
  std::vector<size_t> order(units.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return weight[a] > weight[b]; });
  std::vector<std::vector<size_t>> members(groups);
  std::vector<size_t> sizes(groups, 0);
  for (size_t u : order) {
    size_t lightest =
        static_cast<size_t>(std::min_element(sizes.begin(), sizes.end()) - sizes.begin());
    members[lightest].push_back(u);
    sizes[lightest] += weight[u];
  }
  std::vector<std::string> texts;
  for (std::vector<size_t>& m : members) {
    std::sort(m.begin(), m.end()); // the file's order within a group
    std::string text;
    for (size_t u : m) text += units[u];
    texts.push_back(std::move(text));
  }
  return texts;
}

#ifdef KILN_HAVE_NVRTC

bool haveNvrtc() {
  return true;
}

bool haveNvJitLink() {
#ifdef KILN_HAVE_NVJITLINK
  return true;
#else
  return false;
#endif
}

std::string nvrtcVersion() {
  int major = 0, minor = 0;
  ::nvrtcVersion(&major, &minor);
  return "nvrtc " + std::to_string(major) + "." + std::to_string(minor);
}

namespace {

// Frees the program however compileProgram leaves.
struct Program {
  nvrtcProgram handle = nullptr;
  ~Program() {
    if (handle) nvrtcDestroyProgram(&handle);
  }
};

void check(nvrtcResult result, const char* what) {
  if (result != NVRTC_SUCCESS)
    throw Error(ErrorCode::Internal,
                std::string("codegen: ") + what + ": " + nvrtcGetErrorString(result));
}

enum class Output { Cubin, Ptx };

std::string compileProgram(const std::string& code, const std::vector<std::string>& options,
                           const std::string& arch, Output output = Output::Cubin) {
  Program program;
  check(nvrtcCreateProgram(&program.handle, code.c_str(), "kiln_kernels.cu", 0, nullptr, nullptr),
        "nvrtcCreateProgram");
  std::vector<const char*> argv;
  for (const std::string& o : options) argv.push_back(o.c_str());
  nvrtcResult result =
      nvrtcCompileProgram(program.handle, static_cast<int>(argv.size()), argv.data());
  size_t logSize = 0;
  nvrtcGetProgramLogSize(program.handle, &logSize);
  std::string log(logSize, '\0');
  if (logSize) nvrtcGetProgramLog(program.handle, log.data());
  if (result != NVRTC_SUCCESS)
    throw Error(ErrorCode::Internal,
                std::string("codegen: NVRTC failed (") + nvrtcGetErrorString(result) + ") for " +
                    arch,
                "", log + "\n--- source ---\n" + code);
  size_t size = 0;
  if (output == Output::Ptx) {
    check(nvrtcGetPTXSize(program.handle, &size), "nvrtcGetPTXSize");
    std::string ptx(size, '\0');
    check(nvrtcGetPTX(program.handle, ptx.data()), "nvrtcGetPTX");
    ptx.resize(std::min(ptx.size(), ptx.find('\0'))); // without the terminator NVRTC counts
    return ptx;
  }
  check(nvrtcGetCUBINSize(program.handle, &size), "nvrtcGetCUBINSize");
  std::string cubin(size, '\0');
  check(nvrtcGetCUBIN(program.handle, cubin.data()), "nvrtcGetCUBIN");
  return cubin;
}

#ifdef KILN_HAVE_NVJITLINK
// Frees the linker however link leaves.
struct Linker {
  nvJitLinkHandle handle = nullptr;
  ~Linker() {
    if (handle) nvJitLinkDestroy(&handle);
  }
};

// One cubin of relocatable ones (each a group's kernels).
std::string link(const std::vector<std::string_view>& cubins, const std::string& arch) {
  Linker linker;
  std::string option = "-arch=" + arch;
  const char* options[] = {option.c_str()};
  auto check = [&](nvJitLinkResult result, const char* what) {
    if (result == NVJITLINK_SUCCESS) return;
    size_t size = 0;
    std::string log;
    if (linker.handle && nvJitLinkGetErrorLogSize(linker.handle, &size) == NVJITLINK_SUCCESS) {
      log.resize(size);
      if (size) nvJitLinkGetErrorLog(linker.handle, log.data());
    }
    throw Error(ErrorCode::Internal,
                std::string("codegen: nvJitLink: ") + what + " failed (" +
                    std::to_string(static_cast<int>(result)) + ") for " + arch,
                "", log);
  };
  check(nvJitLinkCreate(&linker.handle, 1, options), "create");
  for (size_t k = 0; k < cubins.size(); ++k)
    check(nvJitLinkAddData(linker.handle, NVJITLINK_INPUT_CUBIN, cubins[k].data(), cubins[k].size(),
                           ("cubin" + std::to_string(k)).c_str()),
          "adding a cubin");
  check(nvJitLinkComplete(linker.handle), "linking");
  size_t size = 0;
  check(nvJitLinkGetLinkedCubinSize(linker.handle, &size), "the linked size");
  std::string cubin(size, '\0');
  check(nvJitLinkGetLinkedCubin(linker.handle, cubin.data()), "the linked cubin");
  return cubin;
}

double millisSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

// Threads for a file's groups: KILN_NVRTC_THREADS when set (1: one program, NVRTC's own
// split compile), else one per CPU.
size_t compileThreads() {
  if (const char* set = std::getenv("KILN_NVRTC_THREADS")) {
    char* end = nullptr;
    long n = std::strtol(set, &end, 10);
    if (end != set && *end == '\0' && n >= 1) return static_cast<size_t>(n);
    throw Error(ErrorCode::InvalidArgument,
                std::string("codegen: KILN_NVRTC_THREADS must be a positive integer, not '") + set +
                    "'");
  }
  return std::max(1u, std::thread::hardware_concurrency());
}
#endif

// A program whose kernels link into another cubin (nvJitLink): on the calling
// thread alone (the caller runs several).
std::vector<std::string> relocatableOptions(const std::string& arch) {
  std::vector<std::string> options = cudaCompilerOptions(arch);
  options.erase(std::remove(options.begin(), options.end(), "--split-compile=0"), options.end());
  options.push_back("--relocatable-device-code=true");
  return options;
}

} // namespace

std::string compileCuda(const std::string& code, const std::string& arch) {
  return compileProgram(code, cudaCompilerOptions(arch), arch);
}

void warmUpCudaCompiler() {
  try {
    compileCuda("extern \"C\" __global__ void kiln_warm_up(float* p) { p[threadIdx.x] = 1.0f; }",
                "sm_90");
  } catch (const std::exception&) {
    // A compiler that fails here fails the first request too, which reports it.
  }
}

std::string compileCuda(const std::string& prelude, const std::vector<std::string>& units,
                        const std::string& arch, std::string* report, const std::set<size_t>& alone,
                        const std::vector<std::string_view>& linked) {
  if (report) report->clear();
#ifdef KILN_HAVE_NVJITLINK
  size_t groups = std::min<size_t>(compileThreads(), units.size());
  if (groups > 1 || !linked.empty()) {
    // Each group one thread's program: relocatable, so the groups (and the
    // cubins kiln's build compiled) link into one cubin.
    std::vector<std::string> options = relocatableOptions(arch);
    std::vector<std::string> texts = groupsOf(units, groups, alone), cubins(groups);
    std::vector<std::exception_ptr> failures(groups);
    std::vector<double> millis(groups, 0.0);
    std::vector<std::thread> threads;
    for (size_t g = 0; g < groups; ++g)
      threads.emplace_back([&, g] {
        auto start = std::chrono::steady_clock::now();
        try {
          cubins[g] = compileProgram(prelude + texts[g], options, arch);
        } catch (...) {
          failures[g] = std::current_exception();
        }
        millis[g] = millisSince(start);
      });
    for (std::thread& t : threads) t.join();
    for (const std::exception_ptr& failure : failures)
      if (failure) std::rethrow_exception(failure);
    auto linking = std::chrono::steady_clock::now();
    std::vector<std::string_view> inputs(cubins.begin(), cubins.end());
    inputs.insert(inputs.end(), linked.begin(), linked.end());
    std::string cubin = link(inputs, arch);
    if (report) {
      *report = std::to_string(groups) + (groups == 1 ? " group" : " groups");
      if (groups > 0)
        *report += ": slowest " +
                   std::to_string(std::lround(*std::max_element(millis.begin(), millis.end()))) +
                   " ms, all " +
                   std::to_string(std::lround(std::accumulate(millis.begin(), millis.end(), 0.0))) +
                   " ms";
      *report += ", ";
      if (!linked.empty()) *report += std::to_string(linked.size()) + " prebuilt, ";
      *report += "link " + std::to_string(std::lround(millisSince(linking))) + " ms";
    }
    return cubin;
  }
#else
  if (!linked.empty())
    throw Error(ErrorCode::Internal,
                "codegen: kiln was built without nvJitLink: no cubin to link kernels into");
#endif
  std::string code = prelude;
  for (const std::string& u : units) code += u;
  return compileCuda(code, arch);
}

std::string compileCudaRelocatable(const std::string& code, const std::string& arch) {
  return compileProgram(code, relocatableOptions(arch), arch);
}

std::string compileCudaPtx(const std::string& code, const std::string& arch) {
  std::string virtualArch = arch.rfind("sm_", 0) == 0 ? "compute_" + arch.substr(3) : arch;
  std::vector<std::string> options = cudaCompilerOptions(virtualArch);
  return compileProgram(code, options, arch, Output::Ptx);
}

#else

bool haveNvrtc() {
  return false;
}

bool haveNvJitLink() {
  return false;
}

std::string nvrtcVersion() {
  return "none";
}

void warmUpCudaCompiler() {}

std::string compileCuda(const std::string&, const std::string& arch) {
  throw Error(ErrorCode::Unsupported,
              "codegen: kiln was built without NVRTC (the CUDA toolkit): cannot compile for " +
                  arch);
}

std::string compileCuda(const std::string&, const std::vector<std::string>&,
                        const std::string& arch, std::string*, const std::set<size_t>&,
                        const std::vector<std::string_view>&) {
  return compileCuda(std::string(), arch);
}

std::string compileCudaRelocatable(const std::string&, const std::string& arch) {
  return compileCuda(std::string(), arch);
}

std::string compileCudaPtx(const std::string&, const std::string& arch) {
  return compileCuda(std::string(), arch);
}

#endif

} // namespace kiln::codegen
