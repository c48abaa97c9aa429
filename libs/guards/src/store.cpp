#include "kiln/guards/store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <capnp/message.h>
#include <capnp/serialize.h>

#include "kiln/common/error.h"
#include "kiln/common/version.h"
#include "kiln/common/log.h"
#include "kiln/guards/input_frontend.h"
#include "kiln/guards/wire.h"

namespace kiln::guards {
namespace {

// A function's file: magic, the hash of the kiln build that wrote it, payload
// length, payload checksum, then the payload (a StoredFunction message). A file
// whose length or checksum does not match is torn or corrupt, and is never read
// further; one of another build is skipped: its entries were traced by another
// tracer (as the codegen cache keys artifacts by build).
constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'G', 'R', 'D', '2'};
constexpr size_t kHeader = sizeof kMagic + 24;
constexpr const char* kExtension = ".kguard";
constexpr uint64_t kMaxFileWords = uint64_t{1} << 27; // 1 GiB

uint64_t fnv1a(std::string_view bytes, uint64_t hash = 0xcbf29ce484222325ULL) {
  for (unsigned char c : bytes) {
    hash ^= c;
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

std::string mapKey(const FunctionKey& f) {
  return f.module + '\0' + f.qualname + '\0' + f.codeHash;
}

std::string fileName(const FunctionKey& f) {
  const std::string key = mapKey(f);
  char name[33];
  std::snprintf(name, sizeof name, "%016llx%016llx", static_cast<unsigned long long>(fnv1a(key)),
                static_cast<unsigned long long>(fnv1a(key, 0x84222325cbf29ce4ULL)));
  return name;
}

void makeDirs(const std::string& path) {
  for (size_t at = 1; at <= path.size(); ++at) {
    if (at != path.size() && path[at] != '/') continue;
    const std::string prefix = path.substr(0, at);
    if (::mkdir(prefix.c_str(), 0700) != 0 && errno != EEXIST)
      throw Error(ErrorCode::Io,
                  "guards store: cannot create " + prefix + ": " + std::strerror(errno));
  }
}

// Writes `bytes` to `path` whole or not at all: a temporary file, synced, renamed over it.
void writeAtomically(const std::string& path, const std::string& bytes) {
  const std::string temp = path + ".tmp" + std::to_string(::getpid());
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) throwSystemError("guards store: open " + temp);
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int saved = errno;
      ::close(fd);
      ::unlink(temp.c_str());
      errno = saved;
      throwSystemError("guards store: write " + temp);
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    ::unlink(temp.c_str());
    throwSystemError("guards store: sync " + temp);
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    ::unlink(temp.c_str());
    throwSystemError("guards store: rename " + temp);
  }
}

bool sameInputs(const std::vector<FrameInput>& a, const std::vector<FrameInput>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(),
                    [](const FrameInput& x, const FrameInput& y) {
                      return x.source == y.source && x.isTensor == y.isTensor &&
                             x.isFloat == y.isFloat && x.sizes == y.sizes && x.value == y.value &&
                             x.number.has_value() == y.number.has_value() &&
                             (!x.number || Constant{*x.number} == Constant{*y.number});
                    });
}

const std::vector<CompiledEntry> kNoEntries;

} // namespace

std::string defaultStoreDir() {
  if (const char* dir = std::getenv("KILN_CACHE_DIR"); dir && *dir)
    return std::string(dir) + "/guards";
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg)
    return std::string(xdg) + "/kiln/guards";
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : "/tmp") + "/.cache/kiln/guards";
}

EntryStore::EntryStore(std::string dir, uint32_t cacheLimit)
    : dir_(std::move(dir)), cacheLimit_(cacheLimit) {
  if (dir_.empty()) return;
  makeDirs(dir_);
  load();
}

const EntryStore::Function* EntryStore::find(const FunctionKey& function) const {
  auto it = functions_.find(mapKey(function));
  return it == functions_.end() ? nullptr : &it->second;
}

