// The bytecode evaluator: frames of typed variables over a TraceRequest.
#include <capnp/message.h>
#include <capnp/serialize.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <cstring>
#include <functional>
#include <map>

#include "kiln/common/error.h"
#include "kiln/guards/wire.h"
#include "kiln/ir/op_registry.h"
#include "kiln/ir/wire.h"
#include "kiln/sym/eval.h"
#include "kiln/sym/print.h"
#include "kiln/sym/range.h"
#include "kiln/tracer/tracer.h"
#include "aten.h"
#include "composite.h"
#include "liveness.h"
#include "modules.h"
#include "object_source.h"
#include "sessions.h"
#include "tracer_state.h"

namespace kiln::tracer {

// The builtin types kiln's values may have, by the names the SDK gives them.
const std::set<std::string>& builtinTypes() {
  static const std::set<std::string> names = {"builtins.int",  "builtins.float", "builtins.bool",  "builtins.str",
                                              "builtins.tuple", "builtins.list", "builtins.dict",  "builtins.set",
                                              "builtins.object", "builtins.type", "builtins.frozenset", "builtins.slice",
                                              "builtins.range"};
  return names;
}

std::string kindName(Kind kind) {
  switch (kind) {
  case Kind::None: return "None";
  case Kind::Bool: return "bool";
  case Kind::Int: return "int";
  case Kind::Float: return "float";
  case Kind::Str: return "str";
  case Kind::Ellipsis: return "Ellipsis";
  case Kind::Tensor: return "tensor";
  case Kind::Tuple: return "tuple";
  case Kind::List: return "list";
  case Kind::Dict: return "dict";
  case Kind::Range: return "range";
  case Kind::Slice: return "slice";
  case Kind::Iterator: return "iterator";
  case Kind::Null: return "NULL";
  case Kind::Function: return "function";
  case Kind::Cell: return "cell";
  case Kind::Builtin: return "builtin";
  case Kind::PyModule: return "module";
  case Kind::NnModule: return "nn.Module";
  case Kind::Object: return "object";
  case Kind::Method: return "method";
  case Kind::DType: return "dtype";
  case Kind::Device: return "device";
  case Kind::TypeObject: return "type";
  case Kind::GradMode: return "grad mode";
  case Kind::Autocast: return "autocast";
  case Kind::Set: return "set";
  case Kind::Super: return "super";
  }
  return "?";
}

namespace {

constexpr size_t kMaxInstructions = 1'000'000; // an unrolled loop past this is not worth compiling
constexpr size_t kMaxDepth = 64;              // inlined calls

struct Frame {
  const FunctionInfo* fn = nullptr;
  schema::Code::Reader code;
  std::map<std::string, Var> locals;
  std::map<std::string, Var> cells;
  std::vector<Var> stack;
  size_t pc = 0;
  std::vector<std::string> kwNames;
  bool v312 = false;
  int line = 0;
  // A generator's frame runs to its end at once: what it yields, in order (its
  // consumers read them as an iterator; generator expressions are the common case).
  bool generator = false;
  std::vector<Var> yields;

  Var pop() {
    if (stack.empty()) throw Error(ErrorCode::Malformed, "tracer: the bytecode popped an empty stack");
    Var v = stack.back();
    stack.pop_back();
    return v;
  }
  std::vector<Var> popN(size_t n) {
    if (stack.size() < n) throw Error(ErrorCode::Malformed, "tracer: the bytecode popped an empty stack");
    std::vector<Var> out(stack.end() - static_cast<std::ptrdiff_t>(n), stack.end());
    stack.resize(stack.size() - n);
    return out;
  }
  Var& top(size_t k = 0) {
    if (stack.size() <= k) throw Error(ErrorCode::Malformed, "tracer: the bytecode read past the stack");
    return stack[stack.size() - 1 - k];
  }
};

std::string pathText(const Path& p) {
  guards::GuardSet scratch;
  return scratch.source(scratch.path(p));
}

Path extend(const Path& p, guards::Step s) {
  Path out = p;
  out.push_back(std::move(s));
  return out;
}

Path readPath(capnp::List<schema::GuardStep>::Reader in) {
  Path p;
  for (auto s : in) p.push_back(guards::fromWire(s));
  return p;
}

// Where a trace refused at its root frame breaks instead (docs/tracer.md, "Graph
// breaks"): instructions [start, instruction] run eagerly, at their `arrival`-th
// execution (a loop reaches them again).
struct BreakAt {
  size_t start = 0;
  size_t instruction = 0;
  uint32_t arrival = 0;
  std::string reason, file;
  int line = 0;
};

// Thrown at the root frame's arrival at the break: its state just before it.
struct Stopped {
  std::vector<Var> stack;
  std::map<std::string, Var> locals;
  std::map<std::string, Var> cells;
  bool generator = false;
};

// Instructions a break cannot run apart from their frame: they read or write its
// locals, cells, exception state or generator state, or jump (a conditional jump's
// break is the SDK's: it decides the branch).
bool runsApart(const std::string& op) {
  static const std::set<std::string> bound = {
      "STORE_FAST", "DELETE_FAST", "LOAD_FAST_AND_CLEAR", "LOAD_CLOSURE", "MAKE_CELL", "COPY_FREE_VARS",
      "RETURN_GENERATOR", "YIELD_VALUE", "SEND", "GET_AWAITABLE", "GET_AITER", "GET_ANEXT", "END_ASYNC_FOR",
      "BEFORE_ASYNC_WITH", "PUSH_EXC_INFO", "POP_EXCEPT", "RERAISE", "CHECK_EXC_MATCH", "CHECK_EG_MATCH",
      "WITH_EXCEPT_START", "CLEANUP_THROW", "LOAD_LOCALS", "LOAD_NAME", "STORE_NAME", "DELETE_NAME",
      "IMPORT_STAR", "SETUP_ANNOTATIONS", "FOR_ITER", "RESUME"};
  return !bound.count(op);
}

class Evaluator : public TraceState {
public:
  Evaluator(schema::TraceRequest::Reader request, std::optional<BreakAt> stopAt, ObjectSource* source)
      : request_(request), source_(source), stopAt_(std::move(stopAt)) {
    frame = guards::fromWire(request.getFrame());
    guards.globals = guards::fromWire(request.getState());
    if (guards.globals.gradEnabled) gradEnabled = *guards.globals.gradEnabled;
    for (const guards::Autocast& a : guards.globals.autocast)
      autocast.of(a.device) = a.enabled ? std::optional<DType>(a.dtype) : std::nullopt;
    for (auto a : request.getArgs()) describe(a);
    for (auto k : request.getKwargs()) describe(k.getValue());
    for (auto o : request.getObjects()) describe(o);
    for (auto blob : request.getObjectMessages()) {
      objectMessages_.push_back(std::make_unique<CopiedMessage>(blob.begin(), blob.size(), "an object message"));
      describe(objectMessages_.back()->reader.getRoot<schema::ObjectDesc>());
    }
    if (source_)
      for (auto d : source_->received()) describe(d);
    guards.call.positional = request.getArgs().size();
    for (auto k : request.getKwargs()) guards.call.keywords.emplace_back(k.getName().cStr());
    std::sort(guards.call.keywords.begin(), guards.call.keywords.end());
  }

  // Traces the request into `reply`; or, where the trace was refused at an instruction of
  // the root frame and may break there, writes nothing and returns that break point
  // (the caller traces again with it: the state before it is then untouched by the
  // refused instruction's partial work).
  std::optional<BreakAt> run(schema::TraceReply::Builder reply) {
    try {
      std::vector<Var> args;
      for (auto a : request_.getArgs()) args.push_back(realize(readPath(a.getPath())));
      Kwargs kwargs;
      for (auto k : request_.getKwargs()) kwargs.emplace_back(k.getName().cStr(), realize(readPath(k.getValue().getPath())));
      auto info = std::make_shared<FunctionInfo>();
      info->code = request_.getCode();
      auto callee = request_.getCallee();
      if (callee.isFunction()) fillFunction(*info, callee.getFunction(), readPath(callee.getPath()));
      info->path.reset(); // the called function itself: its globals are the G[...] roots
      rootModule_ = info->module;
      root_ = info;
      Var result = inline_(*info, std::move(args), kwargs, 0);
      write(result, reply.initTraced());
    } catch (const NeedObjects& need) {
      auto out = reply.initNeedObjects(static_cast<unsigned>(need.paths.size()));
      for (unsigned k = 0; k < out.size(); ++k) {
        auto steps = out.init(k, static_cast<unsigned>(need.paths[k].size()));
        for (unsigned j = 0; j < steps.size(); ++j) guards::toWire(need.paths[k][j], steps[j]);
      }
    } catch (const Stopped& stopped) {
      try {
        writeBreak(stopped, reply);
      } catch (const Unsupported& u) {
        return refuse(u.reason, reply);
      }
    } catch (const Unsupported& u) {
      return refuse(u.reason, reply);
    } catch (const Error& e) {
      if (e.code() == ErrorCode::Malformed) throw;
      return refuse(e.message(), reply);
    }
    return std::nullopt;
  }

private:
  // ---- graph breaks ----------------------------------------------------------

  std::optional<BreakAt> refuse(const std::string& reason, schema::TraceReply::Builder reply) {
    if (!request_.getFullgraph() && !stopAt_ && rootPc_) {
      auto instructions = request_.getCode().getInstructions();
      BreakAt at{*rootPc_, *rootPc_, arrivals_[*rootPc_], reason, file_, line_};
      // A call runs with the KW_NAMES and PRECALL before it (3.11), EXTENDED_ARGs included.
      auto opname = [&](size_t k) { return std::string(instructions[static_cast<unsigned>(k)].getOpname().cStr()); };
      while (at.start > 0 && (opname(at.start - 1) == "KW_NAMES" || opname(at.start - 1) == "PRECALL" ||
                              opname(at.start - 1) == "EXTENDED_ARG"))
        --at.start;
      return at;
    }
    auto out = reply.initUnsupported();
    out.setReason(stopAt_ ? stopAt_->reason + "; no graph break there: " + reason : reason);
    out.setFilename(stopAt_ ? stopAt_->file : file_);
    out.setLine(stopAt_ ? stopAt_->line : line_);
    return std::nullopt;
  }

  // The root frame at the break: the graph up to it, whose outputs rebuild the value
  // stack and the live locals (TraceResult.graphBreak).
  void writeBreak(const Stopped& stopped, schema::TraceReply::Builder reply) {
    const BreakAt& at = *stopAt_;
    schema::Code::Reader code = request_.getCode();
    std::string op = code.getInstructions()[static_cast<unsigned>(at.instruction)].getOpname().cStr();
    if (stopped.generator) unsupported("a graph break in a generator");
    if (!runsApart(op)) unsupported("a graph break at " + op);
    std::set<std::string> live = liveLocals(code, at.start);
    breakCells_ = &stopped.cells;
    std::vector<ir::ValueId> outputs;
    auto traced = reply.initTraced();
    auto out = traced.initGraphBreak();
    out.setIsSet(true);
    out.setStart(static_cast<uint32_t>(at.start));
    out.setInstruction(static_cast<uint32_t>(at.instruction));
    out.setReason(at.reason);
    out.setFilename(at.file);
    out.setLine(at.line);
    std::vector<std::pair<std::string, Var>> locals;
    for (auto name : code.getVarnames())
      if (auto it = stopped.locals.find(name.cStr()); it != stopped.locals.end() && live.count(it->first))
        locals.emplace_back(it->first, it->second);
    // A mutable object the state holds twice (a list on the stack and in a local) is one
    // object again: later places refer to the first; one inside another part is refused.
    std::vector<Var> top = stopped.stack;
    for (const auto& [name, v] : locals) top.push_back(v);
    std::map<const VarNode*, uint32_t> first;
    std::map<const VarNode*, int> count;
    std::function<void(const Var&)> countIn = [&](const Var& v) {
      ++count[v.get()];
      if (v->path) return;
      for (const Var& item : v->items) countIn(item);
      if (v->kind == Kind::Method && v->self) countIn(v->self); // `xs.sort` holds xs
      if (v->kind == Kind::Object) // made here: what its __dict__ and items hold
        for (const Var& part : {v->attrs, v->storage})
          if (part) for (const Var& item : part->items) countIn(item);
    };
    for (const Var& v : top) countIn(v);
    auto mutableMade = [](const Var& v) {
      return !v->path && (v->kind == Kind::List || v->kind == Kind::Dict || v->kind == Kind::Iterator || v->kind == Kind::Object);
    };
    std::vector<Var> roots;
    for (const Effect& e : effects_) roots.push_back(e.value);
    for (const Var& v : top)
      if (std::find(roots.begin(), roots.end(), v) == roots.end()) roots.push_back(v);
    refuseSharedMade(roots);
    for (size_t k = 0; k < top.size(); ++k) {
      int atTop = 0;
      for (const Var& t : top) atTop += t == top[k];
      if (mutableMade(top[k]) && count[top[k].get()] > atTop)
        unsupported("a graph break with a " + kindName(top[k]->kind) + " both in the frame's state and inside it");
      first.emplace(top[k].get(), static_cast<uint32_t>(k));
    }
    auto place = [&](const Var& v, schema::OutputSpec::Builder o, uint32_t at) {
      auto seen = first.find(v.get());
      if (mutableMade(v) && seen != first.end() && seen->second < at) o.setSameAs(seen->second);
      else spec(v, o, outputs, true);
    };
    auto stack = out.initStack(static_cast<unsigned>(stopped.stack.size()));
    for (unsigned k = 0; k < stack.size(); ++k) place(stopped.stack[k], stack[k], k);
    auto named = out.initLocals(static_cast<unsigned>(locals.size()));
    for (unsigned k = 0; k < named.size(); ++k) {
      named[k].setName(locals[k].first);
      place(locals[k].second, named[k].initValue(), static_cast<uint32_t>(stack.size() + k));
    }
    auto cells = out.initCells(code.getCellvars().size());
    for (unsigned k = 0; k < cells.size(); ++k) {
      std::string name = code.getCellvars()[k].cStr();
      cells[k].setName(name);
      Var cell;
      if (auto it = stopped.cells.find(name); it != stopped.cells.end()) cell = it->second;
      else if (auto passed = stopped.locals.find(name); passed != stopped.locals.end() && passed->second->kind == Kind::Cell)
        cell = passed->second; // passed in (a resume function's), not read yet
      if (cell && cell->path) { // the call's own cell object: the same one goes on
        cells[k].setIsCell(true);
        cells[k].setIsSet(true);
        spec(cell, cells[k].initValue(), outputs, true);
        continue;
      }
      bool set = cell && !cell->items.empty();
      cells[k].setIsSet(set);
      if (set) spec(cell->items[0], cells[k].initValue(), outputs, true);
      else cells[k].initValue().initConstant().setNone();
    }
    traced.initOutputs().initConstant().setNone();
    writeGraph(outputs, traced);
  }

  // ---- objects of the call -------------------------------------------------

  void describe(schema::ObjectDesc::Reader d) { described_[pathText(readPath(d.getPath()))] = d; }

  // The description of the object at `path`: asked of the source where it has none yet, or
  // the trace ends with `needObjects`.
  schema::ObjectDesc::Reader lookup(const Path& path) {
    std::string key = pathText(path);
    auto it = described_.find(key);
    if (it != described_.end()) return it->second;
    if (!source_) throw NeedObjects{{path}};
    for (auto d : source_->await(path)) describe(d);
    it = described_.find(key);
    if (it == described_.end()) unsupported("the SDK did not describe " + key);
    return it->second;
  }

  bool has(const Path& path) { return described_.count(pathText(path)) != 0; }

  uint32_t node(const Path& path) { return guards.path(path); }

  // Whether two objects of the call, read through different paths (dataclasses' `f._field_type
  // is _FIELD`), are one object: each path guarded to be the object it is now.
  bool sameObjectOfTheCall(const Var& a, const Var& b) {
    for (const Var& v : {a, b})
      if (lookup(*v->path).isFunction() && lookup(*v->path).getFunction().getIsBound())
        unsupported("`is` of a bound method (a new object at each read)");
    for (const Var& v : {a, b}) {
      uint64_t id = lookup(*v->path).getId();
      guards.check(node(*v->path), guards::identityIs({id, request_.getScope(), "the object at " + pathText(*v->path)}));
    }
    return lookup(*a->path).getId() == lookup(*b->path).getId();
  }

  // The variable for the object at `path`, made (and guarded) once.
  Var realize(const Path& path) {
    std::string key = pathText(path);
    if (auto it = realized_.find(key); it != realized_.end()) return it->second;
    auto d = lookup(path);
    Var v = fromDescription(d, path);
    v->path = path;
    realized_[key] = v;
    if (d.isList() || d.isDict() || d.isObject() || d.isModule()) {
      // One mutable object reached through two paths is two variables: a change through one
      // the other would not see.
      auto [first, fresh] = mutablePaths_.emplace(d.getId(), key);
      if (!fresh && first->second != key && changed_.count(d.getId()))
        unsupported("an object of the call changed through " + first->second + " and read through " + key);
    }
    return v;
  }

  // Before a change to an object of the call (replayed by the SDK): refused where the trace
  // reached it through another path too, whose variable would not see it.
  void changing(const Var& v) {
    auto d = lookup(*v->path);
    std::string key = pathText(*v->path);
    for (const auto& [text, other] : realized_)
      if (other != v && other->path && text != key && has(*other->path) && lookup(*other->path).getId() == d.getId() &&
          (other->kind == Kind::List || other->kind == Kind::Dict || other->kind == Kind::Object || other->kind == Kind::NnModule))
        unsupported("changing an object of the call reached through " + key + " and " + text);
    changed_.insert(d.getId());
  }

  Var fromDescription(schema::ObjectDesc::Reader d, const Path& path) {
    guards::TypeRef type = guards::fromWire(d.getType());
    auto typeGuard = [&] { guards.check(node(path), guards::typeIs(type)); };
    switch (d.which()) {
    case schema::ObjectDesc::NONE:
      guards.check(node(path), guards::equals(guards::Constant{}));
      return none();
    case schema::ObjectDesc::BOOL:
      typeGuard();
      guards.check(node(path), guards::equals(guards::Constant{d.getBool()}));
      return boolean(d.getBool());
    case schema::ObjectDesc::INT:
      typeGuard();
      if (frame.dynamicInt(pathText(path))) {
        // Automatic dynamic made this int a symbol: a graph input of its own.
        std::string name = "s" + std::to_string(symbols_.next++);
        guards.symbol(name, node(path));
        sym::Expr s = table.declare(name, d.getInt(), sym::Range::unbounded());
        ir::ValueId id = graph.placeholder("arg" + std::to_string(inputs_.size()), ir::Value(s));
        inputs_.push_back({path, InputKind::Int});
        symbolSources_[s] = {id, -1};
        return integer(s);
      }
      guards.check(node(path), guards::equals(guards::Constant{d.getInt()}));
      return integer(table.integer(d.getInt()));
    case schema::ObjectDesc::FLOAT: {
      typeGuard();
      if (frame.dynamicFloat(pathText(path))) {
        // Automatic dynamic made this float a graph input (floats.cpp): guarded only
        // where Python needs its value.
        ir::ValueId id = graph.placeholder("arg" + std::to_string(inputs_.size()),
                                           ir::TensorMeta::contiguous(DType::Float64, {}, table));
        inputs_.push_back({path, InputKind::Float});
        floatInput(id, path, d.getFloat());
        return tracedFloat(id, d.getFloat());
      }
      guards.check(node(path), guards::equals(guards::Constant{d.getFloat()}));
      return floating(d.getFloat());
    }
    case schema::ObjectDesc::STR:
      typeGuard();
      guards.check(node(path), guards::equals(guards::Constant{std::string(d.getStr().cStr())}));
      return string(d.getStr().cStr());
    case schema::ObjectDesc::TENSOR: {
      // One Parameter reached by two paths (GPT-2's tied wte and lm_head weights) is one
      // graph input, each path guarded to be that object: one grad, its two parts summed in
      // the backward graph (two inputs made two grads for autograd to add). Parameters
      // only: other tensors are new objects at each call, which identity guards would
      // trace again for.
      bool parameter = type.module == "torch.nn.parameter" && type.qualname == "Parameter";
      if (auto seen = parameters_.find(d.getId()); parameter && seen != parameters_.end()) {
        guards::Identity same{d.getId(), request_.getScope(),
                              "the Parameter at " + pathText(seen->second.second)};
        guards.check(node(seen->second.second), guards::identityIs(same));
        guards.check(node(path), guards::identityIs(same));
        return seen->second.first;
      }
      Var v = input(guards::fromWire(d.getTensor()), path);
      if (parameter) parameters_.emplace(d.getId(), std::make_pair(v, path));
      return v;
    }
    case schema::ObjectDesc::LIST:
    case schema::ObjectDesc::TUPLE: {
      typeGuard();
      auto items = d.isList() ? d.getList() : d.getTuple();
      guards.check(node(path), guards::lengthIs(items.size()));
      std::vector<Var> vars;
      for (auto item : items) {
        describe(item);
        vars.push_back(realize(readPath(item.getPath())));
      }
      Var v = sequence(d.isList() ? Kind::List : Kind::Tuple, std::move(vars));
      if (type == sizeType()) v->type = type; // a torch.Size of the call stays one
      return v;
    }
    case schema::ObjectDesc::DICT: {
      typeGuard();
      Var v = make(Kind::Dict);
      std::vector<guards::Constant> keys;
      for (auto item : d.getDict()) {
        Var k = constantKey(item.getKey());
        keys.push_back(toConstant(k));
        describe(item.getValue());
        v->keys.push_back(k);
        v->items.push_back(realize(readPath(item.getValue().getPath())));
      }
      guards.check(node(path), guards::dictKeysAre(keys, false));
      return v;
    }
    case schema::ObjectDesc::FUNCTION: {
      // TODO(issue 6): guard the function by its code rather than its identity, so
      // that a new process with the same code reuses the entry.
      // A bound method (self.helper) is a new object at each read: its function is guarded.
      Path function = d.getFunction().getIsBound() ? extend(path, guards::attr("__func__")) : path;
      guards.check(node(function), guards::identityIs({d.getId(), request_.getScope(), "function " + std::string(d.getFunction().getCode().getQualname().cStr())}));
      Var v = make(Kind::Function);
      v->function = std::make_shared<FunctionInfo>();
      v->function->code = d.getFunction().getCode();
      fillFunction(*v->function, d.getFunction(), path);
      if (d.getFunction().getIsBound()) {
        describe(d.getFunction().getBound());
        // `obj.method`'s self is obj: the variable read through obj's path, not another one
        // at `obj.method.__self__` (changes through one must be seen through the other).
        Path parent(path.begin(), path.end() - (path.empty() ? 0 : 1));
        bool ofParent = !path.empty() && path.back().kind == guards::StepKind::Attr && has(parent) &&
                        lookup(parent).getId() == d.getFunction().getBound().getId();
        Var self = ofParent ? realize(parent) : realize(readPath(d.getFunction().getBound().getPath()));
        Var bound = make(Kind::Method);
        bound->self = self;
        bound->function = v->function;
        return bound;
      }
      return v;
    }
    case schema::ObjectDesc::MODULE: {
      typeGuard();
      for (auto named : {d.getModule().getParameters(), d.getModule().getBuffers(), d.getModule().getAttributes()})
        for (auto p : named) describe(p.getValue());
      guards.check(node(extend(path, guards::attr("training"))), guards::equals(guards::Constant{d.getModule().getTraining()}));
      Var v = make(Kind::NnModule);
      v->desc = d;
      v->type = type;
      for (auto t : d.getMro()) v->mro.push_back(guards::fromWire(t));
      return v;
    }
    case schema::ObjectDesc::PY_MODULE: {
      typeGuard(); // a module or an instance of a ModuleType subclass (torch 2.x's torch.backends)
      guards.check(node(extend(path, guards::attr("__name__"))), guards::equals(guards::Constant{std::string(d.getPyModule().cStr())}));
      Var v = make(Kind::PyModule);
      v->name = d.getPyModule().cStr();
      return v;
    }
    case schema::ObjectDesc::BUILTIN: // that callable, not another one passed or bound there later (act=F.gelu)
      guards.check(node(path), guards::identityIs({d.getId(), request_.getScope(), std::string(d.getBuiltin().cStr())}));
      return builtin(d.getBuiltin().cStr());
    case schema::ObjectDesc::TYPE_OBJECT: {
      Var v = make(Kind::TypeObject);
      v->type = guards::fromWire(d.getTypeObject());
      for (auto t : d.getMro()) v->mro.push_back(guards::fromWire(t));
      v->boolean = d.getPlainClass();
      return v;
    }
    case schema::ObjectDesc::DTYPE: { // torch's dtypes are one object each
      Var v = make(Kind::DType);
      v->dtype = static_cast<DType>(d.getDtype());
      guards.check(node(path), guards::identityIs({d.getId(), request_.getScope(), "dtype " + std::string(ir::name(v->dtype))}));
      return v;
    }
    case schema::ObjectDesc::DEVICE: { // equal devices are not one object: its type and index
      typeGuard();
      Var v = make(Kind::Device);
      v->device = {static_cast<ir::DeviceType>(d.getDevice().getType()), d.getDevice().getIndex()};
      guards.check(node(extend(path, guards::attr("type"))),
                   guards::equals(guards::Constant{std::string(v->device.type == ir::DeviceType::Cuda ? "cuda" : "cpu")}));
      int64_t index = v->device.index;
      guards.check(node(extend(path, guards::attr("index"))),
                   guards::equals(index < 0 ? guards::Constant{} : guards::Constant{index}));
      return v;
    }
    case schema::ObjectDesc::OBJECT: {
      typeGuard();
      Var v = make(Kind::Object);
      v->desc = d;
      v->type = type;
      for (auto t : d.getMro()) v->mro.push_back(guards::fromWire(t));
      return v;
    }
    case schema::ObjectDesc::CELL: { // its contents are read through it: a write is refused (the call's cell)
      typeGuard();
      Var cell = make(Kind::Cell);
      describe(d.getCell());
      cell->items.push_back(realize(readPath(d.getCell().getPath())));
      return cell;
    }
    case schema::ObjectDesc::EMPTY_CELL:
      typeGuard();
      return make(Kind::Cell);
    case schema::ObjectDesc::ATEN_OP: {
      typeGuard(); // an overload's `_name` ("aten::add.Tensor"), a packet's `_qualified_op_name` ("aten::add")
      auto op = d.getAtenOp();
      guards.check(node(extend(path, guards::attr(op.getOverload() ? "_name" : "_qualified_op_name"))),
                   guards::equals(guards::Constant{std::string(op.getQualifiedName().cStr())}));
      Var v = builtin(atenName(op));
      v->desc = d;
      return v;
    }
    case schema::ObjectDesc::UNSUPPORTED: unsupported(pathText(path) + " is " + std::string(d.getUnsupported().cStr()));
    }
    unsupported(pathText(path) + ": an object kiln cannot describe");
  }

