#include "kiln/shm/store.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>

#include <boost/interprocess/indexes/iset_index.hpp>
#include <boost/interprocess/managed_shared_memory.hpp>
#include <boost/interprocess/mem_algo/rbtree_best_fit.hpp>
#include <boost/interprocess/sync/mutex_family.hpp>
#include <fmt/format.h>

#include "kiln/common/error.h"
#include "kiln/common/log.h"
#include "kiln/common/process.h"
#include "layout.h"
#include "robust_mutex.h"

namespace kiln::shm {

namespace bip = boost::interprocess;

namespace {

// The segment manager takes no lock of its own (Boost's mutexes are not robust).
// It is only changed while create() builds the segment, before any other
// process can see it; afterwards every change goes through Header::mutex.
using Segment = bip::basic_managed_shared_memory<char, bip::rbtree_best_fit<bip::null_mutex_family>,
                                                 bip::iset_index>;

constexpr size_t kMinSegmentBytes = size_t{1} << 20;
constexpr size_t kBytesPerSlot = size_t{64} << 10; // table size: one slot per 64 KiB
constexpr size_t kMinSlots = 64;
constexpr size_t kMaxSlots = 65536;
constexpr const char* kHeaderName = "kiln.shm.header";
constexpr const char* kSlotsName = "kiln.shm.slots";
constexpr const char* kShmDir = "/dev/shm/"; // where glibc's shm_open keeps its names

void checkName(const std::string& name) {
  if (name.empty() || name.size() > 200 || name.find('/') != std::string::npos)
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("bad segment name '{}' (1 to 200 characters, no '/')", name));
}

bool segmentExists(const std::string& name) {
  const int fd = shm_open(("/" + name).c_str(), O_RDONLY | O_CLOEXEC, 0);
  if (fd >= 0) close(fd);
  return fd >= 0 || errno != ENOENT;
}

uint64_t roundUp(uint64_t bytes) {
  return (bytes + kAlignment - 1) / kAlignment * kAlignment;
}

struct Extent {
  uint64_t offset;
  uint64_t bytes;
};

// Lays out header, slot table and arena in a fresh segment nobody else sees yet.
void build(Segment& segment, size_t bytes) {
  Header* header = segment.construct<Header>(kHeaderName)();
  const size_t slotCount = std::clamp(bytes / kBytesPerSlot, kMinSlots, kMaxSlots);
  Slot* slots = segment.construct<Slot>(kSlotsName)[slotCount]();
  const size_t arenaBytes = (segment.get_free_memory() - 4096) / kAlignment * kAlignment;
  void* arena = segment.allocate_aligned(arenaBytes, kAlignment);
  initRobustMutex(header->mutex);
  header->slotsHandle = segment.get_handle_from_address(slots);
  header->slotCount = slotCount;
  header->arenaHandle = segment.get_handle_from_address(arena);
  header->arenaBytes = arenaBytes;
  header->layoutVersion = kLayoutVersion;
  header->slotSize = sizeof(Slot);
  header->magic = kMagic;
}

} // namespace

class Store::Impl {
public:
  Impl(std::string name, Segment segment)
      : name_(std::move(name)), segment_(std::move(segment)), inode_(inodeOf(name_)) {
    header_ = segment_.find<Header>(kHeaderName).first;
    if (!header_)
      throw Error(ErrorCode::Malformed, fmt::format("segment {} holds no kiln store", name_));
    if (header_->magic != kMagic || header_->layoutVersion != kLayoutVersion ||
        header_->slotSize != sizeof(Slot))
      throw Error(ErrorCode::Unsupported,
                  fmt::format("segment {} was made by an incompatible kiln build "
                              "(layout version {}, this build reads {})",
                              name_, header_->layoutVersion, kLayoutVersion));
    slots_ = static_cast<Slot*>(segment_.get_address_from_handle(header_->slotsHandle));
    slotCount_ = header_->slotCount;
    arena_ = static_cast<std::byte*>(segment_.get_address_from_handle(header_->arenaHandle));
  }

  const std::string& name() const { return name_; }

  // The name's file in /dev/shm; 0 when the name is gone.
  static ino_t inodeOf(const std::string& name) {
    struct stat info {};
    return stat((std::string(kShmDir) + name).c_str(), &info) == 0 ? info.st_ino : 0;
  }
  bool current() const { return inode_ != 0 && inodeOf(name_) == inode_; }

  // Runs `f` holding the store's lock, first repairing after a holder that died.
  template <class F> auto locked(F&& f) -> decltype(f()) {
    RobustLock lock(header_->mutex);
    if (lock.ownerDied()) repair();
    return f();
  }

