#include "kiln/runtime/artifact.h"

#include <dlfcn.h>
#include <unistd.h>

#include <capnp/message.h>
#include <capnp/serialize.h>

#include <cctype>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>

#include "kiln/common/error.h"
#include "kiln/ir/wire.h"
#include "kiln/sym/eval.h"
#include "kiln/sym/symbol_table.h"
#include "kiln/sym/wire.h"

namespace kiln::runtime {
namespace {

[[noreturn]] void malformed(const std::string& message) {
  throw Error(ErrorCode::Malformed, "artifact: " + message);
}

using SymbolSet = std::set<std::string>;

void collect(sym::Expr e, std::vector<sym::Expr>& out, SymbolSet& seen) {
  if (e.isNull()) return;
  for (sym::Expr s : sym::freeSymbols(e))
    if (seen.insert(s.name()).second) out.push_back(s);
}

void collect(const ir::TensorMeta& m, std::vector<sym::Expr>& out, SymbolSet& seen) {
  for (sym::Expr e : m.sizes) collect(e, out, seen);
  for (sym::Expr e : m.strides) collect(e, out, seen);
  collect(m.storageOffset, out, seen);
}

// Every symbol the plan mentions, each once.
std::vector<sym::Expr> mentioned(const Plan& plan) {
  std::vector<sym::Expr> out;
  SymbolSet seen;
  for (const ir::Value& v : plan.inputs) {
    if (v.isTensor())
      collect(v.tensor(), out, seen);
    else if (v.isSymInt())
      collect(v.symInt(), out, seen);
  }
  for (const PlanBuffer& b : plan.buffers) collect(b.layout, out, seen);
  for (sym::Expr s : plan.symbols) collect(s, out, seen);
  for (const Step& s : plan.steps) {
    for (const View& v : s.inputs) collect(v.meta, out, seen);
    for (const ir::Attr& a : s.attrs) {
      if (auto* e = std::get_if<sym::Expr>(&a.value)) collect(*e, out, seen);
      if (auto* es = std::get_if<std::vector<sym::Expr>>(&a.value))
        for (sym::Expr e : *es) collect(e, out, seen);
    }
  }
  for (const View& v : plan.outputs) {
    collect(v.meta, out, seen);
    collect(v.symInt, out, seen);
  }
  for (const Launch& l : plan.launches) collect(l.items, out, seen);
  return out;
}

void writeView(const View& v, schema::View::Builder out) {
  out.setBuffer(v.buffer);
  ir::writeMeta(v.meta, out.initMeta());
  if (!v.symInt.isNull()) {
    out.setIsSymInt(true);
    sym::toWire(v.symInt, out.initSymInt());
  }
}

View readView(schema::View::Reader in, sym::SymbolTable& table, size_t buffers) {
  View v;
  if (in.getIsSymInt()) {
    v.symInt = sym::fromWire(in.getSymInt(), table);
    if (v.symInt.isBool()) malformed("a boolean output");
    return v;
  }
  if (in.getBuffer() >= buffers) malformed("a view of buffer " + std::to_string(in.getBuffer()));
  v.buffer = in.getBuffer();
  v.meta = ir::readMeta(in.getMeta(), table);
  return v;
}

void writePlan(const Plan& plan, schema::Plan::Builder out) {
  std::vector<sym::Expr> symbols = mentioned(plan);
  auto syms = out.initSymbols(static_cast<unsigned>(symbols.size()));
  for (unsigned i = 0; i < symbols.size(); ++i) ir::writeSymbol(symbols[i], syms[i]);
  auto inputs = out.initInputs(static_cast<unsigned>(plan.inputs.size()));
  for (unsigned i = 0; i < plan.inputs.size(); ++i) ir::writeValue(plan.inputs[i], inputs[i]);
  auto buffers = out.initBuffers(static_cast<unsigned>(plan.buffers.size()));
  for (unsigned i = 0; i < plan.buffers.size(); ++i) {
    buffers[i].setName(plan.buffers[i].name);
    ir::writeMeta(plan.buffers[i].layout, buffers[i].initLayout());
    buffers[i].setInput(plan.buffers[i].input);
    buffers[i].setAliasOf(plan.buffers[i].aliasOf);
    buffers[i].setReuses(plan.buffers[i].reuses);
  }
  auto kernels = out.initKernels(static_cast<unsigned>(plan.kernels.size()));
  for (unsigned i = 0; i < plan.kernels.size(); ++i) kernels.set(i, plan.kernels[i]);
  auto slots = out.initKernelSymbols(static_cast<unsigned>(plan.symbols.size()));
  for (unsigned i = 0; i < plan.symbols.size(); ++i) slots.set(i, plan.symbols[i].name());
  auto steps = out.initSteps(static_cast<unsigned>(plan.steps.size()));
  for (unsigned i = 0; i < plan.steps.size(); ++i) {
    const Step& s = plan.steps[i];
    switch (s.kind) {
    case Step::RunKernel: {
      auto k = steps[i].initKernel();
      k.setIndex(s.kernel);
      auto writes = k.initWrites(static_cast<unsigned>(s.writes.size()));
      for (unsigned w = 0; w < s.writes.size(); ++w) writes.set(w, s.writes[w]);
      break;
    }
    case Step::CallExtern: {
      auto e = steps[i].initExtern();
      e.setBuffer(s.buffer);
      e.setOp(s.op);
      auto views = e.initInputs(static_cast<unsigned>(s.inputs.size()));
      for (unsigned v = 0; v < s.inputs.size(); ++v) writeView(s.inputs[v], views[v]);
      auto attrs = e.initAttributes(static_cast<unsigned>(s.attrs.size()));
      for (unsigned a = 0; a < s.attrs.size(); ++a) ir::writeAttr(s.attrs[a], attrs[a]);
      auto results = e.initResults(static_cast<unsigned>(s.writes.size()));
      for (unsigned w = 0; w < s.writes.size(); ++w) results.set(w, s.writes[w]);
      break;
    }
    case Step::Free: steps[i].setFree(s.buffer); break;
    }
  }
  auto outputs = out.initOutputs(static_cast<unsigned>(plan.outputs.size()));
  for (unsigned i = 0; i < plan.outputs.size(); ++i) writeView(plan.outputs[i], outputs[i]);
  auto launches = out.initLaunches(static_cast<unsigned>(plan.launches.size()));
  for (unsigned i = 0; i < plan.launches.size(); ++i) {
    const Launch& l = plan.launches[i];
    auto w = launches[i];
    sym::toWire(l.items, w.initItems());
    w.setItemsPerBlock(l.itemsPerBlock);
    w.setThreads(l.threads);
    w.setSharedBytes(l.sharedBytes);
    auto bs = w.initBuffers(static_cast<unsigned>(l.buffers.size()));
    for (unsigned k = 0; k < l.buffers.size(); ++k) bs.set(k, l.buffers[k]);
    auto ss = w.initSymbols(static_cast<unsigned>(l.symbols.size()));
    for (unsigned k = 0; k < l.symbols.size(); ++k) ss.set(k, l.symbols[k]);
    w.setMayFail(l.mayFail);
    auto aligned = w.initAligned(static_cast<unsigned>(l.aligned.size()));
    for (unsigned k = 0; k < l.aligned.size(); ++k) {
      aligned[k].setBuffer(l.aligned[k].buffer);
      sym::toWire(l.aligned[k].offset, aligned[k].initOffset());
      aligned[k].setElementBytes(l.aligned[k].elementBytes);
      aligned[k].setBytes(l.aligned[k].bytes);
    }
    w.setUnaligned(l.unaligned);
    w.setWaves(l.waves);
  }
}

Plan readPlan(schema::Plan::Reader in, sym::SymbolTable& table) {
  Plan plan;
  for (auto s : in.getSymbols()) ir::readSymbol(s, table);
  for (auto v : in.getInputs()) plan.inputs.push_back(ir::readValue(v, table));
  for (auto b : in.getBuffers()) {
    int32_t input = b.getInput();
    if (input < -1 || input >= static_cast<int32_t>(plan.inputs.size()))
      malformed("a buffer of input " + std::to_string(input));
    plan.buffers.push_back({b.getName(), ir::readMeta(b.getLayout(), table), input,
                            b.getAliasOf(), b.getReuses()});
  }
  size_t count = plan.buffers.size();
  for (size_t k = 0; k < count; ++k) {
    int32_t alias = plan.buffers[k].aliasOf;
    if (alias < -1 || alias >= static_cast<int32_t>(k)) // an earlier buffer, so no cycles
      malformed("buffer " + std::to_string(k) + " aliases buffer " + std::to_string(alias));
    int32_t reuses = plan.buffers[k].reuses;
    if (reuses < -1 || reuses >= static_cast<int32_t>(count) ||
        (reuses >= 0 && (plan.buffers[reuses].input < 0 || plan.buffers[k].input >= 0 ||
                         plan.buffers[k].aliasOf >= 0)))
      malformed("buffer " + std::to_string(k) + " reuses buffer " + std::to_string(reuses) +
                ", which is no input buffer");
  }
  auto buffer = [&](uint32_t id) {
    if (id >= count) malformed("buffer " + std::to_string(id) + " of " + std::to_string(count));
    return id;
  };
  for (auto k : in.getKernels()) plan.kernels.push_back(k);
  for (auto name : in.getKernelSymbols()) {
    auto s = table.lookup(std::string(name));
    if (!s) malformed("kernel symbol " + std::string(name) + " is not declared");
    plan.symbols.push_back(*s);
  }
  for (auto s : in.getSteps()) {
    Step step;
    switch (s.which()) {
    case schema::PlanStep::KERNEL:
      step.kind = Step::RunKernel;
      step.kernel = s.getKernel().getIndex();
      if (step.kernel >= plan.kernels.size()) malformed("kernel " + std::to_string(step.kernel));
      for (uint32_t w : s.getKernel().getWrites()) step.writes.push_back(buffer(w));
      break;
    case schema::PlanStep::EXTERN:
      step.kind = Step::CallExtern;
      step.buffer = buffer(s.getExtern().getBuffer());
      step.op = s.getExtern().getOp();
      for (auto v : s.getExtern().getInputs()) step.inputs.push_back(readView(v, table, count));
      for (auto a : s.getExtern().getAttributes()) step.attrs.push_back(ir::readAttr(a, table));
      for (uint32_t w : s.getExtern().getResults()) step.writes.push_back(buffer(w));
      break;
    case schema::PlanStep::FREE:
      step.kind = Step::Free;
      step.buffer = buffer(s.getFree());
      break;
    default: malformed("unknown step kind");
    }
    plan.steps.push_back(std::move(step));
  }
  for (auto v : in.getOutputs()) plan.outputs.push_back(readView(v, table, count));
  if (in.getLaunches().size() != 0 && in.getLaunches().size() != plan.kernels.size())
    malformed(std::to_string(in.getLaunches().size()) + " launches for " +
              std::to_string(plan.kernels.size()) + " kernels");
  for (auto l : in.getLaunches()) {
    Launch launch;
    launch.items = sym::fromWire(l.getItems(), table);
    launch.itemsPerBlock = l.getItemsPerBlock();
    launch.threads = l.getThreads();
    launch.sharedBytes = l.getSharedBytes();
    if (launch.itemsPerBlock == 0 || launch.threads == 0 || launch.threads > 1024)
      malformed("a launch of " + std::to_string(launch.threads) + " threads, " +
                std::to_string(launch.itemsPerBlock) + " items per block");
    for (uint32_t b : l.getBuffers()) launch.buffers.push_back(buffer(b));
    for (uint32_t s : l.getSymbols()) {
      if (s >= plan.symbols.size()) malformed("launch symbol slot " + std::to_string(s));
      launch.symbols.push_back(s);
    }
    launch.mayFail = l.getMayFail();
    for (auto a : l.getAligned()) {
      AlignedAccess access;
      access.buffer = a.getBuffer();
      if (access.buffer < -1 || access.buffer >= static_cast<int32_t>(plan.buffers.size()))
        malformed("an aligned access of buffer " + std::to_string(access.buffer));
      access.offset = sym::fromWire(a.getOffset(), table);
      access.elementBytes = a.getElementBytes();
      access.bytes = a.getBytes();
      if (access.elementBytes == 0 || access.bytes == 0 || (access.bytes & (access.bytes - 1)))
        malformed("an aligned access of " + std::to_string(access.elementBytes) +
                  "-byte elements to " + std::to_string(access.bytes) + " bytes");
      launch.aligned.push_back(std::move(access));
    }
    launch.waves = l.getWaves();
    launch.unaligned = l.getUnaligned();
    if (launch.unaligned < -1 || launch.unaligned >= static_cast<int32_t>(plan.kernels.size()))
      malformed("a launch whose unaligned kernel is " + std::to_string(launch.unaligned));
    plan.launches.push_back(std::move(launch));
  }
  for (const Launch& launch : plan.launches) // one step at most: no kernel falls back twice
    if (launch.unaligned >= 0 &&
        plan.launches[static_cast<size_t>(launch.unaligned)].unaligned >= 0)
      malformed("an unaligned kernel with an unaligned kernel of its own");
  return plan;
}

std::string keyFileName(const std::string& key) {
  std::string out;
  for (char c : key)
    if (std::isalnum(static_cast<unsigned char>(c))) out += c;
  if (out.empty()) malformed("an artifact without a key");
  return out;
}

} // namespace

void toWire(const Artifact& a, schema::Artifact::Builder out) {
  out.setTarget(a.target);
  out.setKey(a.key);
  writePlan(a.plan, out.initPlan());
  out.setSource(a.source);
  out.setLibrary(
      kj::arrayPtr(reinterpret_cast<const kj::byte*>(a.library.data()), a.library.size()));
  out.setExplain(a.explain);
}

Artifact fromWire(schema::Artifact::Reader in, sym::SymbolTable& table) {
  try {
    Artifact a;
    a.target = in.getTarget();
    a.key = in.getKey();
    a.plan = readPlan(in.getPlan(), table);
    a.source = in.getSource();
    auto library = in.getLibrary();
    a.library.assign(reinterpret_cast<const char*>(library.begin()), library.size());
    a.explain = in.getExplain();
    return a;
  } catch (const kj::Exception& e) {
    malformed(e.getDescription().cStr());
  }
}

std::string toBytes(const Artifact& artifact) {
  capnp::MallocMessageBuilder message;
  toWire(artifact, message.initRoot<schema::Artifact>());
  kj::Array<capnp::word> words = capnp::messageToFlatArray(message);
  auto bytes = words.asBytes();
  return std::string(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
}

Artifact fromBytes(std::string_view bytes, sym::SymbolTable& table) {
  if (bytes.size() % sizeof(capnp::word) != 0) malformed("not a whole number of words");
  kj::Array<capnp::word> words = kj::heapArray<capnp::word>(bytes.size() / sizeof(capnp::word));
  std::memcpy(words.begin(), bytes.data(), bytes.size());
  try {
    capnp::ReaderOptions options;
    options.traversalLimitInWords = uint64_t{1} << 30;
    capnp::FlatArrayMessageReader reader(words, options);
    return fromWire(reader.getRoot<schema::Artifact>(), table);
  } catch (const kj::Exception& e) {
    malformed(e.getDescription().cStr());
  }
}

std::shared_ptr<Library> Library::load(const std::string& path) {
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) throw Error(ErrorCode::NotFound, std::string("runtime: cannot load ") + ::dlerror());
  // CPU kernels run OpenMP: libgomp's worker threads outlive the library that
  // loaded it, spinning in its code after a parallel loop; unloaded with the
  // last kernel library, it would take their code from under them (a crash
  // seen when a library was closed right after a parallel run). Pinned once
  // loaded: RTLD_NOLOAD finds it, RTLD_NODELETE keeps it.
  ::dlopen("libgomp.so.1", RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
  return std::shared_ptr<Library>(new Library(handle));
}

Library::~Library() {
  ::dlclose(handle_);
}

KernelFn Library::kernel(const std::string& name) const {
  void* fn = ::dlsym(handle_, name.c_str());
  if (!fn) throw Error(ErrorCode::NotFound, "runtime: no kernel " + name + " in the library");
  return reinterpret_cast<KernelFn>(fn);
}

bool isCudaTarget(const std::string& target) {
  return target == "cuda" || target.rfind("cuda:", 0) == 0;
}

std::shared_ptr<LoadedArtifact> LoadedArtifact::load(std::string_view bytes, const std::string& dir) {
  std::shared_ptr<LoadedArtifact> loaded(new LoadedArtifact());
  loaded->table_ = std::make_unique<sym::SymbolTable>();
  loaded->artifact_ = fromBytes(bytes, *loaded->table_);
  const Artifact& a = loaded->artifact_;
  if (a.plan.launches.size() != a.plan.kernels.size())
    malformed("a plan of " + std::to_string(a.plan.kernels.size()) + " kernels with " +
              std::to_string(a.plan.launches.size()) + " launches");
  loaded->facts_ = planFacts(a.plan);
  loaded->deterministic_ = a.target.find("+deterministic") != std::string::npos;
  if (isCudaTarget(a.target)) {
    if (!a.plan.kernels.empty() && a.library.empty()) malformed("a CUDA artifact without a cubin");
    loaded->module_ = std::make_shared<CudaModule>(a.library, a.plan.kernels);
    return loaded;
  }
  if (a.target != "cpu" && a.target.rfind("cpu+", 0) != 0) // "+modifiers" of codegen's target
    throw Error(ErrorCode::Unsupported, "runtime: an artifact for target '" + a.target +
                                            "' (have: cpu, cuda:sm_NN, each with +modifiers)");
  if (!a.plan.kernels.empty()) {
    std::string path = dir + "/" + keyFileName(a.key) + ".so";
    if (::access(path.c_str(), R_OK) != 0) { // written once, atomically
      std::string temp = path + ".tmp" + std::to_string(::getpid());
      {
        std::ofstream out(temp, std::ios::binary);
        out.write(a.library.data(), static_cast<std::streamsize>(a.library.size()));
        if (!out) throw Error(ErrorCode::Io, "runtime: cannot write " + temp);
      }
      if (std::rename(temp.c_str(), path.c_str()) != 0)
        throw Error(ErrorCode::Io, "runtime: cannot move the library to " + path);
    }
    loaded->library_ = Library::load(path);
  }
  return loaded;
}

RunResult LoadedArtifact::run(const std::vector<Tensor>& inputs, Allocator& allocator,
                              CudaStream where) const {
  if (module_)
    return runCuda(artifact_.plan, *module_, inputs, allocator, where, &facts_, deterministic_);
  return runtime::run(
      artifact_.plan,
      [&](const std::string& name) -> KernelFn {
        if (!library_) throw Error(ErrorCode::NotFound, "runtime: the artifact has no library");
        return library_->kernel(name);
      },
      inputs, allocator, &facts_);
}

} // namespace kiln::runtime