  Var constantKey(schema::ObjectDesc::Reader k) {
    switch (k.which()) {
    case schema::ObjectDesc::STR: return string(k.getStr().cStr());
    case schema::ObjectDesc::INT: return integer(table.integer(k.getInt()));
    case schema::ObjectDesc::BOOL: return boolean(k.getBool());
    case schema::ObjectDesc::NONE: return none();
    default: unsupported("a dict key that is not a str, int, bool or None");
    }
  }

  guards::Constant toConstant(const Var& v) {
    switch (v->kind) {
    case Kind::None: return guards::Constant{};
    case Kind::Bool: return guards::Constant{v->boolean};
    case Kind::Int:
      if (auto c = v->symbolic.asInteger()) return guards::Constant{*c};
      break;
    case Kind::Float: return guards::Constant{number(v)};
    case Kind::Str: return guards::Constant{v->name};
    default: break;
    }
    unsupported("a " + kindName(v->kind) + " used as a constant");
  }

  // A tensor of the call: a graph input, guarded as it is, its dynamic dims symbols.
  Var input(const guards::TensorInput& t, const Path& path) {
    uint32_t at = node(path);
    std::vector<sym::Expr> sizes = guards::guardTensor(guards, at, t, frame, symbols_);
    std::vector<std::pair<sym::Expr, int64_t>> dynamicDims;
    ir::TensorMeta meta;
    meta.dtype = t.dtype;
    meta.device = t.device;
    meta.requiresGrad = t.requiresGrad;
    for (size_t k = 0; k < sizes.size(); ++k) {
      if (auto c = sizes[k].asInteger()) {
        meta.sizes.push_back(table.integer(*c));
      } else {
        std::string name = sizes[k].name();
        sym::Expr s = table.lookup(name) ? *table.lookup(name) : table.declare(name, t.sizes[k], {2, sym::kInf});
        meta.sizes.push_back(s);
        dynamicDims.push_back({s, static_cast<int64_t>(k)});
      }
    }
    if (auto broadcast = guards::broadcastLayout(t)) { // contiguous but for expanded dims (stride 0)
      ir::Shape rest;
      for (size_t k = 0; k < meta.dim(); ++k)
        if (!(*broadcast)[k]) rest.push_back(meta.sizes[k]);
      ir::Shape restStrides = ir::contiguousStrides(rest, table);
      for (size_t k = 0, next = 0; k < meta.dim(); ++k)
        meta.strides.push_back((*broadcast)[k] ? table.integer(0) : restStrides[next++]);
    } else {
      for (int64_t s : t.strides) meta.strides.push_back(table.integer(s));
    }
    meta.storageOffset = table.integer(t.storageOffset);
    ir::ValueId id = graph.placeholder("arg" + std::to_string(inputs_.size()), meta);
    inputs_.push_back({path, InputKind::Tensor});
    tensorInputs_.emplace(id, path);
    for (const auto& [s, dim] : dynamicDims) symbolSources_.emplace(s, std::make_pair(id, dim));
    if (!std::holds_alternative<std::monostate>(t.value)) scalarInputs_[id] = {path, t.value};
    return tensor(id);
  }

  std::pair<ir::ValueId, ir::ValueId> randomStream(ir::Device device) override {
    auto seed = std::find_if(seeds_.begin(), seeds_.end(), [&](const auto& s) { return s.first == device; });
    if (seed == seeds_.end()) {
      ir::ValueId id = graph.placeholder("arg" + std::to_string(inputs_.size()),
                                         ir::TensorMeta::contiguous(DType::Int64, {}, table, device));
      inputs_.push_back({{}, InputKind::Seed});
      seed = seeds_.insert(seeds_.end(), {device, id});
    }
    // 2^40 elements a stream: no tensor reaches into the next one's window.
    int64_t start = static_cast<int64_t>(streams_++) << 40;
    ir::ValueId offset = graph.call("full", {}, {{"size", std::vector<int64_t>{}}, {"fill_value", start},
                                                 {"dtype", DType::Int64}, {"device", ir::toString(device)}});
    return {seed->second, offset};
  }

  std::optional<Var> itemOfInput(const Var& t) override {
    auto it = scalarInputs_.find(t->value);
    if (it == scalarInputs_.end()) return std::nullopt;
    for (const ir::Node& n : graph.nodes()) // a write may have changed it since the call
      if (const ir::OpInfo* info = ir::findOp(n.target); info && info->mutates) return std::nullopt;
    auto& [path, value, item] = it->second;
    if (item) return item;
    Path source = extend(path, guards::value());
    if (auto* i = std::get_if<int64_t>(&value)) {
      std::string name = "s" + std::to_string(symbols_.next++);
      guards.symbol(name, node(source));
      sym::Expr s = table.declare(name, *i, sym::Range::unbounded());
      ir::ValueId id = graph.placeholder("arg" + std::to_string(inputs_.size()), ir::Value(s));
      inputs_.push_back({path, InputKind::Int});
      symbolSources_[s] = {id, -1};
      item = integer(s);
    } else {
      floatInput(t->value, source, std::get<double>(value));
      item = tracedFloat(float64Scalar(t)->value, std::get<double>(value));
    }
    return item;
  }

  void fillFunction(FunctionInfo& info, schema::FunctionDesc::Reader f, const Path& path) {
    info.module = f.getModule().cStr();
    info.path = path;
    for (auto d : f.getDefaults()) {
      describe(d);
      info.defaults.push_back(realize(readPath(d.getPath())));
    }
    for (auto k : f.getKwDefaults()) {
      describe(k.getValue());
      info.kwDefaults.emplace_back(k.getName().cStr(), realize(readPath(k.getValue().getPath())));
    }
    for (auto c : f.getClosure()) {
      describe(c);
      Var cell = make(Kind::Cell);
      cell->shared = true;
      cell->items.push_back(realize(readPath(c.getPath())));
      info.closure.push_back(cell);
    }
  }

  // ---- calls ---------------------------------------------------------------

  Var inline_(const FunctionInfo& fn, std::vector<Var> args, const Kwargs& kwargs, size_t depth) {
    if (depth > kMaxDepth) unsupported("calls nested deeper than " + std::to_string(kMaxDepth));
    schema::Code::Reader code = fn.code;
    std::string version = code.getPythonVersion().cStr();
    if (version != "3.11" && version != "3.12") unsupported("Python " + version + " bytecode");
    if (code.getFlags() & (0x80 | 0x100 | 0x200)) unsupported("coroutines");
    Frame f;
    f.fn = &fn;
    f.code = code;
    f.generator = code.getFlags() & 0x20;
    f.v312 = version == "3.12";
    bind(f, fn, std::move(args), kwargs);
    for (size_t k = 0; k < code.getFreevars().size(); ++k) {
      if (k >= fn.closure.size()) throw Error(ErrorCode::Malformed, "tracer: a closure shorter than co_freevars");
      f.cells[code.getFreevars()[static_cast<unsigned>(k)].cStr()] = fn.closure[k];
    }
    return execute(f, depth);
  }

  void bind(Frame& f, const FunctionInfo& fn, std::vector<Var> args, const Kwargs& kwargs) {
    auto code = f.code;
    auto names = code.getVarnames();
    size_t positional = code.getArgCount(), kwOnly = code.getKwOnlyArgCount(), posOnly = code.getPosOnlyArgCount();
    bool varargs = code.getFlags() & 0x04, varkw = code.getFlags() & 0x08;
    auto name = [&](size_t k) { return std::string(names[static_cast<unsigned>(k)].cStr()); };
    if (names.size() < positional + kwOnly + varargs + varkw) throw Error(ErrorCode::Malformed, "tracer: too few varnames");
    for (size_t k = 0; k < positional && k < args.size(); ++k) f.locals[name(k)] = args[k];
    if (args.size() > positional) {
      if (!varargs) unsupported(std::string(code.getQualname().cStr()) + "() given too many positional arguments");
      f.locals[name(positional + kwOnly)] =
          sequence(Kind::Tuple, std::vector<Var>(args.begin() + static_cast<std::ptrdiff_t>(positional), args.end()));
    } else if (varargs) {
      f.locals[name(positional + kwOnly)] = sequence(Kind::Tuple, {});
    }
    Var extra = make(Kind::Dict);
    for (const auto& [n, v] : kwargs) {
      bool found = false;
      for (size_t k = posOnly; k < positional + kwOnly; ++k)
        if (name(k) == n) {
          if (f.locals.count(n)) unsupported(std::string(code.getQualname().cStr()) + "() got '" + n + "' twice");
          f.locals[n] = v;
          found = true;
        }
      if (!found) {
        if (!varkw) unsupported(std::string(code.getQualname().cStr()) + "() got an unexpected keyword '" + n + "'");
        extra->keys.push_back(string(n));
        extra->items.push_back(v);
      }
    }
    if (varkw) f.locals[name(positional + kwOnly + (varargs ? 1 : 0))] = extra;
    size_t firstDefault = positional - std::min(positional, fn.defaults.size());
    for (size_t k = 0; k < positional; ++k) {
      if (f.locals.count(name(k))) continue;
      if (k < firstDefault) unsupported(std::string(code.getQualname().cStr()) + "() missing argument '" + name(k) + "'");
      f.locals[name(k)] = fn.defaults[k - firstDefault];
    }
    for (size_t k = positional; k < positional + kwOnly; ++k) {
      if (f.locals.count(name(k))) continue;
      bool found = false;
      for (const auto& [n, v] : fn.kwDefaults)
        if (n == name(k)) {
          f.locals[n] = v;
          found = true;
        }
      if (!found) unsupported(std::string(code.getQualname().cStr()) + "() missing keyword argument '" + name(k) + "'");
    }
  }

  Var callVar(const Var& callee, std::vector<Var> args, const Kwargs& kwargs, size_t depth) {
    switch (callee->kind) {
    case Kind::Function: return inline_(*callee->function, std::move(args), kwargs, depth + 1);
    case Kind::Method:
      if (callee->function) {
        args.insert(args.begin(), callee->self);
        return inline_(*callee->function, std::move(args), kwargs, depth + 1);
      }
      return callMethod(callee->self, callee->name, std::move(args), kwargs, depth);
    case Kind::Builtin:
      if (callee->desc && callee->desc->isAtenOp())
        return callAten(*this, callee->desc->getAtenOp(), std::move(args), kwargs,
                        [&](schema::Constant::Reader c) { return constant(c); });
      return callBuiltin(callee->name, std::move(args), kwargs, depth);
    case Kind::NnModule: return callModule(callee, std::move(args), kwargs, depth);
    case Kind::TypeObject: return instantiate(callee, std::move(args), kwargs, depth + 1);
    case Kind::GradMode: unsupported("calling a grad-mode object");
    case Kind::Object: return callObject(callee, std::move(args), kwargs, depth);
    default: unsupported("calling a " + kindName(callee->kind));
    }
  }

  // An object of the call called: a functools.partial is its func called with its args first
  // and its keywords under the call's (read through its paths, which its type's guard fixes).
  Var callObject(const Var& callee, std::vector<Var> args, const Kwargs& kwargs, size_t depth) {
    if (!callee->path || !(callee->type == guards::TypeRef{"functools", "partial"}))
      unsupported("calling a " + (callee->type.qualname.empty() ? kindName(callee->kind) : callee->type.text()));
    Var fn = realize(extend(*callee->path, guards::attr("func")));
    Var bound = realize(extend(*callee->path, guards::attr("args")));
    Var keywords = realize(extend(*callee->path, guards::attr("keywords")));
    if (bound->kind != Kind::Tuple || keywords->kind != Kind::Dict) unsupported("a functools.partial kiln cannot read");
    args.insert(args.begin(), bound->items.begin(), bound->items.end());
    Kwargs merged;
    for (size_t k = 0; k < keywords->keys.size(); ++k) {
      const Var& key = keywords->keys[k];
      if (key->kind != Kind::Str) unsupported("a functools.partial with a keyword that is not a str");
      if (!kwarg(kwargs, key->name)) merged.emplace_back(key->name, keywords->items[k]);
    }
    merged.insert(merged.end(), kwargs.begin(), kwargs.end());
    return callVar(fn, std::move(args), merged, depth);
  }

  Var callMethod(const Var& self, const std::string& name, std::vector<Var> args, const Kwargs& kwargs, size_t depth) {
    if (self->kind == Kind::Object && !self->path && name.find('.') != std::string::npos)
      return madeBuiltinMethod(self, name, std::move(args), kwargs);
    if (self->kind == Kind::NnModule && name == "__module_call__") return callModule(self, std::move(args), kwargs, depth, true);
    if (self->kind == Kind::Tensor) {
      args.insert(args.begin(), self);
      if (auto r = callTorch(*this, "Tensor." + name, args, kwargs)) return *r;
      unsupported("Tensor." + name);
    }
    if (self->kind == Kind::List && name == "append" && args.size() == 1) {
      if (self->path) changing(self), effects_.push_back({false, *self->path, "", args[0]}); // replayed by the SDK
      self->items.push_back(args[0]);
      return none();
    }
    if (self->kind == Kind::List && name == "extend" && args.size() == 1) {
      for (const Var& v : iterate(args[0])) {
        if (self->path) changing(self), effects_.push_back({false, *self->path, "", v});
        self->items.push_back(v);
      }
      return none();
    }
    if ((self->kind == Kind::List || self->kind == Kind::Tuple) && (name == "index" || name == "count"))
      return sequenceSearch(self, name, args, kwargs);
    if (self->kind == Kind::List &&
        (name == "insert" || name == "pop" || name == "reverse" || name == "clear" || name == "remove" || name == "sort"))
      return listMethod(self, name, args, kwargs);
    if (self->kind == Kind::Dict && (name == "items" || name == "keys" || name == "values") && args.empty()) {
      std::vector<Var> out;
      for (size_t k = 0; k < self->items.size(); ++k) {
        if (name == "items") out.push_back(sequence(Kind::Tuple, {self->keys[k], self->items[k]}));
        else out.push_back(name == "keys" ? self->keys[k] : self->items[k]);
      }
      return sequence(Kind::List, out);
    }
    if (self->kind == Kind::Dict && name == "get" && !args.empty()) {
      for (size_t k = 0; k < self->keys.size(); ++k)
        if (sameConstant(self->keys[k], args[0])) return self->items[k];
      return args.size() > 1 ? args[1] : none();
    }
    if (self->kind == Kind::Dict && (name == "pop" || name == "setdefault" || name == "update" || name == "copy"))
      return dictMethod(self, name, args, kwargs);
    if (self->kind == Kind::Autocast && name == "__enter__") {
      autocastStack_.push_back(autocast);
      autocast.of(self->name == "cuda" ? ir::DeviceType::Cuda : ir::DeviceType::Cpu) =
          self->boolean ? std::optional<DType>(self->dtype) : std::nullopt;
      return none();
    }
    if (self->kind == Kind::Autocast && name == "__exit__") {
      if (autocastStack_.empty()) unsupported("an autocast exit without its enter");
      autocast = autocastStack_.back();
      autocastStack_.pop_back();
      return none();
    }
    if (self->kind == Kind::GradMode && name == "__enter__") {
      gradStack_.push_back(gradEnabled);
      gradEnabled = self->boolean;
      return none();
    }
    if (self->kind == Kind::GradMode && name == "__exit__") {
      if (gradStack_.empty()) unsupported("a grad-mode exit without its enter");
      gradEnabled = gradStack_.back();
      gradStack_.pop_back();
      return none();
    }
    if (self->kind == Kind::NnModule && name == "forward") return callModule(self, std::move(args), kwargs, depth);
    if (self->kind == Kind::NnModule && args.empty() && kwargs.empty()) {
      std::vector<Var> out;
      auto names = self->desc->getModule().getModules();
      std::vector<Var> kids = children(self);
      for (size_t k = 0; k < kids.size(); ++k) {
        Var key = string(names[static_cast<unsigned>(k)].cStr());
        if (name == "items" || name == "named_children") out.push_back(sequence(Kind::Tuple, {key, kids[k]}));
        else if (name == "keys") out.push_back(key);
        else if (name == "values" || name == "children") out.push_back(kids[k]);
        else unsupported("nn.Module." + name + "()");
      }
      return sequence(Kind::List, out);
    }
    if (self->kind == Kind::Str) return strMethod(self->name, name, args, kwargs);
    unsupported(kindName(self->kind) + "." + name + "()");
  }