  TensorId allocate(const TensorMeta& meta, Lifetime lifetime, uint64_t bytes) {
    Slot* slot = freeSlot();
    std::optional<uint64_t> offset = place(bytes);
    if (!slot || !offset) {
      reclaimDeadLeases();
      slot = freeSlot();
      offset = place(bytes);
    }
    if (!slot)
      throw Error(
          ErrorCode::ResourceExhausted,
          fmt::format("segment {} already holds its maximum of {} tensors", name_, slotCount_));
    if (!offset) {
      const Usage now = usage();
      throw Error(ErrorCode::ResourceExhausted,
                  fmt::format("segment {} has no room for {} bytes: {} of {} bytes free, largest "
                              "free block {} bytes",
                              name_, bytes, now.freeBytes, now.capacityBytes,
                              now.largestFreeBlock));
    }
    reserve(*offset, bytes);
    // The id is taken (and never handed out again) before the slot shows it.
    const TensorId id = header_->nextId.fetch_add(1);
    slot->offset = *offset;
    slot->bytes = bytes;
    slot->lifetime = uint32_t(lifetime);
    slot->dtype = int32_t(meta.dtype);
    slot->ndim = int32_t(meta.sizes.size());
    slot->storageOffset = meta.storageOffset;
    std::copy(meta.sizes.begin(), meta.sizes.end(), slot->sizes);
    std::copy(meta.strides.begin(), meta.strides.end(), slot->strides);
    std::fill(std::begin(slot->leases), std::end(slot->leases), 0);
    slot->leases[0] = getpid();
    slot->id.store(id, std::memory_order_release);
    return id;
  }

  TensorView open(TensorId id) {
    Slot& slot = find(id);
    addLease(slot, getpid());
    TensorView view{id, meta(slot), nullptr, 0};
    const size_t skipped = size_t(view.meta.storageOffset) * elementSize(view.meta.dtype);
    view.data = arena_ + slot.offset + skipped;
    view.bytes = view.meta.storageBytes() - skipped;
    return view;
  }

  void release(TensorId id) {
    Slot& slot = find(id);
    for (pid_t& holder : slot.leases)
      if (holder == getpid()) holder = 0;
    if (Lifetime(slot.lifetime) == Lifetime::Leased && !hasLease(slot)) clear(slot);
  }

  void free(TensorId id) { clear(find(id)); }

  std::vector<TensorInfo> list() const {
    std::vector<TensorInfo> infos;
    for (const Slot& slot : live()) {
      TensorInfo info{slot.id.load(), meta(slot), Lifetime(slot.lifetime), slot.bytes, {}};
      for (const pid_t holder : slot.leases)
        if (holder != 0) info.leaseHolders.push_back(holder);
      infos.push_back(std::move(info));
    }
    std::sort(infos.begin(), infos.end(),
              [](const TensorInfo& a, const TensorInfo& b) { return a.id < b.id; });
    return infos;
  }

  size_t reclaimDeadLeases() {
    std::map<pid_t, bool> alive;
    size_t dropped = 0;
    for (Slot& slot : live()) {
      for (pid_t& holder : slot.leases) {
        if (holder == 0) continue;
        auto known = alive.find(holder);
        if (known == alive.end()) known = alive.emplace(holder, processAlive(holder)).first;
        if (!known->second) {
          holder = 0;
          ++dropped;
        }
      }
      if (Lifetime(slot.lifetime) == Lifetime::Leased && !hasLease(slot)) clear(slot);
    }
    return dropped;
  }

  Usage usage() const {
    Usage usage;
    usage.capacityBytes = header_->arenaBytes;
    usage.maxTensors = slotCount_;
    usage.recoveries = header_->recoveries;
    uint64_t cursor = 0;
    for (const Extent& extent : extents()) {
      usage.usedBytes += extent.bytes;
      usage.largestFreeBlock = std::max<size_t>(usage.largestFreeBlock, extent.offset - cursor);
      cursor = extent.offset + extent.bytes;
      ++usage.tensors;
    }
    usage.largestFreeBlock = std::max<size_t>(usage.largestFreeBlock, header_->arenaBytes - cursor);
    usage.freeBytes = usage.capacityBytes - usage.usedBytes;
    return usage;
  }

private:
  // The holder of the lock died. Each change it could have been making is
  // published by one store, so the table is whole; the one thing it may have
  // left half done is a release that dropped the last lease of a Leased tensor
  // without freeing it.
  void repair() {
    ++header_->recoveries;
    log().warn("shm: a process died holding the lock of segment {}; recovered", name_);
    for (Slot& slot : live())
      if (Lifetime(slot.lifetime) == Lifetime::Leased && !hasLease(slot)) clear(slot);
  }

