// Stack: a connection to a running kiln stack (its broker), for applications,
// the `kiln` CLI and the Python SDK. Not thread-safe: one per thread.
#pragma once

#include <memory>
#include <optional>
#include <utility>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/client/stack_paths.h"
#include "kiln/client/status.h"
#include "kiln/common/clock.h"
#include "kiln/guards/entry.h"
#include "kiln/guards/frame_state.h"
#include "kiln/guards/input.h"
#include "kiln/ir/graph.h"
#include "kiln/rpc/client.h"
#include "kiln/shapes/constraints.h"
#include "kiln/shapes/decide.h"
#include "kiln/shapes/simplify.h"
#include "kiln/sym/symbol_table.h"

namespace kiln::client {

struct ServiceInfo {
  std::string service;
  std::string version;
  int pid = 0;
  uint64_t uptimeMs = 0;
  std::string buildId;
};

// A graph compiled by the codegen service: the artifact's bytes
// (schemas/codegen.capnp; kiln::runtime::LoadedArtifact loads them).
struct Compiled {
  std::string artifact;
  bool cacheHit = false; // served from the artifact cache: no compiler ran
};

// The partitioner's answer (schemas/partitioner.capnp): a traced graph functionalized,
// differentiated and partitioned. forward: the inputs -> the graph's outputs
// (`userOutputs`), the new value of each mutated input (`mutatedInputs`: placeholder
// indices), then `saved` values; backward: the saved values, then one tangent per
// `tangentOf` entry (a forward output) -> one grad per `gradOf` entry (an input).
struct Partitioned {
  explicit Partitioned(std::shared_ptr<sym::SymbolTable> table)
      : symbols(std::move(table)), forward(*symbols), backward(*symbols) {}
  std::shared_ptr<sym::SymbolTable> symbols; // both graphs'
  ir::Graph forward;
  ir::Graph backward;
  size_t userOutputs = 0;
  std::vector<size_t> mutatedInputs;
  size_t saved = 0;
  std::vector<size_t> tangentOf;
  std::vector<size_t> gradOf;
  size_t recomputed = 0; // forward nodes the backward recomputes
};

// The guards service's answer to a lookup: the entry that holds, or why none did.
struct GuardsLookup {
  std::optional<guards::CompiledEntry> hit;
  std::vector<std::pair<uint64_t, std::string>> reasons; // entry id -> why it failed, in entry order
  bool runEagerly = false; // the function's cache limit is reached: do not compile again
  guards::FrameState frame;
};

struct GuardsInsert {
  uint64_t id = 0;
  bool runEagerly = false; // over the cache limit: not stored
};

struct GuardsEntries {
  std::vector<guards::CompiledEntry> entries;
  guards::FrameState frame;
  uint32_t limit = 0;
};

struct SwapResult {
  std::vector<int> oldPids;
  std::vector<int> newPids;
};

class Stack {
public:
  // `where`: a run directory or a broker endpoint (ipc://, tcp://); empty for
  // $KILN_RUN_DIR or the default stack. Throws Error{unavailable} if no
  // launcher answers within `timeout`.
  static Stack connect(const std::string& where = {}, Millis timeout = Millis(5000));

  // Round trip to a service (or "kiln.launcher"); returns what it says about itself.
  ServiceInfo info(const std::string& service, Millis timeout = Millis(5000));
  // Echoes `payload` through `service`; returns the echoed bytes.
  std::string ping(const std::string& service, const std::string& payload = {},
                   Millis timeout = Millis(5000));
  StackStatus status(Millis timeout = Millis(5000));
  // Compiles `graph` for `target` ("cpu") through the codegen service. A
  // compiler failure is Error{internal} with the compiler's messages and the
  // generated source in its detail; an op without a lowering Error{unsupported}.
  Compiled compile(const ir::Graph& graph, const std::string& target = "cpu",
                   Millis timeout = Millis(120000));
  // Functionalizes, differentiates and partitions `graph` for the placeholders marked in
  // `requiresGrad` through the partitioner service (docs/autograd.md). A request that
  // cannot be differentiated is Error{invalid_argument} (no input marked, a marked input
  // not floating, a mask of the wrong length) or Error{unsupported} (an op without a
  // derivative rule, a mutation functionalization cannot follow).
  Partitioned partition(const ir::Graph& graph, const std::vector<bool>& requiresGrad,
                        double memoryBudget = 0.25, Millis timeout = Millis(60000));
  // Traces through the tracer service: a whole TraceRequest message in, the
  // TraceReply message out (schemas/tracer.capnp, docs/tracer.md). A request
  // that does not decode is Error{malformed}.
  std::string trace(std::string_view request, Millis timeout = Millis(60000));

