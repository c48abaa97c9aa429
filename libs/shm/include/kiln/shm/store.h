// Store: the stack's shared-memory segment of tensors, addressed by id, so
// services and clients in different processes see the same bytes without a
// copy. One per stack: the launcher creates it, every process attaches by name.
// Every call is safe against the crash of any other process at any moment.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/shm/tensor.h"

namespace kiln::shm {

// Unique within a segment, never reused; 0 is never an id.
using TensorId = uint64_t;

enum class Lifetime : uint32_t {
  Pinned = 0, // kept until free(id)
  Leased = 1, // freed when its last lease is released or reclaimed
};
std::string_view lifetimeName(Lifetime lifetime);

// A zero-copy window on a tensor, valid while the tensor lives and the Store
// that opened it is alive in this process.
struct TensorView {
  TensorId id = 0;
  TensorMeta meta;
  std::byte* data = nullptr; // first element: storage start + storageOffset elements
  size_t bytes = 0;          // from `data` to the end of the tensor's farthest element

  template <class T> T* as() const { return reinterpret_cast<T*>(data); }
};

struct TensorInfo {
  TensorId id = 0;
  TensorMeta meta;
  Lifetime lifetime = Lifetime::Pinned;
  size_t bytes = 0;                // taken from the segment (storage, rounded up to 64)
  std::vector<pid_t> leaseHolders; // processes holding a lease
};

struct Usage {
  size_t capacityBytes = 0;    // room for tensor storage in all
  size_t usedBytes = 0;        // taken by live tensors
  size_t freeBytes = 0;        // capacityBytes - usedBytes
  size_t largestFreeBlock = 0; // the largest tensor that fits now
  size_t tensors = 0;
  size_t maxTensors = 0;
  uint64_t recoveries = 0; // times a process died holding the store's lock
};

class Store {
public:
  // Creates the segment `segmentName` of `bytes` bytes in all (at least 1 MiB).
  // It appears under its name only once fully built. Error{AlreadyExists} if it exists.
  static Store create(const std::string& segmentName, size_t bytes);
  // Attaches to an existing segment; Error{NotFound} if there is none.
  static Store attach(const std::string& segmentName);
  // Removes the segment's name (processes attached keep their mapping). False if absent.
  static bool removeSegment(const std::string& segmentName);
  // "kiln-" + 16 hex digits of a hash of the normalized absolute run dir path.
  static std::string segmentNameFor(const std::string& runDir);

  Store(Store&&) noexcept;
  Store& operator=(Store&&) noexcept;
  ~Store();

  // Makes room for a tensor (storage 64-byte aligned, uninitialized) and gives
  // the calling process a lease on it. When the segment is full, reclaims dead
  // leases and tries once more, then throws Error{ResourceExhausted}.
  // Error{InvalidArgument} for a bad meta (see TensorMeta::storageBytes).
  TensorId allocate(const TensorMeta& meta, Lifetime lifetime);
  // Takes a lease for the calling process (one per process, however many opens)
  // and returns a view on the bytes. Error{NotFound} if there is no such tensor.
  TensorView open(TensorId id);
  // Drops the calling process's lease, if it holds one; a Leased tensor left
  // without lease is freed. Error{NotFound} if there is no such tensor.
  void release(TensorId id);
  // Frees the tensor now, whatever its lifetime and leases. Error{NotFound} if absent.
  void free(TensorId id);

  // Live tensors, by increasing id.
  std::vector<TensorInfo> list() const;
  // Drops the leases of processes that no longer exist (or are zombies) and
  // frees the Leased tensors left without lease. Returns the leases dropped.
  size_t reclaimDeadLeases();
  Usage usage() const;

  const std::string& name() const;
  // False once the segment's name was removed or names a newer segment (its
  // stack stopped, or stopped and started again): attach anew to see the stack's
  // tensors. One stat(2); cheap enough to ask before every use.
  bool current() const;

private:
  class Impl;
  explicit Store(std::unique_ptr<Impl> impl);
  Impl& impl() const;

  std::unique_ptr<Impl> impl_;
};

} // namespace kiln::shm
