// Building emitted C++ into a shared object with the system compiler (loading
// one is libs/runtime's: runtime::Library).
#pragma once

#include <cstddef>
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

// How many times this process ran the compiler (cache tests assert a hit ran none).
size_t compilerRuns();

} // namespace kiln::codegen
