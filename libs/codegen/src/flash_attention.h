// Flash attention for the CUDA target: scaled_dot_product_attention and the
// pieces of its backward (attention_lse, attention_grad_query,
// attention_grad_key_value) as kernels of our own on tensor cores
// (FlashAttention-2's algorithm, mma.sync m16n8k16 with f32 accumulation):
// the [L, S] scores never reach memory.
//
// Lowering keeps a node whole (an extern call) when flashAttentionTakes it;
// its call names the kernel in an attribute "kernel" (a paired grads call
// names the [dk, dv] one in "kv_kernel", and a grad call its delta's in
// "delta_kernel"), which the emitter appends to the artifact's source and the
// runtime launches (runtime/cuda_attention.cpp) when cuDNN does not take the
// call, with the parameters
//   (grad, query, key, value, lse, delta, out, out_lse: pointers to element 0,
//    heads, L, S, then the batch, batch and row strides of grad, query, key,
//    value, out: int64, scale: f32)
// on a grid of (batch * heads, ceil(rows / block_rows)) blocks of 128 threads,
// where rows are L (S for attention_grad_key_value) and block_rows is the
// call's attribute of that name (flashAttentionBlockRows). Operands the op has
// not are null; the forward writes out_lse too when its call has a further
// result (lowering pairs it with an attention_lse of its own inputs). The
// delta kernel, (grad, out, delta [batch * heads, L] f32, heads, L, the batch,
// batch and row strides of grad and out) on (batch * heads, ceil(L / 16))
// blocks of 128 threads, writes each row's sum of grad * out, which the grads
// kernels read as `delta`.
//
// Head sizes past 64 (multiples of 8 up to 128), masks and dropout run on
// cuDNN's fused attention alone (flashAttentionTakes): its calls name no kernel of ours.
// TODO(issue 7): kernels of ours past 64 (shared memory past 48 KB: dynamic,
// opted in), with masks or dropout, f32; wgmma and warp specialisation
// (FlashAttention-3) on sm_90;
// dq accumulated (f32 atomics) by the [dk, dv] kernel, as FlashAttention-2's
// backward, instead of a kernel that computes the scores and dP again.
#pragma once

#include <string>

#include "kiln/codegen/flash_kernels.h"
#include "kiln/ir/graph.h"

namespace kiln::codegen::detail {

// Whether the node stays a call of fused attention: half-precision operands
// of 2 to 4 dims, no mask, a positive scale, each operand dense in its last
// dim, lse dense; kiln's kernels run it where flashKernelsRun, else cuDNN's
// fused attention alone: head sizes (E of query and key, Ev of value) in
// multiples of 8 up to 128, strides and offsets in multiples of 8 elements,
// dropout. The runtime fails a call that names no kernel and cuDNN does not
// take (no kernel of ours has its head size, nor would drop the forward's weights).
bool flashAttentionTakes(const ir::Graph& graph, const ir::Node& node);

// Whether `op` is scaled_dot_product_attention or a piece of its backward.
bool isFlashAttentionOp(const std::string& op);

// Whether kiln's kernels run the node (its call names them; the runtime runs
// them where cuDNN does not take the call): one head size E = Ev of 16, 32, 48
// or 64, even strides and offset (32-bit loads), no dropout.
bool flashKernelsRun(const ir::Graph& graph, const ir::Node& node);

// The rows of L (of S for attention_grad_key_value) a block of its kernel takes.
int64_t flashAttentionBlockRows(const ir::Node& node);

// A kernel's name: kind fwd, lse, dq, dkv or delta, head size, dtype, mask.
std::string flashKernelName(const char* kind, int64_t embed, bool bf16, bool causal);

// The kernel's name for a node flashAttentionTakes.
std::string flashAttentionKernel(const ir::Graph& graph, const ir::Node& node);

// The delta kernel's name for a grad node flashAttentionTakes.
std::string flashAttentionDeltaKernel(const ir::Graph& graph, const ir::Node& node);

// Whether a call's attribute names one of its kernels: "kernel", "kv_kernel", "delta_kernel".
bool namesFlashKernel(const ir::Attr& attr);

// The kernels' source (once per file) and the definition of one named kernel.
const std::string& flashAttentionSource();
std::string flashAttentionDefinition(const std::string& kernel);

// A kernel's unit: the (guarded) source and its definition, which the prelude
// (cudaPrelude) makes a whole program.
std::string flashAttentionUnit(const std::string& kernel);

} // namespace kiln::codegen::detail
