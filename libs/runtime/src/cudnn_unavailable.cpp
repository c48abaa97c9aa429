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

const std::string& cudnnAttentionRefusal() {
  static const std::string why = "kiln was built without cuDNN's headers";
  return why;
}

} // namespace kiln::runtime::detail
