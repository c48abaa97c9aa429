// What lives inside the segment. Only offsets are stored (each process maps the
// segment at its own address). Crash safety rests on one rule: every change a
// crash could interrupt becomes visible through a single aligned store, made
// last (a slot's `id`, a lease's pid), so a dead writer leaves the old state,
// the new one, or a Leased tensor without lease, which the next locker frees
// (a release cut between dropping the last lease and freeing). Boost's allocator is used only while
// the segment is built, before any other process can see it; tensor storage is placed by the slot
// table itself, so there is no allocator state a crash could tear.
#pragma once

#include <pthread.h>
#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace kiln::shm {

constexpr uint64_t kMagic = 0x314d48534e4c494b; // "KILNSHM1"
constexpr uint32_t kLayoutVersion = 1;
constexpr size_t kAlignment = 64;
constexpr int kMaxDims = 16;
constexpr int kMaxLeases = 32;

// Atomics in shared memory must not hide a process-local lock.
static_assert(std::atomic<uint64_t>::is_always_lock_free);

// One tensor. Free while id == 0; the other fields are written before `id`.
struct Slot {
  std::atomic<uint64_t> id{0};
  uint64_t offset = 0; // from the arena start, a multiple of kAlignment
  uint64_t bytes = 0;  // taken from the arena, a multiple of kAlignment
  uint32_t lifetime = 0;
  int32_t dtype = 0;
  int32_t ndim = 0;
  int64_t storageOffset = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};
  pid_t leases[kMaxLeases] = {}; // 0: no lease in this place
};

struct Header {
  uint64_t magic = 0;
  uint32_t layoutVersion = 0;
  uint32_t slotSize = 0;
  pthread_mutex_t mutex; // robust, process-shared; guards everything below and the slots
  std::atomic<uint64_t> nextId{1};
  uint64_t recoveries = 0;
  int64_t slotsHandle = 0; // Boost handles: offsets from the segment manager
  uint64_t slotCount = 0;
  int64_t arenaHandle = 0;
  uint64_t arenaBytes = 0;
};

} // namespace kiln::shm
