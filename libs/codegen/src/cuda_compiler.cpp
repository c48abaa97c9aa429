#include "kiln/codegen/cuda_compiler.h"

#include "kiln/common/error.h"

#ifdef KILN_HAVE_NVRTC
#include <nvrtc.h>
#endif

namespace kiln::codegen {

std::vector<std::string> cudaCompilerOptions(const std::string& arch) {
  // No fast math: NaN, infinities and rounding must be torch's.
  // --split-compile=0: optimise the kernels on every CPU at once (one thread per CPU).
  return {"--gpu-architecture=" + arch, "-std=c++17", "--device-as-default-execution-space",
          "--split-compile=0"};
}

#ifdef KILN_HAVE_NVRTC

bool haveNvrtc() {
  return true;
}

std::string nvrtcVersion() {
  int major = 0, minor = 0;
  ::nvrtcVersion(&major, &minor);
  return "nvrtc " + std::to_string(major) + "." + std::to_string(minor);
}

namespace {

// Frees the program however compileCuda leaves.
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

} // namespace

std::string compileCuda(const std::string& code, const std::string& arch) {
  Program program;
  check(nvrtcCreateProgram(&program.handle, code.c_str(), "kiln_kernels.cu", 0, nullptr, nullptr),
        "nvrtcCreateProgram");
  std::vector<std::string> options = cudaCompilerOptions(arch);
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
  check(nvrtcGetCUBINSize(program.handle, &size), "nvrtcGetCUBINSize");
  std::string cubin(size, '\0');
  check(nvrtcGetCUBIN(program.handle, cubin.data()), "nvrtcGetCUBIN");
  return cubin;
}

#else

bool haveNvrtc() {
  return false;
}

std::string nvrtcVersion() {
  return "none";
}

std::string compileCuda(const std::string&, const std::string& arch) {
  throw Error(ErrorCode::Unsupported,
              "codegen: kiln was built without NVRTC (the CUDA toolkit): cannot compile for " +
                  arch);
}

#endif

} // namespace kiln::codegen
