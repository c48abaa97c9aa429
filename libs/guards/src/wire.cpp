#include "kiln/guards/wire.h"

#include <capnp/message.h>
#include <capnp/serialize.h>

#include <cstring>

#include "kiln/common/error.h"
#include "kiln/sym/eval.h"
#include "kiln/sym/wire.h"

namespace kiln::guards {
namespace {

[[noreturn]] void malformed(const std::string& what) { throw Error(ErrorCode::Malformed, "guards wire: " + what); }

constexpr uint64_t kMaxWireWords = uint64_t{1} << 27; // 1 GiB

DType readDType(schema::DType t) {
  auto i = static_cast<int>(t);
  if (i < 0 || i >= kDTypeCount) malformed("unknown dtype " + std::to_string(i));
  return static_cast<DType>(i);
}

ir::Device readDevice(schema::Device::Reader d) {
  auto type = static_cast<int>(d.getType());
  if (type < 0 || type > 1) malformed("unknown device type " + std::to_string(type));
  return {static_cast<ir::DeviceType>(type), d.getIndex()};
}

void writeDevice(ir::Device d, schema::Device::Builder out) {
  out.setType(static_cast<schema::DeviceType>(d.type));
  out.setIndex(d.index);
}

void writeStatic(const StaticInt& v, schema::StaticInt::Builder out) {
  if (v) out.setValue(*v);
  else out.setDynamic();
}

StaticInt readStatic(schema::StaticInt::Reader in) {
  if (in.isValue()) return in.getValue();
  return std::nullopt;
}

void writeConstant(const Constant& c, schema::GuardConstant::Builder out) {
  struct Visitor {
    schema::GuardConstant::Builder& out;
    void operator()(std::monostate) const { out.setNone(); }
    void operator()(bool b) const { out.setBool(b); }
    void operator()(int64_t i) const { out.setInt(i); }
    void operator()(double d) const { out.setFloat(d); }
    void operator()(const std::string& s) const { out.setStr(s); }
    void operator()(const Constant::Tuple& t) const {
      auto list = out.initTuple(static_cast<unsigned>(t.size()));
      for (unsigned k = 0; k < t.size(); ++k) writeConstant(t[k], list[k]);
    }
  };
  std::visit(Visitor{out}, c.value);
}

Constant readConstant(schema::GuardConstant::Reader in, int depth) {
  if (depth > kMaxInputDepth) malformed("constant nested too deep");
  switch (in.which()) {
  case schema::GuardConstant::NONE: return Constant{};
  case schema::GuardConstant::BOOL: return Constant{in.getBool()};
  case schema::GuardConstant::INT: return Constant{in.getInt()};
  case schema::GuardConstant::FLOAT: return Constant{in.getFloat()};
  case schema::GuardConstant::STR: return Constant{std::string(in.getStr().cStr())};
  case schema::GuardConstant::TUPLE: {
    Constant::Tuple t;
    for (auto item : in.getTuple()) t.push_back(readConstant(item, depth + 1));
    return Constant{std::move(t)};
  }
  }
  malformed("unknown constant kind");
}

void writeType(const TypeRef& t, schema::TypeRef::Builder out) {
  out.setModule(t.module);
  out.setQualname(t.qualname);
}

TypeRef readType(schema::TypeRef::Reader in) { return {in.getModule().cStr(), in.getQualname().cStr()}; }

void writeStep(const Step& s, schema::GuardStep::Builder out) {
  out.setName(s.name);
  switch (s.kind) {
  case StepKind::Arg: out.setArg(static_cast<uint32_t>(s.index)); return;
  case StepKind::Kwarg: out.setKwarg(); return;
  case StepKind::Global: out.setGlobal(); return;
  case StepKind::Closure: out.setClosure(static_cast<uint32_t>(s.index)); return;
  case StepKind::Attr: out.setAttr(); return;
  case StepKind::Index: out.setIndex(s.index); return;
  case StepKind::Key: out.setKey(); return;
  case StepKind::IntKey: out.setIntKey(s.index); return;
  case StepKind::Size: out.setSize(static_cast<uint32_t>(s.index)); return;
  case StepKind::Stride: out.setStride(static_cast<uint32_t>(s.index)); return;
  case StepKind::Value: out.setValue(); return;
  case StepKind::HasAttr: out.setHasAttr(); return;
  case StepKind::Module: out.setModule(); return;
  case StepKind::ClassAttr: out.setClassAttr(static_cast<uint32_t>(s.index)); return;
  case StepKind::Default: out.setDefault(static_cast<uint32_t>(s.index)); return;
  case StepKind::KwDefault: out.setKwDefault(); return;
  }
}

Step readStep(schema::GuardStep::Reader in) {
  std::string name = in.getName().cStr();
  switch (in.which()) {
  case schema::GuardStep::ARG: return arg(in.getArg(), name);
  case schema::GuardStep::KWARG: return kwarg(name);
  case schema::GuardStep::GLOBAL: return global(name);
  case schema::GuardStep::CLOSURE: return closure(in.getClosure(), name);
  case schema::GuardStep::ATTR: return attr(name);
  case schema::GuardStep::INDEX: return item(in.getIndex());
  case schema::GuardStep::KEY: return key(name);
  case schema::GuardStep::INT_KEY: return intKey(in.getIntKey());
  case schema::GuardStep::SIZE: return size(in.getSize());
  case schema::GuardStep::STRIDE: return stride(in.getStride());
  case schema::GuardStep::VALUE: return value();
  case schema::GuardStep::HAS_ATTR: return hasAttr(name);
  case schema::GuardStep::MODULE: return pyModule(name);
  case schema::GuardStep::CLASS_ATTR: return classAttr(in.getClassAttr(), name);
  case schema::GuardStep::DEFAULT: return defaultArg(in.getDefault());
  case schema::GuardStep::KW_DEFAULT: return kwDefault(name);
  }
  malformed("unknown step kind");
}

void writeCheck(const Check& c, schema::GuardCheck::Builder out) {
  switch (c.kind) {
  case Check::Kind::Type: writeType(c.type, out.initType()); return;
  case Check::Kind::Identity: {
    auto id = out.initIdentity();
    id.setId(c.identity.id);
    id.setScope(c.identity.scope);
    id.setLabel(c.identity.label);
    return;
  }
  case Check::Kind::Equals: writeConstant(c.equals, out.initEquals()); return;
  case Check::Kind::Length: out.setLength(c.length); return;
  case Check::Kind::DictKeys: {
    auto d = out.initDictKeys();
    d.setOrdered(c.dictKeys.ordered);
    auto keys = d.initKeys(static_cast<unsigned>(c.dictKeys.keys.size()));
    for (unsigned k = 0; k < keys.size(); ++k) writeConstant(c.dictKeys.keys[k], keys[k]);
    return;
  }
  case Check::Kind::Tensor: {
    const TensorCheck& t = c.tensor;
    auto w = out.initTensor();
    w.setDtype(static_cast<schema::DType>(t.dtype));
    writeDevice(t.device, w.initDevice());
    w.setRequiresGrad(t.requiresGrad);
    auto sizes = w.initSizes(static_cast<unsigned>(t.sizes.size()));
    auto strides = w.initStrides(static_cast<unsigned>(t.strides.size()));
    for (unsigned k = 0; k < sizes.size(); ++k) writeStatic(t.sizes[k], sizes[k]);
    for (unsigned k = 0; k < strides.size(); ++k) writeStatic(t.strides[k], strides[k]);
    writeStatic(t.storageOffset, w.initStorageOffset());
    return;
  }
  }
}

Check readCheck(schema::GuardCheck::Reader in) {
  switch (in.which()) {
  case schema::GuardCheck::TYPE: return typeIs(readType(in.getType()));
  case schema::GuardCheck::IDENTITY: {
    auto id = in.getIdentity();
    return identityIs({id.getId(), id.getScope(), id.getLabel().cStr()});
  }
  case schema::GuardCheck::EQUALS: return equals(readConstant(in.getEquals(), 0));
  case schema::GuardCheck::LENGTH: return lengthIs(in.getLength());
  case schema::GuardCheck::DICT_KEYS: {
    std::vector<Constant> keys;
    for (auto k : in.getDictKeys().getKeys()) keys.push_back(readConstant(k, 0));
    return dictKeysAre(std::move(keys), in.getDictKeys().getOrdered());
  }
  case schema::GuardCheck::TENSOR: {
    auto r = in.getTensor();
    TensorCheck t;
    t.dtype = readDType(r.getDtype());
    t.device = readDevice(r.getDevice());
    t.requiresGrad = r.getRequiresGrad();
    for (auto s : r.getSizes()) t.sizes.push_back(readStatic(s));
    for (auto s : r.getStrides()) t.strides.push_back(readStatic(s));
    if (t.sizes.size() != t.strides.size()) malformed("tensor guard with sizes and strides of different ranks");
    t.storageOffset = readStatic(r.getStorageOffset());
    return tensorMatches(std::move(t));
  }
  }
  malformed("unknown check kind");
}

} // namespace

void toWire(const TensorInput& tensor, schema::InputValue::TensorInput::Builder out);
TensorInput fromWire(schema::InputValue::TensorInput::Reader in);

namespace {

void writeInput(const Input& in, schema::InputValue::Builder out, int depth) {
  if (depth > kMaxInputDepth) throw Error(ErrorCode::TooLarge, "guards: input nested deeper than " + std::to_string(kMaxInputDepth));
  if (!in.type.qualname.empty()) writeType(in.type, out.initType());
  out.setId(in.id);
  if (!in.attrs.empty()) {
    auto attrs = out.initAttrs(static_cast<unsigned>(in.attrs.size()));
    for (unsigned k = 0; k < attrs.size(); ++k) {
      attrs[k].setName(in.attrs[k].first);
      writeInput(in.attrs[k].second, attrs[k].initValue(), depth + 1);
    }
  }
  switch (in.kind) {
  case Input::Kind::None: out.setNone(); return;
  case Input::Kind::Bool: out.setBool(in.boolean); return;
  case Input::Kind::Int: out.setInt(in.integer); return;
  case Input::Kind::Float: out.setFloat(in.number); return;
  case Input::Kind::Str: out.setStr(in.str); return;
  case Input::Kind::Tensor: toWire(in.tensor, out.initTensor()); return;
  case Input::Kind::List:
  case Input::Kind::Tuple: {
    auto items = in.kind == Input::Kind::List ? out.initList(static_cast<unsigned>(in.items.size()))
                                              : out.initTuple(static_cast<unsigned>(in.items.size()));
    for (unsigned k = 0; k < items.size(); ++k) writeInput(in.items[k], items[k], depth + 1);
    return;
  }
  case Input::Kind::Dict: {
    auto entries = out.initDict(static_cast<unsigned>(in.entries.size()));
    for (unsigned k = 0; k < entries.size(); ++k) {
      writeInput(in.entries[k].first, entries[k].initKey(), depth + 1);
      writeInput(in.entries[k].second, entries[k].initValue(), depth + 1);
    }
    return;
  }
  case Input::Kind::Object: out.setObject(); return;
  }
}

Input readInput(schema::InputValue::Reader in, int depth) {
  if (depth > kMaxInputDepth) malformed("input nested deeper than " + std::to_string(kMaxInputDepth));
  Input v;
  if (in.hasType()) v.type = readType(in.getType());
  v.id = in.getId();
  for (auto a : in.getAttrs()) v.attrs.emplace_back(a.getName().cStr(), readInput(a.getValue(), depth + 1));
  switch (in.which()) {
  case schema::InputValue::NONE: v.kind = Input::Kind::None; break;
  case schema::InputValue::BOOL: v.kind = Input::Kind::Bool; v.boolean = in.getBool(); break;
  case schema::InputValue::INT: v.kind = Input::Kind::Int; v.integer = in.getInt(); break;
  case schema::InputValue::FLOAT: v.kind = Input::Kind::Float; v.number = in.getFloat(); break;
  case schema::InputValue::STR: v.kind = Input::Kind::Str; v.str = in.getStr().cStr(); break;
  case schema::InputValue::TENSOR:
    v.kind = Input::Kind::Tensor;
    v.tensor = fromWire(in.getTensor());
    break;
  case schema::InputValue::LIST:
    v.kind = Input::Kind::List;
    for (auto item : in.getList()) v.items.push_back(readInput(item, depth + 1));
    break;
  case schema::InputValue::TUPLE:
    v.kind = Input::Kind::Tuple;
    for (auto item : in.getTuple()) v.items.push_back(readInput(item, depth + 1));
    break;
  case schema::InputValue::DICT:
    v.kind = Input::Kind::Dict;
    for (auto e : in.getDict()) v.entries.emplace_back(readInput(e.getKey(), depth + 1), readInput(e.getValue(), depth + 1));
    break;
  case schema::InputValue::OBJECT: v.kind = Input::Kind::Object; break;
  default: malformed("unknown input kind");
  }
  return v;
}

void writeNamed(const std::vector<std::pair<std::string, Input>>& named, capnp::List<schema::InputAttr>::Builder out) {
  for (unsigned k = 0; k < out.size(); ++k) {
    out[k].setName(named[k].first);
    writeInput(named[k].second, out[k].initValue(), 0);
  }
}

std::vector<std::pair<std::string, Input>> readNamed(capnp::List<schema::InputAttr>::Reader in) {
  std::vector<std::pair<std::string, Input>> out;
  for (auto a : in) out.emplace_back(a.getName().cStr(), readInput(a.getValue(), 0));
  return out;
}

template <class T, class Read> T readMessage(std::string_view bytes, Read read) {
  try {
    if (bytes.size() % sizeof(capnp::word) != 0) malformed("size is not a multiple of 8 bytes");
    kj::Array<capnp::word> words = kj::heapArray<capnp::word>(bytes.size() / sizeof(capnp::word));
    std::memcpy(words.begin(), bytes.data(), bytes.size());
    capnp::ReaderOptions options;
    options.traversalLimitInWords = kMaxWireWords;
    options.nestingLimit = 2 * kMaxInputDepth + 16;
    capnp::FlatArrayMessageReader message(words, options);
    return read(message);
  } catch (const kj::Exception& e) {
    malformed(e.getDescription().cStr());
  }
}

template <class Builder> std::string messageBytes(Builder& message) {
  kj::Array<capnp::word> words = capnp::messageToFlatArray(message);
  auto bytes = words.asBytes();
  return std::string(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
}

} // namespace

void toWire(const GlobalState& s, schema::GlobalState::Builder out) {
  if (s.gradEnabled) out.initGradEnabled().setValue(*s.gradEnabled);
  if (s.defaultDtype) out.initDefaultDtype().setValue(static_cast<schema::DType>(*s.defaultDtype));
  if (s.deterministic) out.initDeterministic().setValue(*s.deterministic);
  auto autocast = out.initAutocast(static_cast<unsigned>(s.autocast.size()));
  for (unsigned k = 0; k < autocast.size(); ++k) {
    autocast[k].setDevice(static_cast<schema::DeviceType>(s.autocast[k].device));
    autocast[k].setEnabled(s.autocast[k].enabled);
    autocast[k].setDtype(static_cast<schema::DType>(s.autocast[k].dtype));
  }
}

GlobalState fromWire(schema::GlobalState::Reader in) {
  GlobalState s;
  if (in.hasGradEnabled() && in.getGradEnabled().isValue()) s.gradEnabled = in.getGradEnabled().getValue();
  if (in.hasDefaultDtype() && in.getDefaultDtype().isValue()) s.defaultDtype = readDType(in.getDefaultDtype().getValue());
  if (in.hasDeterministic() && in.getDeterministic().isValue()) s.deterministic = in.getDeterministic().getValue();
  for (auto a : in.getAutocast()) {
    auto device = static_cast<int>(a.getDevice());
    if (device < 0 || device > 1) malformed("unknown autocast device type");
    s.autocast.push_back({static_cast<ir::DeviceType>(device), a.getEnabled(), readDType(a.getDtype())});
  }
  return s;
}

void toWire(const GuardSet& set, schema::GuardSet::Builder out) {
  auto call = out.initCall();
  call.setPositional(set.call.positional);
  auto keywords = call.initKeywords(static_cast<unsigned>(set.call.keywords.size()));
  for (unsigned k = 0; k < keywords.size(); ++k) keywords.set(k, set.call.keywords[k]);
  toWire(set.globals, out.initGlobals());
  auto nodes = out.initNodes(static_cast<unsigned>(set.nodes().size()));
  for (unsigned n = 0; n < nodes.size(); ++n) {
    const Node& node = set.nodes()[n];
    nodes[n].setParent(node.parent);
    writeStep(node.step, nodes[n].initStep());
    auto checks = nodes[n].initChecks(static_cast<unsigned>(node.checks.size()));
    for (unsigned k = 0; k < checks.size(); ++k) writeCheck(node.checks[k], checks[k]);
  }
  auto symbols = out.initSymbols(static_cast<unsigned>(set.symbols().size()));
  for (unsigned k = 0; k < symbols.size(); ++k) {
    symbols[k].setSymbol(set.symbols()[k].symbol.name());
    symbols[k].setNode(set.symbols()[k].node);
  }
  auto guards = out.initShapeGuards(static_cast<unsigned>(set.shapeGuards().size()));
  for (unsigned k = 0; k < guards.size(); ++k) sym::toWire(set.shapeGuards()[k], guards[k]);
}

GuardSet fromWire(schema::GuardSet::Reader in) try {
  GuardSet set;
  set.call.positional = in.getCall().getPositional();
  for (auto k : in.getCall().getKeywords()) set.call.keywords.emplace_back(k.cStr());
  if (!std::is_sorted(set.call.keywords.begin(), set.call.keywords.end())) malformed("call keywords not sorted");
  set.globals = fromWire(in.getGlobals());
  uint32_t count = 0;
  for (auto node : in.getNodes()) {
    Step step = readStep(node.getStep());
    int32_t parent = node.getParent();
    if (parent >= static_cast<int32_t>(count) || parent < -1) malformed("node " + std::to_string(count) + " has parent " + std::to_string(parent));
    if (step.isRoot() != (parent < 0)) malformed("node " + std::to_string(count) + ": a root step must have no parent, and only it");
    if (set.node(parent, step) != count) malformed("node " + std::to_string(count) + " repeats an earlier one");
    for (auto c : node.getChecks()) set.check(count, readCheck(c));
    ++count;
  }
  for (auto s : in.getSymbols()) {
    if (s.getNode() >= count) malformed("symbol " + std::string(s.getSymbol().cStr()) + " reads node " + std::to_string(s.getNode()));
    std::string name = s.getSymbol().cStr();
    if (name.empty() || set.table().lookup(name)) malformed("symbol '" + name + "' empty or repeated");
    set.symbol(name, s.getNode());
  }
  for (auto g : in.getShapeGuards()) {
    sym::Expr e = sym::fromWire(g, set.table());
    if (!e.isBool()) malformed("a shape guard that is not a relation");
    for (sym::Expr s : sym::freeSymbols(e)) {
      bool sourced = false;
      for (const SymbolSource& src : set.symbols()) sourced = sourced || src.symbol == s;
      if (!sourced) malformed("shape guard names " + s.name() + ", which no source reads");
    }
    if (e.asBoolean() == std::optional<bool>(false)) malformed("a shape guard that is always false");
    set.shapeGuard(e);
  }
  return set;
} catch (const Error& e) {
  if (e.code() == ErrorCode::InvalidArgument) malformed(e.what());
  throw;
}

void toWire(const CallInput& call, schema::CallInput::Builder out) {
  auto args = out.initArgs(static_cast<unsigned>(call.args.size()));
  for (unsigned k = 0; k < args.size(); ++k) writeInput(call.args[k], args[k], 0);
  writeNamed(call.kwargs, out.initKwargs(static_cast<unsigned>(call.kwargs.size())));
  writeNamed(call.globals, out.initGlobals(static_cast<unsigned>(call.globals.size())));
  auto closure = out.initClosure(static_cast<unsigned>(call.closure.size()));
  for (unsigned k = 0; k < closure.size(); ++k) writeInput(call.closure[k], closure[k], 0);
  toWire(call.state, out.initState());
  out.setScope(call.scope);
  auto defaults = out.initDefaults(static_cast<unsigned>(call.defaults.size()));
  for (unsigned k = 0; k < defaults.size(); ++k) writeInput(call.defaults[k], defaults[k], 0);
  writeNamed(call.kwDefaults, out.initKwDefaults(static_cast<unsigned>(call.kwDefaults.size())));
}

CallInput fromWire(schema::CallInput::Reader in) {
  CallInput call;
  for (auto a : in.getArgs()) call.args.push_back(readInput(a, 0));
  call.kwargs = readNamed(in.getKwargs());
  call.globals = readNamed(in.getGlobals());
  for (auto c : in.getClosure()) call.closure.push_back(readInput(c, 0));
  call.state = fromWire(in.getState());
  call.scope = in.getScope();
  for (auto d : in.getDefaults()) call.defaults.push_back(readInput(d, 0));
  call.kwDefaults = readNamed(in.getKwDefaults());
  return call;
}

void toWire(const std::vector<FrameInput>& inputs, capnp::List<schema::FrameInput>::Builder out) {
  for (unsigned k = 0; k < out.size(); ++k) {
    const FrameInput& in = inputs[k];
    out[k].setSource(in.source);
    out[k].setIsTensor(in.isTensor);
    auto sizes = out[k].initSizes(static_cast<unsigned>(in.sizes.size()));
    for (unsigned d = 0; d < sizes.size(); ++d) writeStatic(in.sizes[d], sizes[d]);
    writeStatic(in.value, out[k].initValue());
    out[k].setIsFloat(in.isFloat);
    out[k].setNumber(in.number.value_or(0));
    out[k].setNumberDynamic(in.isFloat && !in.number);
  }
}

std::vector<FrameInput> fromWire(capnp::List<schema::FrameInput>::Reader in) {
  std::vector<FrameInput> out;
  for (auto f : in) {
    FrameInput i;
    i.source = f.getSource().cStr();
    i.isTensor = f.getIsTensor();
    for (auto s : f.getSizes()) i.sizes.push_back(readStatic(s));
    i.value = readStatic(f.getValue());
    i.isFloat = f.getIsFloat();
    if (i.isFloat && !f.getNumberDynamic()) i.number = f.getNumber();
    out.push_back(std::move(i));
  }
  return out;
}

void toWire(const FrameState& frame, schema::FrameState::Builder out) {
  toWire(frame.inputs, out.initInputs(static_cast<unsigned>(frame.inputs.size())));
  auto dynamic = out.initForcedDynamic(static_cast<unsigned>(frame.forcedDynamic.size()));
  unsigned k = 0;
  for (const std::string& d : frame.forcedDynamic) dynamic.set(k++, d);
  auto fixed = out.initForcedStatic(static_cast<unsigned>(frame.forcedStatic.size()));
  k = 0;
  for (const std::string& d : frame.forcedStatic) fixed.set(k++, d);
}

FrameState fromWire(schema::FrameState::Reader in) {
  FrameState frame;
  frame.inputs = fromWire(in.getInputs());
  for (auto d : in.getForcedDynamic()) frame.forcedDynamic.insert(d.cStr());
  for (auto d : in.getForcedStatic()) frame.forcedStatic.insert(d.cStr());
  return frame;
}

void toWire(const Step& step, schema::GuardStep::Builder out) { writeStep(step, out); }
Step fromWire(schema::GuardStep::Reader in) { return readStep(in); }
void toWire(const TypeRef& type, schema::TypeRef::Builder out) { writeType(type, out); }
TypeRef fromWire(schema::TypeRef::Reader in) { return readType(in); }

void toWire(const TensorInput& t, schema::InputValue::TensorInput::Builder w) {
  w.setDtype(static_cast<schema::DType>(t.dtype));
  writeDevice(t.device, w.initDevice());
  w.setRequiresGrad(t.requiresGrad);
  auto sizes = w.initSizes(static_cast<unsigned>(t.sizes.size()));
  for (unsigned k = 0; k < sizes.size(); ++k) sizes.set(k, t.sizes[k]);
  auto strides = w.initStrides(static_cast<unsigned>(t.strides.size()));
  for (unsigned k = 0; k < strides.size(); ++k) strides.set(k, t.strides[k]);
  w.setStorageOffset(t.storageOffset);
  if (auto* i = std::get_if<int64_t>(&t.value)) w.initValue().setInt(*i);
  else if (auto* d = std::get_if<double>(&t.value)) w.initValue().setFloat(*d);
}

TensorInput fromWire(schema::InputValue::TensorInput::Reader r) {
  TensorInput t;
  t.dtype = readDType(r.getDtype());
  t.device = readDevice(r.getDevice());
  t.requiresGrad = r.getRequiresGrad();
  for (int64_t s : r.getSizes()) t.sizes.push_back(s);
  for (int64_t s : r.getStrides()) t.strides.push_back(s);
  if (t.sizes.size() != t.strides.size()) malformed("tensor with sizes and strides of different ranks");
  t.storageOffset = r.getStorageOffset();
  if (r.getValue().isInt()) t.value = r.getValue().getInt();
  if (r.getValue().isFloat()) t.value = r.getValue().getFloat();
  if (!std::holds_alternative<std::monostate>(t.value) && !t.sizes.empty())
    malformed("a tensor value given for a tensor that is not 0-d");
  return t;
}

void toWire(const FunctionKey& key, schema::FunctionKey::Builder out) {
  out.setModule(key.module);
  out.setQualname(key.qualname);
  out.setCodeHash(key.codeHash);
}

FunctionKey fromWire(schema::FunctionKey::Reader in) {
  FunctionKey key{in.getModule().cStr(), in.getQualname().cStr(), in.getCodeHash().cStr()};
  if (key.qualname.empty() || key.codeHash.empty())
    throw Error(ErrorCode::InvalidArgument, "guards: a function key needs a qualname and a code hash, got '" +
                                                key.text() + "'");
  return key;
}

void toWire(const CompiledEntry& entry, schema::CompiledEntry::Builder out) {
  toWire(entry.guards, out.initGuards());
  auto artifacts = out.initArtifacts(static_cast<unsigned>(entry.artifacts.size()));
  for (unsigned k = 0; k < artifacts.size(); ++k) artifacts.set(k, entry.artifacts[k]);
  auto graphs = out.initGraphs(static_cast<unsigned>(entry.graphs.size()));
  for (unsigned k = 0; k < graphs.size(); ++k) graphs.set(k, entry.graphs[k]);
  out.setOutputs(kj::arrayPtr(reinterpret_cast<const kj::byte*>(entry.outputs.data()), entry.outputs.size()));
  out.setId(entry.id);
}

CompiledEntry fromWire(schema::CompiledEntry::Reader in) {
  CompiledEntry entry;
  entry.guards = fromWire(in.getGuards());
  for (auto a : in.getArtifacts()) entry.artifacts.emplace_back(a.cStr());
  for (auto g : in.getGraphs()) entry.graphs.emplace_back(g.cStr());
  auto outputs = in.getOutputs();
  entry.outputs.assign(reinterpret_cast<const char*>(outputs.begin()), outputs.size());
  entry.id = in.getId();
  return entry;
}

void toWire(const JobMember& member, schema::JobMember::Builder out) {
  out.setJob(member.job);
  out.setRank(member.rank);
  out.setWorldSize(member.worldSize);
  out.setRound(member.round);
}

std::optional<JobMember> fromWire(schema::JobMember::Reader in) {
  if (in.getJob().size() == 0) return std::nullopt;
  JobMember member{in.getJob().cStr(), in.getRank(), in.getWorldSize(), in.getRound()};
  if (member.worldSize == 0 || member.rank >= member.worldSize)
    throw Error(ErrorCode::InvalidArgument, "guards: job '" + member.job + "': rank " + std::to_string(member.rank) +
                                                " is not within a world of " + std::to_string(member.worldSize));
  return member;
}

std::string toBytes(const CompiledEntry& entry) {
  capnp::MallocMessageBuilder message;
  toWire(entry, message.initRoot<schema::CompiledEntry>());
  return messageBytes(message);
}

CompiledEntry compiledEntryFromBytes(std::string_view bytes) {
  return readMessage<CompiledEntry>(bytes,
                                    [](capnp::MessageReader& m) { return fromWire(m.getRoot<schema::CompiledEntry>()); });
}

std::string toBytes(const GuardSet& set) {
  capnp::MallocMessageBuilder message;
  toWire(set, message.initRoot<schema::GuardSet>());
  return messageBytes(message);
}

GuardSet guardSetFromBytes(std::string_view bytes) {
  return readMessage<GuardSet>(bytes, [](capnp::MessageReader& m) { return fromWire(m.getRoot<schema::GuardSet>()); });
}

std::string toBytes(const CallInput& call) {
  capnp::MallocMessageBuilder message;
  toWire(call, message.initRoot<schema::CallInput>());
  return messageBytes(message);
}

CallInput callInputFromBytes(std::string_view bytes) {
  return readMessage<CallInput>(bytes, [](capnp::MessageReader& m) { return fromWire(m.getRoot<schema::CallInput>()); });
}

} // namespace kiln::guards
