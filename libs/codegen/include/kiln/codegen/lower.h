// Lowering: a graph of libs/ir to the loop-level IR (loop_ir.h).
//
// The graph is decomposed first (softmax, layer_norm, gelu, ... become core
// ops). Then every value is, as in Inductor, either a buffer or a body not yet
// stored: pointwise ops, copies, creation ops, indexing and views of bodies
// (folded into the index they read) give bodies, which consumers inline (a
// pointwise chain becomes one expression, a reduction takes its prologue);
// reductions, scatters and extern calls (the matrix products a library covers)
// give buffers. A body is stored (realized) when it is a graph output, an
// extern call's input, read by several consumers while too big to recompute
// (see kInlineLimit), or viewed where folding the view would be wrong (a
// mutation writes the storage it shares, as_strided) or dear (docs/codegen.md).
#pragma once

#include <set>
#include <string>

#include "kiln/codegen/loop_ir.h"
#include "kiln/ir/graph.h"

namespace kiln::codegen {

// A body read by more than one consumer is stored when it has more nodes than
// this; below, recomputing it in each consumer is cheaper than a round trip
// through memory.
constexpr size_t kInlineLimit = 12;

// What a target runs as library calls rather than loops.
struct LowerOptions {
  // Ops kept as extern calls: the matrix products (of `externProductDTypes`),
  // and ops a target has a routine for, which are then not decomposed either
  // (a CUDA target: addmm with its epilogue in cuBLASLt). Everything
  // else lowers to loops.
  std::set<std::string> externOps = {"mm", "bmm", "matmul"};
  // The dtypes whose products are extern calls (the CPU's BLAS: f32 and f64);
  // products of other dtypes are loop reductions (f16/bf16 accumulating in
  // f32, integers in their own type, as torch).
  std::set<DType> externProductDTypes = {DType::Float32, DType::Float64};
  // Half-precision products of at least this many multiply-adds get their
  // dims zero-padded to multiples of 8 (ir::padProducts); 0: none (the CPU).
  int64_t padProductsFrom = 0;
  // A product's bias add becomes addmm, the bias in the library's epilogue
  // (biasedProducts; CUDA: cuBLASLt), a bias grad the epilogue of its weight
  // grad's product (productSummingRows), a tanh GELU or a ReLU of a product
  // the product's epilogue.
  bool biasEpilogues = false;
  // But a bias grad whose dy kiln computes (a pointwise buffer, or a body) is
  // a column sum, which the scheduler joins to dy's kernel
  // (ScheduleOptions::columnPartials: no second read of dy)...
  bool biasGradsInKernels = false;
  // ...except these (sum nodes of the lowered graph: Program::kernelBiasGrads),
  // where it could not (compile.h's lowerAndSchedule).
  std::set<ir::ValueId> biasGradEpilogues;
  // scatter_add of f32, f64, i32, i64 adds every element atomically, all
  // loops in parallel: float sums then depend on the order threads meet (as
  // torch's CUDA index_add_ and Inductor's scatters). Off: the scatter dim's
  // loop runs in order, sums are deterministic (the CPU; CUDA under
  // torch.use_deterministic_algorithms).
  bool unorderedScatter = false;
  // scaled_dot_product_attention and its backward's pieces run as flash
  // attention's kernels where they take the operands (flash_attention.h):
  // extern calls naming the kernel in a "kernel" attribute (CUDA).
  bool flashAttention = false;
  // A long reduction into few outputs runs as two: partial results over
  // chunks of its rows, enough of them to fill a GPU, then the reduction of
  // those (Inductor's split reductions; CUDA).
  bool splitReductions = false;
  // Each f16/bf16 op's result rounded to its dtype where a later op of the
  // kernel reads it, as eager rounds between ops (Inductor's
  // emulate_precision_casts). Off: a value cast to f16/bf16 and back is the
  // f32 value, unrounded (Inductor's default; faster, and closer to exact).
  bool emulatePrecisionCasts = false;
};

// Error{Unsupported} naming the first op without a lowering yet.
Program lower(const ir::Graph& graph, const LowerOptions& options = {});

} // namespace kiln::codegen
