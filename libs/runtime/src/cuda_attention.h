// Internal to libs/runtime: the extern calls of attention on a CUDA device —
// scaled_dot_product_attention and its backward's pieces — launching the
// artifact's flash attention kernel named by the step's "kernel" attribute
// (codegen's flash_attention.h gives the kernels and their parameters).
#pragma once

#include <string>
#include <vector>

#include "kiln/runtime/cuda_driver.h"
#include "kiln/runtime/runtime.h"

namespace kiln::runtime::detail {

bool isFlashAttention(const std::string& op);

// Launches `kernel` for `op` into `out` on `stream`; the forward may write its
// rows' logsumexp too (`results`: none or that one). Error{Internal} for
// operands the kernels do not take (codegen chose them: a plan that lies).
void cudaFlashAttention(const std::string& op, const std::vector<Tensor>& inputs,
                        const std::vector<ir::Attr>& attrs, const Tensor& out,
                        const std::vector<Tensor>& results, CUfunction kernel,
                        const CudaDriver& driver, CUstream stream);

} // namespace kiln::runtime::detail
