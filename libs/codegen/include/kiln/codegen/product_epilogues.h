// A graph-to-graph pass over matrix products for cuBLASLt, run on the CUDA
// target's decomposed graph before lowering (after ir::padProducts): bias
// adds moved into its epilogue.
#pragma once

#include "kiln/ir/graph.h"

namespace kiln::codegen {

// add(matmul(a, b), bias) (either order, no alpha) with a contiguous
// [..., M, K], a 2-d b, a bias of the result's dtype and shape [N], and the
// product read by that add alone, as reshape(addmm(bias, a as [-1, K], b)):
// cuBLASLt adds the bias in its epilogue (torch's linear), where a kernel of
// its own would read and write the product again (GPT-2's qkv projection:
// 28 us a layer on an H100). The graph is returned as it is when none applies.
ir::Graph biasedProducts(const ir::Graph& graph);

} // namespace kiln::codegen
