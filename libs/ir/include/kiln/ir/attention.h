// Reading attention nodes: scaled_dot_product_attention(query, key, value
// [, attn_mask][, seed, offset]) and the pieces of its backward,
// attention_lse(query, key, value[, attn_mask]) and attention_grad_query /
// attention_grad_key_value(grad, query, key, value, out, lse[, attn_mask]
// [, seed, offset]).
// A node with dropout (dropout_p above 0) takes its random stream as a 0-d i64
// seed and offset, its last two inputs; the dropped weights are those dropout
// would drop of the [..., L, S] weights (ops_nn.cpp).
#pragma once

#include <optional>
#include <utility>

#include "kiln/ir/graph.h"

namespace kiln::ir {

// The node's dropout_p attribute; 0 when absent.
double attentionDropout(const Node& node);

// The node's seed and offset inputs, when it drops weights.
std::optional<std::pair<ValueId, ValueId>> attentionStream(const Node& node);

// The position among an attention node's inputs of its attn_mask, if it has one.
std::optional<size_t> attentionMaskInput(const Node& node);
// That input itself.
std::optional<ValueId> attentionMask(const Node& node);

// Whether `lse` (attention_lse) is of `forward`'s query, key, value and mask
// with its is_causal and scale: the logsumexp a flash forward writes beside its output.
bool lseOfAttention(const Node& forward, const Node& lse);

} // namespace kiln::ir