  std::vector<std::reference_wrapper<Slot>> live() const {
    std::vector<std::reference_wrapper<Slot>> slots;
    for (size_t i = 0; i < slotCount_; ++i)
      if (slots_[i].id.load(std::memory_order_acquire) != 0) slots.push_back(slots_[i]);
    return slots;
  }

  Slot& find(TensorId id) const {
    for (size_t i = 0; id != 0 && i < slotCount_; ++i)
      if (slots_[i].id.load(std::memory_order_acquire) == id) return slots_[i];
    throw Error(ErrorCode::NotFound, fmt::format("no tensor {} in segment {}", id, name_));
  }

  Slot* freeSlot() const {
    for (size_t i = 0; i < slotCount_; ++i)
      if (slots_[i].id.load(std::memory_order_acquire) == 0) return &slots_[i];
    return nullptr;
  }

  static void clear(Slot& slot) { slot.id.store(0, std::memory_order_release); }

  static bool hasLease(const Slot& slot) {
    return std::any_of(std::begin(slot.leases), std::end(slot.leases),
                       [](pid_t holder) { return holder != 0; });
  }

  void addLease(Slot& slot, pid_t pid) {
    pid_t* empty = nullptr;
    for (pid_t& holder : slot.leases) {
      if (holder == pid) return;
      if (holder == 0 && !empty) empty = &holder;
    }
    if (!empty) {
      for (pid_t& holder : slot.leases)
        if (!processAlive(holder)) holder = 0;
      empty = std::find(std::begin(slot.leases), std::end(slot.leases), 0);
    }
    if (empty == std::end(slot.leases))
      throw Error(
          ErrorCode::ResourceExhausted,
          fmt::format("tensor {} already has {} lease holders", slot.id.load(), kMaxLeases));
    *empty = pid;
  }

  static TensorMeta meta(const Slot& slot) {
    TensorMeta meta;
    meta.dtype = DType(slot.dtype);
    meta.sizes.assign(slot.sizes, slot.sizes + slot.ndim);
    meta.strides.assign(slot.strides, slot.strides + slot.ndim);
    meta.storageOffset = slot.storageOffset;
    return meta;
  }

  std::vector<Extent> extents() const {
    std::vector<Extent> extents;
    for (const Slot& slot : live()) extents.push_back({slot.offset, slot.bytes});
    std::sort(extents.begin(), extents.end(),
              [](const Extent& a, const Extent& b) { return a.offset < b.offset; });
    return extents;
  }

  // First fit: the lowest arena offset with `bytes` free.
  std::optional<uint64_t> place(uint64_t bytes) const {
    uint64_t cursor = 0;
    for (const Extent& extent : extents()) {
      if (extent.offset >= cursor && extent.offset - cursor >= bytes) return cursor;
      cursor = std::max(cursor, extent.offset + extent.bytes);
    }
    if (header_->arenaBytes - cursor >= bytes) return cursor;
    return std::nullopt;
  }

  // Backs the range with memory now, so that a full /dev/shm is an error here
  // and not a SIGBUS in whichever process first touches the page. Kernels
  // before 5.14 lack MADV_POPULATE_WRITE; there the pages come on first touch.
  void reserve(uint64_t offset, uint64_t bytes) {
    const size_t page = size_t(sysconf(_SC_PAGESIZE));
    std::byte* begin = arena_ + offset;
    const size_t before = reinterpret_cast<uintptr_t>(begin) % page;
    const size_t length = (before + bytes + page - 1) / page * page;
    if (madvise(begin - before, length, MADV_POPULATE_WRITE) == 0 || errno == EINVAL) return;
    const int error = errno;
    throw Error(ErrorCode::ResourceExhausted,
                fmt::format("no memory behind segment {} for {} bytes ({}); is /dev/shm full?",
                            name_, bytes, std::strerror(error)));
  }

  std::string name_;
  Segment segment_;
  Header* header_ = nullptr;
  Slot* slots_ = nullptr;
  size_t slotCount_ = 0;
  std::byte* arena_ = nullptr;
  ino_t inode_ = 0; // of the segment mapped here, read when it was opened
};

