#include "kiln/client/stack.h"

#include <filesystem>
#include <cstring>
#include <fstream>
#include <thread>

#include <capnp/serialize.h>
#include <fmt/format.h>

#include "kiln/common/process.h"
#include "kiln/guards/wire.h"
#include "kiln/ir/wire.h"
#include "kiln/schema/codegen.capnp.h"
#include "kiln/schema/common.capnp.h"
#include "kiln/schema/guards.capnp.h"
#include "kiln/schema/launcher.capnp.h"
#include "kiln/schema/partitioner.capnp.h"
#include "kiln/schema/shapes.capnp.h"
#include "kiln/schema/tracer.capnp.h"
#include "kiln/shapes/wire.h"
#include "kiln/sym/wire.h"

namespace kiln::client {

static constexpr const char* kLauncher = "kiln.launcher";

static const char* workerStateName(schema::WorkerState state) {
  switch (state) {
  case schema::WorkerState::STARTING: return "starting";
  case schema::WorkerState::IDLE: return "idle";
  case schema::WorkerState::BUSY: return "busy";
  case schema::WorkerState::DRAINING: return "draining";
  case schema::WorkerState::BACKOFF: return "backoff";
  case schema::WorkerState::FAILED: return "failed";
  }
  return "unknown";
}

static const char* serviceStateName(schema::ServiceState state) {
  switch (state) {
  case schema::ServiceState::STARTING: return "starting";
  case schema::ServiceState::RUNNING: return "running";
  case schema::ServiceState::DEGRADED: return "degraded";
  case schema::ServiceState::FAILED: return "failed";
  case schema::ServiceState::STOPPED: return "stopped";
  }
  return "unknown";
}

static StackStatus fromWire(schema::StackStatus::Reader in) {
  StackStatus out;
  out.name = in.getName();
  out.runDir = in.getRunDir();
  out.launcherPid = in.getLauncherPid();
  out.uptimeMs = in.getUptimeMs();
  out.version = in.getVersion();
  for (auto service : in.getServices()) {
    ServiceStatus s;
    s.name = service.getName();
    s.binary = service.getBinary();
    s.state = serviceStateName(service.getState());
    s.failureReason = service.getFailureReason();
    s.restarts = service.getRestarts();
    s.queueDepth = service.getQueueDepth();
    s.inFlight = service.getInFlight();
    s.served = service.getServed();
    s.errors = service.getErrors();
    s.p50Us = service.getP50Us();
    s.p99Us = service.getP99Us();
    for (auto worker : service.getWorkers()) {
      s.workers.push_back(WorkerStatus{worker.getPid(), workerStateName(worker.getState()),
                                       worker.getServed(), worker.getRestarts(),
                                       worker.getUptimeMs(), worker.getLastExit()});
    }
    out.services.push_back(std::move(s));
  }
  return out;
}

Stack Stack::connect(const std::string& where, Millis timeout) {
  std::string endpoint;
  if (where.rfind("ipc://", 0) == 0 || where.rfind("tcp://", 0) == 0) {
    endpoint = where;
  } else {
    const StackPaths paths = resolveStack(where);
    int launcher = 0;
    std::ifstream(paths.lockFile()) >> launcher;
    if (launcher <= 0)
      throw Error(ErrorCode::Unavailable,
                  fmt::format("no kiln stack runs at {} (start one with `kiln up`)", paths.runDir));
    if (!processAlive(launcher))
      throw Error(ErrorCode::Unavailable,
                  fmt::format("the launcher (pid {}) of the stack at {} is gone; `kiln up` "
                              "starts a new one there",
                              launcher, paths.runDir));
    endpoint = paths.clientEndpoint();
  }
  Stack stack(std::make_unique<rpc::Client>(endpoint));
  try {
    stack.info(kLauncher, timeout);
  } catch (const Error& e) {
    throw Error(ErrorCode::Unavailable,
                fmt::format("the kiln launcher at {} does not answer: {}", endpoint, e.what()));
  }
  return stack;
}

ServiceInfo Stack::info(const std::string& service, Millis timeout) {
  capnp::MallocMessageBuilder request;
  request.initRoot<schema::CommonRequest>().setInfo();
  auto reply = rpc_->call(service, request, timeout);
  return rpc::decoding([&] {
    auto root = reply->root<schema::CommonReply>();
    if (!root.isInfo()) throw Error(ErrorCode::Malformed, "reply to `info` is not info", service);
    auto info = root.getInfo();
    return ServiceInfo{info.getService(), info.getVersion(), info.getPid(), info.getUptimeMs(),
                       info.getBuildId()};
  });
}

std::string Stack::ping(const std::string& service, const std::string& payload, Millis timeout) {
  capnp::MallocMessageBuilder request;
  request.initRoot<schema::CommonRequest>().initPing().setPayload(
      kj::arrayPtr(reinterpret_cast<const kj::byte*>(payload.data()), payload.size()));
  auto reply = rpc_->call(service, request, timeout);
  return rpc::decoding([&] {
    auto root = reply->root<schema::CommonReply>();
    if (!root.isPong()) throw Error(ErrorCode::Malformed, "reply to `ping` is not pong", service);
    auto bytes = root.getPong().getPayload();
    return std::string(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
  });
}

Compiled Stack::compile(const ir::Graph& graph, const std::string& target, Millis timeout) {
  capnp::MallocMessageBuilder request;
  auto compile = request.initRoot<schema::CodegenRequest>().initCompile();
  ir::toWire(graph, compile.initGraph());
  compile.setTarget(target);
  auto reply = rpc_->call("codegen", request, timeout);
  return rpc::decoding([&] {
    auto root = reply->root<schema::CodegenReply>();
    if (!root.isCompile())
      throw Error(ErrorCode::Malformed, "reply to `compile` is not compile", "codegen");
    capnp::MallocMessageBuilder artifact;
    artifact.setRoot(root.getCompile().getArtifact());
    auto words = capnp::messageToFlatArray(artifact);
    auto bytes = words.asBytes();
    return Compiled{std::string(reinterpret_cast<const char*>(bytes.begin()), bytes.size()),
                    root.getCompile().getCacheHit()};
  });
}

Partitioned Stack::partition(const ir::Graph& graph, const std::vector<bool>& requiresGrad,
                             double memoryBudget, Millis timeout) {
  capnp::MallocMessageBuilder request;
  auto partition = request.initRoot<schema::PartitionerRequest>().initPartition();
  ir::toWire(graph, partition.initGraph());
  auto mask = partition.initRequiresGrad(static_cast<unsigned>(requiresGrad.size()));
  for (size_t i = 0; i < requiresGrad.size(); ++i)
    mask.set(static_cast<unsigned>(i), requiresGrad[i]);
  partition.initOptions().setMemoryBudget(memoryBudget);
  auto reply = rpc_->call("partitioner", request, timeout);
  return rpc::decoding([&] {
    auto root = reply->root<schema::PartitionerReply>();
    if (!root.isPartition())
      throw Error(ErrorCode::Malformed, "reply to `partition` is not partition", "partitioner");
    auto in = root.getPartition();
    Partitioned out(std::make_shared<sym::SymbolTable>());
    out.forward = ir::fromWire(in.getForward(), *out.symbols);
    out.backward = ir::fromWire(in.getBackward(), *out.symbols);
    out.userOutputs = in.getUserOutputs();
    for (uint32_t i : in.getMutatedInputs()) out.mutatedInputs.push_back(i);
    out.saved = in.getSaved();
    for (uint32_t i : in.getTangentOf()) out.tangentOf.push_back(i);
    for (uint32_t i : in.getGradOf()) out.gradOf.push_back(i);
    out.recomputed = in.getRecomputed();
    return out;
  });
}

// ---- guards ---------------------------------------------------------------

static constexpr const char* kGuards = "guards";

static schema::GuardsReply::Reader guardsReply(rpc::Message& reply, schema::GuardsReply::Which verb,
                                               const char* name) {
  auto root = reply.root<schema::GuardsReply>();
  if (root.which() != verb)
    throw Error(ErrorCode::Malformed, fmt::format("reply to `{}` is not {}", name, name), kGuards);
  return root;
}

GuardsLookup Stack::guardsLookup(const guards::FunctionKey& function, const guards::CallInput& call,
                                 Millis timeout) {
  capnp::MallocMessageBuilder request;
  auto lookup = request.initRoot<schema::GuardsRequest>().initLookup();
  guards::toWire(function, lookup.initFunction());
  guards::toWire(call, lookup.initCall());
  auto reply = rpc_->call(kGuards, request, timeout);
  return rpc::decoding([&] {
    auto in = guardsReply(*reply, schema::GuardsReply::LOOKUP, "lookup").getLookup();
    GuardsLookup out;
    if (in.isHit()) {
      out.hit = guards::fromWire(in.getHit());
      return out;
    }
    auto miss = in.getMiss();
    for (auto r : miss.getReasons()) out.reasons.emplace_back(r.getEntry(), r.getReason().cStr());
    out.runEagerly = miss.getRunEagerly();
    out.frame = guards::fromWire(miss.getFrame());
    return out;
  });
}

GuardsEntries Stack::guardsEntries(const guards::FunctionKey& function, Millis timeout) {
  capnp::MallocMessageBuilder request;
  guards::toWire(function, request.initRoot<schema::GuardsRequest>().initEntries());
  auto reply = rpc_->call(kGuards, request, timeout);
  return rpc::decoding([&] {
    auto in = guardsReply(*reply, schema::GuardsReply::ENTRIES, "entries").getEntries();
    GuardsEntries out;
    for (auto e : in.getEntries()) out.entries.push_back(guards::fromWire(e));
    out.frame = guards::fromWire(in.getFrame());
    out.limit = in.getLimit();
    return out;
  });
}

GuardsInsert Stack::guardsInsert(const guards::FunctionKey& function,
                                 const guards::CompiledEntry& entry, Millis timeout) {
  capnp::MallocMessageBuilder request;
  auto insert = request.initRoot<schema::GuardsRequest>().initInsert();
  guards::toWire(function, insert.initFunction());
  guards::toWire(entry, insert.initEntry());
  auto reply = rpc_->call(kGuards, request, timeout);
  return rpc::decoding([&] {
    auto in = guardsReply(*reply, schema::GuardsReply::INSERT, "insert").getInsert();
    return GuardsInsert{in.getId(), in.getRunEagerly()};
  });
}

// A job's rank asks again while its round waits for other ranks; each ask
// carries the same report (a restarted service learns it again from the next).
guards::FrameState Stack::guardsObserve(const guards::FunctionKey& function,
                                        const std::vector<guards::FrameInput>& seen,
                                        const std::optional<guards::JobMember>& job,
                                        Millis timeout) {
  capnp::MallocMessageBuilder request;
  auto observe = request.initRoot<schema::GuardsRequest>().initObserve();
  guards::toWire(function, observe.initFunction());
  guards::toWire(seen, observe.initObservation().initInputs(static_cast<unsigned>(seen.size())));
  if (job) guards::toWire(*job, observe.initJob());
  const auto deadline = Clock::now() + timeout;
  Millis pause(5);
  std::vector<uint32_t> missing; // as the last answer said
  for (;;) {
    const auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now());
    if (left.count() > 0) {
      std::unique_ptr<rpc::Message> reply;
      try {
        reply = rpc_->call(kGuards, request, left);
      } catch (const Error& e) {
        if (e.code() != ErrorCode::DeadlineExceeded || !job) throw;
      }
      if (reply) {
        std::optional<guards::FrameState> frame =
            rpc::decoding([&]() -> std::optional<guards::FrameState> {
              auto in = guardsReply(*reply, schema::GuardsReply::OBSERVE, "observe").getObserve();
              if (in.isFrame()) return guards::fromWire(in.getFrame());
              missing.clear();
              for (uint32_t rank : in.getMissing()) missing.push_back(rank);
              return std::nullopt;
            });
        if (frame) return std::move(*frame);
        if (!job)
          throw Error(ErrorCode::Malformed, "observe without a job answered pending", kGuards);
      }
    }
    if (Clock::now() + pause >= deadline) {
      std::string ranks;
      for (uint32_t rank : missing) ranks += (ranks.empty() ? "" : ", ") + std::to_string(rank);
      throw Error(ErrorCode::DeadlineExceeded,
                  fmt::format("guards observe of {}: job '{}' round {}: rank(s) {} of {} did not "
                              "report within {} ms",
                              function.text(), job ? job->job : "", job ? job->round : 0,
                              ranks.empty() ? "?" : ranks, job ? job->worldSize : 1,
                              timeout.count()),
                  kGuards);
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, Millis(50));
  }
}

guards::FrameState Stack::guardsMark(const guards::FunctionKey& function, const std::string& dim,
                                     bool dynamic, Millis timeout) {
  capnp::MallocMessageBuilder request;
  auto mark = request.initRoot<schema::GuardsRequest>().initMark();
  guards::toWire(function, mark.initFunction());
  mark.setDim(dim);
  mark.setDynamic(dynamic);
  auto reply = rpc_->call(kGuards, request, timeout);
  return rpc::decoding([&] {
    return guards::fromWire(guardsReply(*reply, schema::GuardsReply::MARK, "mark").getMark());
  });
}

// ---- shapes ---------------------------------------------------------------

static constexpr const char* kShapes = "shapes";

static schema::ShapesReply::Reader shapesReply(rpc::Message& reply, schema::ShapesReply::Which verb,
                                               const char* name) {
  auto root = reply.root<schema::ShapesReply>();
  if (root.which() != verb)
    throw Error(ErrorCode::Malformed, fmt::format("reply to `{}` is not {}", name, name), kShapes);
  return root;
}

template <class Builder> static void writeTable(const sym::SymbolTable& table, Builder out) {
  shapes::writeSymbols(table, out.initSymbols(static_cast<unsigned>(table.symbols().size())));
}

shapes::Simplified Stack::simplify(sym::SymbolTable& table, const std::vector<sym::Expr>& guards,
                                   const shapes::Options& options, Millis timeout) {
  capnp::MallocMessageBuilder request;
  auto in = request.initRoot<schema::ShapesRequest>().initSimplify();
  writeTable(table, in);
  shapes::writeExprs(guards, in.initGuards(static_cast<unsigned>(guards.size())));
  shapes::writeOptions(options, in.initOptions());
  auto reply = rpc_->call(kShapes, request, timeout);
  return rpc::decoding([&] {
    return shapes::readSimplified(shapesReply(*reply, schema::ShapesReply::SIMPLIFY, "simplify").getSimplify(),
                                  table);
  });
}

shapes::Decision Stack::decide(sym::Expr question, const std::vector<sym::Expr>& facts,
                               const shapes::Options& options, Millis timeout) {
  if (question.isNull()) throw Error(ErrorCode::InvalidArgument, "decide: the question is missing");
  capnp::MallocMessageBuilder request;
  auto in = request.initRoot<schema::ShapesRequest>().initDecide();
  writeTable(question.table(), in);
  sym::toWire(question, in.initQuestion());
  shapes::writeExprs(facts, in.initFacts(static_cast<unsigned>(facts.size())));
  shapes::writeOptions(options, in.initOptions());
  auto reply = rpc_->call(kShapes, request, timeout);
  return rpc::decoding([&] {
    return shapes::readDecision(shapesReply(*reply, schema::ShapesReply::DECIDE, "decide").getDecide());
  });
}

shapes::ConstraintReport Stack::checkConstraints(sym::SymbolTable& table, const std::vector<shapes::DimSpec>& dims,
                                                 const std::vector<sym::Expr>& guards,
                                                 const shapes::Options& options, Millis timeout) {
  capnp::MallocMessageBuilder request;
  auto in = request.initRoot<schema::ShapesRequest>().initCheckConstraints();
  writeTable(table, in);
  auto wireDims = in.initDims(static_cast<unsigned>(dims.size()));
  for (unsigned i = 0; i < wireDims.size(); ++i) {
    if (dims[i].symbol.isNull())
      throw Error(ErrorCode::InvalidArgument, "checkConstraints: dim " + dims[i].dim + " has no symbol");
    shapes::writeDim(dims[i], wireDims[i]);
  }
  shapes::writeExprs(guards, in.initGuards(static_cast<unsigned>(guards.size())));
  shapes::writeOptions(options, in.initOptions());
  auto reply = rpc_->call(kShapes, request, timeout);
  return rpc::decoding([&] {
    return shapes::readReport(
        shapesReply(*reply, schema::ShapesReply::CHECK_CONSTRAINTS, "checkConstraints").getCheckConstraints(),
        table);
  });
}

guards::GuardSet Stack::simplifyGuards(const guards::GuardSet& set, const shapes::Options& options,
                                        Millis timeout) {
  // The copy comes from the wire form, which carries no ranges: its table has
  // unbounded symbols, so a bound the service returns is not folded away by a
  // range narrowed in `set`'s table.
  guards::GuardSet out = guards::guardSetFromBytes(guards::toBytes(set));
  if (out.shapeGuards().empty()) return out;
  capnp::MallocMessageBuilder request;
  auto in = request.initRoot<schema::ShapesRequest>().initSimplify();
  const std::vector<sym::Expr> symbols = out.table().symbols();
  auto wireSymbols = in.initSymbols(static_cast<unsigned>(symbols.size()));
  for (unsigned i = 0; i < wireSymbols.size(); ++i)
    shapes::writeSymbol(symbols[i], sym::Range::unbounded(), wireSymbols[i]);
  shapes::writeExprs(out.shapeGuards(), in.initGuards(static_cast<unsigned>(out.shapeGuards().size())));
  shapes::writeOptions(options, in.initOptions());
  auto reply = rpc_->call(kShapes, request, timeout);
  shapes::Simplified simplified = rpc::decoding([&] {
    return shapes::readSimplified(shapesReply(*reply, schema::ShapesReply::SIMPLIFY, "simplify").getSimplify(),
                                  out.table());
  });
  if (simplified.unsatisfiable) // every guard held when traced: a broken answer; keep the guards
    throw Error(ErrorCode::Internal, "simplify: a traced guard set cannot be unsatisfiable", kShapes);
  out.replaceShapeGuards(simplified.checks);
  return out;
}

StackStatus Stack::status(Millis timeout) {
  capnp::MallocMessageBuilder request;
  request.initRoot<schema::LauncherRequest>().setStatus();
  auto reply = rpc_->call(kLauncher, request, timeout);
  return rpc::decoding([&] { return fromWire(reply->root<schema::LauncherReply>().getStatus()); });
}

void Stack::down(Millis timeout) {
  capnp::MallocMessageBuilder request;
  request.initRoot<schema::LauncherRequest>().setDown();
  rpc_->call(kLauncher, request, timeout);
}

SwapResult Stack::swap(const std::string& service, const std::string& binary, Millis timeout) {
  capnp::MallocMessageBuilder request;
  auto swap = request.initRoot<schema::LauncherRequest>().initSwap();
  swap.setService(service);
  swap.setBinary(binary);
  auto reply = rpc_->call(kLauncher, request, timeout);
  return rpc::decoding([&] {
    auto result = reply->root<schema::LauncherReply>().getSwap();
    SwapResult out;
    for (int pid : result.getOldPids()) out.oldPids.push_back(pid);
    for (int pid : result.getNewPids()) out.newPids.push_back(pid);
    return out;
  });
}

std::string Stack::trace(std::string_view requestBytes, Millis timeout) {
  if (requestBytes.size() % sizeof(capnp::word) != 0)
    throw Error(ErrorCode::Malformed, "trace request: not whole words");
  kj::Array<capnp::word> words = kj::heapArray<capnp::word>(requestBytes.size() / sizeof(capnp::word));
  std::memcpy(words.begin(), requestBytes.data(), requestBytes.size());
  capnp::MallocMessageBuilder request;
  try {
    capnp::ReaderOptions options;
    options.traversalLimitInWords = uint64_t{1} << 27;
    options.nestingLimit = 256;
    capnp::FlatArrayMessageReader message(words, options);
    request.initRoot<schema::TracerRequest>().setTrace(message.getRoot<schema::TraceRequest>());
  } catch (const kj::Exception& e) {
    throw Error(ErrorCode::Malformed, std::string("trace request: ") + e.getDescription().cStr());
  }
  auto reply = rpc_->call("tracer", request, timeout);
  return rpc::decoding([&] {
    auto root = reply->root<schema::TracerReply>();
    if (!root.isTrace()) throw Error(ErrorCode::Malformed, "reply to `trace` is not trace", "tracer");
    capnp::MallocMessageBuilder out;
    out.setRoot(root.getTrace());
    auto flat = capnp::messageToFlatArray(out);
    auto bytes = flat.asBytes();
    return std::string(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
  });
}

} // namespace kiln::client
