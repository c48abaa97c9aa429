// Building emitted CUDA C++ into a cubin with NVRTC (loading one is
// libs/runtime's). Needs no GPU: CI compiles every generated kernel this way.
#pragma once

#include <string>
#include <vector>

namespace kiln::codegen {

// Whether kiln was built with NVRTC (the CUDA toolkit).
bool haveNvrtc();

// NVRTC's options for `arch` ("sm_90"): what a cache key must include.
std::vector<std::string> cudaCompilerOptions(const std::string& arch);

// "nvrtc <major>.<minor>", or "none".
std::string nvrtcVersion();

// The cubin of `code` for `arch`. Error{Internal} with NVRTC's log and the
// source in the error's detail when it does not compile; Error{Unsupported}
// when kiln was built without NVRTC.
std::string compileCuda(const std::string& code, const std::string& arch);

} // namespace kiln::codegen