Store Store::create(const std::string& segmentName, size_t bytes) {
  checkName(segmentName);
  if (bytes < kMinSegmentBytes)
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("segment {} of {} bytes is too small (at least {})", segmentName, bytes,
                            kMinSegmentBytes));
  if (segmentExists(segmentName))
    throw Error(ErrorCode::AlreadyExists, fmt::format("segment {} already exists", segmentName));
  // Built under a private name, then linked to its own: no process can attach
  // to a half-built store, and of two creators exactly one wins.
  const std::string building = fmt::format("{}.building-{}", segmentName, getpid());
  bip::shared_memory_object::remove(building.c_str());
  struct RemoveBuilding {
    const std::string& name;
    ~RemoveBuilding() { bip::shared_memory_object::remove(name.c_str()); }
  } removeBuilding{building};
  try {
    // 0600: the tensors are the user's data, like the run dir they belong to.
    Segment segment(bip::create_only, building.c_str(), bytes, nullptr, bip::permissions(0600));
    build(segment, bytes);
    if (link((kShmDir + building).c_str(), (kShmDir + segmentName).c_str()) != 0) {
      if (errno == EEXIST)
        throw Error(ErrorCode::AlreadyExists,
                    fmt::format("segment {} already exists", segmentName));
      throwSystemError("publishing segment " + segmentName);
    }
    return Store(std::make_unique<Impl>(segmentName, std::move(segment)));
  } catch (const bip::interprocess_exception& e) {
    throw Error(ErrorCode::Io, fmt::format("creating segment {}: {}", segmentName, e.what()));
  } catch (const std::bad_alloc&) {
    throw Error(ErrorCode::Internal, fmt::format("laying out segment {}", segmentName));
  }
}

Store Store::attach(const std::string& segmentName) {
  checkName(segmentName);
  try {
    Segment segment(bip::open_only, segmentName.c_str());
    return Store(std::make_unique<Impl>(segmentName, std::move(segment)));
  } catch (const bip::interprocess_exception& e) {
    if (e.get_error_code() == bip::not_found_error)
      throw Error(ErrorCode::NotFound,
                  fmt::format("shared-memory segment {} does not exist (is the stack running?)",
                              segmentName));
    throw Error(ErrorCode::Io, fmt::format("attaching segment {}: {}", segmentName, e.what()));
  }
}

bool Store::removeSegment(const std::string& segmentName) {
  checkName(segmentName);
  return bip::shared_memory_object::remove(segmentName.c_str());
}

std::string Store::segmentNameFor(const std::string& runDir) {
  if (runDir.empty()) throw Error(ErrorCode::InvalidArgument, "empty run dir");
  std::string path = std::filesystem::absolute(runDir).lexically_normal().string();
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  uint64_t hash = 0xcbf29ce484222325; // FNV-1a, 64 bits: stable across builds and languages
  for (const unsigned char c : path) hash = (hash ^ c) * 0x100000001b3;
  return fmt::format("kiln-{:016x}", hash);
}

Store::Store(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Store::Store(Store&&) noexcept = default;
Store& Store::operator=(Store&&) noexcept = default;
Store::~Store() = default;

Store::Impl& Store::impl() const {
  if (!impl_) throw Error(ErrorCode::Internal, "use of a moved-from shm::Store");
  return *impl_;
}

bool Store::current() const {
  return impl().current();
}

const std::string& Store::name() const {
  return impl().name();
}

TensorId Store::allocate(const TensorMeta& meta, Lifetime lifetime) {
  const size_t bytes = meta.storageBytes();
  if (meta.sizes.size() > size_t(kMaxDims))
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("tensor meta: {} dims, at most {}", meta.sizes.size(), kMaxDims));
  if (lifetime != Lifetime::Pinned && lifetime != Lifetime::Leased)
    throw Error(ErrorCode::InvalidArgument, fmt::format("unknown lifetime {}", int(lifetime)));
  Impl& store = impl();
  return store.locked(
      [&] { return store.allocate(meta, lifetime, roundUp(std::max<size_t>(bytes, 1))); });
}

TensorView Store::open(TensorId id) {
  Impl& store = impl();
  return store.locked([&] { return store.open(id); });
}

void Store::release(TensorId id) {
  Impl& store = impl();
  store.locked([&] { store.release(id); });
}

void Store::free(TensorId id) {
  Impl& store = impl();
  store.locked([&] { store.free(id); });
}

std::vector<TensorInfo> Store::list() const {
  Impl& store = impl();
  return store.locked([&] { return store.list(); });
}

size_t Store::reclaimDeadLeases() {
  Impl& store = impl();
  return store.locked([&] { return store.reclaimDeadLeases(); });
}

Usage Store::usage() const {
  Impl& store = impl();
  return store.locked([&] { return store.usage(); });
}

std::string_view lifetimeName(Lifetime lifetime) {
  switch (lifetime) {
  case Lifetime::Pinned: return "pinned";
  case Lifetime::Leased: return "leased";
  }
  return "?";
}

} // namespace kiln::shm
