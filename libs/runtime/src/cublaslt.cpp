#include "cublaslt.h"

#include <optional>
#include <string>

#include "dynamic_library.h"
#include "kiln/common/error.h"
#include "per_device.h"

namespace kiln::runtime::detail {
namespace {

// The first of cuBLASLt's functions `handle` lacks, or null (each one found filled in).
const char* fill(void* handle, CublasLt& functions) {
#define KILN_CUBLASLT_LOAD(name)                                                                   \
  if (!loadSymbol(handle, #name, functions.name)) return #name;
  KILN_CUBLASLT_FUNCTIONS(KILN_CUBLASLT_LOAD)
#undef KILN_CUBLASLT_LOAD
  return nullptr;
}

const LoadedLibrary<CublasLt>& loaded() {
  static const LoadedLibrary<CublasLt> once = loadLibrary<CublasLt>(
      "cuBLASLt", {"libcublasLt.so.13", "/usr/local/cuda/lib64/libcublasLt.so.13"}, fill);
  return once;
}

} // namespace

const CublasLt& cublasLt() {
  const LoadedLibrary<CublasLt>& l = loaded();
  if (!l.functions) throw Error(ErrorCode::Unavailable, l.why);
  return *l.functions;
}

void cublasCheck(cublasStatus_t status, const char* call) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  const LoadedLibrary<CublasLt>& l = loaded();
  const char* text = l.functions ? l.functions->cublasLtGetStatusString(status) : nullptr;
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
