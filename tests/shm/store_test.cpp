// The store within one process: layout, ids, leases, errors.
#include "kiln/shm/store.h"

#include <cstring>

#include <gtest/gtest.h>

#include "shm_fixture.h"

namespace kiln::shm {
namespace {

using test::errorOf;
using test::SegmentName;

constexpr size_t kMiB = size_t{1} << 20;

TensorMeta floats(int64_t n) {
  return TensorMeta::contiguous(DType::Float32, {n});
}

TEST(Store, SegmentNameIsShortStableAndPerRunDir) {
  const std::string name = Store::segmentNameFor("/tmp/kiln-1000/default");
  EXPECT_EQ(name.size(), 21u);
  EXPECT_LT(name.size(), 30u);
  EXPECT_EQ(name.rfind("kiln-", 0), 0u);
  EXPECT_EQ(name, Store::segmentNameFor("/tmp/kiln-1000/default"));
  EXPECT_EQ(name, Store::segmentNameFor("/tmp/kiln-1000/./default/"));
  EXPECT_NE(name, Store::segmentNameFor("/tmp/kiln-1000/other"));
}

TEST(Store, CreateAttachAndRemove) {
  SegmentName name;
  EXPECT_EQ(errorOf([&] { Store::attach(name.str()); }), ErrorCode::NotFound);
  Store created = Store::create(name.str(), 4 * kMiB);
  EXPECT_EQ(errorOf([&] { Store::create(name.str(), 4 * kMiB); }), ErrorCode::AlreadyExists);
  const TensorId id = created.allocate(floats(10), Lifetime::Pinned);

  Store attached = Store::attach(name.str());
  ASSERT_EQ(attached.list().size(), 1u);
  EXPECT_EQ(attached.list()[0].id, id);
  EXPECT_GT(attached.usage().capacityBytes, 3 * kMiB);

  EXPECT_TRUE(Store::removeSegment(name.str()));
  EXPECT_FALSE(Store::removeSegment(name.str()));
  // Mappings outlive the name.
  EXPECT_EQ(attached.open(id).meta, floats(10));
}

TEST(Store, KnowsWhenItsSegmentWasRemovedOrReplaced) {
  SegmentName name;
  Store first = Store::create(name.str(), 4 * kMiB);
  Store attached = Store::attach(name.str());
  EXPECT_TRUE(first.current());
  EXPECT_TRUE(attached.current());
  ASSERT_TRUE(Store::removeSegment(name.str()));
  EXPECT_FALSE(attached.current());
  Store second = Store::create(name.str(), 4 * kMiB); // the stack came back
  EXPECT_FALSE(first.current());
  EXPECT_FALSE(attached.current());
  EXPECT_TRUE(second.current());
  EXPECT_TRUE(Store::attach(name.str()).current());
}

TEST(Store, RejectsTinySegmentsAndBadNames) {
  SegmentName name;
  EXPECT_EQ(errorOf([&] { Store::create(name.str(), 4096); }), ErrorCode::InvalidArgument);
  EXPECT_EQ(errorOf([] { Store::attach("a/b"); }), ErrorCode::InvalidArgument);
  EXPECT_EQ(errorOf([] { Store::attach(""); }), ErrorCode::InvalidArgument);
}

TEST(Store, OpensOfOneIdShareThePointer) {
  SegmentName name;
  Store store = Store::create(name.str(), 4 * kMiB);
  const TensorId id = store.allocate(floats(256), Lifetime::Pinned);
  const TensorView first = store.open(id);
  const TensorView second = store.open(id);
  EXPECT_EQ(first.data, second.data);
  first.as<float>()[7] = 42.5f;
  EXPECT_EQ(second.as<float>()[7], 42.5f);
  EXPECT_EQ(first.bytes, 256u * 4);
  // One lease per process, however many opens.
  EXPECT_EQ(store.list()[0].leaseHolders, std::vector<pid_t>{getpid()});
}

TEST(Store, StorageIsAlignedAndViewStartsAtStorageOffset) {
  SegmentName name;
  Store store = Store::create(name.str(), 4 * kMiB);
  store.allocate(TensorMeta{DType::UInt8, {3}, {1}, 0}, Lifetime::Pinned);
  const TensorMeta meta{DType::Float32, {4, 2}, {1, 4}, 3}; // transposed, offset 3
  const TensorView view = store.open(store.allocate(meta, Lifetime::Pinned));
  EXPECT_EQ(view.meta, meta);
  const std::byte* storage = view.data - 3 * sizeof(float);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(storage) % 64, 0u);
  EXPECT_EQ(view.bytes, (3 + 8) * sizeof(float) - 3 * sizeof(float));
}

TEST(Store, IdsAreNeverReused) {
  SegmentName name;
  Store store = Store::create(name.str(), 4 * kMiB);
  const TensorId first = store.allocate(floats(4), Lifetime::Pinned);
  store.free(first);
  const TensorId second = store.allocate(floats(4), Lifetime::Pinned);
  EXPECT_GT(second, first);
  // A second handle on the segment counts from the same place.
  EXPECT_GT(Store::attach(name.str()).allocate(floats(4), Lifetime::Pinned), second);
}

TEST(Store, LeasedTensorGoesWithItsLastLease) {
  SegmentName name;
  Store store = Store::create(name.str(), 4 * kMiB);
  const size_t freeBytes = store.usage().freeBytes;
  const TensorId leased = store.allocate(floats(1000), Lifetime::Leased);
  const TensorId pinned = store.allocate(floats(1000), Lifetime::Pinned);
  EXPECT_EQ(store.usage().freeBytes, freeBytes - 2 * size_t{4032});

  store.release(pinned);
  store.release(leased);
  const auto left = store.list();
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].id, pinned);
  EXPECT_EQ(left[0].lifetime, Lifetime::Pinned);
  EXPECT_TRUE(left[0].leaseHolders.empty());
  EXPECT_EQ(errorOf([&] { store.open(leased); }), ErrorCode::NotFound);

  store.free(pinned);
  EXPECT_EQ(store.usage().freeBytes, freeBytes);
  EXPECT_EQ(store.usage().tensors, 0u);
}

