// Graph-to-graph passes over matrix products for cuBLASLt, run on the CUDA
// target's decomposed graph before lowering: zero-padding of half-precision
// products whose dims its fast kernels cannot take (Inductor's pad_mm), and
// bias adds moved into its epilogue.
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

// add(matmul(a, b), bias) (either order, no alpha) with a contiguous
// [..., M, K], a 2-d b, a bias of the result's dtype and shape [N], and the
// product read by that add alone, as reshape(addmm(bias, a as [-1, K], b)):
// cuBLASLt adds the bias in its epilogue (torch's linear), where a kernel of
// its own would read and write the product again (GPT-2's qkv projection:
// 28 us a layer on an H100). The graph is returned as it is when none applies.
ir::Graph biasedProducts(const ir::Graph& graph);

} // namespace kiln::codegen
