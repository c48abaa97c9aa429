// The CUDA driver API, loaded at run time: kiln links no CUDA library, so the
// same binaries run on machines without a GPU (where CUDA artifacts give
// Error{Unavailable}). <cuda.h> is included for its types only; every function
// comes from libcuda.so.1 through cuGetProcAddress, in the version this
// header declares.
#pragma once

#include <cuda.h>

#include <string>

namespace kiln::runtime {

// The driver functions kiln calls. Members carry the header's names (some are
// macros for versioned names, cuMemAlloc -> cuMemAlloc_v2: call them as
// written, `driver.cuMemAlloc(...)`).
#define KILN_CUDA_DRIVER_FUNCTIONS(X)                                                              \
  X(cuInit)                                                                                        \
  X(cuGetErrorName)                                                                                \
  X(cuGetErrorString)                                                                              \
  X(cuDriverGetVersion)                                                                            \
  X(cuDeviceGet)                                                                                   \
  X(cuDeviceGetCount)                                                                              \
  X(cuDeviceGetAttribute)                                                                          \
  X(cuDevicePrimaryCtxRetain)                                                                      \
  X(cuCtxPushCurrent)                                                                              \
  X(cuCtxPopCurrent)                                                                               \
  X(cuModuleLoadData)                                                                              \
  X(cuModuleUnload)                                                                                \
  X(cuModuleGetFunction)                                                                           \
  X(cuFuncSetAttribute)                                                                            \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessor)                                                   \
  X(cuLaunchKernel)                                                                                \
  X(cuMemAlloc)                                                                                    \
  X(cuMemFree)                                                                                     \
  X(cuMemAllocAsync)                                                                               \
  X(cuMemFreeAsync)                                                                                \
  X(cuMemcpyHtoD)                                                                                  \
  X(cuMemcpyDtoH)                                                                                  \
  X(cuMemcpyAsync)                                                                                 \
  X(cuMemcpyDtoHAsync)                                                                             \
  X(cuMemcpy2DAsync)                                                                               \
  X(cuMemsetD8Async)                                                                               \
  X(cuMemsetD16Async)                                                                              \
  X(cuMemsetD32Async)                                                                              \
  X(cuStreamCreate)                                                                                \
  X(cuStreamDestroy)                                                                               \
  X(cuStreamSynchronize)                                                                           \
  X(cuEventCreate)                                                                                 \
  X(cuEventRecord)                                                                                 \
  X(cuEventQuery)                                                                                  \
  X(cuEventSynchronize)                                                                            \
  X(cuEventDestroy)                                                                                \
  X(cuEventElapsedTime)                                                                            \
  X(cuMemAllocHost)                                                                                \
  X(cuMemFreeHost)                                                                                 \
  X(cuStreamBeginCapture)                                                                          \
  X(cuStreamEndCapture)                                                                            \
  X(cuStreamIsCapturing)                                                                           \
  X(cuGraphInstantiateWithFlags)                                                                   \
  X(cuGraphLaunch)                                                                                 \
  X(cuGraphExecDestroy)                                                                            \
  X(cuGraphDestroy)

struct CudaDriver {
#define KILN_CUDA_MEMBER(name) decltype(&::name) name = nullptr;
  KILN_CUDA_DRIVER_FUNCTIONS(KILN_CUDA_MEMBER)
#undef KILN_CUDA_MEMBER
  int version = 0; // cuDriverGetVersion: 13000 for CUDA 13.0
};

// The process's driver, loaded (dlopen of $KILN_CUDA_DRIVER, else
// "libcuda.so.1") and initialised (cuInit) on first use. Error{Unavailable}
// when there is no driver, it is older than the functions need, or it has no
// device; the message says which.
const CudaDriver& cudaDriver();

// A driver loaded from `library`, for tests: Error{Unavailable} as above.
CudaDriver loadCudaDriver(const std::string& library);

// Whether cudaDriver() loads and sees a device (never throws).
bool cudaAvailable();

// Turns a failed CUresult into a typed Error naming `call` and the driver's
// text: out of memory is ResourceExhausted, no device Unavailable, a cubin
// for another architecture Unsupported, a damaged one Malformed, the rest Internal.
void cudaCheck(CUresult result, const char* call);

// Makes the primary context of `device` (the one torch uses) current on this
// thread for its scope; the context is retained once per process.
class CudaContextScope {
public:
  explicit CudaContextScope(int device);
  ~CudaContextScope();
  CudaContextScope(const CudaContextScope&) = delete;
  CudaContextScope& operator=(const CudaContextScope&) = delete;

private:
  bool pushed_ = false;
};

} // namespace kiln::runtime
