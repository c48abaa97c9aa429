// Flash attention's kernels as kiln's build compiles them: kiln-flash-prebuild
// (libs/codegen/tools) compiles every kernel of the family with NVRTC for the
// archs of KILN_FLASH_PREBUILT_ARCHS, and the codegen links those an artifact
// calls into its cubin (nvJitLink) instead of compiling them on the request's
// time, as torch ships its attention kernels compiled.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kiln::codegen {

// Every kernel of the family (the names the lowering gives calls it takes).
std::vector<std::string> flashAttentionKernels();

// The kernel as the build compiled it for `arch` (a relocatable cubin); empty where it
// did not (no NVRTC or nvJitLink, or an arch not in KILN_FLASH_PREBUILT_ARCHS): the
// kernel's unit then compiles with the artifact's. Defined by the generated
// flash_prebuilt.cpp.
std::string_view prebuiltFlashKernel(std::string_view kernel, std::string_view arch);

} // namespace kiln::codegen
