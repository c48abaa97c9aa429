#include "kernel_functions.h"

#include <algorithm>
#include <cctype>
#include <set>

namespace kiln::codegen::detail {
namespace {

// The names the emitters give a kernel's own things, each a prefix and a
// number (kernel_text.h, cpu_emitter.cpp, cuda_emitter.cpp, and lowering's index
// variables i, r, t). A name not listed is compared as it is: never wrongly
// shared, at worst compiled twice.
const std::set<std::string> kOwnNamePrefixes = {
    "kiln_kernel_", "kiln_b", "kiln_o", "kiln_p", "kiln_v", "kiln_acc", "kiln_c", "kiln_e",
    "kiln_l",       "kiln_s", "kiln_row", "i",    "r",      "t",        "s",      "u"};

bool isIdentifierStart(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_';
}

bool isIdentifierPart(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}

} // namespace

std::string canonicalKernel(const std::string& text) {
  std::string out;
  std::unordered_map<std::string, size_t> renamed;
  for (size_t at = 0; at < text.size();) {
    char c = text[at];
    if (c == '/' && at + 1 < text.size() && text[at + 1] == '/') {
      at = std::min(text.find('\n', at), text.size());
    } else if (std::isdigit(static_cast<unsigned char>(c))) { // a literal, suffixes and exponents too
      size_t end = at;
      while (end < text.size() && (isIdentifierPart(text[end]) || text[end] == '.')) ++end;
      out.append(text, at, end - at);
      at = end;
    } else if (isIdentifierStart(c)) {
      size_t end = at;
      while (end < text.size() && isIdentifierPart(text[end])) ++end;
      std::string name = text.substr(at, end - at);
      size_t letters = name.find_first_of("0123456789");
      if (letters != std::string::npos && letters > 0 &&
          name.find_first_not_of("0123456789_", letters) == std::string::npos &&
          kOwnNamePrefixes.count(name.substr(0, letters))) {
        auto [it, fresh] = renamed.emplace(name, renamed.size());
        name = name.substr(0, letters) + "#" + std::to_string(it->second);
      }
      out += name;
      at = end;
    } else {
      out += c;
      ++at;
    }
  }
  return out;
}

std::string KernelFunctions::add(const std::string& name, const std::string& text,
                                 std::ostream& code) {
  auto [same, fresh] = byText_.emplace(canonicalKernel(text), name);
  if (fresh)
    code << "\n" << text;
  else
    code << "\n// " << name << ": " << same->second << " (the same function)\n";
  return same->second;
}

} // namespace kiln::codegen::detail
