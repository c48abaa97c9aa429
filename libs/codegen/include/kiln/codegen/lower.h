// Lowering: a graph of libs/ir to the loop-level IR (loop_ir.h).
//
// The graph is decomposed first (softmax, layer_norm, gelu, ... become core
// ops). Then every value is, as in Inductor, either a buffer or a body not yet
// stored: pointwise ops, copies, creation ops, indexing and views of bodies
// (folded into the index they read) give bodies, which consumers inline (a
// pointwise chain becomes one expression, a reduction takes its prologue);
// reductions and extern calls (the matmul family, attention) give buffers. A
// body is stored (realized) when it is a graph output, an extern call's input,
// read by several consumers while too big to recompute (see kInlineLimit), or
// viewed where folding the view would be wrong (a mutation writes the storage
// it shares, as_strided) or dear (docs/codegen.md).
#pragma once

#include "kiln/codegen/loop_ir.h"
#include "kiln/ir/graph.h"

namespace kiln::codegen {

// A body read by more than one consumer is stored when it has more nodes than
// this; below, recomputing it in each consumer is cheaper than a round trip
// through memory.
constexpr size_t kInlineLimit = 12;

// Error{Unsupported} naming the first op without a lowering yet.
Program lower(const ir::Graph& graph);

} // namespace kiln::codegen
