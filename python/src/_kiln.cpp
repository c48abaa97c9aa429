// _kiln: the Python bindings of the client SDK (libs/client, libs/shm), of
// libs/ir (ir_bindings.cpp) and of libs/guards with the guard VM's Python
// front end (guard_bindings.cpp, guard_frontend.cpp).
// Conversion only: each binding calls the C++ library with the GIL released
// and turns what comes back into plain Python values; kiln::Error becomes
// kiln.KilnError. Whatever is more than that belongs in python/kiln.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <fmt/format.h>

#include "kiln/client/stack.h"
#include "kiln/client/stack_paths.h"
#include "kiln/common/error.h"
#include "kiln/guards/frame_state.h"
#include "kiln/guards/wire.h"
#include "kiln/ir/wire.h"
#include "kiln/schema/shapes.capnp.h"
#include "kiln/shapes/wire.h"
#include "kiln/shm/store.h"
#include "capnp_dict.h"
#include "frame_hook.h"
#include "guard_bindings.h"
#include "ir_bindings.h"
#include "program_bindings.h"

namespace py = pybind11;

namespace kiln::python {
namespace {

// Runs `f` with the GIL released; every call that may block goes through here.
template <class F> auto withoutGil(F&& f) {
  py::gil_scoped_release nogil;
  return f();
}

// A stack as Python sees it: the client's connection, which owns one ZeroMQ
// socket (so calls from several Python threads take turns), the run dir it was
// found at, and the stack's shared-memory store once asked for.
class PyStack {
public:
  static std::shared_ptr<PyStack> connect(const std::string& where, Millis timeout) {
    const bool isEndpoint = where.rfind("ipc://", 0) == 0 || where.rfind("tcp://", 0) == 0;
    auto stack = client::Stack::connect(where, timeout);
    return std::make_shared<PyStack>(
        std::move(stack), isEndpoint ? std::string() : client::resolveStack(where).runDir);
  }

  PyStack(client::Stack stack, std::string runDir)
      : stack_(std::move(stack)), runDir_(std::move(runDir)) {}

  // Calls `f(stack)` alone on this connection.
  template <class F> auto locked(F&& f) {
    std::lock_guard lock(mutex_);
    return f(stack_);
  }

  // The stack's shared-memory store, attached on first use and again after
  // the stack restarted. Connected by endpoint, the run dir (hence the
  // segment's name) comes from the launcher.
  std::shared_ptr<shm::Store> store() {
    std::lock_guard lock(mutex_);
    if (!store_ || !store_->current()) { // first use, or the stack restarted
      if (runDir_.empty()) runDir_ = stack_.status().runDir;
      store_ = std::make_shared<shm::Store>(
          shm::Store::attach(client::StackPaths{runDir_}.segmentName()));
    }
    return store_;
  }