EntryStore::Function& EntryStore::get(const FunctionKey& function) {
  auto [it, made] = functions_.try_emplace(mapKey(function));
  if (made) it->second.key = function;
  return it->second;
}

LookupResult EntryStore::lookup(const FunctionKey& function, const CallInput& call) const {
  LookupResult out;
  const Function* f = find(function);
  if (!f) {
    out.runEagerly = cacheLimit_ == 0;
    return out;
  }
  for (size_t i = 0; i < f->entries.size(); ++i) {
    std::optional<std::string> failure = firstFailure(f->programs[i], call);
    if (!failure) {
      out.hit = &f->entries[i];
      out.reasons.clear();
      break;
    }
    out.reasons.emplace_back(f->entries[i].id, std::move(*failure));
  }
  if (!out.hit) out.runEagerly = f->entries.size() >= cacheLimit_;
  out.frame = f->frame;
  return out;
}

void EntryStore::add(Function& f, CompiledEntry entry) {
  const uint64_t id = entry.id;
  entry.id = 0;
  std::string bytes = toBytes(entry);
  entry.id = id;
  f.programs.push_back(compile(entry.guards));
  f.bytes.push_back(std::move(bytes));
  f.entries.push_back(std::move(entry));
}

InsertResult EntryStore::insert(const FunctionKey& function, CompiledEntry entry) {
  entry.id = 0;
  const std::string bytes = toBytes(entry);
  if (const Function* known = find(function))
    for (size_t i = 0; i < known->bytes.size(); ++i)
      if (known->bytes[i] == bytes) return {known->entries[i].id, false, true};
  if (const Function* known = find(function); (known ? known->entries.size() : 0) >= cacheLimit_)
    return {0, true, false};
  Program program =
      compile(entry.guards); // before anything changes: a set that cannot compile stores nothing
  Function& f = get(function);
  entry.id = f.nextId++;
  const uint64_t id = entry.id;
  f.programs.push_back(std::move(program));
  f.bytes.push_back(bytes);
  f.entries.push_back(std::move(entry));
  save(f);
  return {id, false, false};
}

const std::vector<CompiledEntry>& EntryStore::entries(const FunctionKey& function) const {
  const Function* f = find(function);
  return f ? f->entries : kNoEntries;
}

FrameState EntryStore::frame(const FunctionKey& function) const {
  const Function* f = find(function);
  return f ? f->frame : FrameState{};
}

size_t EntryStore::entryCount() const {
  size_t n = 0;
  for (const auto& [key, f] : functions_) n += f.entries.size();
  return n;
}

ObserveResult EntryStore::observe(const FunctionKey& function, const std::vector<FrameInput>& seen,
                                  const std::optional<JobMember>& job) {
  if (job && (job->worldSize == 0 || job->rank >= job->worldSize))
    throw Error(ErrorCode::InvalidArgument,
                "guards: job '" + job->job + "': rank " + std::to_string(job->rank) +
                    " is not within a world of " + std::to_string(job->worldSize));
  ObserveResult out;
  if (!job || job->job.empty()) {
    Function& f = get(function);
    const size_t known = f.frame.inputs.size();
    out.changed = f.frame.observe(seen);
    out.frame = f.frame;
    if (out.changed || f.frame.inputs.size() != known) save(f); // a repeat writes nothing
    return out;
  }
  // Checked before the function is made, so a refused request changes nothing.
  if (const Function* known = find(function)) {
    auto it = known->rounds.find({job->job, job->round});
    if (it != known->rounds.end() && it->second.worldSize != job->worldSize)
      throw Error(ErrorCode::InvalidArgument, "guards: job '" + job->job + "' round " +
                                                  std::to_string(job->round) + " has a world of " +
                                                  std::to_string(it->second.worldSize) + ", not " +
                                                  std::to_string(job->worldSize));
  }
  Function& f = get(function);
  auto [it, began] = f.rounds.try_emplace({job->job, job->round});
  Round& round = it->second;
  if (began) {
    round.worldSize = job->worldSize;
    round.base = f.frame;
    round.order = f.nextOrder++;
  }
  if (round.decided) {
    out.frame = *round.decided;
    return out;
  }
  auto report = round.reports.find(job->rank);
  const bool news = report == round.reports.end() || !sameInputs(report->second, seen);
  round.reports[job->rank] = seen;
  if (round.reports.size() == round.worldSize) {
    std::vector<std::vector<FrameInput>> byRank;
    for (const auto& [rank, inputs] : round.reports) byRank.push_back(inputs);
    round.decided = merge(round.base, byRank);
    for (const auto& inputs : byRank) out.changed = f.frame.observe(inputs) || out.changed;
    out.frame = *round.decided;
    round.reports.clear(); // the decision is all a later report needs
  } else {
    for (uint32_t rank = 0; rank < round.worldSize; ++rank)
      if (!round.reports.count(rank)) out.missing.push_back(rank);
  }
  if (began) dropOldRounds(f);
  if (began || news || out.frame) save(f);
  return out;
}

