// Internal to libs/runtime: a library handle per device (cuBLASLt's, cuDNN's),
// created on first use — with that device's context current — and kept for
// the process.
#pragma once

#include <map>
#include <mutex>

namespace kiln::runtime::detail {

// `create()`'s handle for `device`, made once (each call site keeps its own).
template <class Handle, class Create> Handle perDevice(int device, Create create) {
  static std::mutex mutex;
  static std::map<int, Handle> handles;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = handles.find(device);
  if (it == handles.end()) it = handles.emplace(device, create()).first;
  return it->second;
}

} // namespace kiln::runtime::detail
