// Internal to libs/codegen: each kernel function of a file written once. Two
// kernels whose texts differ only in the names they give their own things
// (their name, buffers, index variables, values, accumulators, arrays, size
// symbols), renamed consistently, compute the same function of their
// arguments, which are positional: the later launches the earlier's. A
// model's repeated layers then compile once.
#pragma once

#include <ostream>
#include <string>
#include <unordered_map>

namespace kiln::codegen::detail {

// The text without comments, its own names numbered in order of first appearance.
std::string canonicalKernel(const std::string& text);

class KernelFunctions {
public:
  // The function kernel `name` (defined by `text`) launches: its own, which is
  // appended to `code`, or an earlier equal one's (a comment says which).
  std::string add(const std::string& name, const std::string& text, std::ostream& code);

private:
  std::unordered_map<std::string, std::string> byText_; // canonical text -> function
};

} // namespace kiln::codegen::detail
