#include "torch_blocks.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <torch/csrc/autograd/python_variable.h>

#include "guard_frontend.h"

namespace kiln::python {
namespace {

at::TensorOptions on(c10::ScalarType dtype, int device) {
  at::TensorOptions options = at::TensorOptions().dtype(dtype);
  return device >= 0 ? options.device(c10::Device(c10::DeviceType::CUDA,
                                                  static_cast<c10::DeviceIndex>(device)))
                     : options.device(c10::Device(c10::DeviceType::CPU));
}

} // namespace

TorchBlock TorchBlock::bytes(size_t nbytes, int device) {
  TorchBlock block;
  block.tensor_ = std::make_shared<at::Tensor>(
      at::empty({static_cast<int64_t>(nbytes)}, on(c10::ScalarType::Byte, device)));
  return block;
}

TorchBlock TorchBlock::strided(DType dtype, const std::vector<int64_t>& sizes,
                               const std::vector<int64_t>& strides, int device) {
  TorchBlock block;
  block.tensor_ = std::make_shared<at::Tensor>(at::empty_strided(
      sizes, strides, on(static_cast<c10::ScalarType>(scalarTypeOf(dtype)), device)));
  return block;
}

std::byte* TorchBlock::data() const {
  return static_cast<std::byte*>(tensor_->data_ptr());
}

pybind11::object TorchBlock::python() const {
  PyObject* wrapped = THPVariable_Wrap(*tensor_);
  if (!wrapped) throw pybind11::error_already_set();
  return pybind11::reinterpret_steal<pybind11::object>(wrapped);
}

} // namespace kiln::python
