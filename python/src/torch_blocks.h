// Memory from torch's allocator, made in C++: a run's buffers without a Python
// call or the GIL each (torch.empty through Python cost 5-9 us an allocation, a
// GPT-2 training step makes ~365). On CUDA it is torch's caching allocator on
// the thread's current stream, as torch.empty would use; the block is an
// at::Tensor that becomes a torch.Tensor when a run hands it out.
#pragma once

#include <pybind11/pybind11.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "kiln/common/dtype.h"

namespace at {
class Tensor;
}

namespace kiln::python {

class TorchBlock {
public:
  TorchBlock() = default;
  // uint8 [nbytes] on cuda:device (device >= 0) or the CPU (device < 0).
  static TorchBlock bytes(size_t nbytes, int device);
  // A tensor of this layout (its dtype, sizes and strides).
  static TorchBlock strided(DType dtype, const std::vector<int64_t>& sizes,
                            const std::vector<int64_t>& strides, int device);

  explicit operator bool() const { return tensor_ != nullptr; }
  std::byte* data() const;
  // The torch.Tensor it is (a new reference, the same object each call); needs the GIL.
  pybind11::object python() const;

private:
  std::shared_ptr<at::Tensor> tensor_;
};

} // namespace kiln::python
