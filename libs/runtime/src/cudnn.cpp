#include "cudnn.h"

#include <cstdlib>

#include "dynamic_library.h"
#include "kiln/common/error.h"
#include "per_device.h"

namespace kiln::runtime::detail {
namespace {

// The first of cuDNN's functions `handle` lacks, or null (each one found filled in).
const char* fill(void* handle, Cudnn& functions) {
#define KILN_CUDNN_LOAD(name)                                                                      \
  if (!loadSymbol(handle, #name, functions.name)) return #name;
  KILN_CUDNN_FUNCTIONS(KILN_CUDNN_LOAD)
#undef KILN_CUDNN_LOAD
  return nullptr;
}

const LoadedLibrary<Cudnn>& loaded() {
  static const LoadedLibrary<Cudnn> once =
      loadLibrary<Cudnn>("cuDNN", {"libcudnn.so.9", "/usr/local/cuda/lib64/libcudnn.so.9"}, fill);
  return once;
}

// Once a plan exists the library stays in use whatever KILN_CUDNN says now.
const Cudnn& required() {
  if (!loaded().functions) throw Error(ErrorCode::Unavailable, loaded().why);
  return *loaded().functions;
}

bool turnedOff() {
  const char* setting = std::getenv("KILN_CUDNN");
  return setting && std::string(setting) == "0";
}

} // namespace

const Cudnn* cudnn() {
  return loaded().functions && !turnedOff() ? &*loaded().functions : nullptr;
}

const std::string& cudnnUnavailableWhy() {
  static const std::string off = "KILN_CUDNN=0 turns cuDNN off";
  return loaded().functions ? off : loaded().why;
}

cudnnHandle_t cudnnHandle(int device) {
  return perDevice<cudnnHandle_t>(device, [] {
    cudnnHandle_t handle;
    cudnnCheck(required().cudnnCreate(&handle), "cudnnCreate");
    return handle;
  });
}

void cudnnCheck(cudnnStatus_t status, const char* call) {
  if (status == CUDNN_STATUS_SUCCESS) return;
  const Cudnn& c = required();
  char last[1024] = {0};
  c.cudnnGetLastErrorString(last, sizeof last);
  ErrorCode code = ErrorCode::Internal;
  if (status == CUDNN_STATUS_ALLOC_FAILED) code = ErrorCode::ResourceExhausted;
  // The NOT_SUPPORTED family shares its leading digits (3000..3999).
  if (status / 1000 == CUDNN_STATUS_NOT_SUPPORTED / 1000) code = ErrorCode::Unsupported;
  std::string text = std::string("runtime: ") + call + ": " + c.cudnnGetErrorString(status);
  if (last[0]) text += " (" + std::string(last) + ")";
  throw Error(code, text);
}

Descriptor::Descriptor(cudnnBackendDescriptorType_t type) {
  cudnnCheck(required().cudnnBackendCreateDescriptor(type, &raw_), "cudnnBackendCreateDescriptor");
}

Descriptor::~Descriptor() {
  if (raw_) required().cudnnBackendDestroyDescriptor(raw_);
}

Descriptor& Descriptor::set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                            int64_t count, const void* values) {
  cudnnCheck(required().cudnnBackendSetAttribute(raw_, name, type, count, values),
             "cudnnBackendSetAttribute");
  return *this;
}

Descriptor& Descriptor::set(cudnnBackendAttributeName_t name, int64_t value) {
  return set(name, CUDNN_TYPE_INT64, 1, &value);
}

Descriptor& Descriptor::set(cudnnBackendAttributeName_t name, const std::vector<int64_t>& values) {
  return set(name, CUDNN_TYPE_INT64, static_cast<int64_t>(values.size()), values.data());
}

Descriptor& Descriptor::set(cudnnBackendAttributeName_t name, bool value) {
  return set(name, CUDNN_TYPE_BOOLEAN, 1, &value);
}

Descriptor& Descriptor::set(cudnnBackendAttributeName_t name, cudnnDataType_t value) {
  return set(name, CUDNN_TYPE_DATA_TYPE, 1, &value);
}

Descriptor& Descriptor::set(cudnnBackendAttributeName_t name, const Descriptor& value) {
  cudnnBackendDescriptor_t raw = value.get();
  return set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw);
}

Descriptor& Descriptor::set(cudnnBackendAttributeName_t name,
                            const std::vector<const Descriptor*>& values) {
  std::vector<cudnnBackendDescriptor_t> raw;
  for (const Descriptor* d : values) raw.push_back(d->get());
  return set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(raw.size()), raw.data());
}

Descriptor& Descriptor::finalize() {
  cudnnCheck(required().cudnnBackendFinalize(raw_), "cudnnBackendFinalize");
  return *this;
}

} // namespace kiln::runtime::detail
