// The CUDA emitter: a schedule's kernels as one CUDA C++ translation unit for
// NVRTC, and how to launch each (runtime::Launch). It prints the same loop IR
// with the same scalar text as the CPU emitter; only the loop structure is
// its own:
//   - a kernel of pointwise buffers over its outer ranges is flat: one thread
//     per element of the outer ranges, grid-stride;
//   - a kernel with reductions (or buffers with dims past the outer ranges)
//     runs by rows: a group of threads per outer index — a warp for short
//     rows, the whole block for long ones — the group's threads stride over
//     the row's inner elements, each reduction accumulates per thread and is
//     combined across the group by warp shuffles (and shared memory between
//     warps), so every thread of the group holds the result for the buffers
//     after it;
//   - a scatter's kernel is flat over its outer loops, each thread running the
//     ordered dim in order (deterministic sums, as on the CPU);
//   - a columns kernel (Kernel::columns) runs a block per chunk of rows and a
//     few columns, its threads walking the chunk's rows down their columns,
//     computing the flat buffers and adding them to the column sums.
// Kernel n is `extern "C" __global__ kiln_kernel_<n>` taking, in order, a
// pointer to element 0 of each buffer it touches, the int64 symbols it reads,
// and an `int*` status word (1 division by zero, 2 index out of range).
// Kernels that compute the same function of their arguments (each layer of a
// repeated block) share the first one's: `CudaSource::kernels[n]` names the
// function kernel n launches, and NVRTC compiles each function once.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "kiln/codegen/loop_ir.h"
#include "kiln/codegen/schedule.h"
#include "kiln/runtime/plan.h"

namespace kiln::codegen {

struct CudaSource {
  std::string code;                      // the whole file: cudaPrelude(), then `units`
  std::string prelude;                   // what every unit needs
  std::vector<std::string> units;        // each kernel's definition (flash's: with helpers)
  // Flash attention's units, by index, and the kernel each defines: linked from kiln's
  // build where it compiled the kernel for the arch (prebuiltFlashKernel), else compiled
  // in groups of their own (compileCuda's `alone`): their tensor-core loops cost NVRTC
  // several times their text's worth (GPT-2's backward on the H100 machine: ~1 s for the
  // [dk, dv] kernel, 2.1 s for its group when text alone weighed it).
  std::map<size_t, std::string> flashUnits;
  std::vector<std::string> kernels;      // the function each schedule kernel launches, by index
  std::vector<sym::Expr> symbols;        // the size symbols the kernels read, in slot order
  std::vector<runtime::Launch> launches; // one per kernel
  std::map<BufferId, BufferId> inPlace;  // KernelSet::inPlace
};

CudaSource emitCuda(const Program& program, const Schedule& schedule);

// The helpers every emitted CUDA file starts with (CudaSource::code holds them).
const std::string& cudaPrelude();

// 1 + erf(x) and the normal cdf (1 + erf(x / sqrt(2))) / 2 as CUDA kernels compute them
// (exact GELU; src/erf_plus_one_fn.h), run on the host: their accuracy against libm is
// tested there.
float erfPlusOne(float x);
float normalCdf(float x);

} // namespace kiln::codegen
