// Internal to libs/codegen: FNV-1a, 64 bits — content hashes for cache keys,
// file names and checksums (not for security).
#pragma once

#include <cstdint>
#include <string_view>

namespace kiln::codegen::detail {

inline uint64_t fnv1a(std::string_view text, uint64_t basis = 0xcbf29ce484222325ULL) {
  uint64_t h = basis;
  for (unsigned char c : text) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

} // namespace kiln::codegen::detail