void EntryStore::dropOldRounds(Function& f) {
  while (f.rounds.size() > kMaxRounds) {
    auto oldest = f.rounds.end();
    for (auto it = f.rounds.begin(); it != f.rounds.end(); ++it) {
      const bool better = oldest == f.rounds.end() ||
                          (it->second.decided && !oldest->second.decided) ||
                          (bool(it->second.decided) == bool(oldest->second.decided) &&
                           it->second.order < oldest->second.order);
      if (better) oldest = it;
    }
    f.rounds.erase(oldest);
  }
}

FrameState EntryStore::mark(const FunctionKey& function, const std::string& dim, bool dynamic) {
  if (dim.empty()) throw Error(ErrorCode::InvalidArgument, "guards: mark of an empty dim");
  Function& f = get(function);
  f.frame.mark(dim, dynamic);
  save(f);
  return f.frame;
}

std::string EntryStore::pathOf(const FunctionKey& function) const {
  return dir_.empty() ? std::string() : dir_ + "/" + fileName(function) + kExtension;
}

// ---- Persistence ----------------------------------------------------------

std::string EntryStore::encode(const Function& f) const {
  capnp::MallocMessageBuilder message;
  auto out = message.initRoot<schema::StoredFunction>();
  toWire(f.key, out.initFunction());
  auto entries = out.initEntries(static_cast<unsigned>(f.entries.size()));
  for (unsigned k = 0; k < entries.size(); ++k) toWire(f.entries[k], entries[k]);
  toWire(f.frame, out.initFrame());
  out.setNextId(f.nextId);
  std::vector<const std::pair<const std::pair<std::string, uint64_t>, Round>*> rounds;
  for (const auto& r : f.rounds) rounds.push_back(&r);
  std::sort(rounds.begin(), rounds.end(),
            [](auto* a, auto* b) { return a->second.order < b->second.order; });
  auto stored = out.initRounds(static_cast<unsigned>(rounds.size()));
  for (unsigned k = 0; k < stored.size(); ++k) {
    const auto& [id, round] = *rounds[k];
    stored[k].setJob(id.first);
    stored[k].setRound(id.second);
    stored[k].setWorldSize(round.worldSize);
    toWire(round.base, stored[k].initBase());
    auto reports = stored[k].initReports(static_cast<unsigned>(round.reports.size()));
    unsigned r = 0;
    for (const auto& [rank, inputs] : round.reports) {
      reports[r].setRank(rank);
      toWire(inputs, reports[r].initObservation().initInputs(static_cast<unsigned>(inputs.size())));
      ++r;
    }
    stored[k].setDecided(bool(round.decided));
    if (round.decided) toWire(*round.decided, stored[k].initFrame());
  }
  kj::Array<capnp::word> words = capnp::messageToFlatArray(message);
  auto bytes = words.asBytes();
  const std::string payload(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
  std::string file(kMagic, sizeof kMagic);
  const uint64_t build = fnv1a(buildId()), length = payload.size(), sum = fnv1a(payload);
  file.append(reinterpret_cast<const char*>(&build), 8);
  file.append(reinterpret_cast<const char*>(&length), 8);
  file.append(reinterpret_cast<const char*>(&sum), 8);
  return file + payload;
}

EntryStore::Function EntryStore::decode(const std::string& file) const {
  uint64_t build = 0, length = 0, sum = 0;
  if (file.size() < kHeader || std::memcmp(file.data(), kMagic, sizeof kMagic) != 0)
    throw Error(ErrorCode::Malformed, "not a guards store file of this kiln version");
  std::memcpy(&build, file.data() + sizeof kMagic, 8);
  std::memcpy(&length, file.data() + sizeof kMagic + 8, 8);
  std::memcpy(&sum, file.data() + sizeof kMagic + 16, 8);
  if (build != fnv1a(buildId()))
    throw Error(ErrorCode::Malformed, "written by another kiln build (not " + std::string(buildId()) + ")");
  const std::string_view payload = std::string_view(file).substr(kHeader);
  if (length != payload.size())
    throw Error(ErrorCode::Malformed, "torn: " + std::to_string(payload.size()) + " of " +
                                          std::to_string(length) + " bytes");
  if (fnv1a(payload) != sum) throw Error(ErrorCode::Malformed, "checksum mismatch");
  if (payload.size() % sizeof(capnp::word) != 0)
    throw Error(ErrorCode::Malformed, "not whole words");
  try {
    kj::Array<capnp::word> words = kj::heapArray<capnp::word>(payload.size() / sizeof(capnp::word));
    std::memcpy(words.begin(), payload.data(), payload.size());
    capnp::ReaderOptions options;
    options.traversalLimitInWords = kMaxFileWords;
    options.nestingLimit = 2 * kMaxInputDepth + 16;
    capnp::FlatArrayMessageReader message(words, options);
    auto in = message.getRoot<schema::StoredFunction>();
    Function f;
    f.key = fromWire(in.getFunction());
    for (auto e : in.getEntries()) add(f, fromWire(e));
    f.frame = fromWire(in.getFrame());
    f.nextId = in.getNextId();
    for (const CompiledEntry& e : f.entries)
      if (e.id >= f.nextId)
        throw Error(ErrorCode::Malformed, "entry id " + std::to_string(e.id) + " not below nextId");
    for (auto r : in.getRounds()) {
      Round round;
      round.worldSize = r.getWorldSize();
      if (round.worldSize == 0) throw Error(ErrorCode::Malformed, "a round of no ranks");
      round.base = fromWire(r.getBase());
      for (auto report : r.getReports()) {
        if (report.getRank() >= round.worldSize)
          throw Error(ErrorCode::Malformed, "a report from outside the world");
        round.reports[report.getRank()] = fromWire(report.getObservation().getInputs());
      }
      if (r.getDecided()) round.decided = fromWire(r.getFrame());
      round.order = f.nextOrder++;
      f.rounds[{r.getJob().cStr(), r.getRound()}] = std::move(round);
    }
    return f;
  } catch (const kj::Exception& e) {
    throw Error(ErrorCode::Malformed, e.getDescription().cStr());
  }
}

void EntryStore::save(const Function& f) const {
  if (dir_.empty()) return;
  try {
    writeAtomically(pathOf(f.key), encode(f));
  } catch (const Error& e) {
    // The store goes on from memory; what was not written is lost at a restart.
    log().error("guards store: cannot save function={}: {}", f.key.text(), e.what());
  }
}

void EntryStore::load() {
  std::error_code ec;
  for (const auto& file : std::filesystem::directory_iterator(dir_, ec)) {
    if (file.path().extension() != kExtension) continue;
    std::ifstream in(file.path(), std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    try {
      Function f = decode(text.str());
      const std::string key = mapKey(f.key);
      functions_[key] = std::move(f);
    } catch (const std::exception& e) { // Error{malformed}, or no memory for a huge one
      log().warn("guards store: skipping file={}: {}", file.path().string(), e.what());
    }
  }
  if (ec) throw Error(ErrorCode::Io, "guards store: cannot list " + dir_ + ": " + ec.message());
}

} // namespace kiln::guards
