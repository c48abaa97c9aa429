// Zero-padding of half-precision matrix products whose dims cuBLASLt's fast
// kernels cannot take (Inductor's pad_mm): a graph-to-graph pass of the CUDA
// target, run on the decomposed graph before lowering.
#pragma once

#include <cstdint>

#include "kiln/ir/graph.h"

namespace kiln::codegen {

// Each f16/bf16 mm, bmm, matmul (and addmm, its inner dim only) with static
// M, K, N not all multiples of 8 and at least `minWork` multiply-adds reads
// operands zero-padded to multiples of 8 (the pads are `cat` with zeros, so
// they fuse into their producers) and its result is sliced back to M x N. A
// value padded through views (transposes, permutes, reshapes of its leading
// dims) is padded once at their source. The graph's values keep their
// layouts; the graph is returned as it is when no product needs padding.
ir::Graph padProducts(const ir::Graph& graph, int64_t minWork);

} // namespace kiln::codegen
