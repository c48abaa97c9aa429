// The CPU emitter: a schedule's kernels as one C++ translation unit, for the
// system compiler (-O3 -march=native -fopenmp) to build into a shared object.
//
// Kernel n is
//   extern "C" int kiln_kernel_<n>(char* const* buffers, const int64_t* symbols);
// `buffers[id]` points at element 0 of buffer `id` of the program (inputs at
// their first element, as torch's data_ptr), `symbols[k]` is the value of
// `CpuSource::symbols[k]`. It returns 0, or a KernelError: integer division by
// zero and indices out of range are reported, never undefined behaviour.
// The outer loops run under OpenMP; pure pointwise kernels leave the last dim
// to an inner `omp simd` loop; a reduction keeps its accumulator in a register,
// and later buffers of the kernel read it from there.
#pragma once

#include <string>
#include <vector>

#include "kiln/codegen/loop_ir.h"
#include "kiln/codegen/schedule.h"

namespace kiln::codegen {

enum KernelError : int { kKernelOk = 0, kDivisionByZero = 1, kIndexOutOfRange = 2 };

struct CpuSource {
  std::string code;
  std::vector<std::string> kernels; // the function of each schedule kernel, by index
  std::vector<sym::Expr> symbols;   // the size symbols the kernels read, in slot order
};

CpuSource emitCpu(const Program& program, const Schedule& schedule);

// The helpers every emitted file starts with (CpuSource::code holds them
// verbatim); the compiler builds them once into a precompiled header.
const std::string& cpuPrelude();

} // namespace kiln::codegen
