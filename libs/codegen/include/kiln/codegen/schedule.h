// Scheduling: which computed buffers of a program share one kernel.
//
// Buffers are taken in program order but for two moves: scalars of a
// constant value (a library call's constant operand: each attention's dropout
// offset) come first, so that one kernel writes them all; and an extern call's
// operand computed for it alone moves, with the call and the readers of its
// results, after the next run of pointwise buffers over the same ranges, and
// joins their kernel (only the call's readers between, a few buffers at most,
// no mutation crossed).
//
// A kernel is one loop nest over `outer` (the dims a target parallelises
// over: OpenMP on the CPU, the grid on CUDA) holding several buffers in
// order; at each outer index every buffer runs its own inner part: a
// reduction over its reduction ranges (its result kept in a register), a
// pointwise buffer over the rest of its ranges. Buffers join the kernel before
// them (vertical and horizontal fusion) when
//   - their ranges, without size-1 dims, start with the kernel's outer ranges
//     (a reduction's are exactly them; a kernel of pointwise buffers narrows
//     its outer ranges to a reduction's when that reduction joins);
//   - everything they read from buffers of the kernel is at the same outer
//     index: a reduction's result (or a pointwise buffer's one element of the
//     outer index) at the outer index, a pointwise buffer's element at the
//     very index it was stored at;
//   - no extern call comes between them (extern calls are steps of their own);
//   - a buffer that cannot join the open kernel and reads none of it may join
//     the kernel before it on the same terms (split reductions' partials);
//   - a buffer that reads none of the kernel's joins only over the same outer
//     ranges and, if pointwise, over the ranges of a member's loop (horizontal
//     fusion adds no loop), and a kernel over no outer range (a reduction to a
//     scalar: one item) takes no pointwise loops.
// A reduction nothing outside its kernel reads, and that is no output, lives
// in a register only (Kernel::local); so does such a pointwise buffer of a
// flat kernel (one element of each buffer per outer index: its readers, later
// in the kernel, read the element of the index, which the register holds). A
// mutation (alias buffer) is a kernel of its own; a scatter's kernel runs over
// its ranges but the ordered one (scatterOuter), which each outer index runs
// in order.
//
// With ScheduleOptions::columnPartials (CUDA), a column sum of a flat
// kernel's buffers over chunks of its rows (a split bias grad's partials:
// columnCover) joins that kernel, as it comes or, when the kernel closes,
// from later in the order up to the next mutation (a bias grad comes after
// the weight grad's product, which reads the kernel's result); the kernel's
// threads then walk its rows down a few columns each, adding as they go
// (Kernel::columns), and nothing but such sums joins it after that.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "kiln/codegen/loop_ir.h"

namespace kiln::codegen {

struct Kernel {
  Shape outer;
  std::vector<BufferId> buffers; // in execution order
  // Reductions, and pointwise buffers of a flat kernel, only this kernel reads
  // (from the register holding the value) and no output is: never stored,
  // never allocated (dead buffer elimination).
  std::vector<BufferId> local;
  // The kernel's reductions are column sums (columnCover) of its pointwise
  // buffers, which are flat over `outer`.
  bool columns = false;
};

struct Step {
  enum Kind { RunKernel, CallExtern } kind;
  size_t kernel = 0;   // RunKernel: index into Schedule::kernels
  BufferId buffer = 0; // CallExtern: the extern buffer
};

struct Schedule {
  std::vector<Kernel> kernels;
  std::vector<Step> steps;
};

struct ScheduleOptions {
  // Column sums join the flat kernel of what they sum (a target whose
  // emitter walks a kernel down its columns: CUDA).
  bool columnPartials = false;
};

Schedule schedule(const Program& program, const ScheduleOptions& options = {});

// Whether every buffer of the kernel (but a columns kernel's sums) is
// pointwise (no scatter, no mutation) over exactly the outer ranges: one
// element of each per outer index.
bool isFlat(const Program& program, const Kernel& kernel);

// How a column sum walks a flat kernel over `outer` (rows, then columns):
// its output dims but the last are chunks of the rows, its last the columns
// (the last outer range), its reduction dims the rows within a chunk, so
// that chunk c's rest position r is the kernel's row c * (rows a chunk) + r
// (lowering's split: LowerOptions::splitReductions). `rows` gives the kernel's
// outer indices but the last over the sum's variables; size-1 dims are left
// out (their variables are 0). Null when the sum's loops are not of that form.
struct ColumnCover {
  std::vector<sym::Expr> chunkVars, restVars;
  Shape chunkRanges, restRanges;
  sym::Expr column;
  std::vector<sym::Expr> rows;
};
std::optional<ColumnCover> columnCover(const Shape& outer, const Loops& sum);

// The `explain` view of a schedule: one block per step, naming each kernel's
// buffers and what they compute.
//
//   kernel 0 over [s0]: buf2 (max of [16]), buf3 (sum of [16]), buf4 (pointwise [16])
//   extern buf5 = mm(buf4, w)
//   extern buf6 = scaled_dot_product_attention(q, k, v, seed, buf1) on cuDNN alone with
//     dropout 0.1, and buf7
std::string explain(const Schedule& schedule, const Program& program);

// The ranges of a computed buffer without its size-1 dims (always 0), and the
// variables they bind.
struct LoopShape {
  Shape ranges;
  std::vector<sym::Expr> vars;
};
LoopShape withoutUnitDims(const Loops& loops);
// A scatter's outer loops: its ranges without size-1 dims nor the ordered one.
LoopShape scatterOuter(const Loops& loops);

} // namespace kiln::codegen
