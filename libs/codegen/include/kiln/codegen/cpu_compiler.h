// Building emitted C++ into a shared object with the system compiler, and
// loading one.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace kiln::codegen {

// The compiler command line, without the file names: what a cache key must
// include, since another compiler or flags give another object.
std::vector<std::string> cpuCompilerCommand();

// Compiles `code` into the shared object `soPath` (written under a temporary
// name, then renamed, so a reader never sees half a file). Error{Internal}
// naming the compiler's exit on failure, with the compiler's messages and the
// source in the error's detail.
void compileCpu(const std::string& code, const std::string& soPath);

// A loaded shared object of kernels (dlopen); unloaded when the last owner goes.
class CpuLibrary {
public:
  using KernelFn = int (*)(char* const* buffers, const int64_t* symbols);

  // Error{NotFound} when the file cannot be loaded.
  static std::shared_ptr<CpuLibrary> load(const std::string& soPath);
  ~CpuLibrary();
  CpuLibrary(const CpuLibrary&) = delete;
  CpuLibrary& operator=(const CpuLibrary&) = delete;

  KernelFn kernel(const std::string& name) const; // Error{NotFound} when absent

private:
  explicit CpuLibrary(void* handle) : handle_(handle) {}
  void* handle_;
};

} // namespace kiln::codegen
