// Internal to libs/runtime: cuBLASLt, loaded at run time — by soname first, so
// that in a torch process kiln shares torch's loaded copy, then from
// /usr/local/cuda/lib64. Types come from <cublasLt.h>; no CUDA library is linked.
#pragma once

#include <cublasLt.h>

namespace kiln::runtime::detail {

#define KILN_CUBLASLT_FUNCTIONS(X)                                                                 \
  X(cublasLtCreate)                                                                                \
  X(cublasLtGetStatusString)                                                                       \
  X(cublasLtMatmulDescCreate)                                                                      \
  X(cublasLtMatmulDescDestroy)                                                                     \
  X(cublasLtMatmulDescSetAttribute)                                                                \
  X(cublasLtMatrixLayoutCreate)                                                                    \
  X(cublasLtMatrixLayoutDestroy)                                                                   \
  X(cublasLtMatrixLayoutSetAttribute)                                                              \
  X(cublasLtMatmulPreferenceCreate)                                                                \
  X(cublasLtMatmulPreferenceDestroy)                                                               \
  X(cublasLtMatmulPreferenceSetAttribute)                                                          \
  X(cublasLtMatmulAlgoGetHeuristic)                                                                \
  X(cublasLtMatmul)

struct CublasLt {
#define KILN_CUBLASLT_MEMBER(name) decltype(&::name) name = nullptr;
  KILN_CUBLASLT_FUNCTIONS(KILN_CUBLASLT_MEMBER)
#undef KILN_CUBLASLT_MEMBER
};

// The process's cuBLASLt, loaded once. Error{Unavailable} when neither
// libcublasLt.so.13 nor /usr/local/cuda/lib64/libcublasLt.so.13 loads.
const CublasLt& cublasLt();

// The handle of `device` (created once, with its context current).
cublasLtHandle_t cublasLtHandle(int device);

// A failed status as Error{Internal} naming `call` (alloc failure: ResourceExhausted,
// not supported: Unsupported).
void cublasCheck(cublasStatus_t status, const char* call);

} // namespace kiln::runtime::detail
