// The store across processes: children that attach, write, and are SIGKILLed.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "kiln/shm/store.h"
#include "shm_fixture.h"

namespace kiln::shm {
namespace {

using test::errorOf;
using test::forkChild;
using test::killChild;
using test::Pipe;
using test::SegmentName;
using test::waitChild;
using test::Watchdog;

constexpr size_t kMiB = size_t{1} << 20;

TensorMeta floats(int64_t n) {
  return TensorMeta::contiguous(DType::Float32, {n});
}

bool holds(const TensorInfo& info, pid_t pid) {
  return std::count(info.leaseHolders.begin(), info.leaseHolders.end(), pid) > 0;
}

TEST(StoreAcrossProcesses, TensorOfAKilledWriterIsIntact) {
  SegmentName name;
  Store::create(name.str(), 80 * kMiB);
  constexpr int64_t kCount = int64_t{16} << 20; // 64 MiB of float32
  Pipe pipe;
  const pid_t writer = forkChild([&] {
    Store store = Store::attach(name.str());
    const TensorId id = store.allocate(floats(kCount), Lifetime::Pinned);
    float* data = store.open(id).as<float>();
    for (int64_t i = 0; i < kCount; ++i) data[i] = float(i); // exact below 2^24
    pipe.send(id);
    pause();
  });
  const TensorId id = pipe.receive();
  Store store = Store::attach(name.str());
  ASSERT_TRUE(holds(store.list().at(0), writer));
  killChild(writer);

  const TensorView view = store.open(id);
  ASSERT_EQ(view.bytes, size_t(kCount) * sizeof(float));
  const float* data = view.as<float>();
  int64_t wrong = 0;
  for (int64_t i = 0; i < kCount; ++i) wrong += data[i] != float(i);
  EXPECT_EQ(wrong, 0);

  EXPECT_GE(store.reclaimDeadLeases(), 1u);
  const auto tensors = store.list();
  ASSERT_EQ(tensors.size(), 1u); // pinned: outlives its writer
  EXPECT_FALSE(holds(tensors[0], writer));
  EXPECT_TRUE(holds(tensors[0], getpid()));
}

TEST(StoreAcrossProcesses, LeasedTensorOfADeadHolderIsReclaimed) {
  SegmentName name;
  Store store = Store::create(name.str(), 16 * kMiB);
  const size_t freeBytes = store.usage().freeBytes;
  Pipe pipe;
  const pid_t holder = forkChild([&] {
    pipe.send(Store::attach(name.str()).allocate(floats(2 * kMiB), Lifetime::Leased));
    pause();
  });
  const TensorId id = pipe.receive();
  EXPECT_EQ(store.usage().freeBytes, freeBytes - 8 * kMiB);
  EXPECT_EQ(store.reclaimDeadLeases(), 0u); // alive: nothing to take

  killChild(holder);
  EXPECT_EQ(store.reclaimDeadLeases(), 1u);
  EXPECT_TRUE(store.list().empty());
  EXPECT_EQ(store.usage().freeBytes, freeBytes);
  EXPECT_EQ(errorOf([&] { store.open(id); }), ErrorCode::NotFound);
}

TEST(StoreAcrossProcesses, ZombieHolderCountsAsDead) {
  SegmentName name;
  Store store = Store::create(name.str(), 4 * kMiB);
  Pipe pipe;
  const pid_t holder = forkChild(
      [&] { pipe.send(Store::attach(name.str()).allocate(floats(16), Lifetime::Leased)); });
  pipe.receive();
  // Exited but not yet reaped: kill(pid, 0) still succeeds on it.
  size_t reclaimed = 0;
  for (int i = 0; i < 5000 && reclaimed == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1)); // until it has exited
    reclaimed = store.reclaimDeadLeases();
  }
  EXPECT_EQ(reclaimed, 1u);
  EXPECT_TRUE(store.list().empty());
  EXPECT_EQ(waitChild(holder), 0);
}

TEST(StoreAcrossProcesses, WritesAreSeenWithoutCopy) {
  SegmentName name;
  Store store = Store::create(name.str(), 4 * kMiB);
  const TensorId id =
      store.allocate(TensorMeta::contiguous(DType::Int64, {32, 32}), Lifetime::Pinned);
  const TensorView view = store.open(id);
  int64_t* data = view.as<int64_t>();
  for (int64_t i = 0; i < 1024; ++i) data[i] = i;

  const pid_t child = forkChild([&] {
    Store other = Store::attach(name.str());
    const TensorView theirs = other.open(id);
    int64_t* values = theirs.as<int64_t>();
    for (int64_t i = 0; i < 1024; ++i) {
      if (values[i] != i) throw Error(ErrorCode::Internal, "the child sees other bytes");
      values[i] = -3 * i;
    }
    other.release(id);
  });
  ASSERT_EQ(waitChild(child), 0);
  int64_t wrong = 0;
  for (int64_t i = 0; i < 1024; ++i) wrong += data[i] != -3 * i; // the same view, not reopened
  EXPECT_EQ(wrong, 0);
}

// Children allocate, open, list, release and free in a loop and are SIGKILLed
// at random moments, often while holding the store's lock. Every time, the
// parent must go on at once (no deadlock), and once the dead child's leases
// and pinned leftovers are gone, the segment must be exactly empty again.
TEST(StoreAcrossProcesses, SurvivesKillsInTheMiddleOfOperations) {
  SegmentName name;
  Store store = Store::create(name.str(), 16 * kMiB);
  const Usage empty = store.usage();
  std::mt19937 random(std::random_device{}());
  constexpr int kRounds = 30;
  for (int round = 0; round < kRounds; ++round) {
    Pipe pipe;
    const pid_t child = forkChild([&] {
      Store mine = Store::attach(name.str());
      for (uint64_t i = 0;; ++i) {
        const TensorId leased =
            mine.allocate(floats(1 + int64_t(i * 7919 % 20000)), Lifetime::Leased);
        mine.open(leased);
        const TensorId pinned =
            mine.allocate(floats(1 + int64_t(i * 104729 % 50000)), Lifetime::Pinned);
        mine.list();
        mine.release(leased);
        mine.free(pinned);
        if (i == 0) pipe.send(1);
      }
    });
    pipe.receive();
    std::this_thread::sleep_for(std::chrono::microseconds(random() % 3000));
    killChild(child);

    Watchdog watchdog(10);
    const TensorId id = store.allocate(floats(1000), Lifetime::Pinned);
    store.open(id).as<float>()[999] = 1.0f;
    store.free(id);
    store.reclaimDeadLeases();
    for (const TensorInfo& info : store.list()) {
      EXPECT_EQ(info.lifetime, Lifetime::Pinned) << "a leased tensor outlived its holder";
      EXPECT_TRUE(info.leaseHolders.empty());
      store.free(info.id);
    }
    const Usage now = store.usage();
    EXPECT_EQ(now.usedBytes, 0u);
    EXPECT_EQ(now.largestFreeBlock, empty.capacityBytes);
  }
  // The robust-lock path was taken, not just lucky timing.
  EXPECT_GE(store.usage().recoveries, 1u);
  RecordProperty("recoveries", int(store.usage().recoveries));
}

} // namespace
} // namespace kiln::shm
