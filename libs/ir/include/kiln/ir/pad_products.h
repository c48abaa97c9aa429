// Zero-padding of half-precision matrix products whose dims cuBLASLt's fast
// kernels cannot take (Inductor's pad_mm): run by CUDA lowering on the
// decomposed graph and, before the partition, on a CUDA training graph.
#pragma once

#include <cstdint>

#include "kiln/ir/graph.h"

namespace kiln::ir {

// Products of fewer multiply-adds stay as they are: the pads' copies would
// cost more than the slow kernel (GPT-2's vocabulary product is ~2^38).
constexpr int64_t kPadProductsFrom = int64_t{1} << 30;

// What the values computed from a padded product look like.
enum class PaddedLayout {
  // Every value keeps its layout: the product sliced back to M x N is copied
  // into the layout it had (lowering: the graph's values are its contract).
  Kept,
  // The slice stays a view of the padded product, and the values computed
  // from it take the layouts that gives (a saved value is then a view whose
  // rows start 16-byte aligned, and nothing copies it); the graph's outputs
  // keep their layouts. Where a view op cannot view the slice, as Kept.
  Viewed,
};

// Each f16/bf16 mm, bmm, matmul, linear (and addmm, its inner dim only) with static
// M, K, N not all multiples of 8 and at least `minWork` multiply-adds reads
// operands zero-padded to multiples of 8 (the pads are `cat` with zeros, so
// they fuse into their producers) and its result is sliced back to M x N. A
// value padded through views (transposes, permutes, reshapes of its leading
// dims) is padded once at their source. The graph is returned as it is when
// no product needs padding.
Graph padProducts(const Graph& graph, int64_t minWork, PaddedLayout layout = PaddedLayout::Kept);

} // namespace kiln::ir
