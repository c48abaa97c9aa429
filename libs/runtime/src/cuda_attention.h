// Internal to libs/runtime: the extern calls of attention on a CUDA device —
// scaled_dot_product_attention and its backward's pieces. cuDNN's fused flash
// attention runs a call it takes (cudnn_attention.h: the forward with its
// logsumexp, the grads all at once); otherwise the artifact's own flash
// kernels named by the call's kernel attributes (codegen's flash_attention.h
// gives the kernels and their parameters).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "cuda_matmul.h"
#include "kiln/runtime/cuda_driver.h"
#include "kiln/runtime/runtime.h"

namespace kiln::runtime::detail {

bool isFlashAttention(const std::string& op);

// The artifact's kernel a call's attribute ("kernel", "kv_kernel", "delta_kernel") names.
using FlashKernels = std::function<CUfunction(const char* attr)>;

// Runs `op` into `out` on the context's stream; `results`: the forward's rows'
// logsumexp, or attention_grad_query's [dk, dv] (lowering pairs each with the
// call of the same operands). Error{Internal} for operands the kernels do not
// take (codegen chose them: a plan that lies).
void cudaFlashAttention(const std::string& op, const std::vector<Tensor>& inputs,
                        const std::vector<ir::Attr>& attrs, const Tensor& out,
                        const std::vector<Tensor>& results, const FlashKernels& kernels,
                        const CudaCallContext& context);

} // namespace kiln::runtime::detail