  // The guards service (docs/guards.md). `lookup` checks the function's entries
  // against a described call; `entries` hands them all over for the caller's own
  // guard VM; `insert` stores one (its id assigned); `observe` records what a
  // missing call saw and returns the frame state to trace with — for a job's
  // rank it waits (polling) until every rank of the round reported, or
  // `timeout` (Error{deadline_exceeded}); `mark` is mark_dynamic/mark_static.
  GuardsLookup guardsLookup(const guards::FunctionKey& function, const guards::CallInput& call,
                            Millis timeout = Millis(10000));
  GuardsEntries guardsEntries(const guards::FunctionKey& function, Millis timeout = Millis(10000));
  GuardsInsert guardsInsert(const guards::FunctionKey& function, const guards::CompiledEntry& entry,
                            Millis timeout = Millis(10000));
  guards::FrameState guardsObserve(const guards::FunctionKey& function, const std::vector<guards::FrameInput>& seen,
                                   const std::optional<guards::JobMember>& job = std::nullopt,
                                   Millis timeout = Millis(60000));
  guards::FrameState guardsMark(const guards::FunctionKey& function, const std::string& dim, bool dynamic,
                                Millis timeout = Millis(10000));

  // The shapes service (docs/services.md, kiln/shapes/*.h). Each request carries
  // every symbol of `table` (names, hints, ranges); what comes back is made of
  // `table`'s symbols and does not narrow them. `simplify`: a guard set (true at
  // the hints) as ranges, replacements and the guards no others imply; `decide`:
  // true, false or unknown for `question` under `facts`; `checkConstraints`: the
  // guards of a trace against the user's dynamic_shapes, with suggested fixes.
  // A guard that is not boolean or is false at the hints is Error{invalid_argument}.
  shapes::Simplified simplify(sym::SymbolTable& table, const std::vector<sym::Expr>& guards,
                              const shapes::Options& options = {}, Millis timeout = Millis(30000));
  shapes::Decision decide(sym::Expr question, const std::vector<sym::Expr>& facts = {},
                          const shapes::Options& options = {}, Millis timeout = Millis(30000));
  shapes::ConstraintReport checkConstraints(sym::SymbolTable& table, const std::vector<shapes::DimSpec>& dims,
                                            const std::vector<sym::Expr>& guards,
                                            const shapes::Options& options = {},
                                            Millis timeout = Millis(30000));
  // A copy of `set` whose shape guards are simplify's `checks` of them (fewer,
  // and equivalent: the same calls pass). The set's symbols are sent with
  // unbounded ranges: only its guards say anything about them.
  guards::GuardSet simplifyGuards(const guards::GuardSet& set, const shapes::Options& options = {},
                                  Millis timeout = Millis(30000));

  // Asks the launcher to drain and stop every service and exit; returns once it agreed.
  void down(Millis timeout = Millis(5000));
  // Starts `binary` for `service`, waits for it to register, drains the old workers.
  SwapResult swap(const std::string& service, const std::string& binary,
                  Millis timeout = Millis(60000));

  const std::string& endpoint() const { return rpc_->endpoint(); }
  rpc::Client& rpc() { return *rpc_; }

private:
  explicit Stack(std::unique_ptr<rpc::Client> rpc) : rpc_(std::move(rpc)) {}
  std::unique_ptr<rpc::Client> rpc_;
};

} // namespace kiln::client