  const std::string& runDir() const { return runDir_; }
  const std::string& endpoint() const { return stack_.endpoint(); }

private:
  std::mutex mutex_;
  client::Stack stack_;
  std::string runDir_;
  std::shared_ptr<shm::Store> store_;
};

// A zero-copy window on one tensor's bytes, exposed through the buffer
// protocol. It holds the store, so the mapping outlives every view on it.
struct ShmBuffer {
  std::shared_ptr<shm::Store> store;
  shm::TensorView view;
};

shm::DType parseDType(const std::string& name) {
  for (int32_t i = 0; i <= static_cast<int32_t>(shm::DType::Complex128); ++i)
    if (shm::dtypeName(static_cast<shm::DType>(i)) == name) return static_cast<shm::DType>(i);
  throw Error(ErrorCode::InvalidArgument, fmt::format("unknown dtype '{}'", name));
}

py::dict toDict(const shm::TensorMeta& meta) {
  py::dict out;
  out["dtype"] = shm::dtypeName(meta.dtype);
  out["sizes"] = meta.sizes;
  out["strides"] = meta.strides;
  out["storage_offset"] = meta.storageOffset;
  return out;
}

py::dict toDict(const shm::TensorInfo& info) {
  py::dict out = toDict(info.meta);
  out["id"] = info.id;
  out["lifetime"] = shm::lifetimeName(info.lifetime);
  out["bytes"] = info.bytes;
  out["lease_holders"] = info.leaseHolders;
  return out;
}

py::dict toDict(const shm::Usage& usage) {
  py::dict out;
  out["capacity_bytes"] = usage.capacityBytes;
  out["used_bytes"] = usage.usedBytes;
  out["free_bytes"] = usage.freeBytes;
  out["largest_free_block"] = usage.largestFreeBlock;
  out["tensors"] = usage.tensors;
  out["max_tensors"] = usage.maxTensors;
  out["recoveries"] = usage.recoveries;
  return out;
}

py::dict toDict(const client::ServiceInfo& info) {
  py::dict out;
  out["service"] = info.service;
  out["version"] = info.version;
  out["pid"] = info.pid;
  out["uptime_ms"] = info.uptimeMs;
  out["build_id"] = info.buildId;
  return out;
}

py::dict toDict(const client::WorkerStatus& worker) {
  py::dict out;
  out["pid"] = worker.pid;
  out["state"] = worker.state;
  out["served"] = worker.served;
  out["restarts"] = worker.restarts;
  out["uptime_ms"] = worker.uptimeMs;
  out["last_exit"] = worker.lastExit;
  return out;
}

py::dict toDict(const client::ServiceStatus& service) {
  py::list workers;
  for (const auto& worker : service.workers) workers.append(toDict(worker));
  py::dict out;
  out["name"] = service.name;
  out["binary"] = service.binary;
  out["state"] = service.state;
  out["failure_reason"] = service.failureReason;
  out["restarts"] = service.restarts;
  out["queue_depth"] = service.queueDepth;
  out["in_flight"] = service.inFlight;
  out["served"] = service.served;
  out["errors"] = service.errors;
  out["p50_us"] = service.p50Us;
  out["p99_us"] = service.p99Us;
  out["workers"] = workers;
  return out;
}

py::dict toDict(const client::StackStatus& status) {
  py::list services;
  for (const auto& service : status.services) services.append(toDict(service));
  py::dict out;
  out["name"] = status.name;
  out["run_dir"] = status.runDir;
  out["launcher_pid"] = status.launcherPid;
  out["uptime_ms"] = status.uptimeMs;
  out["version"] = status.version;
  out["services"] = services;
  return out;
}

void bindError(py::module_& m) {
  // Leaked on purpose: never decref'd after the interpreter is gone.
  static auto* kilnError = new py::exception<Error>(m, "KilnError", PyExc_RuntimeError);
  kilnError->attr("__module__") = "kiln";
  kilnError->attr("__doc__") =
      "An error from kiln: `code` (\"unavailable\", \"not_found\", ...), `message`, "
      "and the `service` that raised it, if any.";
  py::register_exception_translator([](std::exception_ptr thrown) {
    try {
      if (thrown) std::rethrow_exception(thrown);
    } catch (const Error& e) {
      py::object error = py::handle(kilnError->ptr())(e.what());
      error.attr("code") = errorCodeName(e.code());
      error.attr("message") = e.message();
      error.attr("service") = e.service();
      error.attr("detail") = e.detail();
      PyErr_SetObject(kilnError->ptr(), error.ptr());
    }
  });
}

guards::FunctionKey functionKeyOf(const py::tuple& key) {
  if (key.size() != 3)
    throw Error(ErrorCode::InvalidArgument, "a function key is (module, qualname, code_hash)");
  return {key[0].cast<std::string>(), key[1].cast<std::string>(), key[2].cast<std::string>()};
}

py::object entryDict(guards::CompiledEntry entry) {
  PyGuardSet set;
  *set.set = std::move(entry.guards);
  py::dict out;
  out["id"] = entry.id;
  out["guards"] = py::cast(std::move(set));
  out["artifacts"] = entry.artifacts;
  out["graphs"] = entry.graphs;
  out["outputs"] = entry.outputs;
  return std::move(out);
}

std::optional<guards::JobMember> jobOf(const py::object& job) {
  if (job.is_none()) return std::nullopt;
  auto t = job.cast<std::tuple<std::string, uint32_t, uint32_t, uint64_t>>();
  return guards::JobMember{std::get<0>(t), std::get<1>(t), std::get<2>(t), std::get<3>(t)};
}

// The guards service's verbs (docs/python-sdk.md, "Guards"): what a
// FunctionCache asks on a miss, an insert, an observation or a mark.
template <class C> void bindStackGuards(C& stack) {
  stack
      .def(
          "guards_entries",
          [](PyStack& self, const py::tuple& key, int64_t timeoutMs) {
            auto function = functionKeyOf(key);
            auto got = withoutGil([&] {
              return self.locked([&](auto& s) { return s.guardsEntries(function, Millis(timeoutMs)); });
            });
            py::list entries;
            for (auto& e : got.entries) entries.append(entryDict(std::move(e)));
            return py::make_tuple(entries, py::cast(std::move(got.frame)), got.limit);
          },
          py::arg("key"), py::arg("timeout_ms") = 10000,
          "(entries as dicts: id, guards, artifacts, graphs, outputs; the frame state; the cache limit).")
      .def(
          "guards_lookup",
          [](PyStack& self, const py::tuple& key, py::object fn, py::object args, py::object kwargs,
             int64_t timeoutMs) {
            auto function = functionKeyOf(key);
            guards::CallInput call = describePythonCall(fn, args, kwargs);
            auto got = withoutGil([&] {
              return self.locked([&](auto& s) { return s.guardsLookup(function, call, Millis(timeoutMs)); });
            });
            py::dict out;
            out["hit"] = got.hit ? entryDict(std::move(*got.hit)) : py::none();
            out["reasons"] = got.reasons;
            out["run_eagerly"] = got.runEagerly;
            out["frame"] = py::cast(std::move(got.frame));
            return out;
          },
          py::arg("key"), py::arg("fn"), py::arg("args"), py::arg("kwargs") = py::none(),
          py::arg("timeout_ms") = 10000,
          "The service's entries against the call: {hit, reasons, run_eagerly, frame}.")
      .def(
          "guards_insert",
          [](PyStack& self, const py::tuple& key, const PyGuardSet& set, std::vector<std::string> artifacts,
             std::vector<std::string> graphs, std::string outputs, int64_t timeoutMs) {
            auto function = functionKeyOf(key);
            guards::CompiledEntry entry;
            entry.guards = guards::guardSetFromBytes(guards::toBytes(*set.set));
            entry.artifacts = std::move(artifacts);
            entry.graphs = std::move(graphs);
            entry.outputs = std::move(outputs);
            auto got = withoutGil([&] {
              return self.locked([&](auto& s) { return s.guardsInsert(function, entry, Millis(timeoutMs)); });
            });
            py::dict out;
            out["id"] = got.id;
            out["run_eagerly"] = got.runEagerly;
            return out;
          },
          py::arg("key"), py::arg("guards"), py::arg("artifacts") = std::vector<std::string>{},
          py::arg("graphs") = std::vector<std::string>{}, py::arg("outputs") = "",
          py::arg("timeout_ms") = 10000, "Stores an entry: {id, run_eagerly}.")
      .def(
          "guards_observe",
          [](PyStack& self, const py::tuple& key, py::object args, py::object kwargs, py::object names,
             py::object job, int64_t timeoutMs) {
            auto function = functionKeyOf(key);
            auto argNames = names.is_none() ? std::vector<std::string>{} : names.cast<std::vector<std::string>>();
            auto seen = guards::observe(describePythonCall(py::none(), args, kwargs), argNames);
            auto member = jobOf(job);
            auto frame = withoutGil([&] {
              return self.locked(
                  [&](auto& s) { return s.guardsObserve(function, seen, member, Millis(timeoutMs)); });
            });
            return py::cast(std::move(frame));
          },
          py::arg("key"), py::arg("args"), py::arg("kwargs") = py::none(), py::arg("arg_names") = py::none(),
          py::arg("job") = py::none(), py::arg("timeout_ms") = 60000,
          "Records what a missing call saw; the frame state to trace with. `job`: (job id, rank, "
          "world size, round): waits until every rank of the round reported.")
      .def(
          "guards_mark",
          [](PyStack& self, const py::tuple& key, const std::string& dim, bool dynamic, int64_t timeoutMs) {
            auto function = functionKeyOf(key);
            auto frame = withoutGil([&] {
              return self.locked([&](auto& s) { return s.guardsMark(function, dim, dynamic, Millis(timeoutMs)); });
            });
            return py::cast(std::move(frame));
          },
          py::arg("key"), py::arg("dim"), py::arg("dynamic"), py::arg("timeout_ms") = 10000,
          "mark_dynamic / mark_static of a dim (\"L['x'].size()[0]\") or an int (\"L['n']\").");
}

void bindStack(py::module_& m) {
  auto stack = py::class_<PyStack, std::shared_ptr<PyStack>>(m, "Stack", "A connection to a running kiln stack.");
  stack
      .def_static(
          "connect",
          [](const std::string& where, int64_t timeoutMs) {
            return withoutGil([&] { return PyStack::connect(where, Millis(timeoutMs)); });
          },
          py::arg("where") = "", py::arg("timeout_ms") = 5000,
          "Connects to the stack at a run dir or broker endpoint (empty: $KILN_RUN_DIR or "
          "the default stack); KilnError(code='unavailable') if no launcher answers.")
      .def(
          "info",
          [](PyStack& self, const std::string& service, int64_t timeoutMs) {
            return toDict(withoutGil([&] {
              return self.locked([&](auto& s) { return s.info(service, Millis(timeoutMs)); });
            }));
          },
          py::arg("service"), py::arg("timeout_ms") = 5000,
          "What `service` (or 'kiln.launcher') says about itself.")
      .def(
          "ping",
          [](PyStack& self, const std::string& service, const py::bytes& payload,
             int64_t timeoutMs) {
            std::string bytes = payload;
            return py::bytes(withoutGil([&] {
              return self.locked(
                  [&](auto& s) { return s.ping(service, bytes, Millis(timeoutMs)); });
            }));
          },
          py::arg("service"), py::arg("payload") = py::bytes(), py::arg("timeout_ms") = 5000,
          "Echoes `payload` through `service`; returns the bytes that came back.")
      .def(
          "status",
          [](PyStack& self, int64_t timeoutMs) {
            return toDict(withoutGil(
                [&] { return self.locked([&](auto& s) { return s.status(Millis(timeoutMs)); }); }));
          },
          py::arg("timeout_ms") = 5000, "The launcher's view of every service and worker.")
      .def(
          "down",
          [](PyStack& self, int64_t timeoutMs) {
            withoutGil([&] { self.locked([&](auto& s) { s.down(Millis(timeoutMs)); }); });
          },
          py::arg("timeout_ms") = 5000,
          "Asks the launcher to stop every service and exit; returns once it agreed.")
      .def(
          "compile",
          [](PyStack& self, py::handle graph, const std::string& target, int64_t timeoutMs) {
            const ir::Graph& g = graphOf(graph);
            client::Compiled compiled = withoutGil([&] {
              return self.locked([&](auto& s) { return s.compile(g, target, Millis(timeoutMs)); });
            });
            return py::make_tuple(py::bytes(compiled.artifact), compiled.cacheHit);
          },
          py::arg("graph"), py::arg("target") = "cpu", py::arg("timeout_ms") = 120000,
          "Compiles a kiln.ir.Graph through the codegen service: (artifact bytes, cache hit).")
      .def(
          "decide",
          [](PyStack& self, const GuardSym& question, const std::vector<GuardSym>& facts,
             uint32_t timeoutMs, uint32_t budgetMs, int64_t rpcTimeoutMs) {
            std::vector<sym::Expr> exprs;
            for (const GuardSym& f : facts) {
              if (f.owner != question.owner)
                throw Error(ErrorCode::InvalidArgument, "decide: a fact over another guard set's symbols");
              exprs.push_back(f.expr);
            }
            shapes::Decision d = withoutGil([&] {
              return self.locked([&](auto& s) {
                return s.decide(question.expr, exprs, {timeoutMs, budgetMs}, Millis(rpcTimeoutMs));
              });
            });
            py::object answer = d.answer == shapes::Answer::True    ? py::object(py::bool_(true))
                                : d.answer == shapes::Answer::False ? py::object(py::bool_(false))
                                                                    : py::object(py::none());
            return py::make_tuple(answer, d.how);
          },
          py::arg("question"), py::arg("facts") = std::vector<GuardSym>{}, py::arg("z3_timeout_ms") = 200,
          py::arg("z3_budget_ms") = 2000, py::arg("timeout_ms") = 30000,
          "Whether a relation over kiln.guards.Sym symbols holds for every binding within their "
          "ranges that satisfies `facts`, through the shapes service: (True | False | None for "
          "unknown, how).")
      .def(
          "check_constraints",
          [](PyStack& self, const py::bytes& guardSet, const std::vector<py::dict>& dims,
             int64_t timeoutMs) {
            guards::GuardSet set = guards::guardSetFromBytes(std::string(guardSet));
            std::vector<shapes::DimSpec> spec;
            for (const py::dict& d : dims) {
              const auto name = d["symbol"].cast<std::string>();
              auto symbol = set.table().lookup(name);
              if (!symbol)
                throw Error(ErrorCode::InvalidArgument, "check_constraints: the guard set has no symbol " + name);
              shapes::DimSpec dim{d["source"].cast<std::string>(), *symbol, d["dim"].cast<std::string>()};
              if (d.contains("min") && !d["min"].is_none()) dim.range.lo = d["min"].cast<int64_t>();
              if (d.contains("max") && !d["max"].is_none()) dim.range.hi = d["max"].cast<int64_t>();
              spec.push_back(std::move(dim));
            }
            std::string reply = withoutGil([&] {
              shapes::ConstraintReport report = self.locked([&](auto& s) {
                return s.checkConstraints(set.table(), spec, set.shapeGuards(), {}, Millis(timeoutMs));
              });
              capnp::MallocMessageBuilder message;
              shapes::writeReport(report, message.initRoot<schema::CheckConstraintsReply>());
              auto flat = capnp::messageToFlatArray(message);
              return std::string(reinterpret_cast<const char*>(flat.asBytes().begin()), flat.asBytes().size());
            });
            return capnpDecode("CheckConstraintsReply", reply);
          },
          py::arg("guards"), py::arg("dims"), py::arg("timeout_ms") = 30000,
          "The shape guards of a guard set (bytes) against the user's Dims ({source, symbol, dim, "
          "min, max} each), through the shapes service: {violations: [{kind, dims, message, fix}], "
          "text, asserts: [{condition (a SymExpr), dims, message}]} (docs/shapes.md).")
      .def(
          "simplify_guards",
          [](PyStack& self, const py::bytes& guardSet, int64_t timeoutMs) {
            std::string in = guardSet;
            std::string out = withoutGil([&] {
              return self.locked([&](auto& s) {
                return guards::toBytes(
                    s.simplifyGuards(guards::guardSetFromBytes(in), {}, Millis(timeoutMs)));
              });
            });
            return py::bytes(out);
          },
          py::arg("guards"), py::arg("timeout_ms") = 30000,
          "A guard set's bytes with its shape guards simplified by the shapes service "
          "(fewer, equivalent: docs/shapes.md).")
      .def(
          "partition",
          [](PyStack& self, py::handle graph, std::vector<bool> requiresGrad, double memoryBudget,
             int64_t timeoutMs) {
            const ir::Graph& g = graphOf(graph);
            client::Partitioned p = withoutGil([&] {
              return self.locked([&](auto& s) {
                return s.partition(g, requiresGrad, memoryBudget, Millis(timeoutMs));
              });
            });
            py::object fromBytes = py::module_::import("kiln.ir").attr("Graph").attr("from_bytes");
            py::dict out;
            out["forward"] = fromBytes(py::bytes(ir::toBytes(p.forward)));
            out["backward"] = fromBytes(py::bytes(ir::toBytes(p.backward)));
            out["user_outputs"] = p.userOutputs;
            out["mutated_inputs"] = p.mutatedInputs;
            out["saved"] = p.saved;
            out["tangent_of"] = p.tangentOf;
            out["grad_of"] = p.gradOf;
            out["recomputed"] = p.recomputed;
            return out;
          },
          py::arg("graph"), py::arg("requires_grad"), py::arg("memory_budget") = 0.5,
          py::arg("timeout_ms") = 60000,
          "Functionalizes, differentiates and partitions a kiln.ir.Graph through the partitioner "
          "service: {forward, backward, user_outputs, mutated_inputs, saved, tangent_of, grad_of, "
          "recomputed}.")
      .def(
          "trace",
          [](PyStack& self, const std::string& request, int64_t timeoutMs) {
            std::string reply = withoutGil([&] {
              return self.locked([&](auto& s) { return s.trace(request, Millis(timeoutMs)); });
            });
            return py::bytes(reply);
          },
          py::arg("request"), py::arg("timeout_ms") = 60000,
          "Traces through the tracer service: TraceRequest bytes in, TraceReply bytes out.")
      .def(
          "shm", [](PyStack& self) { return withoutGil([&] { return self.store(); }); },
          "The stack's shared-memory store (attached once, then shared).")
      .def_property_readonly("run_dir",
                             [](const PyStack& self) -> std::optional<std::string> {
                               if (self.runDir().empty()) return std::nullopt;
                               return self.runDir();
                             })
      .def_property_readonly("endpoint", &PyStack::endpoint)
      .def("__repr__", [](const PyStack& self) {
        return fmt::format("<kiln.Stack endpoint='{}'>", self.endpoint());
      });
  bindStackGuards(stack);
}

void bindShm(py::module_& m) {
  py::class_<ShmBuffer>(m, "ShmBuffer", py::buffer_protocol(),
                        "The bytes of one tensor in shared memory (writable, zero-copy).")
      .def_buffer([](ShmBuffer& self) {
        return py::buffer_info(self.view.data, 1, py::format_descriptor<uint8_t>::format(), 1,
                               {static_cast<py::ssize_t>(self.view.bytes)}, {1});
      })
      .def_property_readonly("id", [](const ShmBuffer& self) { return self.view.id; })
      .def_property_readonly("nbytes", [](const ShmBuffer& self) { return self.view.bytes; })
      .def_property_readonly("meta", [](const ShmBuffer& self) { return toDict(self.view.meta); });

  py::class_<shm::Store, std::shared_ptr<shm::Store>>(
      m, "ShmStore", "A stack's shared-memory segment of tensors, addressed by id.")
      .def_static(
          "attach",
          [](const std::string& segmentName) {
            return withoutGil(
                [&] { return std::make_shared<shm::Store>(shm::Store::attach(segmentName)); });
          },
          py::arg("segment_name"), "Attaches to a segment by name; KilnError(code='not_found').")
      .def_static(
          "for_run_dir",
          [](const std::string& runDir) {
            return withoutGil([&] {
              const auto name = client::resolveStack(runDir).segmentName();
              return std::make_shared<shm::Store>(shm::Store::attach(name));
            });
          },
          py::arg("run_dir") = "",
          "Attaches to the segment of the stack at `run_dir` (empty: $KILN_RUN_DIR or the "
          "default stack), without talking to its launcher.")
      .def(
          "allocate",
          [](shm::Store& self, std::vector<int64_t> sizes, const std::string& dtype,
             std::optional<std::vector<int64_t>> strides, int64_t storageOffset, bool pinned) {
            shm::TensorMeta meta = shm::TensorMeta::contiguous(parseDType(dtype), std::move(sizes));
            if (strides) meta.strides = std::move(*strides);
            meta.storageOffset = storageOffset;
            return withoutGil([&] {
              return self.allocate(meta, pinned ? shm::Lifetime::Pinned : shm::Lifetime::Leased);
            });
          },
          py::arg("sizes"), py::arg("dtype"), py::arg("strides") = py::none(),
          py::arg("storage_offset") = 0, py::arg("pinned") = true,
          "Makes room for an uninitialized tensor (row-major unless `strides` is given); "
          "returns its id. Pinned: kept until free(id); else freed with its last lease.")
      .def(
          "buffer",
          [](const std::shared_ptr<shm::Store>& self, shm::TensorId id) {
            return withoutGil([&] { return ShmBuffer{self, self->open(id)}; });
          },
          py::arg("id"),
          "A writable buffer on the tensor's bytes, from its first element (takes a lease "
          "for this process); KilnError(code='not_found') if there is no such tensor.")
      .def(
          "meta",
          [](shm::Store& self, shm::TensorId id) {
            for (const auto& info : withoutGil([&] { return self.list(); }))
              if (info.id == id) return toDict(info);
            throw Error(ErrorCode::NotFound, fmt::format("no tensor {} in shared memory", id));
          },
          py::arg("id"), "dtype, sizes, strides, storage_offset, lifetime, bytes, lease_holders.")
      .def(
          "release",
          [](shm::Store& self, shm::TensorId id) { withoutGil([&] { self.release(id); }); },
          py::arg("id"), "Drops this process's lease on the tensor.")
      .def(
          "free", [](shm::Store& self, shm::TensorId id) { withoutGil([&] { self.free(id); }); },
          py::arg("id"), "Frees the tensor now, whatever its leases; views on it become invalid.")
      .def(
          "list",
          [](shm::Store& self) {
            py::list out;
            for (const auto& info : withoutGil([&] { return self.list(); }))
              out.append(toDict(info));
            return out;
          },
          "Every live tensor, by increasing id.")
      .def(
          "usage",
          [](shm::Store& self) { return toDict(withoutGil([&] { return self.usage(); })); },
          "Capacity, bytes used and free, tensor count.")
      .def_property_readonly("name", &shm::Store::name)
      .def_property_readonly("current", &shm::Store::current,
                             "False once the stack's segment was removed or replaced.")
      .def("__repr__",
           [](const shm::Store& self) { return fmt::format("<kiln.ShmStore '{}'>", self.name()); });
}

} // namespace
} // namespace kiln::python

PYBIND11_MODULE(_kiln, m) {
  m.doc() = "kiln's native bindings; use the `kiln` package instead.";
  kiln::python::bindError(m);
  kiln::python::bindStack(m);
  kiln::python::bindShm(m);
  kiln::python::bindIr(m);
  kiln::python::bindCapnp(m);
  kiln::python::bindGuards(m);
  kiln::python::bindProgram(m);
  if (kiln_frame_hook_init(m.ptr()) < 0) throw py::error_already_set();
}
