// The CPU emitter: a schedule's kernels as one C++ translation unit, for the
// system compiler (-O3 -march=native -fopenmp) to build into a shared object.
//
// Kernel n is
//   extern "C" int kiln_kernel_<n>(char* const* buffers, const int64_t* symbols,
//                                  const uint32_t* args, const uint32_t* slots);
// `buffers[id]` points at element 0 of buffer `id` of the program (inputs at
// their first element, as torch's data_ptr), `symbols[k]` is the value of
// `CpuSource::symbols[k]`; the kernel's own buffers are buffers[args[0]],
// buffers[args[1]], ... and its symbols symbols[slots[0]], ... (its
// `CpuSource::launches` entry lists them), so kernels that compute the same
// function of their arguments (a repeated layer's) share one: `kernels[n]`
// names the function kernel n calls. It returns 0, or a KernelError: integer
// division by zero and indices out of range are reported, never undefined
// behaviour.
// The outer loops run under OpenMP; pure pointwise kernels leave the last dim
// to an inner `omp simd` loop; a reduction keeps its accumulator in a register,
// and later buffers of the kernel read it from there.
#pragma once

#include <string>
#include <vector>

#include "kiln/codegen/loop_ir.h"
#include "kiln/codegen/schedule.h"
#include "kiln/runtime/plan.h"

namespace kiln::codegen {

enum KernelError : int { kKernelOk = 0, kDivisionByZero = 1, kIndexOutOfRange = 2 };

struct CpuSource {
  std::string code;
  std::vector<std::string> kernels;      // the function each schedule kernel calls, by index
  std::vector<sym::Expr> symbols;        // the size symbols the kernels read, in slot order
  std::vector<runtime::Launch> launches; // per kernel: its buffers and symbol slots, in order
};

CpuSource emitCpu(const Program& program, const Schedule& schedule);

// The helpers every emitted file starts with (CpuSource::code holds them
// verbatim); the compiler builds them once into a precompiled header.
const std::string& cpuPrelude();

} // namespace kiln::codegen
