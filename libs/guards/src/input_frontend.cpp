#include "kiln/guards/input_frontend.h"

#include <algorithm>

namespace kiln::guards {

TypeRef Input::typeRef() const {
  if (!type.qualname.empty()) return type;
  switch (kind) {
  case Kind::None: return {"builtins", "NoneType"};
  case Kind::Bool: return {"builtins", "bool"};
  case Kind::Int: return {"builtins", "int"};
  case Kind::Float: return {"builtins", "float"};
  case Kind::Str: return {"builtins", "str"};
  case Kind::Tensor: return {"torch", "Tensor"};
  case Kind::List: return {"builtins", "list"};
  case Kind::Tuple: return {"builtins", "tuple"};
  case Kind::Dict: return {"builtins", "dict"};
  case Kind::Object: return {"builtins", "object"};
  }
  return {"builtins", "object"};
}

Input Input::none() { return Input{}; }

Input Input::of(bool v) {
  Input i;
  i.kind = Kind::Bool;
  i.boolean = v;
  return i;
}

Input Input::of(int64_t v) {
  Input i;
  i.kind = Kind::Int;
  i.integer = v;
  return i;
}

Input Input::of(double v) {
  Input i;
  i.kind = Kind::Float;
  i.number = v;
  return i;
}

Input Input::of(std::string v) {
  Input i;
  i.kind = Kind::Str;
  i.str = std::move(v);
  return i;
}

Input Input::of(TensorInput t) {
  Input i;
  i.kind = Kind::Tensor;
  i.tensor = std::move(t);
  return i;
}

Input Input::list(std::vector<Input> items) {
  Input i;
  i.kind = Kind::List;
  i.items = std::move(items);
  return i;
}

Input Input::tuple(std::vector<Input> items) {
  Input i = list(std::move(items));
  i.kind = Kind::Tuple;
  return i;
}

Input Input::dict(std::vector<std::pair<Input, Input>> entries) {
  Input i;
  i.kind = Kind::Dict;
  i.entries = std::move(entries);
  return i;
}

Input Input::object(TypeRef type, uint64_t id, std::vector<std::pair<std::string, Input>> attrs) {
  Input i;
  i.kind = Kind::Object;
  i.type = std::move(type);
  i.id = id;
  i.attrs = std::move(attrs);
  return i;
}

TensorInput contiguousTensor(DType dtype, std::vector<int64_t> sizes, bool requiresGrad) {
  TensorInput t;
  t.dtype = dtype;
  t.requiresGrad = requiresGrad;
  t.strides.assign(sizes.size(), 1);
  for (size_t k = sizes.size(); k-- > 1;) t.strides[k - 1] = t.strides[k] * std::max<int64_t>(sizes[k], 1);
  t.sizes = std::move(sizes);
  return t;
}

std::optional<std::vector<bool>> broadcastLayout(const TensorInput& t) {
  std::vector<bool> broadcast(t.sizes.size(), false);
  std::vector<int64_t> rest, restStrides;
  for (size_t k = 0; k < t.sizes.size(); ++k) {
    broadcast[k] = t.strides[k] == 0 && t.sizes[k] >= 2;
    if (!broadcast[k]) rest.push_back(t.sizes[k]), restStrides.push_back(t.strides[k]);
  }
  if (contiguousTensor(t.dtype, rest).strides != restStrides) return std::nullopt;
  return broadcast;
}

CallInput CallInput::of(std::vector<Input> args) {
  CallInput call;
  call.args = std::move(args);
  call.state = defaultGlobalState();
  return call;
}

GlobalState defaultGlobalState() {
  GlobalState s;
  s.gradEnabled = true;
  s.defaultDtype = DType::Float32;
  s.deterministic = false;
  s.autocast = {{ir::DeviceType::Cpu, false, DType::BFloat16}, {ir::DeviceType::Cuda, false, DType::Float16}};
  return s;
}

std::optional<Constant> constantOf(const Input& input) {
  switch (input.kind) {
  case Input::Kind::None: return Constant{};
  case Input::Kind::Bool: return Constant{input.boolean};
  case Input::Kind::Int: return Constant{input.integer};
  case Input::Kind::Float: return Constant{input.number};
  case Input::Kind::Str: return Constant{input.str};
  case Input::Kind::Tuple: {
    Constant::Tuple items;
    for (const Input& i : input.items) {
      auto c = constantOf(i);
      if (!c) return std::nullopt;
      items.push_back(std::move(*c));
    }
    return Constant{std::move(items)};
  }
  default: return std::nullopt;
  }
}

namespace {

const Input* attrOf(const std::vector<std::pair<std::string, Input>>& attrs, const std::string& name) {
  for (const auto& [n, v] : attrs)
    if (n == name) return &v;
  return nullptr;
}

bool sameAutocast(const std::vector<Autocast>& expected, const std::vector<Autocast>& got) {
  for (const Autocast& e : expected) {
    auto it = std::find_if(got.begin(), got.end(), [&](const Autocast& g) { return g.device == e.device; });
    if (it == got.end() || !e.holds(*it)) return false;
  }
  return true;
}

bool matches(const StaticInt& expected, int64_t got) { return !expected || *expected == got; }

} // namespace

bool InputFrontend::callShape(const CallShape& shape) {
  if (call_.args.size() != shape.positional || call_.kwargs.size() != shape.keywords.size()) return false;
  for (const auto& [name, value] : call_.kwargs)
    if (!std::binary_search(shape.keywords.begin(), shape.keywords.end(), name)) return false;
  return true;
}

bool InputFrontend::globals(const GlobalState& e) {
  const GlobalState& g = call_.state;
  return (!e.gradEnabled || e.gradEnabled == g.gradEnabled) && (!e.defaultDtype || e.defaultDtype == g.defaultDtype) &&
         (!e.deterministic || e.deterministic == g.deterministic) && sameAutocast(e.autocast, g.autocast);
}

bool InputFrontend::load(const Step& step, Value parent, Value& out) {
  out = Value{};
  const Input* p = parent.input;
  switch (step.kind) {
  case StepKind::Arg:
    if (step.index < 0 || static_cast<size_t>(step.index) >= call_.args.size()) return false;
    out.input = &call_.args[static_cast<size_t>(step.index)];
    return true;
  case StepKind::Kwarg: return (out.input = attrOf(call_.kwargs, step.name)) != nullptr;
  case StepKind::Global: return (out.input = attrOf(call_.globals, step.name)) != nullptr;
  case StepKind::Closure:
    if (step.index < 0 || static_cast<size_t>(step.index) >= call_.closure.size()) return false;
    out.input = &call_.closure[static_cast<size_t>(step.index)];
    return true;
  case StepKind::Default:
    if (step.index < 0 || static_cast<size_t>(step.index) >= call_.defaults.size()) return false;
    out.input = &call_.defaults[static_cast<size_t>(step.index)];
    return true;
  case StepKind::KwDefault: return (out.input = attrOf(call_.kwDefaults, step.name)) != nullptr;
  case StepKind::Attr: return p && (out.input = attrOf(p->attrs, step.name)) != nullptr;
  case StepKind::Index: {
    if (!p || (p->kind != Input::Kind::List && p->kind != Input::Kind::Tuple)) return false;
    int64_t n = static_cast<int64_t>(p->items.size());
    int64_t at = step.index < 0 ? step.index + n : step.index;
    if (at < 0 || at >= n) return false;
    out.input = &p->items[static_cast<size_t>(at)];
    return true;
  }
  case StepKind::Key:
  case StepKind::IntKey:
    if (!p || p->kind != Input::Kind::Dict) return false;
    for (const auto& [k, v] : p->entries)
      if ((step.kind == StepKind::Key && k.kind == Input::Kind::Str && k.str == step.name) ||
          (step.kind == StepKind::IntKey && k.kind == Input::Kind::Int && k.integer == step.index)) {
        out.input = &v;
        return true;
      }
    return false;
  case StepKind::Size:
  case StepKind::Stride: {
    if (!p || p->kind != Input::Kind::Tensor) return false;
    const auto& dims = step.kind == StepKind::Size ? p->tensor.sizes : p->tensor.strides;
    if (step.index < 0 || static_cast<size_t>(step.index) >= dims.size()) return false;
    out.integer = dims[static_cast<size_t>(step.index)];
    return true;
  }
  case StepKind::Value: {
    if (!p || p->kind != Input::Kind::Tensor) return false;
    const auto& value = p->tensor.value;
    if (auto* i = std::get_if<int64_t>(&value)) out.integer = *i;
    else if (auto* d = std::get_if<double>(&value)) out.isFloat = true, out.number = *d;
    else return false; // not a described 0-d CPU tensor
    return true;
  }
  case StepKind::HasAttr: return false; // a description lists some attributes, not all: an absence is not there
  case StepKind::Module: return false;  // the process's modules are not part of a described call
  case StepKind::ClassAttr: return false; // nor are classes' dicts
  }
  return false;
}

bool InputFrontend::check(Value v, const Check& c) {
  if (!v.input) { // a number read from a tensor
    switch (c.kind) {
    case Check::Kind::Type: return c.type == type(v);
    case Check::Kind::Equals: return c.equals == (v.isFloat ? Constant{v.number} : Constant{v.integer});
    default: return false;
    }
  }
  const Input& in = *v.input;
  switch (c.kind) {
  case Check::Kind::Type: return in.typeRef() == c.type;
  case Check::Kind::Identity: return c.identity.scope == call_.scope && in.id == c.identity.id && in.id != 0;
  case Check::Kind::Equals: {
    auto constant = constantOf(in);
    return constant && *constant == c.equals;
  }
  case Check::Kind::Length: {
    auto len = length(v);
    return len && *len == c.length;
  }
  case Check::Kind::DictKeys: {
    auto got = keys(v);
    if (!got || got->size() != c.dictKeys.keys.size()) return false;
    if (c.dictKeys.ordered) return std::equal(got->begin(), got->end(), c.dictKeys.keys.begin());
    for (const Constant& k : c.dictKeys.keys)
      if (std::find(got->begin(), got->end(), k) == got->end()) return false;
    return true;
  }
  case Check::Kind::Tensor: {
    if (in.kind != Input::Kind::Tensor) return false;
    const TensorCheck& e = c.tensor;
    const TensorInput& t = in.tensor;
    if (t.dtype != e.dtype || t.device != e.device || t.requiresGrad != e.requiresGrad ||
        t.sizes.size() != e.sizes.size() || t.strides.size() != e.strides.size() ||
        !matches(e.storageOffset, t.storageOffset))
      return false;
    for (size_t k = 0; k < e.sizes.size(); ++k)
      if (!matches(e.sizes[k], t.sizes[k]) || !matches(e.strides[k], t.strides[k])) return false;
    return true;
  }
  }
  return false;
}

bool InputFrontend::integer(Value v, int64_t& out) {
  if (!v.input) {
    out = v.integer;
    return !v.isFloat;
  }
  if (v.input->kind != Input::Kind::Int) return false;
  out = v.input->integer;
  return true;
}

std::string InputFrontend::callText() {
  std::string out = std::to_string(call_.args.size()) + " positional, keywords [";
  std::vector<std::string> names;
  for (const auto& [name, value] : call_.kwargs) names.push_back(name);
  std::sort(names.begin(), names.end());
  for (size_t k = 0; k < names.size(); ++k) out += (k ? ", " : "") + names[k];
  return out + "]";
}

TypeRef InputFrontend::type(Value v) {
  return v.input ? v.input->typeRef() : TypeRef{"builtins", v.isFloat ? "float" : "int"};
}

std::string InputFrontend::repr(Value v) {
  if (!v.input) return v.isFloat ? Constant{v.number}.text() : std::to_string(v.integer);
  if (auto c = constantOf(*v.input)) return c->text();
  if (v.input->kind == Input::Kind::Tensor) return "a tensor";
  return "a " + type(v).text();
}

std::optional<uint64_t> InputFrontend::length(Value v) {
  if (!v.input) return std::nullopt;
  switch (v.input->kind) {
  case Input::Kind::List:
  case Input::Kind::Tuple: return v.input->items.size();
  case Input::Kind::Dict: return v.input->entries.size();
  case Input::Kind::Str: return v.input->str.size();
  default: return std::nullopt;
  }
}

std::optional<std::vector<Constant>> InputFrontend::keys(Value v) {
  if (!v.input || v.input->kind != Input::Kind::Dict) return std::nullopt;
  std::vector<Constant> out;
  for (const auto& [k, value] : v.input->entries) {
    auto c = constantOf(k);
    if (!c) return std::nullopt; // a key that is no constant matches no guard
    out.push_back(std::move(*c));
  }
  return out;
}

std::optional<TensorInput> InputFrontend::tensor(Value v) {
  if (!v.input || v.input->kind != Input::Kind::Tensor) return std::nullopt;
  return v.input->tensor;
}

std::optional<std::string> firstFailure(const Program& program, const CallInput& call) {
  InputFrontend frontend(call);
  Scratch<InputFrontend::Value> scratch;
  std::string reason;
  if (run(program, frontend, scratch, nullptr, &reason)) return std::nullopt;
  return reason;
}

} // namespace kiln::guards
