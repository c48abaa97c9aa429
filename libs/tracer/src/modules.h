// nn modules and functions the tracer computes itself as compositions of graph
// ops, where torch's own code calls into what it does not trace
// (F.multi_head_attention_forward, the native batch_norm) or the graph op
// cannot take the call (attention with dropout).
#pragma once

#include "tracer_state.h"

namespace kiln::tracer {

// An nn.MultiheadAttention's parts, as the evaluator read them off the module.
struct MultiheadAttentionModule {
  Var inProjWeight, inProjBias;     // [3E, E] and [3E] (either may be None)
  Var qWeight, kWeight, vWeight;    // with kdim/vdim of their own (inProjWeight None)
  Var outWeight, outBias;           // out_proj's
  int64_t heads = 1;
  double dropout = 0;
  bool batchFirst = false;
  bool training = false;
};

// forward(query, key, value, key_padding_mask=None, need_weights=True,
// attn_mask=None, average_attn_weights=True, is_causal=False) as
// F.multi_head_attention_forward computes it: the projections, scaled scores
// with the masks (bool: excluded, float: added), softmax, dropout in training,
// the weighted values and out_proj; (output, weights or None). Batched and
// unbatched inputs; add_bias_kv and add_zero_attn are Unsupported.
Var multiheadAttention(TraceState& s, const MultiheadAttentionModule& m, const std::vector<Var>& args,
                       const Kwargs& kwargs);

// torch.nn.functional.multi_head_attention_forward(query, key, value,
// embed_dim_to_check, num_heads, in_proj_weight, in_proj_bias, bias_k, bias_v,
// add_zero_attn, dropout_p, out_proj_weight, out_proj_bias, training=True, ...):
// what nn.MultiheadAttention's own forward calls (sequence-first inputs), as
// multiheadAttention computes it.
Var multiHeadAttentionForward(TraceState& s, const std::vector<Var>& args, const Kwargs& kwargs);

// F.scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p,
// is_causal=False, scale=None) with dropout_p > 0: the graph's attention op with
// dropout_p and a random stream of its own (a seed and offset, as dropout's),
// which cuDNN's fused attention runs on CUDA (the scores never reach memory)
// and the decomposition elsewhere. dropout_p >= 1 drops every weight: torch's
// math path (attentionDroppingAll), zeros.
Var attentionWithDropout(TraceState& s, const std::vector<Var>& args, const Kwargs& kwargs);
Var attentionDroppingAll(TraceState& s, const Var& q, const Var& k, const Var& v, const Var& mask,
                         bool causal, const Var& scale);

// torch.nn.functional.embedding(input, weight, padding_idx=None, max_norm=None,
// norm_type=2.0, scale_grad_by_freq=False, sparse=False): the rows of weight the
// indices pick; padding_idx's row gets no grad (its lookups are read through
// detach). max_norm, scale_grad_by_freq and sparse are Unsupported.
Var embedding(TraceState& s, const std::vector<Var>& args, const Kwargs& kwargs);

// torch.nn.functional.batch_norm(input, running_mean, running_var, weight=None,
// bias=None, training=False, momentum=0.1, eps=1e-5) over dim 1: in training
// the batch's mean and biased variance normalise, and running stats (when
// given) are updated in place, detached, the variance's unbiased; otherwise
// the running stats normalise.
Var batchNorm(TraceState& s, const std::vector<Var>& args, const Kwargs& kwargs);

// torch.nn.functional.group_norm(input, num_groups, weight=None, bias=None,
// eps=1e-5): each sample's channels in num_groups groups, each normalised by
// its mean and biased variance, then the per-channel affine.
Var groupNorm(TraceState& s, const std::vector<Var>& args, const Kwargs& kwargs);

} // namespace kiln::tracer
