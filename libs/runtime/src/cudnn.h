// Internal to libs/runtime: cuDNN's backend (graph) API, loaded at run time —
// by soname first, so that in a torch process kiln shares torch's loaded copy,
// then from /usr/local/cuda/lib64. Types come from <cudnn_graph.h>; no cuDNN
// library is linked. Descriptor wraps one backend descriptor (destroyed with
// it) and sets its attributes; every failure is an Error naming the call and
// cuDNN's own last message.
#pragma once

#include <cudnn_graph.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace kiln::runtime::detail {

#define KILN_CUDNN_FUNCTIONS(X)                                                                    \
  X(cudnnGetVersion)                                                                               \
  X(cudnnGetErrorString)                                                                           \
  X(cudnnGetLastErrorString)                                                                       \
  X(cudnnCreate)                                                                                   \
  X(cudnnSetStream)                                                                                \
  X(cudnnBackendCreateDescriptor)                                                                  \
  X(cudnnBackendDestroyDescriptor)                                                                 \
  X(cudnnBackendFinalize)                                                                          \
  X(cudnnBackendSetAttribute)                                                                      \
  X(cudnnBackendGetAttribute)                                                                      \
  X(cudnnBackendExecute)

struct Cudnn {
#define KILN_CUDNN_MEMBER(name) decltype(&::name) name = nullptr;
  KILN_CUDNN_FUNCTIONS(KILN_CUDNN_MEMBER)
#undef KILN_CUDNN_MEMBER
};

// The process's cuDNN, loaded once: nullptr when neither libcudnn.so.9 nor
// /usr/local/cuda/lib64/libcudnn.so.9 loads, or while the environment's
// KILN_CUDNN is 0 (read each call: tests compare both ways; cudnnUnavailableWhy
// says which).
const Cudnn* cudnn();
const std::string& cudnnUnavailableWhy();

// The handle of `device` (created once, with its context current).
cudnnHandle_t cudnnHandle(int device);

// A failed status as Error naming `call` and cuDNN's last message
// (CUDNN_STATUS_NOT_SUPPORTED*: Unsupported; alloc failure: ResourceExhausted).
void cudnnCheck(cudnnStatus_t status, const char* call);

// One backend descriptor of a type, destroyed with this object.
class Descriptor {
 public:
  explicit Descriptor(cudnnBackendDescriptorType_t type);
  Descriptor(Descriptor&& other) noexcept : raw_(other.raw_) { other.raw_ = nullptr; }
  Descriptor& operator=(Descriptor&& other) noexcept {
    std::swap(raw_, other.raw_);
    return *this;
  }
  Descriptor(const Descriptor&) = delete;
  ~Descriptor();

  cudnnBackendDescriptor_t get() const { return raw_; }

  Descriptor& set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                  int64_t count, const void* values);
  Descriptor& set(cudnnBackendAttributeName_t name, int64_t value);
  Descriptor& set(cudnnBackendAttributeName_t name, const std::vector<int64_t>& values);
  Descriptor& set(cudnnBackendAttributeName_t name, bool value);
  Descriptor& set(cudnnBackendAttributeName_t name, cudnnDataType_t value);
  Descriptor& set(cudnnBackendAttributeName_t name, const Descriptor& value);
  Descriptor& set(cudnnBackendAttributeName_t name, const std::vector<const Descriptor*>& values);
  Descriptor& finalize();

 private:
  cudnnBackendDescriptor_t raw_ = nullptr;
};

} // namespace kiln::runtime::detail
