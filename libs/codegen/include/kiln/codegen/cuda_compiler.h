// Building emitted CUDA C++ into a cubin with NVRTC (loading one is
// libs/runtime's). Needs no GPU: CI compiles every generated kernel this way.
#pragma once

#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::codegen {

// Whether kiln was built with NVRTC (the CUDA toolkit), and with nvJitLink (which links
// kernels compiled apart into one cubin: compileCuda's groups and `linked`).
bool haveNvrtc();
bool haveNvJitLink();

// NVRTC's options for `arch` ("sm_90"): what a cache key must include.
std::vector<std::string> cudaCompilerOptions(const std::string& arch);

// "nvrtc <major>.<minor>", or "none".
std::string nvrtcVersion();

// Compiles a trivial kernel and throws the cubin away: NVRTC's first compile in a process
// initialises it (loads its builtins), which a codegen worker does when it starts rather
// than on a request's time. Nothing when kiln was built without NVRTC; never throws.
void warmUpCudaCompiler();

// The cubin of `code` for `arch`. Error{Internal} with NVRTC's log and the
// source in the error's detail when it does not compile; Error{Unsupported}
// when kiln was built without NVRTC.
std::string compileCuda(const std::string& code, const std::string& arch);

// `units` as `groups` texts of about equal weight (the heaviest first into the lightest
// group; a unit's order kept within a group): a unit weighs its text, one of `alone`
// (indices) all of the text, so that it compiles in a group of its own where groups allow.
std::vector<std::string> groupsOf(const std::vector<std::string>& units, size_t groups,
                                  const std::set<size_t>& alone = {});

// The cubin of `prelude` followed by `units` (kernel definitions, each needing only the
// prelude). With nvJitLink and several CPUs, the units go in groups of about equal text,
// one NVRTC program (relocatable) per group on a thread of its own, linked into one cubin:
// NVRTC's own --split-compile barely scales (GPT-2's backward, 55 kernels, took ~5 s on
// 16 CPUs). Otherwise one program, as compileCuda(code, arch). Errors as compileCuda's
// (the failing group's source in the detail); a failed link is Error{Internal} with
// nvJitLink's log. `report`, when given, is set to how the time went ("4 groups: slowest
// 210 ms, all 700 ms, link 3 ms"; "" for one program): the compile log's. `alone`: the
// units to compile in groups of their own (groupsOf). `linked`: relocatable cubins
// (compileCudaRelocatable's: kernels kiln's build compiled) linked in beside the units'
// (with nvJitLink; Error{Internal} without it).
std::string compileCuda(const std::string& prelude, const std::vector<std::string>& units,
                        const std::string& arch, std::string* report = nullptr,
                        const std::set<size_t>& alone = {},
                        const std::vector<std::string_view>& linked = {});

// The relocatable cubin of `code` for `arch`, for compileCuda's `linked`. Errors as
// compileCuda's.
std::string compileCudaRelocatable(const std::string& code, const std::string& arch);

// The PTX of `code` for `arch`'s virtual architecture (sm_90: compute_90), before ptxas:
// what NVVM made of the code (tests read it). Errors as compileCuda's.
std::string compileCudaPtx(const std::string& code, const std::string& arch);

} // namespace kiln::codegen
