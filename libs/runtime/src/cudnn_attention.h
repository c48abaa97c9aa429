// Internal to libs/runtime: scaled_dot_product_attention on cuDNN's fused
// flash attention (the backend graph API: a graph of matmuls, pointwise ops
// and reductions that cuDNN's heuristics run as one fused engine), forward
// with the rows' logsumexp and backward (dq, dk, dv from dout, out and the
// logsumexp), as torch runs it on an H100, with a mask as cuDNN's bias and
// dropout as its Bernoulli draws. Plans are built once per shape, layout,
// dtype, mask layout and dropout probability and kept for the process.
//
// Each call answers false when cuDNN cannot run it (no libcudnn, KILN_CUDNN=0,
// or no graph or engine for these operands, logged once; cudnnAttentionRefusal
// says why): the caller runs its own kernels where the call names them, and
// fails it otherwise (dropout, a mask, head sizes kiln's kernels lack). A plan
// cuDNN built that fails to execute is an Error.
#pragma once

#include <string>

#include "cuda_matmul.h"
#include "kiln/runtime/runtime.h"

namespace kiln::runtime::detail {

struct AttentionCall {
  bool causal = false; // top-left: key j sees query i when j <= i
  float scale = 1.0f;
  // Dropout of the weights (cuDNN's Philox stream of the 0-d i64 seed and
  // offset on the device): each kept with probability 1 - dropout, scaled by
  // 1 / (1 - dropout). The backward given the same seed and offset drops the same.
  double dropout = 0;
  const Tensor* seed = nullptr;
  const Tensor* offset = nullptr;
  // An additive mask of the operands' dtype (lowering makes a bool one 0 and
  // -inf) broadcasting to the scores [..., L, S], its last dim dense.
  const Tensor* bias = nullptr;
};

// out [B, H, L, Ev] = attention(q [B, H, L, E], k [B, H, S, E], v [B, H, S, Ev]);
// lse [B, H, L] f32 (dense) when not null. f16 or bf16, last dims dense.
bool cudnnAttentionForward(const AttentionCall& call, const Tensor& q, const Tensor& k,
                           const Tensor& v, const Tensor& out, const Tensor* lse,
                           const CudaCallContext& context);

// dq, dk, dv (q's, k's, v's sizes) of attention given dout (out's sizes), out and lse.
bool cudnnAttentionBackward(const AttentionCall& call, const Tensor& dout, const Tensor& q,
                            const Tensor& k, const Tensor& v, const Tensor& out,
                            const Tensor& lse, const Tensor& dq, const Tensor& dk,
                            const Tensor& dv, const CudaCallContext& context);

// Why cuDNN did not take this thread's last call it answered false for.
const std::string& cudnnAttentionRefusal();

} // namespace kiln::runtime::detail
