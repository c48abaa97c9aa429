#include "cublaslt.h"

#include <optional>
#include <string>

#include "kiln/common/error.h"
#include "dynamic_library.h"
#include "per_device.h"

namespace kiln::runtime::detail {
namespace {

struct Loaded {
  std::optional<CublasLt> library;
  std::string error;
};

const Loaded& loaded() {
  static const Loaded once = [] {
    Loaded out;
    std::string why;
    void* handle = openFirst({"libcublasLt.so.13", "/usr/local/cuda/lib64/libcublasLt.so.13"}, why);
    if (!handle) {
      out.error = "no cuBLASLt: libcublasLt.so.13 could not be loaded: " + why;
      return out;
    }
    CublasLt lt;
#define KILN_CUBLASLT_LOAD(name)                                                                   \
  if (!loadSymbol(handle, #name, lt.name)) {                                                       \
    out.error = "no cuBLASLt: libcublasLt.so.13 lacks " #name;                                     \
    return out;                                                                                    \
  }
    KILN_CUBLASLT_FUNCTIONS(KILN_CUBLASLT_LOAD)
#undef KILN_CUBLASLT_LOAD
    out.library = lt;
    return out;
  }();
  return once;
}

} // namespace

const CublasLt& cublasLt() {
  const Loaded& l = loaded();
  if (!l.library) throw Error(ErrorCode::Unavailable, l.error);
  return *l.library;
}

void cublasCheck(cublasStatus_t status, const char* call) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  const Loaded& l = loaded();
  const char* text = l.library ? l.library->cublasLtGetStatusString(status) : nullptr;
  ErrorCode code = ErrorCode::Internal;
  if (status == CUBLAS_STATUS_ALLOC_FAILED) code = ErrorCode::ResourceExhausted;
  if (status == CUBLAS_STATUS_NOT_SUPPORTED) code = ErrorCode::Unsupported;
  throw Error(code, std::string("runtime: ") + call + ": " +
                        (text ? text : "cuBLAS status " + std::to_string(status)));
}

cublasLtHandle_t cublasLtHandle(int device) {
  return perDevice<cublasLtHandle_t>(device, [] {
    cublasLtHandle_t handle;
    cublasCheck(cublasLt().cublasLtCreate(&handle), "cublasLtCreate");
    return handle;
  });
}

} // namespace kiln::runtime::detail
