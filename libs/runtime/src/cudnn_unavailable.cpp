// A build without cuDNN's headers: attention runs kiln's own flash kernels.
#include "cudnn_attention.h"

namespace kiln::runtime::detail {

bool cudnnAttentionForward(const AttentionCall&, const Tensor&, const Tensor&, const Tensor&,
                           const Tensor&, const Tensor*, const CudaCallContext&) {
  return false;
}

bool cudnnAttentionBackward(const AttentionCall&, const Tensor&, const Tensor&, const Tensor&,
                            const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                            const Tensor&, const Tensor&, const CudaCallContext&) {
  return false;
}

} // namespace kiln::runtime::detail
