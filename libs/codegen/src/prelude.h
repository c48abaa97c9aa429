// The text every generated kernel file starts with: the target's head (the
// CPU's headers and vector math, or CUDA's stand-ins for the C library under
// NVRTC), libs/sym's index helpers, Philox, and kiln's scalar helpers — one
// text for both targets, `KILN_FN` making each helper host or device code.
#pragma once

#include <string>

namespace kiln::codegen::detail {

std::string kernelPrelude(bool cuda);

} // namespace kiln::codegen::detail
