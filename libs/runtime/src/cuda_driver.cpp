#include "kiln/runtime/cuda_driver.h"

#include <dlfcn.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>

#include "kiln/common/error.h"

namespace kiln::runtime {
namespace {

[[noreturn]] void unavailable(const std::string& message) {
  throw Error(ErrorCode::Unavailable, "no CUDA driver: " + message);
}

using GetProcAddress = CUresult (*)(const char*, void**, int, cuuint64_t,
                                    CUdriverProcAddressQueryResult*);

// The driver of the process, or why there is none (loaded once).
struct Loaded {
  std::optional<CudaDriver> driver;
  std::string error;
};

const Loaded& loaded() {
  static const Loaded once = [] {
    Loaded out;
    const char* path = std::getenv("KILN_CUDA_DRIVER");
    try {
      out.driver = loadCudaDriver(path && *path ? path : "libcuda.so.1");
    } catch (const Error& e) {
      out.error = e.message();
    }
    return out;
  }();
  return once;
}

} // namespace

CudaDriver loadCudaDriver(const std::string& library) {
  // Never closed: the driver lives as long as the process (as torch's does).
  void* handle = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = ::dlerror();
    unavailable(library + " could not be loaded: " + (why ? why : "unknown reason"));
  }
  auto getProc = reinterpret_cast<GetProcAddress>(::dlsym(handle, "cuGetProcAddress_v2"));
  if (!getProc) unavailable(library + " has no cuGetProcAddress_v2: the driver predates CUDA 12");
  CudaDriver d;
  auto load = [&](const char* name, void** fn) {
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    if (getProc(name, fn, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &status) != CUDA_SUCCESS ||
        status != CU_GET_PROC_ADDRESS_SUCCESS || !*fn)
      unavailable(library + " has no " + name + " of CUDA " + std::to_string(CUDA_VERSION / 1000) +
                  "." + std::to_string(CUDA_VERSION % 1000 / 10) + " (update the driver)");
  };
#define KILN_CUDA_LOAD(name) load(#name, reinterpret_cast<void**>(&d.name));
  KILN_CUDA_DRIVER_FUNCTIONS(KILN_CUDA_LOAD)
#undef KILN_CUDA_LOAD
  CUresult init = d.cuInit(0);
  if (init != CUDA_SUCCESS) {
    const char* text = nullptr;
    d.cuGetErrorString(init, &text);
    unavailable("cuInit failed: " + std::string(text ? text : "unknown error"));
  }
  d.cuDriverGetVersion(&d.version);
  return d;
}

const CudaDriver& cudaDriver() {
  const Loaded& l = loaded();
  if (!l.driver) throw Error(ErrorCode::Unavailable, l.error);
  return *l.driver;
}

bool cudaAvailable() {
  const Loaded& l = loaded();
  int count = 0;
  return l.driver && l.driver->cuDeviceGetCount(&count) == CUDA_SUCCESS && count > 0;
}

void cudaCheck(CUresult result, const char* call) {
  if (result == CUDA_SUCCESS) return;
  const char* name = nullptr;
  const char* text = nullptr;
  if (const Loaded& l = loaded(); l.driver) {
    l.driver->cuGetErrorName(result, &name);
    l.driver->cuGetErrorString(result, &text);
  }
  std::string message = std::string(call) + ": " +
                        (name ? name : "CUDA error " + std::to_string(result)) +
                        (text ? std::string(": ") + text : "");
  ErrorCode code = ErrorCode::Internal;
  if (result == CUDA_ERROR_OUT_OF_MEMORY) code = ErrorCode::ResourceExhausted;
  if (result == CUDA_ERROR_NO_DEVICE || result == CUDA_ERROR_INVALID_DEVICE)
    code = ErrorCode::Unavailable;
  if (result == CUDA_ERROR_NOT_SUPPORTED || result == CUDA_ERROR_NO_BINARY_FOR_GPU ||
      result == CUDA_ERROR_UNSUPPORTED_PTX_VERSION)
    code = ErrorCode::Unsupported; // e.g. a cubin for another architecture
  if (result == CUDA_ERROR_INVALID_IMAGE) code = ErrorCode::Malformed;
  throw Error(code, "runtime: " + message);
}

CudaContextScope::CudaContextScope(int device) {
  const CudaDriver& d = cudaDriver();
  static std::mutex mutex;
  static std::map<int, CUcontext> contexts; // retained once, kept for the process
  CUcontext context;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = contexts.find(device);
    if (it == contexts.end()) {
      CUdevice dev;
      cudaCheck(d.cuDeviceGet(&dev, device), "cuDeviceGet");
      cudaCheck(d.cuDevicePrimaryCtxRetain(&context, dev), "cuDevicePrimaryCtxRetain");
      contexts.emplace(device, context);
    } else {
      context = it->second;
    }
  }
  cudaCheck(d.cuCtxPushCurrent(context), "cuCtxPushCurrent");
  pushed_ = true;
}

CudaContextScope::~CudaContextScope() {
  CUcontext popped;
  if (pushed_) cudaDriver().cuCtxPopCurrent(&popped);
}

} // namespace kiln::runtime
