// Hand-built CUDA plans for the runtime's tests (gtest, and the artifacts the
// pytest of kiln.ir's CUDA path loads): two kernels compiled with NVRTC, and
// plans of kernels and of extern matrix products, as the CUDA emitter will
// produce them (kiln/runtime/plan.h, Launch).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/runtime/artifact.h"
#include "kiln/sym/symbol_table.h"

namespace kiln::runtime::testing {

// The kernels' CUDA C++:
//   scale_add(const float* x, float* y, int64 n, int64 k, int* status): y = 2 x + k over n
//   gather(const float* x, const int64* index, float* y, int64 n, int64 m, int* status):
//     y[i] = x[index[i]] over m, status 2 where an index is outside [0, n)
extern const char* const kKernelSource;

// The cubin of kKernelSource for `arch` ("sm_90") through NVRTC (needs no
// GPU). Error{Internal} with NVRTC's log when it fails.
std::string compileCubin(const std::string& arch = "sm_90");

// x: f32[s0], k: a symbolic int s1 -> (y = 2 x + k: f32[s0], s0 + s1 as a symbolic-int output).
Plan scaleAddPlan(sym::SymbolTable& table);

// x: f32[s0], index: i64[s1] -> y = x[index]: f32[s1]; may fail (index out of range).
Plan gatherPlan(sym::SymbolTable& table);

// One extern call `op` of two operands (addmm: bias, a, b, with alpha and
// beta) into a fresh result: every input, the result, all of `dtype`,
// contiguous unless `strides` gives an input's. Concrete sizes.
struct ProductCase {
  std::string op;
  ir::DType dtype = ir::DType::Float32;
  std::vector<std::vector<int64_t>> inputs;  // sizes per input
  std::vector<std::vector<int64_t>> strides; // per input; empty: contiguous
  std::vector<int64_t> out;
  double alpha = 1, beta = 1;
  std::string epilogue; // "" / "relu" / "gelu_tanh"
};
Plan productPlan(sym::SymbolTable& table, const ProductCase& c);

// Element i of input k of a ProductCase: a multiple of 1/8 in [-1, 1], exact in
// every float dtype (signed arithmetic: an unsigned `k` once wrapped -1 to 2^61).
inline double productInput(int64_t k, int64_t i) {
  return static_cast<double>((i * 7 + k * 5) % 17 - 8) / 8;
}

// x: f32[s0], k: symbolic int, w: f32[s0, 8] -> matmul(2 x + k, w): f32[8]
// (a kernel, then an extern call on its result; the kernel's buffer freed).
Plan scaleThenMatmulPlan(sym::SymbolTable& table);

// An artifact of `plan` for "cuda:sm_90" with `cubin` as its library.
Artifact cudaArtifact(const Plan& plan, const std::string& cubin, const std::string& key);

} // namespace kiln::runtime::testing
