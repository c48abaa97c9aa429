// EntryStore: what the guards service knows, per function (its FunctionKey):
// the ordered compiled entries with their guard programs, the frame state
// (automatic dynamic and marks) and the rounds in which a job's ranks decide
// a frame state together. Everything is kept on disk, one file per function,
// so a new store over the same directory starts warm. See docs/guards.md.
//
// Not thread-safe: the service runs one request at a time. Two stores over one
// directory (two service workers) would not see each other's changes: the
// guards service runs one worker.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/guards/entry.h"
#include "kiln/guards/frame_state.h"
#include "kiln/guards/input.h"
#include "kiln/guards/program.h"

namespace kiln::guards {

constexpr uint32_t kDefaultCacheLimit = 8;

// $KILN_CACHE_DIR/guards, else ${XDG_CACHE_HOME:-$HOME/.cache}/kiln/guards
// (beside codegen's artifact cache, kiln::codegen::defaultCacheDir).
std::string defaultStoreDir();

struct LookupResult {
  const CompiledEntry* hit = nullptr; // the first entry that holds; valid until the store changes
  std::vector<std::pair<uint64_t, std::string>>
      reasons;             // on a miss: entry id -> why not, in entry order
  bool runEagerly = false; // on a miss: the cache limit is reached
  FrameState frame;
};

struct InsertResult {
  uint64_t id = 0;
  bool runEagerly = false; // over the cache limit: not stored
  bool known = false;      // the same entry was stored already (a repeated request): its id
};

struct ObserveResult {
  std::optional<FrameState> frame; // decided: trace with this
  std::vector<uint32_t> missing;   // else: the ranks still to report, ascending
  bool changed = false;            // this request changed a decision (a dim or int turned dynamic)
};

class EntryStore {
public:
  // `dir` empty: memory only. Else created if missing (Error{Io} when it
  // cannot be) and every intact function file in it loaded; a corrupt or
  // torn file is logged and skipped.
  explicit EntryStore(std::string dir, uint32_t cacheLimit = kDefaultCacheLimit);

  // The first entry whose guards hold for `call`, else one reason per entry.
  LookupResult lookup(const FunctionKey& function, const CallInput& call) const;
  // Stores `entry` (its id assigned) after the function's others, unless the
  // cache limit is reached. The same entry inserted twice is stored once.
  InsertResult insert(const FunctionKey& function, CompiledEntry entry);
  const std::vector<CompiledEntry>& entries(const FunctionKey& function) const;
  FrameState frame(const FunctionKey& function) const;

  // Automatic dynamic: the function's frame state updated with what a call
  // saw. With a job member, the observation is that rank's report for the
  // round; the round is decided once all its ranks reported, as `merge` of the
  // frame state when the round began with every report in rank order, and
  // that is every rank's answer from then on. A rank reporting again before
  // the decision replaces its report. Error{InvalidArgument} for a rank
  // outside the world or a world size other than the round's.
  ObserveResult observe(const FunctionKey& function, const std::vector<FrameInput>& seen,
                        const std::optional<JobMember>& job = std::nullopt);
  // mark_dynamic (`dynamic`) or mark_static of "L['x'].size()[0]" or "L['n']".
  FrameState mark(const FunctionKey& function, const std::string& dim, bool dynamic);

  uint32_t cacheLimit() const { return cacheLimit_; }
  const std::string& dir() const { return dir_; }
  size_t functionCount() const { return functions_.size(); }
  size_t entryCount() const;
  // The file that keeps `function` (empty for a memory-only store).
  std::string pathOf(const FunctionKey& function) const;

  static constexpr size_t kMaxRounds = 64; // per function; the oldest decided ones go first

private:
  struct Round {
    uint32_t worldSize = 1;
    FrameState base;
    std::map<uint32_t, std::vector<FrameInput>> reports;
    std::optional<FrameState> decided;
    uint64_t order = 0;
  };
  struct Function {
    FunctionKey key;
    std::vector<CompiledEntry> entries;
    std::vector<Program> programs;  // entries[i]'s guards, compiled
    std::vector<std::string> bytes; // entries[i] as bytes with id 0, to recognise a repeat
    FrameState frame;
    uint64_t nextId = 1;
    std::map<std::pair<std::string, uint64_t>, Round> rounds; // by (job, round)
    uint64_t nextOrder = 0;
  };

  const Function* find(const FunctionKey& function) const;
  Function& get(const FunctionKey& function);
  static void add(Function& f, CompiledEntry entry);
  void dropOldRounds(Function& f);
  void save(const Function& f) const;
  std::string encode(const Function& f) const;
  Function decode(const std::string& bytes) const;
  void load();

  std::string dir_;
  uint32_t cacheLimit_;
  std::map<std::string, Function> functions_; // by file name
};

} // namespace kiln::guards