  // Methods of a str constant: startswith endswith replace lower upper strip lstrip rstrip split
  // join isdigit (format and the rest refused).
  Var strMethod(const std::string& s, const std::string& name, const std::vector<Var>& args, const Kwargs& kwargs) {
    auto text = [&](const Var& v) {
      if (v->kind != Kind::Str) unsupported("str." + name + "() of a " + kindName(v->kind));
      return v->name;
    };
    if (name == "startswith" || name == "endswith") {
      takes("str." + name, args, kwargs, 1, 1); // start/end positions refused
      std::vector<Var> options = args[0]->kind == Kind::Tuple ? args[0]->items : std::vector<Var>{args[0]};
      for (const Var& o : options) {
        std::string x = text(o);
        bool hit = x.size() <= s.size() && (name == "startswith" ? s.compare(0, x.size(), x) == 0
                                                                   : s.compare(s.size() - x.size(), x.size(), x) == 0);
        if (hit) return boolean(true);
      }
      return boolean(false);
    }
    if (name == "replace") {
      takes("str.replace", args, kwargs, 2, 3);
      std::string from = text(args[0]), to = text(args[1]), out;
      int64_t count = args.size() > 2 ? intArg(*this, "str.replace's count", args[2]) : -1;
      if (from.empty()) unsupported("str.replace of an empty string");
      for (size_t at = 0, done = 0;; ++done) {
        size_t hit = count >= 0 && static_cast<int64_t>(done) >= count ? std::string::npos : s.find(from, at);
        if (hit == std::string::npos) return string(out + s.substr(at));
        out += s.substr(at, hit - at) + to;
        at = hit + from.size();
      }
    }
    if (name == "format") return string(formatText(s, args, kwargs));
    auto ascii = [&] {
      for (unsigned char c : s)
        if (c >= 0x80) unsupported("str." + name + "() of non-ASCII text");
    };
    if (name == "lower" || name == "upper" || name == "isdigit") {
      takes("str." + name, args, kwargs, 0, 0);
      ascii();
      std::string out = s;
      if (name == "isdigit") return boolean(!s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); }));
      for (char& c : out) c = static_cast<char>(name == "lower" ? std::tolower(c) : std::toupper(c));
      return string(out);
    }
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      takes("str." + name, args, kwargs, 0, 1);
      ascii();
      std::string chars = args.empty() || args[0]->kind == Kind::None ? std::string(" \t\n\r\x0b\x0c") : text(args[0]);
      size_t begin = name == "rstrip" ? 0 : s.find_first_not_of(chars);
      if (begin == std::string::npos) return string("");
      size_t end = name == "lstrip" ? s.size() : s.find_last_not_of(chars) + 1;
      return string(s.substr(begin, end - begin));
    }
    if (name == "split") {
      takes("str.split", args, kwargs, 0, 2, {"sep", "maxsplit"});
      std::optional<Var> sep = args.empty() ? kwarg(kwargs, "sep") : std::optional<Var>(args[0]);
      std::optional<Var> most = args.size() > 1 ? std::optional<Var>(args[1]) : kwarg(kwargs, "maxsplit");
      int64_t limit = most ? concrete(*most) : -1;
      if (!sep || (*sep)->kind == Kind::None) unsupported("str.split() on whitespace");
      std::string by = text(*sep);
      if (by.empty()) unsupported("str.split() by an empty separator (ValueError)");
      std::vector<Var> parts;
      size_t at = 0;
      for (size_t hit; (limit < 0 || static_cast<int64_t>(parts.size()) < limit) && (hit = s.find(by, at)) != std::string::npos;
           at = hit + by.size())
        parts.push_back(string(s.substr(at, hit - at)));
      parts.push_back(string(s.substr(at)));
      return sequence(Kind::List, parts);
    }
    if (name == "join") {
      takes("str.join", args, kwargs, 1, 1);
      std::string out;
      std::vector<Var> items = iterate(args[0]);
      for (size_t k = 0; k < items.size(); ++k) out += (k ? s : "") + text(items[k]);
      return string(out);
    }
    unsupported("str." + name + "()");
  }

  // str.format of plain fields: "{}", "{0}", "{name}", with "{{" and "}}" for braces, and the
  // specs ":d" of an int and ":s" of a str. A field's attribute or item, a conversion or
  // another spec is Python's to apply: refused, as are what Python raises for (a missing
  // argument, mixed numbering, a single brace).
  std::string formatText(const std::string& s, const std::vector<Var>& args, const Kwargs& kwargs) {
    std::string out;
    size_t automatic = 0;
    bool numbered = false;
    for (size_t k = 0; k < s.size(); ++k) {
      char c = s[k];
      bool doubled = k + 1 < s.size() && s[k + 1] == c;
      if ((c == '{' || c == '}') && doubled) {
        out += c;
        ++k;
        continue;
      }
      if (c == '}') unsupported("str.format() of a single '}'");
      if (c != '{') {
        out += c;
        continue;
      }
      size_t close = s.find('}', k);
      if (close == std::string::npos) unsupported("str.format() of an unclosed '{'");
      std::string field = s.substr(k + 1, close - k - 1), spec;
      k = close;
      if (size_t colon = field.find(':'); colon != std::string::npos)
        spec = field.substr(colon + 1), field = field.substr(0, colon);
      if (field.find_first_of(".[!{") != std::string::npos)
        unsupported("str.format() of the field {" + field + (spec.empty() ? "" : ":" + spec) + "}");
      Var value;
      if (field.empty() || std::all_of(field.begin(), field.end(), [](unsigned char d) { return std::isdigit(d); })) {
        if (!field.empty()) numbered = true;
        if (field.empty() ? numbered : automatic > 0) unsupported("str.format() mixing automatic and numbered fields");
        size_t at = field.empty() ? automatic++ : std::stoul(field);
        if (at >= args.size()) unsupported("str.format() of a missing positional argument");
        value = args[at];
      } else {
        std::optional<Var> named = kwarg(kwargs, field);
        if (!named) unsupported("str.format() of a missing keyword argument");
        value = *named;
      }
      if (spec == "d" && value->kind != Kind::Int && value->kind != Kind::Bool) unsupported("{:d} of a " + kindName(value->kind));
      if (spec == "d" && value->kind == Kind::Bool) out += truth(value) ? "1" : "0";
      else out += spec.empty() ? text(value) : formatted(value, spec);
    }
    return out;
  }

  // fmt % values with %s, %d, %i and %% (%r of an int, a bool or None, which print as str
  // does); flags, widths, precisions and mappings are Python's to apply: refused.
  std::string percentText(const std::string& fmt, const Var& values) {
    std::vector<Var> items = values->kind == Kind::Tuple ? values->items : std::vector<Var>{values};
    std::string out;
    size_t next = 0;
    for (size_t k = 0; k < fmt.size(); ++k) {
      if (fmt[k] != '%') {
        out += fmt[k];
        continue;
      }
      char conversion = k + 1 < fmt.size() ? fmt[++k] : '\0';
      if (conversion == '%') {
        out += '%';
        continue;
      }
      if (conversion != 's' && conversion != 'd' && conversion != 'i' && conversion != 'r')
        unsupported(std::string("the % format %") + conversion);
      if (next >= items.size()) unsupported("str % with too few values (TypeError)");
      const Var& v = items[next++];
      if (conversion == 's') {
        out += text(v);
      } else if (conversion == 'r') {
        if (v->kind != Kind::Int && v->kind != Kind::Bool && v->kind != Kind::None) unsupported("%r of a " + kindName(v->kind));
        out += text(v);
      } else {
        if (v->kind == Kind::Bool) out += truth(v) ? "1" : "0";
        else if (v->kind == Kind::Int) out += text(v);
        else unsupported(std::string("%") + conversion + " of a " + kindName(v->kind));
      }
    }
    if (next != items.size()) unsupported("str % with values left over (TypeError)");
    return out;
  }

  // Whether `a == b` for two items of a sequence, decided (a tensor's == is elementwise: refused).
  bool itemEquals(const Var& a, const Var& b) {
    if (a->kind == Kind::Tensor || b->kind == Kind::Tensor) unsupported("searching a sequence for a tensor");
    if (a == b) return true;
    return truth(compare("==", a, b));
  }

  // `item in container` for a sequence, set or dict (its keys): Python's identity-then-== test.
  bool contains(const Var& container, const Var& item) {
    if (container->kind == Kind::Str) {
      if (item->kind != Kind::Str) unsupported("`in <str>` of a " + kindName(item->kind) + " (TypeError)");
      return container->name.find(item->name) != std::string::npos;
    }
    std::vector<Var> items = iterate(container);
    for (const Var& v : items)
      if (v == item) return true;
    for (const Var& v : items)
      if (itemEquals(v, item)) return true;
    return false;
  }

  // list.index(x[, start[, stop]]) and count(x) of a list or tuple.
  Var sequenceSearch(const Var& self, const std::string& name, const std::vector<Var>& args, const Kwargs& kwargs) {
    takes(kindName(self->kind) + "." + name, args, kwargs, 1, name == "index" ? 3 : 1);
    std::vector<Var> items = iterate(self);
    int64_t n = static_cast<int64_t>(items.size());
    auto bound = [&](size_t at, int64_t fallback) {
      if (args.size() <= at) return fallback;
      int64_t x = concrete(args[at]);
      if (x < 0) x += n;
      return std::max<int64_t>(0, std::min(x, n));
    };
    int64_t count = 0;
    for (int64_t k = bound(1, 0); k < bound(2, n); ++k) {
      if (!itemEquals(items[static_cast<size_t>(k)], args[0])) continue;
      if (name == "index") return integer(table.integer(k));
      ++count;
    }
    if (name == "index") unsupported(kindName(self->kind) + ".index() of an item not there (ValueError)");
    return integer(table.integer(count));
  }

  // `items` sorted as sorted()/list.sort() with the keywords key= and reverse= sort them: a
  // stable sort by `<` of the keys (decided, guarded where symbolic), as Python's; reversed, each
  // comparison is, so equal items keep their order.
  std::vector<Var> sortedItems(const std::vector<Var>& items, const Kwargs& kwargs, int depth) {
    std::optional<Var> key = kwarg(kwargs, "key");
    std::optional<Var> reverse = kwarg(kwargs, "reverse");
    std::vector<std::pair<Var, Var>> keyed;
    for (const Var& v : items) keyed.emplace_back(key && (*key)->kind != Kind::None ? callVar(*key, {v}, {}, depth) : v, v);
    bool backwards = reverse && truth(*reverse);
    std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
      return truth(backwards ? compare("<", b.first, a.first) : compare("<", a.first, b.first));
    });
    std::vector<Var> out;
    for (const auto& [k, v] : keyed) out.push_back(v);
    return out;
  }

  // insert, pop, reverse, clear, remove and sort of a list the traced code made; the call's own
  // lists are Python's to change (a graph break).
  Var listMethod(const Var& self, const std::string& name, const std::vector<Var>& args, const Kwargs& kwargs) {
    if (self->path) unsupported("list." + name + "() of a list of the call");
    auto& items = self->items;
    int64_t n = static_cast<int64_t>(items.size());
    if (name == "reverse" || name == "clear") {
      takes("list." + name, args, kwargs, 0, 0);
      if (name == "reverse") std::reverse(items.begin(), items.end());
      else items.clear();
      return none();
    }
    if (name == "sort") {
      takes("list.sort", args, kwargs, 0, 0, {"key", "reverse"});
      items = sortedItems(items, kwargs, depth_);
      return none();
    }
    if (name == "insert") {
      takes("list.insert", args, kwargs, 2, 2);
      int64_t k = concrete(args[0]);
      if (k < 0) k += n;
      k = std::max<int64_t>(0, std::min(k, n));
      items.insert(items.begin() + k, args[1]);
      return none();
    }
    if (name == "remove") {
      takes("list.remove", args, kwargs, 1, 1);
      for (size_t k = 0; k < items.size(); ++k)
        if (itemEquals(items[k], args[0])) {
          items.erase(items.begin() + static_cast<std::ptrdiff_t>(k));
          return none();
        }
      unsupported("list.remove() of an item not there (ValueError)");
    }
    takes("list.pop", args, kwargs, 0, 1); // pop([index])
    int64_t k = args.empty() ? n - 1 : concrete(args[0]);
    if (k < 0) k += n;
    if (k < 0 || k >= n) unsupported("list.pop() out of range (IndexError)");
    Var v = items[static_cast<size_t>(k)];
    items.erase(items.begin() + k);
    return v;
  }

  // pop, setdefault, update and copy of a dict the traced code made (a `**kwargs` among
  // them); the call's own dicts are Python's to change (a graph break).
  Var dictMethod(const Var& self, const std::string& name, const std::vector<Var>& args, const Kwargs& kwargs) {
    if (name == "copy") {
      takes("dict.copy", args, kwargs, 0, 0);
      Var out = make(Kind::Dict);
      out->keys = self->keys;
      out->items = self->items;
      return out;
    }
    if (self->path) unsupported("dict." + name + "() of a dict of the call");
    auto find = [&](const Var& key) { return keyIndex(self, key); };
    auto set = [&](const Var& key, const Var& value) { dictPut(self, key, value); };
    if (name == "pop") {
      takes("dict.pop", args, kwargs, 1, 2);
      auto at = find(args[0]);
      if (!at) {
        if (args.size() < 2) unsupported("dict.pop() of a missing key (KeyError)");
        return args[1];
      }
      Var value = self->items[*at];
      self->keys.erase(self->keys.begin() + static_cast<std::ptrdiff_t>(*at));
      self->items.erase(self->items.begin() + static_cast<std::ptrdiff_t>(*at));
      return value;
    }
    if (name == "setdefault") {
      takes("dict.setdefault", args, kwargs, 1, 2);
      if (auto at = find(args[0])) return self->items[*at];
      Var value = args.size() > 1 ? args[1] : none();
      set(args[0], value);
      return value;
    }
    // update(other=(), **kw)
    if (args.size() > 1) unsupported("dict.update() with more than one positional argument");
    if (!args.empty()) {
      const Var& other = args[0];
      if (other->kind != Kind::Dict) unsupported("dict.update() from a " + kindName(other->kind));
      for (size_t k = 0; k < other->keys.size(); ++k) set(other->keys[k], other->items[k]);
    }
    for (const auto& [key, value] : kwargs) set(string(key), value);
    return none();
  }

  // `module(*args)`: its class's own __call__ inlined where it overrides nn.Module's (its
  // super().__call__ comes back here as `moduleCall`), else forward.
  Var callModule(const Var& module, std::vector<Var> args, const Kwargs& kwargs, size_t depth, bool moduleCall = false) {
    auto desc = module->desc->getModule();
    if (desc.getOwnCall() && !moduleCall) {
      Var type = typeOf(module);
      std::optional<Var> call = type->kind == Kind::TypeObject ? classAttribute(type, 0, "__call__") : std::nullopt;
      if (!call || (*call)->kind != Kind::Function) unsupported("calling a module whose class overrides __call__");
      return callVar(bindClassAttribute(*call, module, type, depth), std::move(args), kwargs, depth);
    }
    // Its hooks run beside forward when called: Python's to run. Their absence is guarded
    // (a hook added later traces again); global hooks are refused where they are described.
    if (desc.getHooks()) unsupported("calling a module with hooks");
    for (const char* hooks : {"_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks"})
      guards.check(node(extend(*module->path, guards::attr(hooks))), guards::lengthIs(0));
    std::string kind = desc.getKind().cStr();
    if (kind.empty()) {
      if (!desc.hasForward()) unsupported("a module without forward");
      auto info = std::make_shared<FunctionInfo>();
      info->code = desc.getForward().getCode();
      fillFunction(*info, desc.getForward(), extend(extend(*module->path, guards::attr("forward")), guards::attr("__func__")));
      args.insert(args.begin(), module);
      return inline_(*info, std::move(args), kwargs, depth + 1);
    }
    return builtinModule(module, kind, std::move(args), kwargs, depth);
  }

  Var param(const Var& module, const std::string& name) { return attribute(module, name); }

  Var builtinModule(const Var& m, const std::string& kind, std::vector<Var> args, const Kwargs& kwargs, size_t depth) {
    auto num = [&](const std::string& attr) { return realize(extend(*m->path, guards::attr(attr))); };
    if (kind == "torch.nn.Linear") return callOp("linear", {args.at(0), param(m, "weight"), param(m, "bias")}, {});
    if (kind == "torch.nn.LayerNorm") {
      Var shape = num("normalized_shape");
      return callOp("layer_norm", {args.at(0), shape, param(m, "weight"), param(m, "bias"), num("eps")}, {});
    }
    if (kind == "torch.nn.RMSNorm")
      return callOp("rms_norm", {args.at(0), num("normalized_shape"), param(m, "weight"), num("eps")}, {});
    if (kind == "torch.nn.Embedding")
      return *callTorch(*this, "torch.nn.functional.embedding", {args.at(0), param(m, "weight")},
                        {{"padding_idx", num("padding_idx")}, {"max_norm", num("max_norm")},
                         {"scale_grad_by_freq", num("scale_grad_by_freq")}, {"sparse", num("sparse")}});
    if (kind == "torch.nn.Dropout") {
      bool training = m->desc->getModule().getTraining();
      return *callTorch(*this, "torch.nn.functional.dropout",
                        {args.at(0), num("p"), boolean(training), num("inplace")}, {});
    }
    if (kind == "torch.nn.ReLU" || kind == "torch.nn.SiLU" || kind == "torch.nn.Tanh" || kind == "torch.nn.Sigmoid") {
      std::string op = kind.substr(9);
      for (char& c : op) c = static_cast<char>(std::tolower(c));
      // ReLU(inplace=True), SiLU(inplace=True) write their input, as eager's (a later read of it sees that).
      bool inplace = (kind == "torch.nn.ReLU" || kind == "torch.nn.SiLU") && truth(num("inplace"));
      return callOp(inplace ? op + "_" : op, {args.at(0)}, {});
    }
    if (kind == "torch.nn.GELU") return callOp("gelu", {args.at(0), num("approximate")}, {});
    if (kind == "torch.nn.Softmax") return callOp("softmax", {args.at(0), num("dim")}, {});
    if (kind == "torch.nn.Identity") return args.at(0);
    if (kind == "torch.nn.MultiheadAttention") {
      auto isNoneVar = [](const Var& v) { return v->kind == Kind::None; };
      if (!isNoneVar(num("bias_k")) || truth(num("add_zero_attn")))
        unsupported("nn.MultiheadAttention with add_bias_kv or add_zero_attn");
      MultiheadAttentionModule a;
      a.inProjWeight = param(m, "in_proj_weight");
      a.inProjBias = param(m, "in_proj_bias");
      if (isNoneVar(a.inProjWeight)) {
        a.qWeight = param(m, "q_proj_weight");
        a.kWeight = param(m, "k_proj_weight");
        a.vWeight = param(m, "v_proj_weight");
      }
      Var out = attribute(m, "out_proj");
      a.outWeight = param(out, "weight");
      a.outBias = param(out, "bias");
      a.heads = concrete(num("num_heads"));
      a.dropout = number(num("dropout"));
      a.batchFirst = truth(num("batch_first"));
      a.training = m->desc->getModule().getTraining();
      return multiheadAttention(*this, a, args, kwargs);
    }
    if (kind == "torch.nn.Sequential") {
      Var x = args.at(0);
      for (const Var& child : children(m)) x = callVar(child, {x}, {}, depth + 1);
      return x;
    }
    (void)kwargs;
    unsupported("calling " + kind);
  }

  std::vector<Var> children(const Var& m) {
    std::vector<Var> out;
    for (auto name : m->desc->getModule().getModules()) out.push_back(attribute(m, name.cStr()));
    return out;
  }

  // Refuses a call of builtin `name` with fewer than `least` or more than `most` positional
  // arguments, or a keyword other than `keywords`: a handler reads every argument it takes,
  // never a result that leaves one out.
  static void takes(const std::string& name, const std::vector<Var>& args, const Kwargs& kwargs, size_t least,
                    size_t most, std::initializer_list<const char*> keywords = {}) {
    if (args.size() < least || args.size() > most)
      unsupported(name + "() with " + std::to_string(args.size()) + " positional arguments");
    for (const auto& [key, value] : kwargs)
      if (std::none_of(keywords.begin(), keywords.end(), [&](const char* k) { return key == k; }))
        unsupported(name + "() with the keyword " + key);
  }

  Var callBuiltin(const std::string& name, std::vector<Var> args, const Kwargs& kwargs, size_t depth) {
    if (name == "torch.autocast" || name == "torch.amp.autocast") {
      // autocast(device_type, dtype=None, enabled=True, cache_enabled=None)
      Var v = make(Kind::Autocast);
      auto get = [&](size_t at, const char* key) -> Var {
        if (args.size() > at) return args[at];
        for (const auto& [n, x] : kwargs)
          if (n == key) return x;
        return nullptr;
      };
      Var device = get(0, "device_type"), dtype = get(1, "dtype"), enabled = get(2, "enabled");
      if (!device || device->kind != Kind::Str) unsupported("torch.autocast without a device type");
      v->name = device->name;
      v->dtype = dtype && dtype->kind == Kind::DType ? dtype->dtype
                                                     : (device->name == "cuda" ? DType::Float16 : DType::BFloat16);
      v->boolean = !enabled || truth(enabled);
      if (v->name != "cpu" && v->name != "cuda") unsupported("autocast of device type " + v->name);
      return v;
    }
    if (name == "torch.no_grad" || name == "torch.enable_grad") {
      Var v = make(Kind::GradMode);
      v->boolean = name == "torch.enable_grad";
      return v;
    }
    if (name == "torch.is_autocast_enabled") { // (device_type="cuda"): the state the trace runs under
      Var device = args.empty() ? nullptr : args[0];
      for (const auto& [key, value] : kwargs)
        if (key == "device_type") device = value;
      if (device && device->kind != Kind::Str) unsupported("torch.is_autocast_enabled of a non-string device type");
      bool cpu = device && device->name == "cpu";
      return boolean((cpu ? autocast.cpu : autocast.cuda).has_value());
    }
    if (auto answer = answeredWhenTracing(name)) {
      takes(name, args, kwargs, 0, 0);
      return *answer;
    }
    if (name == "torch.tensor") return tensorOfConstants(args, kwargs);
    if (name == "torch.finfo" || name == "torch.iinfo") return typeInfoOf(*this, name, args, kwargs);
    if (name == "inspect.signature") return signature(args, kwargs);
    if (name == "torch.nn.functional.pad") return constantPad(args, kwargs);
    if (name == "torch.utils.checkpoint.checkpoint") return checkpoint(std::move(args), kwargs, depth);
    if (name == "torch.nn.functional.multi_head_attention_forward") return multiHeadAttentionForward(*this, args, kwargs);
    if (name == "torch.nn.functional.batch_norm") return batchNorm(*this, args, kwargs);
    if (name == "torch.nn.functional.group_norm") return groupNorm(*this, args, kwargs);
    if (auto r = callTorch(*this, name, args, kwargs)) return *r;
    if (name == "builtins.len") {
      takes(name, args, kwargs, 1, 1);
      const Var& v = args.at(0);
      if (v->kind == Kind::Tensor) {
        if (meta(v).dim() == 0) unsupported("len() of a 0-d tensor");
        return integer(meta(v).sizes[0]);
      }
      if (v->kind == Kind::NnModule) return integer(table.integer(static_cast<int64_t>(children(v).size())));
      if (v->kind == Kind::Object && !v->path) return *dunder(v, "__len__", {}, depth);
      return integer(table.integer(static_cast<int64_t>(iterate(v).size())));
    }
    if (name == "builtins.range") {
      takes(name, args, kwargs, 1, 3);
      Var r = make(Kind::Range);
      Var start = integer(table.integer(0)), step = integer(table.integer(1)), stop;
      if (args.size() == 1) stop = args[0];
      else if (args.size() >= 2) start = args[0], stop = args[1];
      if (args.size() == 3) step = args[2];
      if (!stop) unsupported("range() without arguments");
      r->items = {start, stop, step};
      return r;
    }
    if (name == "builtins.enumerate") {
      takes(name, args, kwargs, 1, 2, {"start"});
      if (args.size() > 1 && kwarg(kwargs, "start")) unsupported("enumerate() given start twice");
      std::vector<Var> items = iterate(args.at(0)), out;
      std::optional<Var> from = args.size() > 1 ? std::optional<Var>(args[1]) : kwarg(kwargs, "start");
      int64_t start = from ? concrete(*from) : 0;
      for (size_t k = 0; k < items.size(); ++k)
        out.push_back(sequence(Kind::Tuple, {integer(table.integer(start + static_cast<int64_t>(k))), items[k]}));
      return iterator(out);
    }
    if (name == "builtins.zip") {
      takes(name, args, kwargs, 0, SIZE_MAX, {"strict"});
      std::optional<Var> strict = kwarg(kwargs, "strict");
      std::vector<std::vector<Var>> lists;
      size_t n = SIZE_MAX;
      for (const Var& a : args) {
        lists.push_back(iterate(a));
        if (strict && truth(*strict) && n != SIZE_MAX && lists.back().size() != n)
          unsupported("zip(strict=True) of iterables of different lengths (raises)");
        n = std::min(n, lists.back().size());
      }
      std::vector<Var> out;
      for (size_t k = 0; k < (args.empty() ? 0 : n); ++k) {
        std::vector<Var> t;
        for (auto& l : lists) t.push_back(l[k]);
        out.push_back(sequence(Kind::Tuple, t));
      }
      return iterator(out);
    }
    if (name == "builtins.set" || name == "builtins.frozenset") {
      takes(name, args, kwargs, 0, 1);
      Var s = make(Kind::Set);
      if (name == "builtins.frozenset") s->type = {"builtins", "frozenset"};
      for (const Var& v : args.empty() ? std::vector<Var>{} : iterate(args[0])) setAdd(s, v);
      return s;
    }
    if (name == "builtins.slice") { // slice(stop) or slice(start, stop[, step])
      takes(name, args, kwargs, 1, 3);
      if (args.size() == 1) return sequence(Kind::Slice, {none(), args[0], none()});
      return sequence(Kind::Slice, {args[0], args[1], args.size() == 3 ? args[2] : none()});
    }
    if (name == "itertools.chain") {
      takes(name, args, kwargs, 0, SIZE_MAX);
      std::vector<Var> out;
      for (const Var& a : args)
        for (const Var& v : iterate(a)) out.push_back(v);
      return iterator(out);
    }
    if (name == "itertools.product") {
      takes(name, args, kwargs, 0, SIZE_MAX, {"repeat"});
      std::optional<Var> repeat = kwarg(kwargs, "repeat");
      int64_t times = repeat ? intArg(*this, name + "'s repeat", *repeat) : 1;
      if (times < 0) unsupported(name + " with a negative repeat (ValueError)");
      std::vector<std::vector<Var>> pools;
      for (int64_t r = 0; r < times; ++r)
        for (const Var& a : args) pools.push_back(iterate(a));
      std::vector<std::vector<Var>> rows = {{}};
      for (const auto& pool : pools) {
        std::vector<std::vector<Var>> next;
        for (const auto& row : rows)
          for (const Var& v : pool) {
            next.push_back(row);
            next.back().push_back(v);
          }
        rows = std::move(next);
        if (rows.size() > 100000) unsupported("itertools.product of more than 100000 rows");
      }
      std::vector<Var> out;
      for (auto& row : rows) out.push_back(sequence(Kind::Tuple, row));
      return iterator(out);
    }
    if (name == "builtins.any" || name == "builtins.all") {
      takes(name, args, kwargs, 1, 1);
      bool any = name == "builtins.any";
      for (const Var& v : iterate(args[0]))
        if (truth(v) == any) return boolean(any);
      return boolean(!any);
    }
    if (name == "builtins.reversed") {
      takes(name, args, kwargs, 1, 1);
      if (args[0]->kind != Kind::List && args[0]->kind != Kind::Tuple && args[0]->kind != Kind::Range)
        unsupported("reversed() of a " + kindName(args[0]->kind));
      std::vector<Var> items = iterate(args[0]);
      return iterator(std::vector<Var>(items.rbegin(), items.rend()));
    }
    if (name == "builtins.iter") {
      takes(name, args, kwargs, 1, 1); // iter(callable, sentinel) refused
      return args[0]->kind == Kind::Iterator ? args[0] : iterator(iterate(args[0]));
    }
    if (name == "builtins.next") {
      takes(name, args, kwargs, 1, 2);
      const Var& it = args[0];
      if (it->kind != Kind::Iterator) unsupported("next() of a " + kindName(it->kind));
      if (it->next < it->items.size()) return it->items[it->next++];
      if (args.size() == 2) return args[1];
      unsupported("next() of an exhausted iterator (StopIteration)");
    }
    if (name == "builtins.callable") {
      takes(name, args, kwargs, 1, 1);
      switch (args[0]->kind) {
      case Kind::Function: case Kind::Method: case Kind::Builtin: case Kind::TypeObject: case Kind::NnModule: return boolean(true);
      case Kind::None: case Kind::Bool: case Kind::Int: case Kind::Float: case Kind::Str: case Kind::Tuple: case Kind::List:
      case Kind::Dict: case Kind::Set: case Kind::Tensor: case Kind::DType: case Kind::Device: return boolean(false);
      default: return boolean(!absent(args[0], "__call__"));
      }
    }
    if (name == "functools.reduce") { // fn(fn(initial, x0), x1)...; without initial, from x0
      takes(name, args, kwargs, 2, 3);
      std::vector<Var> items = iterate(args[1]);
      size_t next = 0;
      Var acc = args.size() == 3 ? args[2] : nullptr;
      if (!acc) {
        if (items.empty()) unsupported("functools.reduce() of an empty sequence without an initial value (TypeError)");
        acc = items[next++];
      }
      for (; next < items.size(); ++next) acc = callVar(args[0], {acc, items[next]}, {}, depth);
      return acc;
    }
    if (auto op = operatorSymbol(name)) { // operator.add(a, b) is a + b
      takes(name, args, kwargs, 2, 2);
      return arith(*op, args[0], args[1]);
    }
    if (name == "builtins.map" || name == "builtins.filter") {
      takes(name, args, kwargs, 2, name == "builtins.filter" ? 2 : SIZE_MAX);
      std::vector<std::vector<Var>> lists;
      for (size_t k = 1; k < args.size(); ++k) lists.push_back(iterate(args[k]));
      size_t n = SIZE_MAX;
      for (const auto& l : lists) n = std::min(n, l.size());
      std::vector<Var> out;
      for (size_t k = 0; k < n; ++k) {
        std::vector<Var> call;
        for (const auto& l : lists) call.push_back(l[k]);
        if (name == "builtins.filter") {
          bool keep = args[0]->kind == Kind::None ? truth(call[0]) : truth(callVar(args[0], call, {}, depth));
          if (keep) out.push_back(call[0]);
        } else {
          out.push_back(callVar(args[0], call, {}, depth));
        }
      }
      return iterator(out);
    }
    if (name == "builtins.sorted") {
      takes(name, args, kwargs, 1, 1, {"key", "reverse"});
      return sequence(Kind::List, sortedItems(iterate(args[0]), kwargs, depth));
    }
    if (name == "builtins.dict") { // dict(), dict(mapping), dict(pairs), then the keywords
      if (args.size() > 1) unsupported("dict() with " + std::to_string(args.size()) + " positional arguments");
      Var d = make(Kind::Dict);
      if (!args.empty() && args[0]->kind == Kind::Dict) {
        for (size_t k = 0; k < args[0]->keys.size(); ++k) dictPut(d, args[0]->keys[k], args[0]->items[k]);
      } else if (!args.empty()) {
        for (const Var& pair : iterate(args[0])) {
          std::vector<Var> kv = iterate(pair);
          if (kv.size() != 2) unsupported("dict() of an item of " + std::to_string(kv.size()) + " values");
          dictPut(d, kv[0], kv[1]);
        }
      }
      for (const auto& [key, value] : kwargs) dictPut(d, string(key), value);
      return d;
    }
    if (name == "builtins.tuple" || name == "builtins.list") {
      takes(name, args, kwargs, 0, 1);
      return sequence(name == "builtins.tuple" ? Kind::Tuple : Kind::List, args.empty() ? std::vector<Var>{} : iterate(args[0]));
    }
    if (name == "builtins.isinstance") {
      takes(name, args, kwargs, 2, 2);
      return boolean(isInstance(args.at(0), args.at(1)));
    }
    if (name == "builtins.min" || name == "builtins.max") {
      takes(name, args, kwargs, 1, SIZE_MAX, {"key", "default"});
      std::optional<Var> key = kwarg(kwargs, "key");
      bool keyed = key && (*key)->kind != Kind::None;
      std::optional<Var> fallback = kwarg(kwargs, "default");
      if (fallback && args.size() > 1) unsupported(name + "() of several arguments with a default");
      if (fallback && iterate(args[0]).empty()) return *fallback;
      std::vector<Var> items = args.size() == 1 ? iterate(args[0]) : args;
      if (items.empty()) unsupported(name + "() of nothing");
      // The first item whose key no later one's beats, as Python's.
      auto keyOf = [&](const Var& v) { return keyed ? callVar(*key, {v}, {}, depth) : v; };
      Var best = items[0], bestKey = keyOf(best);
      for (size_t k = 1; k < items.size(); ++k) {
        Var candidate = keyOf(items[k]);
        if (truth(compare(name == "builtins.min" ? "<" : ">", candidate, bestKey))) best = items[k], bestKey = candidate;
      }
      return best;
    }
    if (name == "builtins.abs" || name == "builtins.float" || name == "builtins.int" || name == "builtins.bool" ||
        name == "builtins.str")
      takes(name, args, kwargs, 1, 1); // int(x, base) and str(b, encoding) are refused
    if (name == "builtins.abs" && args.size() == 1) {
      if (args[0]->kind == Kind::Tensor) return callOp("abs", args, {});
      if (args[0]->kind == Kind::Float && args[0]->traced) return *floatMath("abs", args[0]);
      if (args[0]->kind == Kind::Float) return floating(std::fabs(args[0]->number));
      Var neg = compare("<", args[0], integer(table.integer(0)));
      return truth(neg) ? arith("-", integer(table.integer(0)), args[0]) : args[0];
    }
    if (name == "builtins.sum") { // sum(iterable, /, start=0)
      takes(name, args, kwargs, 1, 2, {"start"});
      if (args.size() > 1 && kwarg(kwargs, "start")) unsupported("sum() given start twice");
      std::vector<Var> items = iterate(args.at(0));
      std::optional<Var> start = args.size() > 1 ? std::optional<Var>(args[1]) : kwarg(kwargs, "start");
      Var total = start ? *start : integer(table.integer(0));
      for (const Var& v : items) total = arith("+", total, v);
      return total;
    }
    if (name == "builtins.super") {
      takes(name, args, kwargs, 2, 2); // super() without arguments is the frame's (doCall)
      return makeSuper(args[0], args[1]);
    }
    if (name == "builtins.type") {
      takes(name, args, kwargs, 1, 1); // type(name, bases, dict) makes a class: refused
      return typeOf(args[0]);
    }
    if (name == "builtins.getattr") {
      takes(name, args, kwargs, 2, 3);
      if (args.size() < 2 || args[1]->kind != Kind::Str) unsupported("getattr() with a name that is not a constant");
      if (args.size() == 3 && absent(args[0], args[1]->name)) return args[2];
      return attribute(args[0], args[1]->name);
    }
    if (name == "builtins.hasattr") {
      takes(name, args, kwargs, 2, 2);
      if (args.size() != 2 || args[1]->kind != Kind::Str) unsupported("hasattr() with a name that is not a constant");
      if (absent(args[0], args[1]->name)) return boolean(false);
      attribute(args[0], args[1]->name); // one that is there is guarded by reading it
      return boolean(true);
    }
    if (name == "builtins.float" && args.size() == 1 && args[0]->kind == Kind::Str) {
      std::string t = args[0]->name;
      for (char& c : t) c = static_cast<char>(std::tolower(c));
      if (t == "inf" || t == "+inf" || t == "infinity") return floating(std::numeric_limits<double>::infinity());
      if (t == "-inf" || t == "-infinity") return floating(-std::numeric_limits<double>::infinity());
      if (t == "nan") return floating(std::numeric_limits<double>::quiet_NaN());
      char* end = nullptr;
      double v = std::strtod(args[0]->name.c_str(), &end);
      if (end == args[0]->name.c_str() || *end != '\0') unsupported("float() of '" + args[0]->name + "'");
      return floating(v);
    }
    if (name == "builtins.float" && args.size() == 1 && args[0]->kind == Kind::Float) return args[0];
    if (name == "builtins.float" && args.size() == 1 && args[0]->kind != Kind::Tensor)
      return floating(static_cast<double>(concrete(args[0])));
    if (name == "builtins.int" && args.size() == 1 && args[0]->kind == Kind::Float)
      return integer(table.integer(static_cast<int64_t>(number(args[0]))));
    if (name == "builtins.int" && args.size() == 1 && args[0]->kind == Kind::Int) return args[0];
    if (name == "builtins.int" && args.size() == 1 && args[0]->kind == Kind::Str) { // decimal digits, a sign, spaces
      const std::string& t = args[0]->name;
      size_t begin = t.find_first_not_of(" \t\n"), end = t.find_last_not_of(" \t\n");
      std::string digits = begin == std::string::npos ? "" : t.substr(begin, end - begin + 1);
      size_t from = !digits.empty() && (digits[0] == '-' || digits[0] == '+') ? 1 : 0;
      if (digits.size() <= from || digits.size() > 18 ||
          !std::all_of(digits.begin() + static_cast<std::ptrdiff_t>(from), digits.end(), [](unsigned char c) { return std::isdigit(c); }))
        unsupported("int() of '" + t + "'");
      return integer(table.integer(std::stoll(digits)));
    }
    if (name == "builtins.bool" && args.size() == 1) return boolean(truth(args[0]));
    if (name == "builtins.str" && args.size() == 1) return string(text(args[0]));
    if (name.rfind("math.", 0) == 0) {
      takes(name, args, kwargs, 0, SIZE_MAX); // math's functions take no keywords
      return math(name.substr(5), args);
    }
    (void)depth;
    unsupported("calling " + name);
  }

  // inspect.signature(fn) of a Python function or bound method, for its `parameters`: their
  // names in order (a bound method's first left out). A function that says otherwise
  // (__wrapped__, __signature__) is refused, the absence guarded. The Parameter objects
  // themselves are opaque: anything but their identity and truth is refused.
  Var signature(const std::vector<Var>& args, const Kwargs& kwargs) {
    takes("inspect.signature", args, kwargs, 1, 1);
    const Var& fn = args[0];
    if ((fn->kind != Kind::Function && fn->kind != Kind::Method) || !fn->function)
      unsupported("inspect.signature of a " + kindName(fn->kind));
    const FunctionInfo& info = *fn->function;
    if (info.path)
      for (const char* attr : {"__wrapped__", "__signature__"}) {
        if (!isMissing(lookup(extend(*info.path, guards::attr(attr))))) unsupported(std::string("inspect.signature of a function with ") + attr);
        guards.check(node(extend(*info.path, guards::hasAttr(attr))), guards::equals(guards::Constant{false}));
      }
    auto code = info.code;
    auto names = code.getVarnames();
    size_t positional = code.getArgCount(), kwOnly = code.getKwOnlyArgCount();
    bool varargs = code.getFlags() & 0x04, varkw = code.getFlags() & 0x08;
    std::vector<size_t> order;
    for (size_t k = 0; k < positional; ++k) order.push_back(k);
    if (varargs) order.push_back(positional + kwOnly);
    for (size_t k = positional; k < positional + kwOnly; ++k) order.push_back(k);
    if (varkw) order.push_back(positional + kwOnly + (varargs ? 1 : 0));
    if (fn->kind == Kind::Method && !order.empty() && order.front() == 0 && positional > 0) order.erase(order.begin());
    Var parameters = make(Kind::Dict);
    parameters->type = {"inspect", "Signature.parameters"};
    for (size_t k : order) {
      if (k >= names.size()) throw Error(ErrorCode::Malformed, "tracer: too few varnames");
      std::string name = names[static_cast<unsigned>(k)].cStr();
      // An inspect.Parameter: its name and its default, inspect.Parameter.empty where it has
      // none (what else it holds is refused where read).
      Var empty = make(Kind::TypeObject);
      empty->type = {"inspect", "_empty"};
      empty->mro = {empty->type, {"builtins", "object"}};
      empty->boolean = true; // a plain class
      Var parameter = sequence(Kind::Tuple, {string(name), empty});
      parameter->type = {"inspect", "Parameter"};
      if (k < positional && k + info.defaults.size() >= positional)
        parameter->items[1] = info.defaults[k + info.defaults.size() - positional];
      for (const auto& [kwName, value] : info.kwDefaults)
        if (k >= positional && kwName == name) parameter->items[1] = value;
      parameters->keys.push_back(string(name));
      parameters->items.push_back(parameter);
    }
    Var sig = sequence(Kind::Tuple, {parameters});
    sig->type = {"inspect", "Signature"};
    return sig;
  }

  // F.pad(x, pad, mode="constant", value=None): each padded dim (from the last, a (before,
  // after) pair each) the input between two `full`s of the value, joined; other modes and
  // negative pads (a crop) refused.
  Var constantPad(const std::vector<Var>& args, const Kwargs& kwargs) {
    takes("torch.nn.functional.pad", args, kwargs, 2, 4, {"pad", "mode", "value"});
    auto get = [&](size_t at, const char* key) -> std::optional<Var> {
      if (args.size() > at) return args[at];
      return kwarg(kwargs, key);
    };
    Var x = args[0];
    if (x->kind != Kind::Tensor) unsupported("F.pad of a " + kindName(x->kind));
    std::optional<Var> mode = get(2, "mode"), value = get(3, "value");
    if (mode && (*mode)->kind != Kind::Str) unsupported("F.pad with a mode that is not a str");
    if (mode && (*mode)->name != "constant") {
      if (value && (*value)->kind != Kind::None) unsupported("F.pad: a value with mode '" + (*mode)->name + "' (torch raises)");
      return edgePad(x, iterate(*get(1, "pad")), (*mode)->name);
    }
    Var fill = value && (*value)->kind != Kind::None ? *value : integer(table.integer(0));
    std::vector<Var> pad = iterate(*get(1, "pad"));
    const ir::TensorMeta& m = meta(x);
    if (pad.size() % 2 || pad.size() / 2 > m.dim()) unsupported("F.pad with " + std::to_string(pad.size()) + " pads of a " + std::to_string(m.dim()) + "-d tensor");
    Var dtype = make(Kind::DType), device = make(Kind::Device);
    dtype->dtype = m.dtype;
    device->device = m.device;
    Var out = x;
    for (size_t k = 0; k < pad.size() / 2; ++k) {
      int64_t dim = static_cast<int64_t>(m.dim() - 1 - k);
      std::vector<Var> parts;
      for (size_t side = 0; side < 2; ++side) {
        int64_t n = concrete(pad[2 * k + side]);
        if (n < 0) unsupported("F.pad with a negative pad");
        if (n == 0) continue;
        std::vector<Var> sizes;
        for (sym::Expr s : meta(out).sizes) sizes.push_back(integer(s));
        sizes[static_cast<size_t>(dim)] = integer(table.integer(n));
        Var part = callOp("full", {sequence(Kind::Tuple, sizes), fill}, {{"dtype", dtype}, {"device", device}});
        if (side == 0) parts.insert(parts.begin(), part);
        else parts.push_back(part);
      }
      if (parts.empty()) continue;
      size_t at = pad[2 * k]->kind == Kind::Int && concrete(pad[2 * k]) > 0 ? 1 : 0;
      parts.insert(parts.begin() + static_cast<std::ptrdiff_t>(at), out);
      out = callOp("cat", {sequence(Kind::List, parts)}, {{"dim", integer(table.integer(dim))}});
    }
    return out;
  }

  // F.pad in mode reflect, replicate or circular: each padded dim (the last first, a (before,
  // after) pair each) read through index_select at the positions the mode names, from
  // i in [-before, n + after): reflect (n - 1) - |(n - 1) - |i||, replicate clamp(i, 0, n - 1),
  // circular i mod n. torch pads only the last 1 to 3 dims of a batched or unbatched input so,
  // and needs the pads to fit the input (reflect: under its size; circular: at most it).
  Var edgePad(Var x, const std::vector<Var>& pad, const std::string& mode) {
    if (mode != "reflect" && mode != "replicate" && mode != "circular") unsupported("F.pad in mode '" + mode + "'");
    const ir::TensorMeta m = meta(x);
    size_t dims = pad.size() / 2;
    if (pad.size() % 2 || dims < 1 || dims > 3 || m.dim() < dims + 1 || m.dim() > dims + 2)
      unsupported("F.pad in mode '" + mode + "' with " + std::to_string(pad.size()) + " pads of a " +
                  std::to_string(m.dim()) + "-d tensor (torch raises)");
    std::string device = ir::toString(m.device);
    for (size_t k = 0; k < dims; ++k) {
      auto dim = static_cast<int64_t>(m.dim() - 1 - k);
      int64_t before = concrete(pad[2 * k]), after = concrete(pad[2 * k + 1]);
      if (before == 0 && after == 0) continue;
      int64_t n = concrete(integer(meta(x).sizes[static_cast<size_t>(dim)]));
      bool fits = mode == "reflect" ? before < n && after < n && before >= 0 && after >= 0
                  : mode == "circular" ? before <= n && after <= n && before >= 0 && after >= 0
                                       : before >= 0 && after >= 0 && n > 0;
      if (!fits) unsupported("F.pad in mode '" + mode + "' with pads that do not fit a dim of " + std::to_string(n));
      Var i = op("arange", {}, {{"end", n + after}, {"start", -before}, {"dtype", DType::Int64}, {"device", device}});
      auto scalar = [&](const char* name, const Var& a, int64_t v) { return op(name, {a->value}, {{"other", v}}); };
      if (mode == "reflect") {
        Var distance = op("abs", {scalar("sub", op("abs", {i->value}), n - 1)->value});
        i = op("add", {op("neg", {distance->value})->value}, {{"other", n - 1}});
      } else if (mode == "replicate") {
        i = op("clamp", {i->value}, {{"min", int64_t{0}}, {"max", n - 1}});
      } else {
        i = scalar("remainder", i, n);
      }
      x = op("index_select", {x->value, i->value}, {{"dim", dim}});
    }
    return x;
  }

  // torch.tensor(data, dtype=None, device=None, requires_grad=False) of numbers in nested lists
  // and tuples: a `full` of each value (at most 64), joined and shaped; torch.tensor([]) an
  // empty one. The dtype is torch's inference: bool, int64, or the default float dtype.
  Var tensorOfConstants(const std::vector<Var>& args, const Kwargs& kwargs) {
    takes("torch.tensor", args, kwargs, 1, 1, {"dtype", "device", "requires_grad", "pin_memory"});
    if (auto grad = kwarg(kwargs, "requires_grad"); grad && truth(*grad)) unsupported("torch.tensor(requires_grad=True)");
    if (auto pin = kwarg(kwargs, "pin_memory"); pin && truth(*pin)) unsupported("torch.tensor(pin_memory=True)");
    std::vector<Var> shape, values;
    std::vector<size_t> lengths;
    bool anyFloat = false, allBool = true, ragged = false;
    std::function<void(const Var&, size_t)> walk = [&](const Var& v, size_t dim) {
      if (v->kind == Kind::List || v->kind == Kind::Tuple) {
        if (lengths.size() == dim) lengths.push_back(v->items.size());
        ragged = ragged || lengths[dim] != v->items.size();
        for (const Var& item : v->items) walk(item, dim + 1);
        return;
      }
      bool number = (v->kind == Kind::Int && v->symbolic.asInteger()) || (v->kind == Kind::Float && !v->traced) ||
                    (v->kind == Kind::Bool && v->symbolic.isNull());
      if (!number) unsupported("torch.tensor of a " + kindName(v->kind) + " (only constant numbers)");
      ragged = ragged || dim != lengths.size();
      anyFloat = anyFloat || v->kind == Kind::Float;
      allBool = allBool && v->kind == Kind::Bool;
      values.push_back(v);
    };
    walk(args[0], 0);
    size_t count = 1;
    for (size_t n : lengths) count *= n, shape.push_back(integer(table.integer(static_cast<int64_t>(n))));
    if (ragged || count != values.size()) unsupported("torch.tensor of nested lists of different lengths (ValueError)");
    if (values.size() > 64) unsupported("torch.tensor of more than 64 numbers");
    Var dtype = make(Kind::DType);
    if (auto given = kwarg(kwargs, "dtype"); given && (*given)->kind != Kind::None) {
      if ((*given)->kind != Kind::DType) unsupported("torch.tensor with a dtype that is a " + kindName((*given)->kind));
      dtype = *given;
    } else if (!values.empty() && allBool) {
      dtype->dtype = DType::Bool;
    } else if (anyFloat || values.empty()) {
      if (!guards.globals.defaultDtype) unsupported("torch.tensor of floats without the default dtype in the call's state");
      dtype->dtype = *guards.globals.defaultDtype;
    } else {
      dtype->dtype = DType::Int64;
    }
    Kwargs made = {{"dtype", dtype}};
    if (auto device = kwarg(kwargs, "device"); device && (*device)->kind != Kind::None) made.emplace_back("device", *device);
    if (values.size() != 1 || !lengths.empty()) {
      if (values.empty()) return callOp("full", {sequence(Kind::Tuple, shape), integer(table.integer(0))}, made);
      std::vector<Var> parts;
      for (const Var& v : values) parts.push_back(callOp("full", {sequence(Kind::Tuple, {integer(table.integer(1))}), v}, made));
      Var flat = parts.size() == 1 ? parts[0] : callOp("cat", {sequence(Kind::List, parts)}, {});
      return callOp("reshape", {flat, sequence(Kind::Tuple, shape)}, {});
    }
    return callOp("full", {sequence(Kind::Tuple, {}), values[0]}, made);
  }

  // Calls whose answer is known when tracing: kiln compiles (modeling code takes its
  // compile-friendly paths, as under torch.compile), TorchScript is not tracing, and the grad
  // mode and default dtype are those the trace runs under (the entry's global state guards them).
  std::optional<Var> answeredWhenTracing(const std::string& name) {
    if (name == "torch.compiler.is_compiling" || name == "torch.compiler.is_dynamo_compiling") return boolean(true);
    if (name == "torch.compiler.is_exporting" || name == "torch.jit.is_tracing" || name == "torch.jit.is_scripting")
      return boolean(false);
    if (name == "torch._C._get_tracing_state") return none();
    if (name == "torch.is_grad_enabled") return boolean(gradEnabled);
    if (name == "torch.get_default_dtype") {
      if (!guards.globals.defaultDtype) unsupported("torch.get_default_dtype() without the default dtype in the call's state");
      Var v = make(Kind::DType);
      v->dtype = *guards.globals.defaultDtype;
      return v;
    }
    return std::nullopt;
  }

  // torch.utils.checkpoint.checkpoint(function, *args, use_reentrant=..., **kwargs):
  // the function inlined. What to keep for the backward and what to recompute is
  // the partitioner's choice for the whole graph (its memory_budget), as Inductor
  // partitions through a checkpoint; dropouts inside replay their seed either way.
  // The reentrant form (use_reentrant unset or true) gives outputs that carry no
  // grad when no tensor argument requires grad (eager warns so): detached here too.
  Var checkpoint(std::vector<Var> args, const Kwargs& kwargs, size_t depth) {
    if (args.empty()) unsupported("torch.utils.checkpoint.checkpoint without a function");
    Var function = args.front();
    args.erase(args.begin());
    bool reentrant = true;
    Kwargs passed;
    for (const auto& [key, value] : kwargs) {
      if (key == "use_reentrant") {
        reentrant = value->kind == Kind::None || truth(value);
      } else if (key == "preserve_rng_state" || key == "determinism_check" || key == "debug") {
        continue; // kiln's random streams replay by seed; nothing is recomputed eagerly to check
      } else if (key == "context_fn") {
        unsupported("torch.utils.checkpoint.checkpoint with a context_fn");
      } else {
        passed.emplace_back(key, value);
      }
    }
    bool anyGrad = false;
    for (const Var& a : args)
      anyGrad = anyGrad || (a->kind == Kind::Tensor && meta(a).requiresGrad);
    Var result = callVar(function, std::move(args), passed, depth);
    if (!reentrant || anyGrad || !gradEnabled) return result;
    return detachTensors(result);
  }

  // `v` with each tensor in it (through tuples and lists) detached.
  Var detachTensors(const Var& v) {
    if (v->kind == Kind::Tensor) return op("detach", {v->value});
    if (v->kind != Kind::Tuple && v->kind != Kind::List) return v;
    Var copy = std::make_shared<VarNode>(*v);
    for (Var& item : copy->items) item = detachTensors(item);
    return copy;
  }

  Var math(const std::string& f, const std::vector<Var>& args) {
    if (args.size() == 1 && args[0]->kind == Kind::Float && args[0]->traced)
      if (auto traced = floatMath(f, args[0])) return *traced;
    if (args.size() == 2 && f == "pow" && (args[0]->traced || args[1]->traced)) return arith("**", args[0], args[1]);
    if (args.size() == 1) {
      double x = number(args[0]);
      // Where Python raises (a domain error, an overflow), eager raises: refused.
      bool logarithm = f == "log" || f == "log2" || f == "log10";
      if ((f == "sqrt" && x < 0) || (logarithm && x <= 0) || ((f == "floor" || f == "ceil") && !std::isfinite(x)))
        unsupported("math." + f + " of " + std::to_string(x) + " (Python raises)");
      if (f == "sqrt") return floating(std::sqrt(x));
      if (f == "exp") return floating(std::exp(x));
      if (f == "log") return floating(std::log(x));
      if (f == "log2") return floating(std::log2(x));
      if (f == "log10") return floating(std::log10(x));
      if (f == "tanh") return floating(std::tanh(x));
      if (f == "cos") return floating(std::cos(x));
      if (f == "sin") return floating(std::sin(x));
      if (f == "floor") return integer(table.integer(static_cast<int64_t>(std::floor(x))));
      if (f == "ceil") return integer(table.integer(static_cast<int64_t>(std::ceil(x))));
      if (f == "erf") return floating(std::erf(x));
    }
    if (args.size() == 2 && f == "pow") return floating(std::pow(number(args[0]), number(args[1])));
    unsupported("math." + f);
  }

  // type(v): an object of the call's class read through its path (guarded by the object's
  // type guard); a value the trace made, its Python type.
  Var typeOf(const Var& v) {
    if (v->kind == Kind::Object && !v->path) return v->cls;
    if (v->path && has(*v->path) && v->kind != Kind::Int && v->kind != Kind::Float && v->kind != Kind::Bool)
      return realize(extend(*v->path, guards::attr("__class__")));
    auto named = [](const std::string& module, const std::string& qualname) {
      Var t = make(Kind::TypeObject);
      t->type = {module, qualname};
      t->mro = {t->type, {"builtins", "object"}};
      t->boolean = true;
      return t;
    };
    switch (v->kind) {
    case Kind::None: return named("builtins", "NoneType");
    case Kind::Bool: return builtin("builtins.bool");
    case Kind::Int: return builtin("builtins.int");
    case Kind::Float: return builtin("builtins.float");
    case Kind::Str: return builtin("builtins.str");
    case Kind::List: return builtin("builtins.list");
    case Kind::Dict: return builtin("builtins.dict");
    case Kind::Set: return builtin(v->type.qualname.empty() ? "builtins.set" : "builtins.frozenset");
    case Kind::Tensor: return builtin("torch.Tensor"); // made by the trace: never a subclass
    case Kind::Tuple:
      if (v->type.qualname.empty()) return builtin("builtins.tuple");
      break;
    default: break;
    }
    unsupported("type() of a " + kindName(v->kind));
  }

  // The MRO of an object's class: as described, or, for one the trace made, its class's.
  static const std::vector<guards::TypeRef>& mroOf(const Var& v) {
    if (v->mro.empty() && v->kind == Kind::Object && !v->path && v->cls) return v->cls->mro;
    return v->mro;
  }

  bool isInstance(const Var& v, const Var& types) {
    if (types->kind == Kind::Tuple) {
      for (const Var& t : types->items)
        if (isInstance(v, t)) return true;
      return false;
    }
    if (types->kind == Kind::Builtin) {
      const std::string& n = types->name;
      if (n == "builtins.object") return true;
      // An instance of a class whose MRO holds the builtin type (a namedtuple is a tuple,
      // an IntEnum an int, an OrderedDict or a ModelOutput a dict): its MRO decides.
      const std::vector<guards::TypeRef>& mro = mroOf(v);
      if (!mro.empty() && n.rfind("builtins.", 0) == 0) {
        guards::TypeRef builtinType{"builtins", n.substr(std::string("builtins.").size())};
        return std::find(mro.begin(), mro.end(), builtinType) != mro.end();
      }
      if (n == "builtins.int") return v->kind == Kind::Int || v->kind == Kind::Bool; // bool is an int
      if (n == "builtins.float") return v->kind == Kind::Float;
      if (n == "builtins.bool") return v->kind == Kind::Bool;
      if (n == "builtins.str") return v->kind == Kind::Str;
      if (n == "builtins.tuple") return v->kind == Kind::Tuple;
      if (n == "builtins.list") return v->kind == Kind::List;
      if (n == "builtins.dict") return v->kind == Kind::Dict;
      if (n == "builtins.set") return v->kind == Kind::Set && v->type.qualname.empty();
      if (n == "builtins.frozenset") return v->kind == Kind::Set && !v->type.qualname.empty();
      if (n == "torch.Tensor") return v->kind == Kind::Tensor;
    }
    if (types->kind == Kind::TypeObject && (v->kind == Kind::NnModule || v->kind == Kind::Object)) {
      // Its type's __mro__, as the SDK described it (the type is guarded, so is its MRO).
      const std::vector<guards::TypeRef>& mro = mroOf(v);
      if (mro.empty()) unsupported("isinstance() of an object described without its type's MRO");
      return std::find(mro.begin(), mro.end(), types->type) != mro.end();
    }
    if (types->kind == Kind::TypeObject && types->boolean && types->type.module != "builtins") {
      // A class of its own (its metaclass keeps type's __instancecheck__: no virtual
      // subclasses) holds none of kiln's values, unless it is a Tensor subclass, which a
      // tensor of the call may be (an nn.Parameter): that tensor's class, read, decides.
      const guards::TypeRef tensor{"torch", "Tensor"};
      bool tensorClass = std::find(types->mro.begin(), types->mro.end(), tensor) != types->mro.end();
      if (v->kind != Kind::Tensor && !v->type.qualname.empty()) unsupported("isinstance() of a " + v->type.text() + " with a class");
      if (v->kind == Kind::Tensor && tensorClass && v->path) {
        Var cls = typeOf(v);
        return cls->kind == Kind::TypeObject && std::find(cls->mro.begin(), cls->mro.end(), types->type) != cls->mro.end();
      }
      return false;
    }
    unsupported("isinstance() with a " + kindName(types->kind));
  }

  // ---- instances the traced code makes --------------------------------------

  static bool isMissing(schema::ObjectDesc::Reader d) {
    return d.isUnsupported() && std::string(d.getUnsupported().cStr()).rfind("missing (AttributeError", 0) == 0;
  }

  // A class's raw attribute `name`, as the first class of its MRO from `from` whose __dict__
  // has it holds it (a function, staticmethod, classmethod, property or value); nullopt
  // where none has it (guarded so).
  std::optional<Var> classAttribute(const Var& cls, size_t from, const std::string& name) {
    if (cls->kind != Kind::TypeObject || !cls->path) unsupported("an attribute of a class kiln reached without a path");
    Path at = extend(*cls->path, guards::classAttr(static_cast<uint32_t>(from), name));
    if (!isMissing(lookup(at))) return realize(at);
    if (from != 0) unsupported("super()." + name + ", which no class after it has");
    // Absent from the class's MRO; hasattr(cls, name) (which also sees the metaclass's) keeps its answer.
    bool onMetaclass = !isMissing(lookup(extend(*cls->path, guards::attr(name))));
    guards.check(node(extend(*cls->path, guards::hasAttr(name))), guards::equals(guards::Constant{onMetaclass}));
    return std::nullopt;
  }

  static bool isDescriptor(const Var& raw, const char* type) {
    return raw->kind == Kind::Object && raw->type.text() == type;
  }

  // A class attribute that takes over reads and writes of the instance's attribute of its
  // name (a property, a __slots__ member, any descriptor with __set__ or __delete__).
  static bool isDataDescriptor(const Var& raw) {
    return isDescriptor(raw, "builtins.property") || (raw->kind == Kind::Object && raw->desc && raw->desc->getDataDescriptor());
  }

  static bool isBuiltinMethod(const Var& raw, const std::string& name) { return raw->kind == Kind::Builtin && raw->name == name; }

  // A raw class attribute read through an instance `self` of `cls`: a function bound to it, a
  // staticmethod's function as it is, a classmethod's bound to the class, a property's getter
  // run, a method of object/dict/OrderedDict kiln runs on the instance; a value as it is.
  Var bindClassAttribute(const Var& raw, const Var& self, const Var& cls, size_t depth) {
    if (raw->kind == Kind::Function) {
      Var bound = make(Kind::Method);
      bound->self = self;
      bound->function = raw->function;
      return bound;
    }
    if (raw->kind == Kind::Builtin && (raw->name.rfind("builtins.object.", 0) == 0 || raw->name.rfind("builtins.dict.", 0) == 0 ||
                                       raw->name.rfind("collections.OrderedDict.", 0) == 0))
      return method(self, raw->name);
    if (raw->kind == Kind::Object && raw->path) {
      if (isDescriptor(raw, "builtins.staticmethod")) return realize(extend(*raw->path, guards::attr("__func__")));
      if (isDescriptor(raw, "builtins.classmethod")) {
        Var fn = realize(extend(*raw->path, guards::attr("__func__")));
        if (fn->kind != Kind::Function) unsupported("a classmethod of a " + kindName(fn->kind));
        return bindClassAttribute(fn, cls, cls, depth);
      }
      if (isDescriptor(raw, "builtins.property")) {
        Var getter = realize(extend(*raw->path, guards::attr("fget")));
        if (getter->kind == Kind::None) unsupported("a property without a getter (AttributeError)");
        return callVar(getter, {self}, {}, depth);
      }
      if (!absent(raw, "__get__")) unsupported("a class attribute that is a " + raw->type.text() + " (a descriptor)");
    }
    return raw; // a class variable: a number, a string, a class, an object without __get__
  }

  // `obj.name` of an instance the traced code made: a property first, then its __dict__, then
  // the class's attribute, then the class's __getattr__.
  Var madeAttribute(const Var& obj, const std::string& name, size_t depth) {
    if (name == "__class__") return obj->cls;
    if (name == "__dict__") return obj->attrs;
    std::optional<Var> raw = classAttribute(obj->cls, 0, name);
    if (raw && isDataDescriptor(*raw) && !isDescriptor(*raw, "builtins.property"))
      unsupported("attribute '" + name + "' of a " + obj->type.text() + ", a " + (*raw)->type.text());
    if (!raw || !isDataDescriptor(*raw))
      for (size_t k = 0; k < obj->attrs->keys.size(); ++k)
        if (obj->attrs->keys[k]->name == name) return obj->attrs->items[k];
    if (raw) return bindClassAttribute(*raw, obj, obj->cls, depth);
    if (auto getattr = classAttribute(obj->cls, 0, "__getattr__"))
      return callVar(bindClassAttribute(*getattr, obj, obj->cls, depth), {string(name)}, {}, depth);
    unsupported("attribute '" + name + "' of a " + obj->type.text() + " (AttributeError)");
  }

  // object.__setattr__: into the instance's __dict__ (a property's setter is refused).
  void objectSetAttribute(const Var& obj, const std::string& name, const Var& value) {
    if (auto raw = classAttribute(obj->cls, 0, name); raw && isDataDescriptor(*raw))
      unsupported("setting '" + name + "' of a " + obj->type.text() + ", a " + (*raw)->type.text());
    Var& own = obj->attrs;
    for (size_t k = 0; k < own->keys.size(); ++k)
      if (own->keys[k]->kind == Kind::Str && own->keys[k]->name == name) {
        own->items[k] = value;
        return;
      }
    own->keys.push_back(string(name));
    own->items.push_back(value);
  }

  // `obj.name = value` of an object of the call, which the trace records and the SDK replays
  // with setattr afterwards: refused where the class runs code of its own there (a
  // __setattr__ other than object's or nn.Module's, a property setter or other data
  // descriptor) or its instances have no __dict__ (__slots__): later reads would see the
  // value as assigned, not as that code leaves it, and what it raises would come too late.
  void plainSetAttribute(const Var& obj, const std::string& name) {
    Var cls = realize(extend(*obj->path, guards::attr("__class__")));
    if (cls->kind != Kind::TypeObject) unsupported("setting '" + name + "' of an object whose class kiln cannot read");
    std::string what = "setting '" + name + "' of a " + cls->type.text();
    if (std::optional<Var> setter = classAttribute(cls, 0, "__setattr__")) {
      const Var& raw = *setter;
      bool moduleSetter = obj->kind == Kind::NnModule && raw->kind == Kind::Function &&
                          std::string(raw->function->code.getQualname().cStr()) == "Module.__setattr__" &&
                          raw->function->module == "torch.nn.modules.module";
      if (!isBuiltinMethod(raw, "builtins.object.__setattr__") && !moduleSetter)
        unsupported(what + ", whose class has a __setattr__ of its own");
    }
    Path at = extend(*cls->path, guards::classAttr(0, name));
    guards::TypeRef type = guards::fromWire(lookup(at).getType());
    if (!isMissing(lookup(at)) && type.module == "builtins" && type.qualname == "member_descriptor") {
      // a __slots__ member: a store as object's
      guards.check(node(at), guards::identityIs({lookup(at).getId(), request_.getScope(), "the __slots__ member " + name}));
      return;
    }
    if (auto raw = classAttribute(cls, 0, name); raw && isDataDescriptor(*raw))
      unsupported(what + ", a " + (*raw)->type.text() + " of its class (a setter)");
    else if (!raw && obj->kind == Kind::Object && !lookup(*cls->path).getInstanceDict())
      unsupported(what + ", whose instances have no __dict__ (__slots__)");
  }

  // `obj.name = value` for an instance the traced code made: its class's __setattr__.
  void madeSetAttribute(const Var& obj, const std::string& name, const Var& value, size_t depth) {
    std::optional<Var> setter = classAttribute(obj->cls, 0, "__setattr__");
    if (!setter || isBuiltinMethod(*setter, "builtins.object.__setattr__")) return objectSetAttribute(obj, name, value);
    callVar(bindClassAttribute(*setter, obj, obj->cls, depth), {string(name), value}, {}, depth);
  }

  // `cls(*args, **kwargs)` for a class of the call whose instances are plain objects, dicts
  // or OrderedDicts with a __dict__: made by its layout's __new__, then its __init__ inlined.
  Var instantiate(const Var& cls, std::vector<Var> args, const Kwargs& kwargs, size_t depth) {
    if (!cls->path) unsupported("calling a class kiln reached without a path");
    auto d = lookup(*cls->path);
    std::string what = cls->type.text();
    if (!d.getInstantiable()) unsupported("calling " + what + " (its metaclass's __call__, or abstract methods)");
    if (!d.getInstanceDict()) unsupported("calling " + what + ", whose instances have no __dict__ (__slots__)");
    if (cls->type.module.rfind("torch", 0) == 0) unsupported("making a " + what + " in the traced code");
    for (const guards::TypeRef& t : cls->mro) {
      bool builtinBase = t.module == "builtins" || t.module == "collections" || t.module.rfind("torch", 0) == 0 ||
                         t.module == "enum" || t.module == "_collections";
      if (builtinBase && !(t == guards::TypeRef{"builtins", "object"} || t == guards::TypeRef{"builtins", "dict"} ||
                           t == guards::TypeRef{"collections", "OrderedDict"}))
        unsupported("calling " + what + ", a subclass of " + t.text());
    }
    // TODO(issue 45): a @contextmanager's generator runs to its end when called here: its code
    // after `yield` would run before the `with` block's.
    if (std::find(cls->mro.begin(), cls->mro.end(), guards::TypeRef{"contextlib", "_GeneratorContextManagerBase"}) != cls->mro.end())
      unsupported("a @contextlib.contextmanager's context manager");
    Var made = make(Kind::Object);
    made->attrs = make(Kind::Dict);
    made->cls = cls;
    made->type = cls->type;
    made->mro = cls->mro;
    std::optional<Var> create = classAttribute(cls, 0, "__new__");
    if (create && isBuiltinMethod(*create, "builtins.object.__new__")) {
      made->layout = "object";
    } else if (create && isBuiltinMethod(*create, "builtins.dict.__new__")) {
      bool ordered = std::find(cls->mro.begin(), cls->mro.end(), guards::TypeRef{"collections", "OrderedDict"}) != cls->mro.end();
      made->layout = ordered ? "OrderedDict" : "dict";
      made->storage = make(Kind::Dict);
    } else {
      unsupported("calling " + what + ", whose class has its own __new__");
    }
    std::optional<Var> get = classAttribute(cls, 0, "__getattribute__");
    if (!get || !(isBuiltinMethod(*get, "builtins.object.__getattribute__") || isBuiltinMethod(*get, "builtins.dict.__getattribute__")))
      unsupported("calling " + what + ", whose class has its own __getattribute__");
    std::optional<Var> init = classAttribute(cls, 0, "__init__");
    Var result = init ? callVar(bindClassAttribute(*init, made, cls, depth), std::move(args), kwargs, depth) : none();
    if (result->kind != Kind::None) unsupported(what + ".__init__ returned a value (TypeError)");
    return made;
  }

  // A method of object, dict or OrderedDict (by name: "builtins.dict.__setitem__") run on an
  // instance the traced code made.
  Var madeBuiltinMethod(const Var& obj, const std::string& name, std::vector<Var> args, const Kwargs& kwargs) {
    if (name == "builtins.object.__init__") {
      takes(name, args, kwargs, 0, 0);
      return none();
    }
    if (name == "builtins.object.__setattr__") {
      takes(name, args, kwargs, 2, 2);
      if (args[0]->kind != Kind::Str) unsupported("object.__setattr__ with a name that is not a str");
      objectSetAttribute(obj, args[0]->name, args[1]);
      return none();
    }
    if (!obj->storage) unsupported(name + " of a " + obj->type.text());
    std::string m = name.substr(name.rfind('.') + 1);
    const Var& items = obj->storage;
    if (m == "__setitem__") {
      takes(name, args, kwargs, 2, 2);
      dictPut(items, args[0], args[1]);
      return none();
    }
    if (m == "__getitem__") {
      takes(name, args, kwargs, 1, 1);
      return subscript(items, args[0]);
    }
    if (m == "__contains__") {
      takes(name, args, kwargs, 1, 1);
      return boolean(contains(items, args[0]));
    }
    if (m == "__len__") {
      takes(name, args, kwargs, 0, 0);
      return integer(table.integer(static_cast<int64_t>(items->keys.size())));
    }
    if (m == "__iter__") {
      takes(name, args, kwargs, 0, 0);
      return iterator(items->keys);
    }
    if (m == "__delitem__") {
      takes(name, args, kwargs, 1, 1);
      dictMethod(items, "pop", {args[0]}, {});
      return none();
    }
    if (m == "__init__") return dictMethod(items, "update", args, kwargs);
    if (m == "keys" || m == "values" || m == "items" || m == "get" || m == "pop" || m == "setdefault" || m == "update")
      return callMethod(items, m, std::move(args), kwargs, 0);
    unsupported(name + " of a " + obj->type.text());
  }

  // The special method `name` of an object (as Python finds it for a statement: on its class
  // for one the trace made), bound.
  Var specialMethod(const Var& obj, const std::string& name, size_t depth) {
    if (obj->path) return attribute(obj, name);
    std::optional<Var> raw = classAttribute(obj->cls, 0, name);
    if (!raw) unsupported("a " + obj->type.text() + " without " + name);
    return bindClassAttribute(*raw, obj, obj->cls, depth);
  }

  // super() in a method: its class (the __class__ cell) and its first argument.
  Var zeroArgumentSuper(Frame& f) {
    adoptCell(f, "__class__");
    auto cell = f.cells.find("__class__");
    if (cell == f.cells.end() || cell->second->items.empty()) unsupported("super() outside a method");
    auto names = f.code.getVarnames();
    if (f.code.getArgCount() == 0 || names.size() == 0) unsupported("super() in a method without arguments");
    std::string first = names[0].cStr();
    Var self;
    if (auto it = f.locals.find(first); it != f.locals.end() && it->second->kind != Kind::Cell) self = it->second;
    else if (auto c = f.cells.find(first); c != f.cells.end() && !c->second->items.empty()) self = c->second->items[0];
    if (!self) unsupported("super() whose first argument was deleted");
    return makeSuper(cell->second->items[0], self);
  }

  Var makeSuper(const Var& cls, const Var& self) {
    if (cls->kind != Kind::TypeObject) unsupported("super() of a " + kindName(cls->kind));
    Var s = make(Kind::Super);
    s->cls = cls;
    s->self = self;
    return s;
  }

  // super().name: the attribute as the classes after `cls` in type(self)'s MRO hold it, bound
  // to self. nn.Module's __call__ (a subclass overriding it calls it so) runs the module.
  Var superAttribute(const Var& s, const std::string& name, size_t depth) {
    Var type = s->self->kind == Kind::Object && !s->self->path ? s->self->cls : typeOf(s->self);
    if (type->kind != Kind::TypeObject) unsupported("super() of a " + kindName(s->self->kind));
    auto at = std::find(type->mro.begin(), type->mro.end(), s->cls->type);
    if (at == type->mro.end()) unsupported("super(): " + s->cls->type.text() + " is not in the instance's MRO");
    size_t from = static_cast<size_t>(at - type->mro.begin()) + 1;
    Var raw = *classAttribute(type, from, name);
    if (raw->kind == Kind::Function && s->self->kind == Kind::NnModule &&
        std::string(raw->function->code.getQualname().cStr()) == "Module._wrapped_call_impl")
      return method(s->self, "__module_call__");
    return bindClassAttribute(raw, s->self, type, depth);
  }

  // ---- attributes ----------------------------------------------------------

  // Whether an object lacks attribute `name` (reading it raises AttributeError), asked of the
  // object of the call (an object, a module, a tensor) or, for a tensor the trace computed, of
  // torch.Tensor; guarded either way: hasattr(obj, name) keeps its answer. nullopt: not known
  // (a value kiln reads attributes of itself).
  std::optional<bool> absence(const Var& obj, const std::string& name) {
    if (obj->kind == Kind::None && name.rfind("__", 0) != 0) return true; // None has only dunder attributes
    if (obj->kind != Kind::Object && obj->kind != Kind::NnModule && obj->kind != Kind::Tensor) return std::nullopt;
    if (obj->kind != Kind::Tensor && !obj->path) return std::nullopt;
    if (obj->kind == Kind::NnModule && (name == "training" || name == "forward" || name == "__call__")) return false;
    Path base = obj->path ? *obj->path : Path{guards::pyModule("torch"), guards::attr("Tensor")};
    auto d = lookup(extend(base, guards::attr(name)));
    bool missing = isMissing(d);
    guards.check(node(extend(base, guards::hasAttr(name))), guards::equals(guards::Constant{!missing}));
    return missing;
  }

  bool absent(const Var& obj, const std::string& name) { return absence(obj, name).value_or(false); }

  Var attribute(const Var& obj, const std::string& name) {
    if (auto field = typeInfoAttribute(obj, name)) return *field;
    switch (obj->kind) {
    case Kind::Tensor:
      if (name == "__class__") return typeOf(obj);
      if (auto a = tensorAttribute(*this, obj, name)) return *a;
      return method(obj, name);
    case Kind::PyModule: {
      if (auto m = moduleMember(obj->name, name)) {
        // A submodule kiln knows (torch.nn) keeps where it was reached, so that what
        // kiln does not know in it (a class for isinstance) is asked of the SDK.
        if ((*m)->kind == Kind::PyModule && obj->path) (*m)->path = extend(*obj->path, guards::attr(name));
        return *m;
      }
      if (!obj->path) unsupported(obj->name + "." + name);
      return realize(extend(*obj->path, guards::attr(name)));
    }
    case Kind::NnModule: {
      if (name == "training") return boolean(obj->desc->getModule().getTraining());
      if (name == "forward" || name == "__call__") return method(obj, "forward");
      // The container protocol of Module, ModuleList and ModuleDict, over the described children,
      // unless the module has a parameter, buffer, submodule or attribute of that name (a cache's
      // `keys` buffer), which Module.__getattr__ finds first.
      auto module = obj->desc->getModule();
      auto named = [&](auto list) {
        for (auto item : list)
          if (item.getName() == name) return true;
        return false;
      };
      bool own = named(module.getParameters()) || named(module.getBuffers()) || named(module.getAttributes());
      for (auto child : module.getModules()) own = own || child == name;
      if (!own && (name == "items" || name == "keys" || name == "values" || name == "children" || name == "named_children"))
        return method(obj, name);
      return realize(extend(*obj->path, guards::attr(name)));
    }
    case Kind::Object:
      if (!obj->path) return madeAttribute(obj, name, depth_);
      return realize(extend(*obj->path, guards::attr(name)));
    case Kind::Super: return superAttribute(obj, name, depth_);
    case Kind::TypeObject: // a class's attribute, as getattr(cls, name) finds it (guarded as read)
      if (obj->path) return realize(extend(*obj->path, guards::attr(name)));
      break;
    case Kind::Builtin: // an ATen packet's overload (torch.ops.aten.add.Tensor)
      if (obj->path && obj->desc && obj->desc->isAtenOp() && !obj->desc->getAtenOp().getOverload())
        return realize(extend(*obj->path, guards::attr(name)));
      break;
    case Kind::List:
    case Kind::Dict:
    case Kind::Str:
    case Kind::GradMode:
    case Kind::Autocast: return method(obj, name);
    case Kind::Tuple:
      if (name == "index" || name == "count") return method(obj, name);
      break;
    case Kind::Function:
      if (name == "__name__" && !obj->path) return string(obj->function->code.getName().cStr());
      // Introspection of a function of the call (`fn.__code__.co_varnames`): read, guarded.
      if (obj->path && name != "__call__" && name != "__get__") return realize(extend(*obj->path, guards::attr(name)));
      break;
    case Kind::DType:
      if (name == "is_floating_point") return boolean(ir::isFloating(obj->dtype));
      if (name == "itemsize") return integer(table.integer(static_cast<int64_t>(elementSize(obj->dtype))));
      break;
    case Kind::Device:
      if (name == "type") return string(obj->device.type == ir::DeviceType::Cuda ? "cuda" : "cpu");
      break;
    default: break;
    }
    if (obj->kind == Kind::Tuple && obj->type == guards::TypeRef{"inspect", "Signature"} && name == "parameters") return obj->items[0];
    if (obj->kind == Kind::Tuple && obj->type == guards::TypeRef{"inspect", "Parameter"}) {
      if (name == "name") return obj->items[0];
      if (name == "default") return obj->items[1];
      unsupported("attribute '" + name + "' of an inspect.Parameter");
    }
    if (isReturnType(obj) && obj->items.size() == 2 && (name == "values" || name == "indices"))
      return obj->items[name == "values" ? 0 : 1];
    unsupported("attribute '" + name + "' of a " + kindName(obj->kind));
  }

  // A cell variable whose slot holds a cell object passed in (a resume function's: no
  // MAKE_CELL ran, the slot is the frame's cell itself) is that cell.
  void adoptCell(Frame& f, const std::string& name) {
    if (f.cells.count(name)) return;
    if (auto it = f.locals.find(name); it != f.locals.end() && it->second->kind == Kind::Cell) {
      f.cells[name] = it->second;
      f.locals.erase(it);
    }
  }

  // ---- values --------------------------------------------------------------

  Var iterator(std::vector<Var> items) { return sequence(Kind::Iterator, std::move(items)); }

  // The list or dict a builder instruction adds to: one the traced code is building. One
  // of the call (a resume function's stack after a graph break) would need the additions
  // replayed on it.
  Var builtHere(const Var& v, Kind kind) {
    if (v->kind != kind) unsupported("adding to a " + kindName(v->kind) + " as to a " + kindName(kind));
    if (v->path) unsupported("adding to a " + kindName(kind) + " of the call as it is built");
    return v;
  }

  std::vector<Var> iterate(const Var& v) {
    switch (v->kind) {
    case Kind::Tuple:
    case Kind::List:
    case Kind::Set:
    case Kind::Iterator: return std::vector<Var>(v->items.begin() + static_cast<std::ptrdiff_t>(v->next), v->items.end());
    case Kind::Dict: return v->keys;
    case Kind::Range: {
      int64_t start = concrete(v->items[0]), stop = concrete(v->items[1]), step = concrete(v->items[2]);
      if (step == 0) unsupported("range() with step 0");
      std::vector<Var> out;
      for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step) {
        if (out.size() > 100000) unsupported("a loop of more than 100000 iterations");
        out.push_back(integer(table.integer(k)));
      }
      return out;
    }
    case Kind::Str: {
      std::vector<Var> out;
      for (char c : v->name) out.push_back(string(std::string(1, c)));
      return out;
    }
    case Kind::Tensor: {
      const ir::TensorMeta& m = meta(v);
      if (m.dim() == 0) unsupported("iterating a 0-d tensor");
      Var n = integer(m.sizes[0]);
      int64_t count = concrete(n);
      Var parts = op("unbind", {v->value}, {{"dim", int64_t{0}}});
      (void)count;
      return parts->items;
    }
    case Kind::NnModule: return children(v);
    case Kind::Object:
      if (!v->path) return iterate(*dunder(v, "__iter__", {}, depth_));
      break;
    default: break;
    }
    unsupported("iterating a " + kindName(v->kind));
  }

  // Where `key` is in dict `d`, as Python's dict finds it. Keys kiln compares are str, int,
  // bool, float and None; ints, bools and floats mixed in one dict are refused (1 == True).
  std::optional<size_t> keyIndex(const Var& d, const Var& key) {
    toConstant(key);
    auto numeric = [](Kind k) { return k == Kind::Int || k == Kind::Bool || k == Kind::Float; };
    for (size_t k = 0; k < d->keys.size(); ++k) {
      const Var& other = d->keys[k];
      if (other->kind != key->kind && numeric(other->kind) && numeric(key->kind))
        unsupported("a dict whose keys mix ints, bools and floats");
      if (sameConstant(other, key)) return k;
    }
    return std::nullopt;
  }

  // d[key] = value: a key already there keeps its place and takes the value.
  void dictPut(const Var& d, const Var& key, const Var& value) {
    if (auto at = keyIndex(d, key)) {
      d->items[*at] = value;
      return;
    }
    d->keys.push_back(key);
    d->items.push_back(value);
  }

  bool sameConstant(const Var& a, const Var& b) {
    if (a->kind != b->kind) return false;
    switch (a->kind) {
    case Kind::None: return true;
    case Kind::Str: return a->name == b->name;
    case Kind::Bool: return a->boolean == b->boolean;
    case Kind::Int: return decide(sym::eq(a->symbolic, b->symbolic));
    case Kind::Float: return number(a) == number(b);
    default: return false;
    }
  }

  bool truth(const Var& v) {
    switch (v->kind) {
    case Kind::None: return false;
    case Kind::Bool: return v->symbolic.isNull() ? v->boolean : decide(v->symbolic);
    case Kind::Int: return decide(sym::ne(v->symbolic, 0));
    case Kind::Float: return number(v) != 0;
    case Kind::Str: return !v->name.empty();
    case Kind::Tuple:
    case Kind::List:
    case Kind::Set:
    case Kind::Dict: return !v->items.empty();
    case Kind::Tensor: unsupported("a branch on a tensor's value"); // TODO(issue 6): a graph break
    case Kind::Object:
    case Kind::NnModule:
      // True unless its class defines __bool__ or __len__ (both absences guarded); a
      // ModuleList's, Sequential's or ModuleDict's length is its children's.
      if (v->kind == Kind::Object && !v->path) { // made here
        for (const char* name : {"__bool__", "__len__"})
          if (classAttribute(v->cls, 0, name)) return truth(*dunder(v, name, {}, depth_));
        return true;
      }
      if (!v->path || (absent(v, "__bool__") && absent(v, "__len__"))) return true;
      if (v->kind == Kind::NnModule && isContainerModule(v)) return !children(v).empty();
      unsupported("the truth of a " + v->type.text() + " (its class defines __bool__ or __len__)");
    default: return true;
    }
  }

  std::string text(const Var& v) {
    switch (v->kind) {
    case Kind::Str: return v->name;
    case Kind::Int: return std::to_string(concrete(v));
    // A float's text is Python's shortest round-trip repr (2.0, 0.1, 1e+16): refused, not guessed.
    case Kind::Bool: return truth(v) ? "True" : "False";
    case Kind::None: return "None";
    case Kind::TypeObject: // str() of a plain class (see ObjectDesc.plainClass)
      if (!v->boolean) unsupported("formatting a class whose metaclass has its own __str__");
      return "<class '" + (v->type.module == "builtins" ? "" : v->type.module + ".") + v->type.qualname + "'>";
    case Kind::Builtin:
      if (v->name == "torch.Tensor") return "<class 'torch.Tensor'>";
      if (builtinTypes().count(v->name)) return "<class '" + v->name.substr(9) + "'>";
      unsupported("formatting " + v->name);
    default: unsupported("formatting a " + kindName(v->kind));
    }
  }

  // format(v, spec) for a str, an int or a float, Python's mini-language
  // [[fill]align][sign][0][width][,|_][.precision][type] with the types s, d, x, X, o, b, f,
  // F, e, E and %; others ('g', 'n', '#', a float's precision without a type) are refused.
  std::string formatted(const Var& given, const std::string& spec) {
    // A bool formats as its int under any spec (bool inherits int.__format__).
    const Var v = given->kind == Kind::Bool ? integer(table.integer(truth(given) ? 1 : 0)) : given;
    auto refuse = [&]() -> std::string { unsupported("the format spec '" + spec + "' of a " + kindName(v->kind)); };
    size_t i = 0, n = spec.size();
    char fill = ' ', align = 0;
    auto isAlign = [](char c) { return c == '<' || c == '>' || c == '=' || c == '^'; };
    if (n >= 2 && isAlign(spec[1])) fill = spec[0], align = spec[1], i = 2;
    else if (n >= 1 && isAlign(spec[0])) align = spec[0], i = 1;
    char sign = '-';
    if (i < n && (spec[i] == '+' || spec[i] == '-' || spec[i] == ' ')) sign = spec[i++];
    if (i < n && (spec[i] == 'z' || spec[i] == '#')) return refuse();
    if (i < n && spec[i] == '0') {
      if (!align) fill = '0', align = '=';
      ++i;
    }
    size_t width = 0;
    while (i < n && std::isdigit(static_cast<unsigned char>(spec[i]))) width = width * 10 + static_cast<size_t>(spec[i++] - '0');
    char grouping = 0;
    if (i < n && (spec[i] == ',' || spec[i] == '_')) grouping = spec[i++];
    std::optional<int> precision;
    if (i < n && spec[i] == '.') {
      int p = 0;
      size_t start = ++i;
      while (i < n && std::isdigit(static_cast<unsigned char>(spec[i]))) p = p * 10 + (spec[i++] - '0');
      if (i == start) return refuse();
      precision = p;
    }
    char type = i < n ? spec[i++] : 0;
    if (i != n) return refuse();
    std::string body;
    bool negative = false, numeric = true;
    auto grouped = [&](std::string digits) { // the integer part's thousands
      if (!grouping) return digits;
      std::string out;
      for (size_t k = 0; k < digits.size(); ++k) {
        if (k && (digits.size() - k) % 3 == 0) out += grouping;
        out += digits[k];
      }
      return out;
    };
    if (v->kind == Kind::Str) {
      if ((type && type != 's') || sign != '-' || grouping || align == '=') return refuse();
      body = precision ? v->name.substr(0, static_cast<size_t>(*precision)) : v->name;
      numeric = false;
    } else if (v->kind == Kind::Int && (!type || type == 'd' || type == 'x' || type == 'X' || type == 'o' || type == 'b')) {
      if (precision) return refuse(); // ValueError
      int64_t x = concrete(v);
      negative = x < 0;
      uint64_t m = negative ? 0 - static_cast<uint64_t>(x) : static_cast<uint64_t>(x);
      int base = type == 'x' || type == 'X' ? 16 : type == 'o' ? 8 : type == 'b' ? 2 : 10;
      if (base != 10 && grouping) return refuse();
      do {
        int d = static_cast<int>(m % static_cast<uint64_t>(base));
        body.insert(body.begin(), static_cast<char>(d < 10 ? '0' + d : (type == 'X' ? 'A' : 'a') + d - 10));
        m /= static_cast<uint64_t>(base);
      } while (m);
      body = grouped(body);
    } else if ((v->kind == Kind::Int || v->kind == Kind::Float) &&
               (type == 'f' || type == 'F' || type == 'e' || type == 'E' || type == '%')) {
      double x = v->kind == Kind::Int ? static_cast<double>(concrete(v)) : number(v);
      if (type == '%') x *= 100;
      negative = std::signbit(x) && !std::isnan(x);
      char conversion = type == '%' ? 'f' : type;
      std::string format = "%." + std::to_string(precision.value_or(6)) + conversion;
      char buffer[512];
      int written = std::snprintf(buffer, sizeof buffer, format.c_str(), std::fabs(x));
      if (written < 0 || static_cast<size_t>(written) >= sizeof buffer) return refuse();
      body = buffer;
      size_t point = body.find_first_of(".eE");
      if (std::isfinite(x)) body = grouped(body.substr(0, point)) + (point == std::string::npos ? "" : body.substr(point));
      if (type == '%') body += '%';
    } else {
      return refuse();
    }
    std::string prefix = negative ? "-" : numeric && sign == '+' ? "+" : numeric && sign == ' ' ? " " : "";
    if (!align) align = numeric ? '>' : '<';
    size_t length = prefix.size() + body.size();
    std::string pad = width > length ? std::string(width - length, fill) : "";
    if (align == '=') return prefix + pad + body;
    if (align == '<') return prefix + body + pad;
    if (align == '>') return pad + prefix + body;
    size_t left = pad.size() / 2;
    return pad.substr(0, left) + prefix + body + pad.substr(left);
  }

  Var relation(sym::Expr e) {
    if (auto b = e.asBoolean()) return boolean(*b);
    Var v = make(Kind::Bool);
    v->symbolic = e;
    return v;
  }

  Var compare(const std::string& op, const Var& a, const Var& b) {
    if (a->kind == Kind::Tensor || b->kind == Kind::Tensor) {
      static const std::map<std::string, std::string> ops = {{"<", "lt"}, {"<=", "le"}, {"==", "eq"},
                                                             {"!=", "ne"}, {">", "gt"},  {">=", "ge"}};
      return tensorBinary(*this, ops.at(op), a, b);
    }
    auto isInt = [](const Var& v) { return v->kind == Kind::Int || (v->kind == Kind::Bool && v->symbolic.isNull()); };
    if (isInt(a) && isInt(b)) {
      sym::Expr x = asExpr(a), y = asExpr(b);
      if (op == "<") return relation(sym::lt(x, y));
      if (op == "<=") return relation(sym::le(x, y));
      if (op == "==") return relation(sym::eq(x, y));
      if (op == "!=") return relation(sym::ne(x, y));
      if (op == ">") return relation(sym::gt(x, y));
      if (op == ">=") return relation(sym::ge(x, y));
    }
    if (isNumber(a) && isNumber(b)) {
      double x = number(a), y = number(b);
      if (op == "<") return boolean(x < y);
      if (op == "<=") return boolean(x <= y);
      if (op == "==") return boolean(x == y);
      if (op == "!=") return boolean(x != y);
      if (op == ">") return boolean(x > y);
      if (op == ">=") return boolean(x >= y);
    }
    if (op == "==" || op == "!=") {
      bool same;
      if (a->kind == Kind::Str && b->kind == Kind::Str) same = a->name == b->name;
      else if (a->kind == Kind::None || b->kind == Kind::None) same = a->kind == b->kind;
      else if (a->kind == Kind::DType && b->kind == Kind::DType) same = a->dtype == b->dtype;
      else if (auto classes = sameClass(a, b)) same = *classes;
      else if (isEnumMember(a) && isEnumMember(b) && a->type == b->type)
        same = a == b || sameObjectOfTheCall(a, b); // one enum's members: equal only to themselves (aliases are one object)
      else if ((a->kind == Kind::Tuple || a->kind == Kind::List) && a->kind == b->kind) {
        same = a->items.size() == b->items.size();
        for (size_t k = 0; same && k < a->items.size(); ++k) same = truth(compare("==", a->items[k], b->items[k]));
      } else if (a->kind != b->kind && isPlainValue(a) && isPlainValue(b)) {
        same = false; // values of different builtin types (numbers were compared above)
      } else unsupported("comparing a " + kindName(a->kind) + " with a " + kindName(b->kind));
      return boolean(op == "==" ? same : !same);
    }
    if ((a->kind == Kind::Tuple || a->kind == Kind::List) && a->kind == b->kind) {
      // Lexicographic: the first unequal items decide, else the lengths.
      size_t n = std::min(a->items.size(), b->items.size());
      for (size_t k = 0; k < n; ++k)
        if (!truth(compare("==", a->items[k], b->items[k]))) return compare(op, a->items[k], b->items[k]);
      return compare(op, integer(table.integer(static_cast<int64_t>(a->items.size()))),
                     integer(table.integer(static_cast<int64_t>(b->items.size()))));
    }
    if ((a->kind == Kind::Str && b->kind == Kind::Str)) {
      int c = a->name.compare(b->name);
      return boolean(op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0);
    }
    unsupported("comparing a " + kindName(a->kind) + " " + op + " a " + kindName(b->kind));
  }

  // Whether two classes are one (`type(x) is int`, `self.__class__ != ModelOutput`): classes
  // kiln knows by name, or described ones, compared by their module and qualified name (the
  // name a type guard finds them by). Not classes: nullopt.
  static std::optional<bool> sameClass(const Var& a, const Var& b) {
    auto isClass = [](const Var& v) {
      return v->kind == Kind::TypeObject || (v->kind == Kind::Builtin && (v->name == "torch.Tensor" || builtinTypes().count(v->name)));
    };
    if (!isClass(a) || !isClass(b)) return std::nullopt;
    if (a->kind != b->kind) return false;
    if (a->kind == Kind::Builtin) return a->name == b->name;
    if (a == b) return true;
    if (!a->boolean || !b->boolean) unsupported("comparing classes whose metaclass has its own ==");
    if (a->type.qualname.find("<locals>") != std::string::npos) unsupported("comparing classes made in a function");
    return a->type == b->type;
  }

  static bool isEnumMember(const Var& v) {
    return v->kind == Kind::Object && v->path && std::find(v->mro.begin(), v->mro.end(), guards::TypeRef{"enum", "Enum"}) != v->mro.end();
  }

  // A value whose type's == kiln knows: never equal to a value of another of these types
  // (numbers apart).
  static bool isPlainValue(const Var& v) {
    switch (v->kind) {
    case Kind::None: case Kind::Bool: case Kind::Int: case Kind::Float: case Kind::Str: case Kind::List:
    case Kind::Dict: case Kind::Set: case Kind::DType: case Kind::Device: case Kind::Range: case Kind::Slice: return true;
    case Kind::Tuple: return v->type.qualname.empty() || isSize(v);
    default: return false;
    }
  }

  static bool isNumber(const Var& v) {
    return v->kind == Kind::Int || v->kind == Kind::Float || (v->kind == Kind::Bool && v->symbolic.isNull());
  }


  sym::Expr asExpr(const Var& v) {
    if (v->kind == Kind::Bool) return table.integer(v->boolean ? 1 : 0);
    return v->symbolic;
  }

  // The operator module's binary functions, as the symbol arith() takes.
  static std::optional<std::string> operatorSymbol(const std::string& name) {
    static const std::map<std::string, std::string> symbols = {
        {"operator.add", "+"}, {"operator.sub", "-"},  {"operator.mul", "*"},      {"operator.truediv", "/"},
        {"operator.floordiv", "//"}, {"operator.mod", "%"}, {"operator.pow", "**"}, {"operator.matmul", "@"}};
    auto it = symbols.find(name);
    return it == symbols.end() ? std::nullopt : std::optional<std::string>(it->second);
  }

  Var arith(const std::string& op, const Var& a, const Var& b) {
    if (a->kind == Kind::Tensor || b->kind == Kind::Tensor) {
      static const std::map<std::string, std::string> ops = {
          {"+", "add"}, {"-", "sub"}, {"*", "mul"}, {"/", "div"}, {"%", "remainder"}, {"**", "pow"},
          {"@", "matmul"}, {"&", "bitwise_and"}, {"|", "bitwise_or"}, {"^", "bitwise_xor"}};
      if (op == "//") {
        if (a->kind != Kind::Tensor) unsupported("a number // a tensor");
        return callOp("div", {a, b, string("floor")}, {});
      }
      auto it = ops.find(op);
      if (it == ops.end()) unsupported("tensor operator " + op);
      if (op == "**" && a->kind != Kind::Tensor) unsupported("a number ** a tensor");
      if (op == "@" && (a->kind != Kind::Tensor || b->kind != Kind::Tensor)) unsupported("@ of a number");
      if (op == "%" && a->kind != Kind::Tensor) unsupported("a number % a tensor");
      return tensorBinary(*this, it->second, a, b);
    }
    // A torch.Size with a tuple, either side, makes a torch.Size; other tuples make a plain one.
    auto sized = [&](Var v) {
      if (isSize(a) || isSize(b)) v->type = sizeType();
      return v;
    };
    if ((a->kind == Kind::Tuple || a->kind == Kind::List) && a->kind == b->kind && op == "+") {
      std::vector<Var> items = a->items;
      items.insert(items.end(), b->items.begin(), b->items.end());
      return sized(sequence(a->kind, items));
    }
    if ((a->kind == Kind::Tuple || a->kind == Kind::List) && b->kind == Kind::Int && op == "*") {
      std::vector<Var> items;
      for (int64_t k = 0; k < concrete(b); ++k) items.insert(items.end(), a->items.begin(), a->items.end());
      return sized(sequence(a->kind, items));
    }
    if (a->kind == Kind::Str && b->kind == Kind::Str && op == "+") return string(a->name + b->name);
    if (a->kind == Kind::Str && op == "%") return string(percentText(a->name, b));
    if (!isNumber(a) || !isNumber(b)) unsupported(kindName(a->kind) + " " + op + " " + kindName(b->kind));
    // Floats the graph computes: from a traced float, or from a symbolic int (0.9 ** step, n / 2).
    auto symbolicInt = [](const Var& v) { return v->kind == Kind::Int && !v->symbolic.asInteger(); };
    bool floatResult = a->kind == Kind::Float || b->kind == Kind::Float || op == "/";
    if (a->traced || b->traced || (floatResult && (symbolicInt(a) || symbolicInt(b)) && op != "//" && op != "%"))
      return floatArith(op, a, b);
    bool ints = a->kind != Kind::Float && b->kind != Kind::Float;
    if (ints) {
      sym::Expr x = asExpr(a), y = asExpr(b);
      if (op == "+") return integer(x + y);
      if (op == "-") return integer(x - y);
      if (op == "*") return integer(x * y);
      if (op == "//" || op == "%") {
        if (decide(sym::eq(y, 0))) unsupported("integer division by zero");
        return integer(op == "//" ? sym::floorDiv(x, y) : sym::mod(x, y));
      }
      if (op == "/") {
        double d = static_cast<double>(concrete(b));
        if (d == 0) unsupported("division by zero");
        return floating(static_cast<double>(concrete(a)) / d);
      }
      if (op == "**") {
        int64_t e = concrete(b);
        if (e < 0) return floating(std::pow(static_cast<double>(concrete(a)), static_cast<double>(e)));
        sym::Expr r = table.integer(1);
        for (int64_t k = 0; k < e; ++k) r = r * x;
        return integer(r);
      }
      if (op == "&" || op == "|" || op == "^" || op == "<<" || op == ">>") {
        int64_t p = concrete(a), q = concrete(b);
        int64_t r = op == "&" ? (p & q) : op == "|" ? (p | q) : op == "^" ? (p ^ q) : op == "<<" ? (p << q) : (p >> q);
        return integer(table.integer(r));
      }
    }
    double x = number(a), y = number(b);
    if (op == "+") return floating(x + y);
    if (op == "-") return floating(x - y);
    if (op == "*") return floating(x * y);
    if (op == "/") {
      if (y == 0) unsupported("float division by zero");
      return floating(x / y);
    }
    if (op == "//") return floating(std::floor(x / y));
    if (op == "%") return floating(x - y * std::floor(x / y));
    if (op == "**") return floating(std::pow(x, y));
    unsupported("float operator " + op);
  }

  static bool isContainerModule(const Var& m) {
    for (const char* name : {"ModuleList", "Sequential", "ModuleDict"})
      if (std::find(m->mro.begin(), m->mro.end(), guards::TypeRef{"torch.nn.modules.container", name}) != m->mro.end())
        return true;
    return false;
  }

  // Adds `v` to set `s` unless an equal item is there: constants compare by value, other
  // values (hashed by identity in Python: tensors, modules) by being the same variable.
  void setAdd(const Var& s, const Var& v) {
    if (v->kind == Kind::List || v->kind == Kind::Dict || v->kind == Kind::Set) unsupported("an unhashable " + kindName(v->kind) + " in a set");
    if (v->kind == Kind::Tuple || v->kind == Kind::Float) unsupported("a " + kindName(v->kind) + " in a set");
    auto isConstant = [](const Var& x) { return x->kind == Kind::None || x->kind == Kind::Str || x->kind == Kind::Bool || x->kind == Kind::Int; };
    bool constant = isConstant(v);
    if (v->kind == Kind::Int && !v->symbolic.asInteger()) unsupported("a symbolic int in a set");
    for (const Var& item : s->items) {
      bool itemConstant = isConstant(item);
      if (constant && itemConstant && (item->kind == v->kind || isNumber(item) == isNumber(v)) &&
          ((isNumber(item) && isNumber(v)) ? number(item) == number(v) : sameConstant(item, v)))
        return;
      if (!constant && item == v) return;
    }
    s->items.push_back(v);
  }

  Var subscript(const Var& obj, const Var& index) {
    if (obj->kind == Kind::Tensor) return tensorIndex(*this, obj, index);
    if (obj->kind == Kind::Tuple || obj->kind == Kind::List) {
      if (index->kind == Kind::Slice) {
        // Python's slice.indices(n): bounds clamped to [0, n] going up, to [-1, n - 1] going down.
        int64_t n = static_cast<int64_t>(obj->items.size());
        int64_t step = index->items[2]->kind == Kind::None ? 1 : concrete(index->items[2]);
        if (step == 0) unsupported("a slice step of 0 (ValueError)");
        int64_t lower = step > 0 ? 0 : -1, upper = step > 0 ? n : n - 1;
        auto bound = [&](const Var& v, int64_t fallback) {
          if (v->kind == Kind::None) return fallback;
          int64_t x = concrete(v);
          if (x < 0) return std::max<int64_t>(x + n, lower);
          return std::min<int64_t>(x, upper);
        };
        int64_t start = bound(index->items[0], step > 0 ? lower : upper);
        int64_t stop = bound(index->items[1], step > 0 ? upper : lower);
        std::vector<Var> items;
        for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step)
          items.push_back(obj->items[static_cast<size_t>(k)]);
        Var part = sequence(obj->kind, items);
        if (isSize(obj)) part->type = obj->type; // a torch.Size's slice is one
        return part;
      }
      int64_t k = concrete(index), n = static_cast<int64_t>(obj->items.size());
      if (k < 0) k += n;
      if (k < 0 || k >= n) unsupported("index " + std::to_string(k) + " out of range");
      return obj->items[static_cast<size_t>(k)];
    }
    if (obj->kind == Kind::Dict) {
      for (size_t k = 0; k < obj->keys.size(); ++k)
        if (sameConstant(obj->keys[k], index)) return obj->items[k];
      unsupported("a missing dict key");
    }
    if (obj->kind == Kind::NnModule && index->kind == Kind::Slice) {
      // A ModuleList's slice is a ModuleList of the same children: read as a list of them.
      if (std::find(obj->mro.begin(), obj->mro.end(), guards::TypeRef{"torch.nn.modules.container", "ModuleList"}) == obj->mro.end())
        unsupported("slicing a " + obj->type.text());
      Var part = subscript(sequence(Kind::List, children(obj)), index);
      part->type = {"torch.nn.modules.container", "ModuleList"};
      return part;
    }
    if (obj->kind == Kind::NnModule) {
      // The containers' __getitem__: a ModuleDict's child by name, a ModuleList's or
      // Sequential's by position. Another module's __getitem__ is its own code.
      if (!isContainerModule(obj)) unsupported("subscripting a " + obj->type.text());
      if (std::find(obj->mro.begin(), obj->mro.end(), guards::TypeRef{"torch.nn.modules.container", "ModuleDict"}) != obj->mro.end()) {
        if (index->kind != Kind::Str) unsupported("a ModuleDict key that is not a str");
        for (auto name : obj->desc->getModule().getModules())
          if (index->name == name.cStr()) return attribute(obj, index->name);
        unsupported("a ModuleDict key it does not hold (KeyError)");
      }
      std::vector<Var> kids = children(obj);
      int64_t k = concrete(index), n = static_cast<int64_t>(kids.size());
      if (k < 0) k += n;
      if (k < 0 || k >= n) unsupported("module index out of range");
      return kids[static_cast<size_t>(k)];
    }
    unsupported("subscripting a " + kindName(obj->kind));
  }

  Var constant(schema::Constant::Reader c) {
    switch (c.which()) {
    case schema::Constant::NONE: return none();
    case schema::Constant::BOOL: return boolean(c.getBool());
    case schema::Constant::INT: return integer(table.integer(c.getInt()));
    case schema::Constant::FLOAT: return floating(c.getFloat());
    case schema::Constant::STR: return string(c.getStr().cStr());
    case schema::Constant::TUPLE: {
      std::vector<Var> items;
      for (auto i : c.getTuple()) items.push_back(constant(i));
      return sequence(Kind::Tuple, items);
    }
    case schema::Constant::CODE: {
      Var v = make(Kind::Function);
      v->function = std::make_shared<FunctionInfo>();
      v->function->code = c.getCode();
      v->name = "<code>";
      return v;
    }
    case schema::Constant::ELLIPSIS: return make(Kind::Ellipsis);
    case schema::Constant::OTHER: unsupported("the constant " + std::string(c.getOther().cStr()));
    }
    unsupported("an unknown constant");
  }

  // ---- the loop ------------------------------------------------------------

  // A global of the running function: G[name] for the called function's module, else
  // read through the inlined function's own __globals__ (another module's names).
  Var global(Frame& f, const std::string& name) {
    if (name == "__name__") unsupported("__name__");
    if (!f.fn || !f.fn->path || f.fn->module == rootModule_) return realize({guards::global(name)});
    return realize(extend(extend(*f.fn->path, guards::attr("__globals__")), guards::key(name)));
  }

  // `import name` (`from name import ...` when `from`), `level` dots deep: a module imported
  // already, read from sys.modules and guarded there; importing one is Python's (refused).
  Var importModule(Frame& f, const std::string& name, int64_t level, bool from) {
    std::string absolute = name;
    if (level > 0) {
      std::string module = f.fn ? f.fn->module : rootModule_;
      Var package = realize({guards::pyModule(module), guards::attr("__package__")});
      if (package->kind != Kind::Str || package->name.empty()) unsupported("a relative import outside a package");
      std::string base = package->name;
      for (int64_t k = 1; k < level; ++k) {
        size_t dot = base.rfind('.');
        if (dot == std::string::npos) unsupported("a relative import beyond the top-level package");
        base.resize(dot);
      }
      absolute = name.empty() ? base : base + "." + name;
    }
    Var module = realize({guards::pyModule(absolute)});
    if (module->kind != Kind::PyModule) unsupported("importing " + absolute + ", which is not imported yet");
    if (from) return module;
    return realize({guards::pyModule(absolute.substr(0, absolute.find('.')))});
  }

  // `obj.name(*args)` for an operator on an object of the call whose class defines the special
  // method (`obj[k]`: __getitem__, `k in obj`: __contains__): the method inlined. nullopt: not
  // such an object.
  std::optional<Var> dunder(const Var& obj, const std::string& name, std::vector<Var> args, size_t depth) {
    if (obj->kind != Kind::Object) return std::nullopt;
    if (!obj->path) { // made here: looked up on its class, as Python does for operators
      std::optional<Var> raw = classAttribute(obj->cls, 0, name);
      if (!raw) unsupported("a " + obj->type.text() + " without " + name);
      return callVar(bindClassAttribute(*raw, obj, obj->cls, depth), std::move(args), {}, depth);
    }
    if (absent(obj, name)) unsupported("an object without " + name);
    return callVar(attribute(obj, name), std::move(args), {}, depth);
  }

  // The call protocol of 3.11/3.12: [NULL, callable] or [callable, self], then args.
  Var doCall(Frame& f, size_t argc, size_t depth) {
    std::vector<Var> args = f.popN(argc);
    Var second = f.pop(), first = f.pop();
    Var callee = second;
    if (first->kind != Kind::Null) { // a method: `first` is the callable, `second` self
      callee = first;
      args.insert(args.begin(), second);
    }
    Kwargs kwargs;
    size_t nk = f.kwNames.size();
    if (nk > args.size()) throw Error(ErrorCode::Malformed, "tracer: more keyword names than arguments");
    for (size_t k = 0; k < nk; ++k) kwargs.emplace_back(f.kwNames[k], args[args.size() - nk + k]);
    args.resize(args.size() - nk);
    f.kwNames.clear();
    if (callee->kind == Kind::Builtin && callee->name == "builtins.super" && args.empty() && kwargs.empty())
      return zeroArgumentSuper(f);
    return callVar(callee, std::move(args), kwargs, depth);
  }

  Var execute(Frame& f, size_t depth) {
    auto instructions = f.code.getInstructions();
    file_ = f.code.getFilename().cStr();
    while (true) {
      if (++steps_ > kMaxInstructions) unsupported("more than " + std::to_string(kMaxInstructions) + " instructions");
      if (f.pc >= instructions.size()) throw Error(ErrorCode::Malformed, "tracer: ran past the last instruction");
      if (depth == 0) {
        if (arrivals_.size() < instructions.size()) arrivals_.resize(instructions.size());
        uint32_t arrival = ++arrivals_[f.pc];
        rootPc_ = f.pc;
        if (stopAt_ && stopAt_->start == f.pc && stopAt_->arrival == arrival) throw Stopped{f.stack, f.locals, f.cells, f.generator};
      }
      auto in = instructions[static_cast<unsigned>(f.pc)];
      depth_ = depth;
      std::string opname = in.getOpname().cStr();
      std::string name = in.getName().cStr();
      int64_t arg = in.getArg();
      line_ = in.getLine();
      file_ = f.code.getFilename().cStr();
      size_t next = f.pc + 1;
      auto jump = [&] {
        if (in.getTarget() < 0 || static_cast<size_t>(in.getTarget()) >= instructions.size())
          throw Error(ErrorCode::Malformed, "tracer: a jump outside the code");
        next = static_cast<size_t>(in.getTarget());
      };

      if (opname == "RESUME" || opname == "NOP" || opname == "PRECALL" || opname == "CACHE" ||
          opname == "EXTENDED_ARG" || opname == "COPY_FREE_VARS") {
      } else if (opname == "MAKE_CELL") {
        Var cell = make(Kind::Cell);
        if (auto it = f.locals.find(name); it != f.locals.end()) cell->items.push_back(it->second);
        f.cells[name] = cell;
      } else if (opname == "LOAD_CONST") {
        if (arg < 0 || arg >= static_cast<int64_t>(f.code.getConsts().size())) throw Error(ErrorCode::Malformed, "tracer: LOAD_CONST out of range");
        f.stack.push_back(constant(f.code.getConsts()[static_cast<unsigned>(arg)]));
      } else if (opname == "RETURN_CONST") {
        if (arg < 0 || arg >= static_cast<int64_t>(f.code.getConsts().size())) throw Error(ErrorCode::Malformed, "tracer: RETURN_CONST out of range");
        if (f.generator) return iterator(f.yields);
        return constant(f.code.getConsts()[static_cast<unsigned>(arg)]);
      } else if (opname == "RETURN_GENERATOR") {
        f.stack.push_back(none()); // popped by the POP_TOP that follows
      } else if (opname == "YIELD_VALUE") {
        if (!f.generator) unsupported("yield outside a generator");
        f.yields.push_back(f.pop());
        f.stack.push_back(none()); // what the consumer sends: next() sends None
      } else if (opname == "LOAD_FAST" || opname == "LOAD_FAST_CHECK") {
        auto it = f.locals.find(name);
        if (it == f.locals.end()) unsupported("local '" + name + "' read before it was set");
        f.stack.push_back(it->second);
      } else if (opname == "LOAD_FAST_AND_CLEAR") {
        auto it = f.locals.find(name);
        f.stack.push_back(it == f.locals.end() ? make(Kind::Null) : it->second);
        if (it != f.locals.end()) f.locals.erase(it);
      } else if (opname == "STORE_FAST") {
        Var v = f.pop();
        if (v->kind == Kind::Null) f.locals.erase(name);
        else f.locals[name] = v;
      } else if (opname == "DELETE_FAST") {
        f.locals.erase(name);
      } else if (opname == "LOAD_GLOBAL") {
        if (arg & 1) f.stack.push_back(make(Kind::Null)); // 3.11 and 3.12 push it first
        f.stack.push_back(global(f, name));
      } else if (opname == "LOAD_DEREF" || opname == "LOAD_CLASSDEREF") {
        adoptCell(f, name);
        auto it = f.cells.find(name);
        if (it == f.cells.end() || it->second->items.empty()) unsupported("free variable '" + name + "' read before it was set");
        f.stack.push_back(it->second->items[0]);
      } else if (opname == "STORE_DEREF") {
        Var v = f.pop();
        adoptCell(f, name);
        auto it = f.cells.find(name);
        if (it == f.cells.end()) {
          Var cell = make(Kind::Cell);
          it = f.cells.emplace(name, cell).first;
        }
        // TODO(issue 44): replay it as a side effect instead of a graph break.
        if (it->second->path || it->second->shared) unsupported("writing a cell of the call");
        it->second->items = {v};
      } else if (opname == "LOAD_CLOSURE") {
        adoptCell(f, name);
        auto it = f.cells.find(name);
        if (it == f.cells.end()) it = f.cells.emplace(name, make(Kind::Cell)).first;
        f.stack.push_back(it->second);
      } else if (opname == "LOAD_ATTR") {
        Var obj = f.pop();
        bool methodForm = f.v312 && (arg & 1);
        Var a = attribute(obj, name);
        if (methodForm) {
          // [NULL, attr] for a plain attribute, [method, self] for a bound one; kiln's
          // bound methods carry their receiver, so the NULL form serves both.
          f.stack.push_back(make(Kind::Null));
        }
        f.stack.push_back(a);
      } else if (opname == "LOAD_SUPER_ATTR") { // 3.12: super().name, or super(cls, self).name
        Var self = f.pop(), cls = f.pop();
        f.pop(); // the global `super`
        Var s = makeSuper(cls, self);
        if (arg & 1) f.stack.push_back(make(Kind::Null));
        f.stack.push_back(superAttribute(s, name, depth));
      } else if (opname == "LOAD_METHOD") {
        Var obj = f.pop();
        f.stack.push_back(make(Kind::Null));
        f.stack.push_back(attribute(obj, name));
      } else if (opname == "STORE_ATTR") {
        Var obj = f.pop(), value = f.pop();
        if (obj->kind == Kind::Object && !obj->path) {
          madeSetAttribute(obj, name, value, depth);
          f.pc = next;
          continue;
        }
        if (!obj->path || (obj->kind != Kind::NnModule && obj->kind != Kind::Object))
          unsupported("setting attribute '" + name + "' of a " + kindName(obj->kind) +
                      (obj->path ? "" : " made in the traced code"));
        plainSetAttribute(obj, name);
        if (value->kind == Kind::Tensor && obj->kind == Kind::NnModule) {
          // A parameter or buffer replaced by a computed tensor changes what later calls read.
          auto module = obj->desc->getModule();
          for (auto named : {module.getParameters(), module.getBuffers()})
            for (auto p : named)
              if (name == p.getName().cStr()) unsupported("assigning module tensor '" + name + "'");
        }
        // Later reads in this trace see the new value; the SDK sets it after the artifact ran.
        changing(obj);
        realized_[pathText(extend(*obj->path, guards::attr(name)))] = value;
        effects_.push_back({true, *obj->path, name, value});
      } else if (opname == "PUSH_NULL") {
        f.stack.push_back(make(Kind::Null));
      } else if (opname == "KW_NAMES") {
        auto c = f.code.getConsts()[static_cast<unsigned>(arg)];
        if (!c.isTuple()) throw Error(ErrorCode::Malformed, "tracer: KW_NAMES of a non-tuple");
        f.kwNames.clear();
        for (auto n : c.getTuple()) f.kwNames.emplace_back(n.getStr().cStr());
      } else if (opname == "CALL") {
        f.stack.push_back(doCall(f, static_cast<size_t>(arg), depth));
      } else if (opname == "CALL_FUNCTION_EX") {
        Var kw = (arg & 1) ? f.pop() : nullptr;
        Var posArgs = f.pop();
        Var callee = f.pop();
        if (!f.stack.empty() && f.stack.back()->kind == Kind::Null) f.pop();
        Kwargs kwargs;
        if (kw) {
          if (kw->kind != Kind::Dict) unsupported("**kwargs of a " + kindName(kw->kind));
          for (size_t k = 0; k < kw->keys.size(); ++k) kwargs.emplace_back(kw->keys[k]->name, kw->items[k]);
        }
        f.stack.push_back(callVar(callee, iterate(posArgs), kwargs, depth));
      } else if (opname == "MAKE_FUNCTION") {
        Var code = f.pop();
        auto info = std::make_shared<FunctionInfo>(*code->function);
        info->module = f.fn ? f.fn->module : rootModule_; // made here: this frame's globals
        info->path = f.fn ? f.fn->path : std::nullopt;
        if (arg & 0x08) {
          Var cells = f.pop();
          info->closure = cells->items;
        }
        if (arg & 0x04) f.pop();
        if (arg & 0x02) {
          Var kw = f.pop();
          for (size_t k = 0; k < kw->keys.size(); ++k) info->kwDefaults.emplace_back(kw->keys[k]->name, kw->items[k]);
        }
        if (arg & 0x01) info->defaults = f.pop()->items;
        Var fn = make(Kind::Function);
        fn->function = info;
        f.stack.push_back(fn);
      } else if (opname == "RETURN_VALUE") {
        Var v = f.pop();
        return f.generator ? iterator(f.yields) : v;
      } else if (opname == "POP_TOP") {
        f.pop();
      } else if (opname == "END_FOR") {
        f.pop();
        f.pop();
      } else if (opname == "COPY") {
        f.stack.push_back(f.top(static_cast<size_t>(arg) - 1));
      } else if (opname == "SWAP") {
        std::swap(f.top(0), f.top(static_cast<size_t>(arg) - 1));
      } else if (opname == "BINARY_OP") {
        Var b = f.pop(), a = f.pop();
        std::string op = in.getName().cStr(); // argrepr: "+", "+=", "@", ...
        bool inplace = op.size() > 1 && op.back() == '=' && op != "==";
        if (inplace) op.pop_back();
        if (inplace && a->kind == Kind::Tensor) {
          static const std::map<std::string, std::string> inplaceOps = {
              {"+", "add_"}, {"-", "sub_"}, {"*", "mul_"}, {"/", "div_"}};
          auto it = inplaceOps.find(op);
          if (it == inplaceOps.end()) unsupported("tensor operator " + op + "=");
          f.stack.push_back(callOp(it->second, {a, b}, {}));
        } else if (inplace && a->kind == Kind::List && op == "+") {
          for (const Var& v : iterate(b)) {
            if (a->path) changing(a), effects_.push_back({false, *a->path, "", v});
            a->items.push_back(v);
          }
          f.stack.push_back(a);
        } else {
          f.stack.push_back(arith(op, a, b));
        }
      } else if (opname == "BINARY_SUBSCR") {
        Var index = f.pop(), obj = f.pop();
        if (auto r = dunder(obj, "__getitem__", {index}, depth)) f.stack.push_back(*r);
        else f.stack.push_back(subscript(obj, index));
      } else if (opname == "BINARY_SLICE") {
        Var stop = f.pop(), start = f.pop(), obj = f.pop();
        f.stack.push_back(subscript(obj, sequence(Kind::Slice, {start, stop, none()})));
      } else if (opname == "STORE_SUBSCR") {
        Var index = f.pop(), obj = f.pop(), value = f.pop();
        if (obj->kind == Kind::List && !obj->path) {
          int64_t k = concrete(index);
          if (k < 0) k += static_cast<int64_t>(obj->items.size());
          if (k < 0 || k >= static_cast<int64_t>(obj->items.size())) unsupported("list assignment out of range");
          obj->items[static_cast<size_t>(k)] = value;
        } else if (obj->kind == Kind::Dict && !obj->path) {
          dictPut(obj, index, value);
        } else if (obj->kind == Kind::Object && !obj->path) {
          dunder(obj, "__setitem__", {index, value}, depth);
        } else if (obj->kind == Kind::Tensor) {
          tensorSetItem(*this, obj, index, value);
        } else {
          unsupported("assigning to an item of a " + kindName(obj->kind));
        }
      } else if (opname == "DELETE_SUBSCR") { // del obj[index] of a dict or list the trace made
        Var index = f.pop(), obj = f.pop();
        if (obj->path || (obj->kind != Kind::Dict && obj->kind != Kind::List))
          unsupported("deleting an item of a " + std::string(obj->path ? "value of the call" : kindName(obj->kind)));
        size_t at = 0;
        if (obj->kind == Kind::Dict) {
          auto found = keyIndex(obj, index);
          if (!found) unsupported("deleting a missing dict key"); // KeyError: eager raises it
          at = *found;
          obj->keys.erase(obj->keys.begin() + static_cast<std::ptrdiff_t>(at));
        } else {
          int64_t k = concrete(index), n = static_cast<int64_t>(obj->items.size());
          if (k < -n || k >= n) unsupported("deleting a list item out of range");
          at = static_cast<size_t>(k < 0 ? k + n : k);
        }
        obj->items.erase(obj->items.begin() + static_cast<std::ptrdiff_t>(at));
      } else if (opname == "STORE_SLICE") { // 3.12: obj[start:stop] = value
        Var stop = f.pop(), start = f.pop(), obj = f.pop(), value = f.pop();
        if (obj->kind != Kind::Tensor) unsupported("assigning to a slice of a " + kindName(obj->kind));
        tensorSetItem(*this, obj, sequence(Kind::Slice, {start, stop, none()}), value);
      } else if (opname == "BUILD_SLICE") {
        Var step = arg == 3 ? f.pop() : none();
        Var stop = f.pop(), start = f.pop();
        f.stack.push_back(sequence(Kind::Slice, {start, stop, step}));
      } else if (opname == "COMPARE_OP") {
        Var b = f.pop(), a = f.pop();
        std::string op = name;
        f.stack.push_back(compare(op, a, b));
      } else if (opname == "IS_OP") {
        Var b = f.pop(), a = f.pop();
        bool same;
        if (a->kind == Kind::None || b->kind == Kind::None) same = a->kind == b->kind;
        else if (a->kind == Kind::Bool && b->kind == Kind::Bool) same = a->boolean == b->boolean;
        else if (auto classes = sameClass(a, b)) same = *classes;
        else if (a != b && a->path && b->path && has(*a->path) && has(*b->path)) same = sameObjectOfTheCall(a, b);
        else same = a == b;
        f.stack.push_back(boolean(arg ? !same : same));
      } else if (opname == "CONTAINS_OP") {
        Var container = f.pop(), item = f.pop();
        bool found;
        if (auto r = dunder(container, "__contains__", {item}, depth)) found = truth(*r);
        else found = contains(container, item);
        f.stack.push_back(boolean(arg ? !found : found));
      } else if (opname == "UNARY_NEGATIVE") {
        Var v = f.pop();
        if (v->kind == Kind::Tensor) f.stack.push_back(op("neg", {v->value}));
        else if (v->kind == Kind::Float && v->traced) f.stack.push_back(*floatMath("neg", v));
        else f.stack.push_back(arith("-", integer(table.integer(0)), v));
      } else if (opname == "UNARY_NOT") {
        f.stack.push_back(boolean(!truth(f.pop())));
      } else if (opname == "UNARY_INVERT") {
        Var v = f.pop();
        if (v->kind == Kind::Tensor && meta(v).dtype == DType::Bool) f.stack.push_back(op("logical_not", {v->value}));
        else if (v->kind == Kind::Int) f.stack.push_back(integer(-v->symbolic - 1));
        else unsupported("~ of a " + kindName(v->kind));
      } else if (opname == "UNARY_POSITIVE") {
      } else if (opname == "GET_ITER") {
        Var v = f.pop();
        f.stack.push_back(v->kind == Kind::Iterator ? v : iterator(iterate(v)));
      } else if (opname == "FOR_ITER") {
        Var it = f.top();
        if (it->kind != Kind::Iterator) unsupported("iterating a " + kindName(it->kind) + " passed in");
        if (it->next < it->items.size()) {
          f.stack.push_back(it->items[it->next++]);
        } else {
          f.pop();
          jump();
          if (f.v312 && next < instructions.size() && std::string(instructions[static_cast<unsigned>(next)].getOpname().cStr()) == "END_FOR")
            ++next;
        }
      } else if (opname == "BUILD_TUPLE" || opname == "BUILD_LIST") {
        f.stack.push_back(sequence(opname == "BUILD_TUPLE" ? Kind::Tuple : Kind::List, f.popN(static_cast<size_t>(arg))));
      } else if (opname == "LIST_APPEND") {
        Var v = f.pop();
        builtHere(f.top(static_cast<size_t>(arg) - 1), Kind::List)->items.push_back(v);
      } else if (opname == "LIST_EXTEND") {
        Var v = f.pop();
        Var list = builtHere(f.top(static_cast<size_t>(arg) - 1), Kind::List);
        for (const Var& item : iterate(v)) list->items.push_back(item);
      } else if (opname == "BUILD_SET") {
        Var s = make(Kind::Set);
        for (const Var& v : f.popN(static_cast<size_t>(arg))) setAdd(s, v);
        f.stack.push_back(s);
      } else if (opname == "SET_ADD") {
        Var v = f.pop();
        setAdd(builtHere(f.top(static_cast<size_t>(arg) - 1), Kind::Set), v);
      } else if (opname == "SET_UPDATE") {
        Var v = f.pop();
        Var s = builtHere(f.top(static_cast<size_t>(arg) - 1), Kind::Set);
        for (const Var& item : iterate(v)) setAdd(s, item);
      } else if (opname == "LIST_TO_TUPLE") {
        f.stack.push_back(sequence(Kind::Tuple, f.pop()->items));
      } else if (opname == "BUILD_MAP") {
        std::vector<Var> kv = f.popN(2 * static_cast<size_t>(arg));
        Var d = make(Kind::Dict);
        for (size_t k = 0; k < kv.size(); k += 2) dictPut(d, kv[k], kv[k + 1]);
        f.stack.push_back(d);
      } else if (opname == "BUILD_CONST_KEY_MAP") {
        Var keys = f.pop();
        std::vector<Var> values = f.popN(static_cast<size_t>(arg));
        Var d = make(Kind::Dict);
        for (size_t k = 0; k < values.size(); ++k) dictPut(d, keys->items.at(k), values[k]);
        f.stack.push_back(d);
      } else if (opname == "DICT_UPDATE" || opname == "DICT_MERGE") {
        Var src = f.pop();
        if (src->kind != Kind::Dict) unsupported(opname + " of a " + kindName(src->kind));
        Var dst = builtHere(f.top(static_cast<size_t>(arg) - 1), Kind::Dict);
        for (size_t k = 0; k < src->keys.size(); ++k) {
          // f(**a, **b) raises on a key both give; {**a, **b} keeps b's value in a's place.
          if (opname == "DICT_MERGE" && keyIndex(dst, src->keys[k])) unsupported("a keyword argument given twice");
          dictPut(dst, src->keys[k], src->items[k]);
        }
      } else if (opname == "MAP_ADD") {
        Var value = f.pop(), key = f.pop();
        Var d = builtHere(f.top(static_cast<size_t>(arg) - 1), Kind::Dict);
        dictPut(d, key, value);
      } else if (opname == "UNPACK_SEQUENCE") {
        std::vector<Var> items = iterate(f.pop());
        if (items.size() != static_cast<size_t>(arg)) unsupported("unpacking " + std::to_string(items.size()) + " values into " + std::to_string(arg));
        for (size_t k = items.size(); k-- > 0;) f.stack.push_back(items[k]);
      } else if (opname == "UNPACK_EX") {
        std::vector<Var> items = iterate(f.pop());
        size_t before = static_cast<size_t>(arg & 0xff), after = static_cast<size_t>(arg >> 8);
        if (items.size() < before + after) unsupported("not enough values to unpack");
        std::vector<Var> rest(items.begin() + static_cast<std::ptrdiff_t>(before), items.end() - static_cast<std::ptrdiff_t>(after));
        for (size_t k = 0; k < after; ++k) f.stack.push_back(items[items.size() - 1 - k]);
        f.stack.push_back(sequence(Kind::List, rest));
        for (size_t k = before; k-- > 0;) f.stack.push_back(items[k]);
      } else if (opname == "FORMAT_VALUE") {
        // str() of ints, strings, bools and None, or format() with a spec (formatted); repr()/
        // ascii() of a string is Python's to apply (a graph break).
        std::optional<std::string> spec;
        if (arg & 0x04) {
          Var given = f.pop();
          if (given->kind != Kind::Str) unsupported("an f-string format spec that is not a str");
          spec = given->name;
        }
        int64_t conversion = arg & 0x03;
        if (conversion >= 2 && f.top()->kind == Kind::Str) unsupported("repr() of a string in an f-string");
        Var value = f.pop();
        if (spec && !spec->empty()) f.stack.push_back(string(formatted(conversion ? string(text(value)) : value, *spec)));
        else f.stack.push_back(string(text(value)));
      } else if (opname == "BUILD_STRING") {
        std::string s;
        for (const Var& v : f.popN(static_cast<size_t>(arg))) s += v->name;
        f.stack.push_back(string(s));
      } else if (opname == "JUMP_FORWARD" || opname == "JUMP_BACKWARD" || opname == "JUMP_BACKWARD_NO_INTERRUPT" ||
                 opname == "JUMP" || opname == "JUMP_NO_INTERRUPT") {
        jump();
      } else if (opname.rfind("POP_JUMP", 0) == 0) {
        Var v = f.pop();
        bool cond;
        if (opname.find("IF_NOT_NONE") != std::string::npos) cond = v->kind != Kind::None;
        else if (opname.find("IF_NONE") != std::string::npos) cond = v->kind == Kind::None;
        else if (opname.find("IF_TRUE") != std::string::npos) cond = truth(v);
        else cond = !truth(v);
        if (cond) jump();
      } else if (opname == "JUMP_IF_TRUE_OR_POP" || opname == "JUMP_IF_FALSE_OR_POP") {
        bool t = truth(f.top());
        if (t == (opname == "JUMP_IF_TRUE_OR_POP")) jump();
        else f.pop();
      } else if (opname == "BEFORE_WITH") {
        Var manager = f.pop();
        if (manager->kind == Kind::Object) { // a context manager of Python's: its methods inlined
          Var exit = specialMethod(manager, "__exit__", depth);
          Var enter = specialMethod(manager, "__enter__", depth);
          f.stack.push_back(exit);
          f.stack.push_back(callVar(enter, {}, {}, depth));
          f.pc = next;
          continue;
        }
        if (manager->kind != Kind::GradMode && manager->kind != Kind::Autocast)
          unsupported("a `with` over a " + kindName(manager->kind));
        f.stack.push_back(method(manager, "__exit__"));
        f.stack.push_back(callMethod(manager, "__enter__", {}, {}, depth));
      } else if (opname == "IMPORT_NAME") {
        Var fromlist = f.pop(), level = f.pop();
        f.stack.push_back(importModule(f, name, concrete(level), fromlist->kind != Kind::None));
      } else if (opname == "IMPORT_FROM") {
        f.stack.push_back(attribute(f.top(), name));
      } else if (opname == "LOAD_ASSERTION_ERROR") {
        unsupported("an assertion that fails while tracing");
      } else if (opname == "RAISE_VARARGS") {
        unsupported("raise");
      } else if (opname == "CHECK_EXC_MATCH" || opname == "PUSH_EXC_INFO" || opname == "POP_EXCEPT" ||
                 opname == "RERAISE" || opname == "WITH_EXCEPT_START") {
        unsupported("exception handling (" + opname + ")");
      } else if (opname == "CALL_INTRINSIC_1" && name == "INTRINSIC_LIST_TO_TUPLE") {
        f.stack.push_back(sequence(Kind::Tuple, f.pop()->items));
      } else if (opname == "CALL_INTRINSIC_1" && name == "INTRINSIC_UNARY_POSITIVE") {
      } else if (opname == "GET_LEN") {
        f.stack.push_back(integer(table.integer(static_cast<int64_t>(iterate(f.top()).size()))));
      } else {
        unsupported("the " + opname + " instruction");
      }
      f.pc = next;
    }
  }

  // ---- the result ----------------------------------------------------------

  void write(const Var& result, schema::TraceResult::Builder out) {
    std::vector<Var> roots{result};
    for (const Effect& e : effects_) roots.push_back(e.value);
    refuseSharedMade(roots);
    // Tensors of the call come back as themselves where the graph computes some other tensor
    // and writes none in place; a call that computes none keeps them as graph outputs.
    inputsAsThemselves_ = !writesInputs() && computesTensor(roots);
    std::vector<ir::ValueId> outputs;
    ++specRoot_;
    spec(result, out.initOutputs(), outputs, false);
    writeGraph(outputs, out);
  }

  // Whether `roots` hold a tensor the graph computes (not a tensor of the call as it came).
  bool computesTensor(const std::vector<Var>& roots) const {
    std::set<const VarNode*> seen;
    std::function<bool(const Var&)> computed = [&](const Var& v) {
      if (!seen.insert(v.get()).second) return false;
      if (v->kind == Kind::Tensor) return !tensorInputs_.count(v->value);
      if (v->kind == Kind::Object && !v->path) {
        for (const Var& part : {v->attrs, v->storage})
          if (part && std::any_of(part->items.begin(), part->items.end(), computed)) return true;
        return false;
      }
      if (v->path) return false;
      return std::any_of(v->items.begin(), v->items.end(), computed);
    };
    return std::any_of(roots.begin(), roots.end(), computed);
  }

  // Whether the graph writes into a tensor (an in-place op on an input): its inputs then
  // pass through it as outputs, as the writes are functionalized.
  bool writesInputs() const {
    for (const ir::Node& n : graph.nodes())
      if (n.kind == ir::NodeKind::Call)
        if (const ir::OpInfo* op = ir::findOp(n.target); op && op->mutates) return true;
    return false;
  }

  // A list or dict the trace made is rebuilt at each place it ends up (the result, a side
  // effect's value): one reached twice would come back as two objects, where the caller's
  // code expects one. Refused.
  void refuseSharedMade(const std::vector<Var>& roots) {
    std::set<const VarNode*> seen, objects;
    std::function<void(const Var&)> walk = [&](const Var& v) {
      if (v->path) return;
      if ((v->kind == Kind::List || v->kind == Kind::Dict) && !seen.insert(v.get()).second)
        unsupported("a " + kindName(v->kind) + " made in the traced code that ends up in two places (each would be a copy)");
      if (v->kind == Kind::Object) {
        if (!objects.insert(v.get()).second) return; // made objects keep their identity
        for (const Var& part : {v->attrs, v->storage})
          if (part) for (const Var& item : part->items) walk(item);
        return;
      }
      if (v->kind == Kind::List || v->kind == Kind::Dict || v->kind == Kind::Tuple)
        for (const Var& item : v->items) walk(item);
    };
    for (const Var& root : roots) walk(root);
  }

  // How the SDK rebuilds `v` from the graph's outputs (added to `outputs` as needed).
  // `resumable`: a graph break's state, where objects of the call pass as themselves
  // (found again by their paths), and the value stack's NULLs, iterators, bound
  // methods and slices are rebuilt too.
  void spec(const Var& v, schema::OutputSpec::Builder o, std::vector<ir::ValueId>& outputs, bool resumable) {
    auto output = [&](ir::ValueId id) {
      auto it = std::find(outputs.begin(), outputs.end(), id);
      if (it == outputs.end()) it = outputs.insert(outputs.end(), id);
      return static_cast<uint32_t>(it - outputs.begin());
    };
    auto items = [&](const std::vector<Var>& vars, capnp::List<schema::OutputSpec>::Builder list) {
      for (unsigned k = 0; k < list.size(); ++k) spec(vars[k], list[k], outputs, resumable);
    };
    bool primitive = v->kind == Kind::None || v->kind == Kind::Bool || v->kind == Kind::Int ||
                     v->kind == Kind::Float || v->kind == Kind::Str;
    if (resumable && v->path && !primitive) {
      auto steps = o.initPath(static_cast<unsigned>(v->path->size()));
      for (unsigned j = 0; j < steps.size(); ++j) guards::toWire((*v->path)[j], steps[j]);
      return;
    }
    switch (v->kind) {
    case Kind::Tensor:
      if (auto input = tensorInputs_.find(v->value); input != tensorInputs_.end() && inputsAsThemselves_) {
        // A tensor of the call returned as it came: the object itself (an nn.Parameter
        // stays one, `out is x` holds), not a new tensor of its values.
        auto steps = o.initPath(static_cast<unsigned>(input->second.size()));
        for (unsigned j = 0; j < steps.size(); ++j) guards::toWire(input->second[j], steps[j]);
        return;
      }
      o.setGraphOutput(output(v->value));
      return;
    case Kind::None: o.initConstant().setNone(); return;
    case Kind::Bool: o.initConstant().setBool(truth(v)); return;
    case Kind::Int: {
      if (auto c = v->symbolic.asInteger()) {
        o.initConstant().setInt(*c);
        return;
      }
      // A symbol of the inputs, read back as a graph output; any other
      // expression of the graph's symbols computed by sym_int.
      ir::ValueId id;
      if (auto source = symbolSources_.find(v->symbolic); source != symbolSources_.end()) {
        auto [input, dim] = source->second;
        id = dim < 0 ? input : graph.call("sym_size", {input}, {{"dim", dim}});
      } else {
        id = graph.call("sym_int", {}, {{"value", v->symbolic}});
      }
      o.setSymInt(output(id));
      return;
    }
    case Kind::Float:
      if (v->traced) o.setNumber(output(v->value));
      else o.initConstant().setFloat(v->number);
      return;
    case Kind::Str: o.initConstant().setStr(v->name); return;
    case Kind::Ellipsis:
      if (!resumable) break;
      o.initConstant().setEllipsis();
      return;
    case Kind::Tuple:
      if (isReturnType(v)) {
        auto r = o.initReturnType();
        r.setName(v->type.qualname);
        items(v->items, r.initItems(static_cast<unsigned>(v->items.size())));
      } else if (isSize(v)) items(v->items, o.initSize(static_cast<unsigned>(v->items.size())));
      else if (!v->type.qualname.empty()) unsupported("a " + v->type.text() + " outside the traced code");
      else items(v->items, o.initTuple(static_cast<unsigned>(v->items.size())));
      return;
    case Kind::List:
      if (!v->type.qualname.empty()) unsupported("a " + v->type.text() + " outside the traced code");
      items(v->items, o.initList(static_cast<unsigned>(v->items.size())));
      return;
    case Kind::Dict:
      if (!v->type.qualname.empty()) unsupported("a " + v->type.text() + " outside the traced code");
      dictItems(v, o.initDict(static_cast<unsigned>(v->items.size())), outputs, resumable);
      return;
    case Kind::DType: o.setDtype(static_cast<schema::DType>(v->dtype)); return;
    case Kind::Device: {
      auto d = o.initDevice();
      d.setType(static_cast<schema::DeviceType>(v->device.type));
      d.setIndex(v->device.index);
      return;
    }
    case Kind::Object:
      if (v->path) break;
      madeObject(v, o, outputs, resumable);
      return;
    default: break;
    }
    if (!resumable) unsupported("returning a " + kindName(v->kind));
    switch (v->kind) {
    case Kind::Null: o.setNull(); return;
    case Kind::Iterator: {
      std::vector<Var> rest(v->items.begin() + static_cast<std::ptrdiff_t>(v->next), v->items.end());
      items(rest, o.initIterator(static_cast<unsigned>(rest.size())));
      return;
    }
    case Kind::Builtin: o.setBuiltin(v->name); return;
    case Kind::Method:
      if (v->self && v->name == "__exit__" && v->self->kind == Kind::GradMode) {
        o.initExitOf().setGradEnabled(v->self->boolean);
        return;
      }
      if (v->self && v->name == "__exit__" && v->self->kind == Kind::Autocast) {
        auto a = o.initExitOf().initAutocast();
        a.setDeviceType(v->self->name);
        a.setDtype(static_cast<schema::DType>(v->self->dtype));
        a.setEnabled(v->self->boolean);
        return;
      }
      if (!v->self || v->name.empty()) break;
      spec(v->self, o.initMethod().initSelf(), outputs, resumable);
      o.getMethod().setName(v->name);
      return;
    case Kind::Slice: items(v->items, o.initSlice(3)); return;
    case Kind::Function: madeFunction(v, o.initFunction(), outputs); return;
    default: break;
    }
    unsupported("a graph break with a " + kindName(v->kind) + " made in the traced code live");
  }

  // A dict's items: str and int keys, their values' specs.
  void dictItems(const Var& dict, capnp::List<schema::OutputItem>::Builder entries, std::vector<ir::ValueId>& outputs,
                 bool resumable) {
    for (unsigned k = 0; k < entries.size(); ++k) {
      const Var& key = dict->keys[k];
      auto c = entries[k].initKey();
      if (key->kind == Kind::Str) c.setStr(key->name);
      else if (key->kind == Kind::Int && key->symbolic.asInteger()) c.setInt(*key->symbolic.asInteger());
      else unsupported("returning a dict with a " + kindName(key->kind) + " key");
      spec(dict->items[k], entries[k].initValue(), outputs, resumable);
    }
  }

  // An instance the traced code made: its class's path, its __dict__ and its dict items; once
  // per value (a later place names it by id).
  void madeObject(const Var& v, schema::OutputSpec::Builder o, std::vector<ir::ValueId>& outputs, bool resumable) {
    if (auto seen = made_.find(v.get()); seen != made_.end()) {
      if (seen->second.first != specRoot_) unsupported("a " + v->type.text() + " made in the traced code both returned and stored");
      o.setMadeRef(seen->second.second);
      return;
    }
    uint32_t id = static_cast<uint32_t>(made_.size());
    made_[v.get()] = {specRoot_, id};
    auto m = o.initObject();
    m.setId(id);
    m.setLayout(v->layout);
    auto steps = m.initCls(static_cast<unsigned>(v->cls->path->size()));
    for (unsigned j = 0; j < steps.size(); ++j) guards::toWire((*v->cls->path)[j], steps[j]);
    const Var& own = v->attrs;
    auto attributes = m.initAttributes(static_cast<unsigned>(own->keys.size()));
    for (unsigned k = 0; k < attributes.size(); ++k) {
      if (own->keys[k]->kind != Kind::Str) unsupported("a __dict__ with a key that is not a str");
      attributes[k].setName(own->keys[k]->name);
      spec(own->items[k], attributes[k].initValue(), outputs, resumable);
    }
    if (v->storage) dictItems(v->storage, m.initItems(static_cast<unsigned>(v->storage->keys.size())), outputs, resumable);
  }

  // A function the traced code made, rebuilt by the SDK from the frame's code constants:
  // its closure cells are the frame's, the traced function's, or cells of their own.
  void madeFunction(const Var& v, schema::MadeFunction::Builder o, std::vector<ir::ValueId>& outputs) {
    const FunctionInfo& fn = *v->function;
    o.setQualname(fn.code.getQualname());
    o.setFirstLine(fn.code.getFirstLine());
    auto defaults = o.initDefaults(static_cast<unsigned>(fn.defaults.size()));
    for (unsigned k = 0; k < defaults.size(); ++k) spec(fn.defaults[k], defaults[k], outputs, true);
    auto kwDefaults = o.initKwDefaults(static_cast<unsigned>(fn.kwDefaults.size()));
    for (unsigned k = 0; k < kwDefaults.size(); ++k) {
      kwDefaults[k].setName(fn.kwDefaults[k].first);
      spec(fn.kwDefaults[k].second, kwDefaults[k].initValue(), outputs, true);
    }
    auto closure = o.initClosure(static_cast<unsigned>(fn.closure.size()));
    for (unsigned k = 0; k < closure.size(); ++k) {
      const Var& cell = fn.closure[k];
      std::optional<std::string> frameCell;
      if (breakCells_)
        for (const auto& [name, c] : *breakCells_)
          if (c == cell) frameCell = name;
      std::optional<uint32_t> freeCell;
      for (size_t j = 0; root_ && j < root_->closure.size(); ++j)
        if (root_->closure[j] == cell) freeCell = static_cast<uint32_t>(j);
      if (frameCell) closure[k].setFrameCell(*frameCell);
      else if (freeCell) closure[k].setFreeCell(*freeCell);
      else if (cell->shared || cell->path) unsupported("a graph break with a function closing over a cell of another frame");
      else if (cell->items.empty()) closure[k].setEmpty();
      else spec(cell->items[0], closure[k].initContents(), outputs, true);
    }
  }

  // The graph (its outputs `outputs`), the side effects to replay after it, guards and inputs.
  void writeGraph(const std::vector<ir::ValueId>& graphOutputs, schema::TraceResult::Builder out) {
    std::vector<ir::ValueId> outputs = graphOutputs;
    auto effects = out.initSideEffects(static_cast<unsigned>(effects_.size()));
    for (unsigned k = 0; k < effects.size(); ++k) {
      const Effect& e = effects_[k];
      auto writePath = [&](capnp::List<schema::GuardStep>::Builder steps) {
        for (unsigned j = 0; j < steps.size(); ++j) guards::toWire(e.path[j], steps[j]);
      };
      if (e.setAttr) {
        auto s = effects[k].initSetAttr();
        writePath(s.initPath(static_cast<unsigned>(e.path.size())));
        s.setName(e.name);
        ++specRoot_;
        spec(e.value, s.initValue(), outputs, false);
      } else {
        auto a = effects[k].initListAppend();
        writePath(a.initListPath(static_cast<unsigned>(e.path.size())));
        ++specRoot_;
        spec(e.value, a.initItem(), outputs, false);
      }
    }
    bool broke = out.getGraphBreak().getIsSet();
    if (outputs.empty() && !broke) unsupported("a function that computes no tensor");
    // Ops under no_grad read tensors that require grad through `detach`; a write into one there
    // (an optimizer's update) would need the write kept out of the backward too.
    if (requiresGrad && noGradOverGrad)
      unsupported("an in-place write under torch.no_grad() into a tensor that requires grad, in a "
                  "call autograd records");
    graph.setOutputs(outputs);
    ir::toWire(graph, out.initGraph());
    guards::toWire(guards, out.initGuards());
    out.setRequiresGrad(requiresGrad);
    auto inputs = out.initInputs(static_cast<unsigned>(inputs_.size()));
    for (unsigned k = 0; k < inputs.size(); ++k) {
      auto steps = inputs[k].initPath(static_cast<unsigned>(inputs_[k].path.size()));
      for (unsigned j = 0; j < steps.size(); ++j) guards::toWire(inputs_[k].path[j], steps[j]);
      inputs[k].setIsInt(inputs_[k].kind == InputKind::Int);
      inputs[k].setIsFloat(inputs_[k].kind == InputKind::Float);
      inputs[k].setIsSeed(inputs_[k].kind == InputKind::Seed);
    }
  }

  schema::TraceRequest::Reader request_;
  ObjectSource* source_; // a kept trace's: where lookup() waits for what it lacks
  std::map<std::string, schema::ObjectDesc::Reader> described_;
  std::map<std::string, Var> realized_;
  std::vector<std::unique_ptr<CopiedMessage>> objectMessages_; // TraceRequest.objectMessages (described_ reads them)
  uint32_t specRoot_ = 0; // which returned or stored value spec() writes
  std::map<const VarNode*, std::pair<uint32_t, uint32_t>> made_; // made objects written: (root, id)
  size_t depth_ = 0; // the frame depth executing (for calls made from attribute reads and operators)
  std::map<uint64_t, std::string> mutablePaths_; // a mutable object of the call: the path it was first read through
  std::set<uint64_t> changed_;                   // objects of the call the trace changed
  // Int: a symbolic-int placeholder; Float: a 0-d f64 one; Seed: randomStream's (no path).
  enum class InputKind { Tensor, Int, Float, Seed };
  struct Input {
    Path path;
    InputKind kind;
  };
  std::vector<Input> inputs_;
  std::map<ir::ValueId, Path> tensorInputs_; // a tensor input's placeholder: its path
  bool inputsAsThemselves_ = false;          // write(): returned inputs as their paths
  std::map<uint64_t, std::pair<Var, Path>> parameters_; // by object id: the graph input, its first path
  std::vector<std::pair<ir::Device, ir::ValueId>> seeds_; // randomStream's seed input per device
  size_t streams_ = 0;                                    // random streams handed out
  struct Effect {
    bool setAttr; // else an append to the list at `path`
    Path path;
    std::string name;
    Var value;
  };
  std::vector<Effect> effects_;
  // Where each input symbol can be read in the graph: (placeholder, dim), dim -1 for an int input.
  std::map<sym::Expr, std::pair<ir::ValueId, int64_t>, bool (*)(sym::Expr, sym::Expr)> symbolSources_{
      [](sym::Expr a, sym::Expr b) { return sym::compare(a, b) < 0; }};
  guards::DynamicSizes symbols_; // the trace's size and int symbols
  struct ScalarInput {
    Path path;
    std::variant<std::monostate, int64_t, double> value;
    Var item; // what .item() gave, once asked
  };
  std::map<ir::ValueId, ScalarInput> scalarInputs_; // 0-d CPU tensor inputs described with their values
  size_t steps_ = 0;
  std::string file_;
  int line_ = 0;
  std::vector<bool> gradStack_;
  std::vector<AutocastState> autocastStack_;
  std::string rootModule_;
  std::shared_ptr<FunctionInfo> root_;            // the traced function
  const std::map<std::string, Var>* breakCells_ = nullptr; // the root frame's cells, at a break
  std::optional<BreakAt> stopAt_;    // the second trace of a graph break: where to stop
  std::optional<size_t> rootPc_;     // the root frame's instruction being evaluated
  std::vector<uint32_t> arrivals_;   // per root-frame instruction: times evaluated so far
};

} // namespace

void traceWith(schema::TraceRequest::Reader request, schema::TraceReply::Builder reply, ObjectSource* source) {
  std::optional<BreakAt> at = Evaluator(request, std::nullopt, source).run(reply);
  if (at) Evaluator(request, std::move(at), source).run(reply);
}

void trace(schema::TraceRequest::Reader request, schema::TraceReply::Builder reply) {
  if (request.getKeepState() || request.getSession() != 0) return traceKept(request, reply);
  traceWith(request, reply, nullptr);
}

std::string trace(std::string_view request) {
  capnp::MallocMessageBuilder reply;
  try {
    CopiedMessage message(request.data(), request.size(), "trace request");
    trace(message.reader.getRoot<schema::TraceRequest>(), reply.initRoot<schema::TraceReply>());
    kj::Array<capnp::word> out = capnp::messageToFlatArray(reply);
    auto bytes = out.asBytes();
    return std::string(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
  } catch (const kj::Exception& e) {
    throw Error(ErrorCode::Malformed, std::string("trace request: ") + e.getDescription().cStr());
  }
}

} // namespace kiln::tracer