TEST(Store, FreedSpaceIsReused) {
  SegmentName name;
  Store store = Store::create(name.str(), 4 * kMiB);
  const int64_t quarter = int64_t(store.usage().capacityBytes / 4 / sizeof(float)) / 16 * 16;
  std::vector<TensorId> ids;
  ids.reserve(4);
  for (int i = 0; i < 4; ++i) ids.push_back(store.allocate(floats(quarter), Lifetime::Pinned));
  EXPECT_EQ(errorOf([&] { store.allocate(floats(quarter), Lifetime::Pinned); }),
            ErrorCode::ResourceExhausted);
  store.free(ids[1]);
  const TensorView view = store.open(store.allocate(floats(quarter), Lifetime::Pinned));
  std::memset(view.data, 0xab, view.bytes); // the whole extent is ours to write
  EXPECT_EQ(store.usage().tensors, 4u);
}

TEST(Store, ErrorsSayWhatIsWrong) {
  SegmentName name;
  Store store = Store::create(name.str(), 4 * kMiB);
  try {
    store.allocate(floats(int64_t(8 * kMiB)), Lifetime::Pinned);
    FAIL() << "allocated 32 MiB in a 4 MiB segment";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::ResourceExhausted);
    EXPECT_NE(e.message().find(std::to_string(store.usage().freeBytes)), std::string::npos)
        << e.message();
  }
  EXPECT_EQ(errorOf([&] { store.free(12345); }), ErrorCode::NotFound);
  EXPECT_EQ(errorOf([&] { store.open(12345); }), ErrorCode::NotFound);
  EXPECT_EQ(errorOf([&] { store.release(12345); }), ErrorCode::NotFound);
  EXPECT_EQ(errorOf([&] {
              store.allocate(TensorMeta{DType::Float32, {-4}, {1}, 0}, Lifetime::Pinned);
            }),
            ErrorCode::InvalidArgument);
  EXPECT_EQ(errorOf([&] {
              store.allocate(TensorMeta::contiguous(DType::Int8, std::vector<int64_t>(17, 1)),
                             Lifetime::Pinned);
            }),
            ErrorCode::InvalidArgument);
  EXPECT_EQ(errorOf([&] { store.allocate(floats(4), Lifetime(7)); }), ErrorCode::InvalidArgument);
  EXPECT_TRUE(store.list().empty());
}

TEST(Store, TableFullIsResourceExhausted) {
  SegmentName name;
  Store store = Store::create(name.str(), 1 * kMiB);
  const size_t maxTensors = store.usage().maxTensors;
  for (size_t i = 0; i < maxTensors; ++i) store.allocate(floats(1), Lifetime::Pinned);
  EXPECT_EQ(errorOf([&] { store.allocate(floats(1), Lifetime::Pinned); }),
            ErrorCode::ResourceExhausted);
}

TEST(Store, MovedStoreKeepsWorking) {
  SegmentName name;
  Store first = Store::create(name.str(), 4 * kMiB);
  const TensorId id = first.allocate(floats(4), Lifetime::Pinned);
  Store second = std::move(first);
  EXPECT_EQ(second.open(id).id, id);
  EXPECT_EQ(second.name(), name.str());
}

} // namespace
} // namespace kiln::shm
