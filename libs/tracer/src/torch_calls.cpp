// Torch callables, Tensor methods and operators as graph ops.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include "kiln/common/error.h"
#include "kiln/ir/op_registry.h"
#include "kiln/shapes/decide.h"
#include "kiln/sym/eval.h"
#include "kiln/sym/print.h"
#include "kiln/sym/range.h"
#include "kiln/sym/wire.h"

#include <capnp/message.h>
#include "composite.h"
#include "losses.h"
#include "convolution.h"
#include "modules.h"
#include "tracer_state.h"

namespace kiln::tracer {

void unsupported(const std::string& reason) { throw Unsupported{reason}; }

std::optional<Var> kwarg(const Kwargs& kwargs, const std::string& name) {
  for (const auto& [n, v] : kwargs)
    if (n == name) return v;
  return std::nullopt;
}

Params bindParams(const std::string& what, const std::vector<Var>& args, const Kwargs& kwargs,
                  const std::vector<std::string>& names, size_t keywordOnly) {
  Params p;
  if (args.size() > std::min(names.size(), keywordOnly))
    unsupported(what + "() with " + std::to_string(args.size()) + " positional arguments");
  for (size_t k = 0; k < args.size(); ++k) p.given[names[k]] = args[k];
  for (const auto& [key, value] : kwargs) {
    if (std::find(names.begin(), names.end(), key) == names.end()) unsupported(what + "() with the keyword " + key);
    if (!p.given.emplace(key, value).second) unsupported(what + "() given '" + key + "' twice");
  }
  return p;
}

bool boolArg(const std::string& what, const std::optional<Var>& v, bool otherwise) {
  if (!v) return otherwise;
  if ((*v)->kind != Kind::Bool || !(*v)->symbolic.isNull()) unsupported(what + ": expected a bool, got a " + kindName((*v)->kind));
  return (*v)->boolean;
}

Var tensorArg(const std::string& what, const std::optional<Var>& v) {
  if (!v || (*v)->kind != Kind::Tensor) unsupported(what + ": expected a tensor");
  return *v;
}

double numberArg(TraceState& s, const std::string& what, const std::optional<Var>& v, double otherwise) {
  if (!v) return otherwise;
  if ((*v)->kind != Kind::Int && (*v)->kind != Kind::Float) unsupported(what + ": expected a number");
  return s.number(*v);
}

int64_t intArg(TraceState& s, const std::string& what, const Var& v) {
  if (v->kind != Kind::Int) unsupported(what + ": expected an int, got a " + kindName(v->kind));
  return s.concrete(v);
}

namespace {

// Runtime asserts one op call may defer before the trace gives up on it.
constexpr int kMaxAssertsPerOp = 4;

bool mentionsUnbacked(sym::Expr e) {
  for (sym::Expr s : sym::freeSymbols(e))
    if (!e.table().isBacked(s)) return true;
  return false;
}

} // namespace

Var TraceState::tensor(ir::ValueId id) {
  Var v = make(Kind::Tensor);
  v->value = id;
  return v;
}

ir::TensorMeta TraceState::meta(const Var& v) const { return graph.meta(v->value); }

Var TraceState::op(const std::string& name, std::vector<ir::ValueId> inputs, std::vector<ir::Attr> attrs) {
  const ir::OpInfo* info = ir::findOp(name);
  bool mutates = info && info->mutates;
  for (ir::ValueId& in : inputs) {
    if (!graph.value(in).isTensor() || !graph.meta(in).requiresGrad || name == "detach") continue;
    if (gradEnabled) {
      requiresGrad = true;
    } else if (mutates) {
      noGradOverGrad = true; // a write into a tensor that requires grad (an optimizer's step)
    } else {
      // Under no_grad, torch records nothing: the op reads its inputs as detached.
      in = graph.call("detach", {in});
    }
  }
  applyAutocast(graph, autocast, name, inputs, attrs);
  ir::ValueId id = 0;
  for (int asserts = 0;; ++asserts) {
    try {
      id = graph.call(name, inputs, attrs);
      break;
    } catch (const ir::Undecided& e) {
      // What an op needs of unbacked sizes is checked at run time, as torch's meta
      // functions torch._check it; of backed sizes, it is guarded with their hints
      // (as Dynamo guards `s0*s1 == s2` for x.reshape(-1) + y): either way a fact
      // of the trace from here on.
      sym::Expr condition = e.condition();
      if (asserts < kMaxAssertsPerOp) {
        if (mentionsUnbacked(condition) ? deferAssert(condition, name) : decide(condition)) {
          table.assume(condition);
          continue;
        }
      }
      unsupported(name + ": " + e.message());
    } catch (const Error& e) {
      // The user's code would fail in eager too (or kiln cannot say it would not):
      // run it eagerly, where torch raises its own error.
      unsupported(name + ": " + e.message());
    }
  }
  const ir::Value& value = graph.value(id);
  if (value.isTensor()) return tensor(id);
  if (value.isSymInt()) return integer(value.symInt());
  std::vector<Var> items;
  size_t count = value.tuple().size(); // `value` moves as getitem nodes are added
  for (size_t k = 0; k < count; ++k)
    items.push_back(tensor(graph.call("getitem", {id}, {{"index", static_cast<int64_t>(k)}})));
  return sequence(Kind::Tuple, std::move(items));
}

Var TraceState::unbackedOp(const std::string& name, std::vector<ir::ValueId> inputs) {
  return op(name, std::move(inputs), {{"symbol", table.createUnbacked()}});
}

bool TraceState::deferAssert(sym::Expr condition, const std::string& op) {
  switch (shapes::decide(condition, table.facts()).answer) {
  case shapes::Answer::True: return true;
  case shapes::Answer::False: return false;
  case shapes::Answer::Unknown: break;
  }
  graph.call("_assert_scalar", {}, {{"condition", condition}, {"message", op + "'s arguments"}});
  return true;
}

bool TraceState::decide(sym::Expr relation) {
  if (auto b = relation.asBoolean()) return *b;
  if (auto known = sym::staticallyKnown(relation)) return *known;
  if (mentionsUnbacked(relation)) {
    shapes::Decision d = shapes::decide(relation, table.facts());
    if (d.answer != shapes::Answer::Unknown) return d.answer == shapes::Answer::True;
    unsupported("a branch on " + sym::toString(relation) + ", which depends on data (" + d.how + ")");
  }
  bool value = sym::evaluateWithHints(relation) != 0;
  sym::Expr taken = value ? relation : sym::logicalNot(relation);
  // The guard set has its own symbols of the same names.
  capnp::MallocMessageBuilder message;
  auto wire = message.initRoot<schema::SymExpr>();
  sym::toWire(taken, wire);
  sym::Expr inGuards = sym::fromWire(wire.asReader(), guards.table());
  guards.shapeGuard(inGuards);
  return value;
}

int64_t TraceState::concrete(const Var& v) {
  if (v->kind == Kind::Bool && v->symbolic.isNull()) return v->boolean;
  if (v->kind != Kind::Int && v->kind != Kind::Bool) unsupported("an int was expected, got a " + kindName(v->kind));
  if (auto c = v->symbolic.asInteger()) return *c;
  if (auto b = v->symbolic.asBoolean()) return *b;
  if (mentionsUnbacked(v->symbolic))
    unsupported("the value of " + sym::toString(v->symbolic) + ", which depends on data, where Python needs a number");
  int64_t value = sym::evaluateWithHints(v->symbolic);
  decide(sym::eq(v->symbolic, value));
  return value;
}

namespace {

std::string deviceText(ir::Device d) { return ir::toString(d); }

// An attribute of the kind the op's schema wants, from a variable.
ir::AttrValue attrOf(TraceState& s, const std::string& op, const ir::ArgSpec& spec, const Var& v) {
  auto wrong = [&](const std::string& what) -> ir::AttrValue {
    unsupported(op + ": argument '" + spec.name + "': " + what + ", got a " + kindName(v->kind));
  };
  if (v->kind == Kind::None) return std::monostate{};
  switch (spec.kind) {
  // torch's argument parser takes no bool for an int and no int for a bool.
  case ir::ArgKind::Int:
    if (v->kind == Kind::Int) return s.concrete(v);
    return wrong("expected an int");
  case ir::ArgKind::Float:
    if (v->kind == Kind::Float) return s.number(v);
    if (v->kind == Kind::Int || v->kind == Kind::Bool) return static_cast<double>(s.concrete(v));
    return wrong("expected a float");
  case ir::ArgKind::Bool:
    if (v->kind == Kind::Bool && v->symbolic.isNull()) return v->boolean;
    return wrong("expected a bool");
  case ir::ArgKind::DType:
    if (v->kind == Kind::DType) return v->dtype;
    return wrong("expected a dtype");
  case ir::ArgKind::String:
    if (v->kind == Kind::Str) return v->name;
    if (v->kind == Kind::Device) return deviceText(v->device);
    return wrong("expected a str");
  case ir::ArgKind::Scalar:
    if (v->kind == Kind::Float) return s.number(v);
    if (v->kind == Kind::Bool && v->symbolic.isNull()) return v->boolean;
    if (v->kind == Kind::Int) {
      if (auto c = v->symbolic.asInteger()) return *c;
      return v->symbolic;
    }
    return wrong("expected a number");
  case ir::ArgKind::IntList: {
    if (v->kind == Kind::Int) return std::vector<int64_t>{s.concrete(v)};
    if (v->kind != Kind::Tuple && v->kind != Kind::List) return wrong("expected ints");
    std::vector<int64_t> out;
    for (const Var& item : v->items) {
      if (item->kind != Kind::Int) return wrong("expected ints");
      out.push_back(s.concrete(item));
    }
    return out;
  }
  case ir::ArgKind::SymIntList: {
    if (v->kind == Kind::Int) return std::vector<sym::Expr>{v->symbolic};
    if (v->kind != Kind::Tuple && v->kind != Kind::List) return wrong("expected sizes");
    std::vector<sym::Expr> out;
    for (const Var& item : v->items) {
      if (item->kind != Kind::Int) unsupported(op + ": argument '" + spec.name + "': a size that is a " + kindName(item->kind));
      out.push_back(item->symbolic);
    }
    return out;
  }
  default: return wrong("unexpected");
  }
}

// Ops whose number arguments must be constants (the others take a 0-d tensor there).
bool numbersOnly(const std::string& op) {
  return op == "full" || op == "arange" || op == "sym_int" || op == "narrow" || op == "as_strided" || op == "split";
}

bool isInputKind(ir::ArgKind k) {
  return k == ir::ArgKind::Tensor || k == ir::ArgKind::TensorList || k == ir::ArgKind::Tuple || k == ir::ArgKind::SymInt;
}

} // namespace

Var TraceState::callOp(const std::string& name, std::vector<Var> args, const Kwargs& kwargs) {
  if ((name == "add" || name == "sub" || name == "add_" || name == "sub_") && args.size() == 2) {
    // A traced float alpha (p.add_(g, alpha=-lr), as torch.optim writes it) scales
    // `other` in the graph rather than becoming a constant; floating operands only,
    // as torch refuses a float alpha for integral ones.
    auto alpha = std::find_if(kwargs.begin(), kwargs.end(), [](const auto& kw) { return kw.first == "alpha"; });
    if (alpha != kwargs.end() && alpha->second->kind == Kind::Float && alpha->second->traced &&
        args[1]->kind == Kind::Tensor && ir::isFloating(meta(args[1]).dtype)) {
      Kwargs rest(kwargs.begin(), alpha);
      rest.insert(rest.end(), std::next(alpha), kwargs.end());
      return callOp(name, {args[0], callOp("mul", {args[1], alpha->second}, {})}, rest);
    }
  }
  const ir::OpInfo* info = ir::findOp(name);
  if (!info) unsupported("no graph op " + name);
  std::vector<ir::ValueId> inputs;
  std::vector<ir::Attr> attrs;
  std::set<std::string> used;
  size_t next = 0;
  for (size_t k = 0; k < info->args.size(); ++k) {
    const ir::ArgSpec& spec = info->args[k];
    Var arg;
    if (next < args.size() && !spec.keywordOnly) {
      arg = args[next++];
    } else {
      for (const auto& [n, v] : kwargs)
        if (n == spec.name || (k == 0 && (n == "input" || n == "self"))) {
          arg = v;
          used.insert(n);
        }
    }
    bool mayBeInput = spec.kind == ir::ArgKind::Tensor || spec.kind == ir::ArgKind::Scalar;
    if ((!arg || arg->kind == Kind::None) && spec.optional && mayBeInput) {
      attrs.push_back({spec.name, std::monostate{}}); // absent: later inputs bind past it
      continue;
    }
    if (!arg) continue;
    if (spec.kind == ir::ArgKind::TensorList) {
      if (arg->kind != Kind::Tuple && arg->kind != Kind::List) unsupported(name + ": '" + spec.name + "' is not a list of tensors");
      for (const Var& t : arg->items) {
        if (t->kind != Kind::Tensor) unsupported(name + ": '" + spec.name + "' holds a " + kindName(t->kind));
        inputs.push_back(t->value);
      }
    } else if (arg->kind == Kind::Tensor) {
      if (!isInputKind(spec.kind) && spec.kind != ir::ArgKind::Scalar)
        unsupported(name + ": argument '" + spec.name + "' is a tensor");
      inputs.push_back(arg->value);
    } else if (arg->kind == Kind::Float && arg->traced && spec.kind == ir::ArgKind::Scalar && !numbersOnly(name)) {
      std::vector<Var> operands = args;
      for (const auto& kw : kwargs) operands.push_back(kw.second);
      inputs.push_back(floatOperand(arg, operands));
    } else if (isInputKind(spec.kind)) {
      if (arg->kind != Kind::None) unsupported(name + ": argument '" + spec.name + "' is a " + kindName(arg->kind) + ", not a tensor");
    } else {
      attrs.push_back({spec.name, attrOf(*this, name, spec, arg)});
    }
  }
  if (next < args.size()) unsupported(name + ": too many arguments");
  for (const auto& [n, v] : kwargs)
    if (!used.count(n)) unsupported(name + ": no argument named '" + n + "'");
  return op(name, std::move(inputs), std::move(attrs));
}

namespace {

// torch.* and torch.nn.functional.* functions whose IR op has torch's name and argument order.
const std::set<std::string>& sameNamed() {
  static const std::set<std::string> ops = {
      "abs", "add", "sub", "mul", "div", "neg", "exp", "exp2", "expm1", "log", "log1p", "sqrt", "rsqrt",
      "sin", "cos", "tan", "tanh", "sigmoid", "relu", "gelu", "silu", "erf", "floor", "ceil", "round", "trunc",
      "sign", "reciprocal", "pow", "remainder", "fmod", "maximum", "minimum", "clamp", "where", "eq", "ne", "lt",
      "le", "gt", "ge", "logical_and", "logical_or", "logical_not", "bitwise_and", "bitwise_or", "bitwise_xor",
      "isnan", "isinf", "matmul", "mm", "bmm", "addmm", "linear", "layer_norm", "rms_norm", "softmax",
      "log_softmax", "cross_entropy", "scaled_dot_product_attention", "embedding", "cat", "stack", "sum", "mean",
      "prod", "amax", "amin", "argmax", "argmin", "all", "any", "var", "std", "transpose", "permute", "reshape",
      "unsqueeze", "squeeze", "flatten", "unflatten", "narrow", "select", "chunk", "split", "unbind", "gather",
      "index_select", "scatter_add", "clone", "zeros_like", "ones_like", "full_like", "empty_like", "full",
      "arange", "detach"};
  return ops;
}

const std::map<std::string, std::string>& renamed() {
  static const std::map<std::string, std::string> ops = {
      {"concat", "cat"}, {"concatenate", "cat"}, {"multiply", "mul"}, {"subtract", "sub"}, {"divide", "div"},
      {"true_divide", "div"}, {"negative", "neg"}, {"clip", "clamp"}, {"absolute", "abs"}, {"greater", "gt"},
      {"less", "lt"}, {"greater_equal", "ge"}, {"less_equal", "le"}, {"not_equal", "ne"}, {"arccos", "acos"},
      {"swapaxes", "transpose"}, {"swapdims", "transpose"}};
  return ops;
}

std::string shortName(const std::string& name) {
  for (const char* prefix : {"torch.nn.functional.", "torch.special.", "torch.", "Tensor."})
    if (name.rfind(prefix, 0) == 0) return name.substr(std::string(prefix).size());
  return {};
}

bool isFunctional(const std::string& name) { return name.rfind("torch.nn.functional.", 0) == 0; }

// Sizes given as varargs (`x.view(2, -1)`, `torch.zeros(2, 3)`) or as one sequence.
Var sizesOf(std::vector<Var>& args, size_t from) {
  if (args.size() == from + 1 && (args[from]->kind == Kind::Tuple || args[from]->kind == Kind::List)) return args[from];
  std::vector<Var> items(args.begin() + static_cast<std::ptrdiff_t>(from), args.end());
  return sequence(Kind::Tuple, std::move(items));
}

Kwargs without(const Kwargs& kwargs, std::initializer_list<const char*> names) {
  Kwargs out;
  for (const auto& [n, v] : kwargs)
    if (std::none_of(names.begin(), names.end(), [&](const char* x) { return n == x; })) out.emplace_back(n, v);
  return out;
}

std::optional<DType> dtypeMethod(const std::string& m) {
  static const std::map<std::string, DType> methods = {
      {"float", DType::Float32}, {"double", DType::Float64}, {"half", DType::Float16}, {"bfloat16", DType::BFloat16},
      {"int", DType::Int32},     {"long", DType::Int64},     {"short", DType::Int16},  {"bool", DType::Bool},
      {"byte", DType::UInt8},    {"char", DType::Int8}};
  auto it = methods.find(m);
  if (it == methods.end()) return std::nullopt;
  return it->second;
}

Var toDType(TraceState& s, const Var& t, DType dtype) {
  if (s.meta(t).dtype == dtype) return t;
  return s.op("to_dtype", {t->value}, {{"dtype", dtype}});
}

// Refuses a device other than the tensor's: a graph runs on one device.
void requireSameDevice(TraceState& s, const Var& t, ir::Device to, const std::string& what) {
  ir::Device at = s.meta(t).device;
  if (to.type != at.type || (to.index >= 0 && at.index >= 0 && to.index != at.index))
    unsupported(what + " moves a tensor from " + deviceText(at) + " to " + deviceText(to));
}

// A device given as a torch.device or its name ('cpu', 'cuda', 'cuda:1'); nullopt for another kind.
std::optional<ir::Device> deviceArg(const Var& v) {
  if (v->kind == Kind::Device) return v->device;
  if (v->kind != Kind::Str) return std::nullopt;
  std::string name = v->name;
  int16_t index = -1;
  if (auto colon = name.find(':'); colon != std::string::npos) {
    int given = -1;
    try {
      given = std::stoi(name.substr(colon + 1));
    } catch (const std::exception&) {
    }
    if (given < 0 || given > INT16_MAX) unsupported("the device '" + v->name + "'");
    index = static_cast<int16_t>(given);
    name = name.substr(0, colon);
  }
  if (name == "cpu") return ir::Device{ir::DeviceType::Cpu, index};
  if (name == "cuda") return ir::Device{ir::DeviceType::Cuda, index};
  unsupported("the device '" + v->name + "'");
}

// Tensor.to(dtype | device | other, [dtype], non_blocking, copy=, memory_format=), as torch
// binds it: each argument is read or refused (copy=True, a memory format, a move between
// devices, an unknown keyword); to() of nothing new is the tensor itself.
Var tensorTo(TraceState& s, const std::vector<Var>& args, const Kwargs& kwargs) {
  const Var& self = args[0];
  std::optional<DType> dtype;
  auto setDType = [&](DType d) {
    if (dtype && *dtype != d) unsupported("Tensor.to() given two dtypes");
    dtype = d;
  };
  if (args.size() > 3) unsupported("Tensor.to() with " + std::to_string(args.size() - 1) + " positional arguments");
  for (size_t k = 1; k < args.size(); ++k) {
    const Var& a = args[k];
    if (a->kind == Kind::DType) {
      setDType(a->dtype);
    } else if (a->kind == Kind::Tensor && k == 1) { // to(other): other's dtype and device
      requireSameDevice(s, self, s.meta(a).device, "Tensor.to(other)");
      setDType(s.meta(a).dtype);
    } else if (auto device = deviceArg(a); device && k == 1) {
      requireSameDevice(s, self, *device, "Tensor.to()");
    } else if (a->kind == Kind::Bool && k == 2) { // to(dtype or device, non_blocking): no copy to wait for
      continue;
    } else {
      unsupported("Tensor.to() with a " + kindName(a->kind) + " at position " + std::to_string(k));
    }
  }
  for (const auto& [key, value] : kwargs) {
    if (key == "dtype" && value->kind == Kind::DType) {
      setDType(value->dtype);
    } else if (key == "dtype" && value->kind == Kind::None) {
      continue;
    } else if (key == "device" && value->kind != Kind::None) {
      std::optional<ir::Device> device = deviceArg(value);
      if (!device) unsupported("Tensor.to(device=) of a " + kindName(value->kind));
      requireSameDevice(s, self, *device, "Tensor.to()");
    } else if (key == "device" || key == "non_blocking") { // no copy between devices: nothing to wait for
      continue;
    } else if (key == "copy") {
      if (value->kind != Kind::Bool || s.concrete(value) != 0) unsupported("Tensor.to(copy=True)");
    } else {
      unsupported("Tensor.to() with the keyword " + key);
    }
  }
  return dtype ? toDType(s, self, *dtype) : self;
}

// torch's tensor type names ('torch.FloatTensor', 'torch.cuda.HalfTensor') by dtype.
const std::map<DType, std::string>& tensorTypeNames() {
  static const std::map<DType, std::string> names = {
      {DType::Float32, "FloatTensor"}, {DType::Float64, "DoubleTensor"}, {DType::Float16, "HalfTensor"},
      {DType::BFloat16, "BFloat16Tensor"}, {DType::UInt8, "ByteTensor"}, {DType::Int8, "CharTensor"},
      {DType::Int16, "ShortTensor"}, {DType::Int32, "IntTensor"}, {DType::Int64, "LongTensor"},
      {DType::Bool, "BoolTensor"}};
  return names;
}

// Tensor.type(): the type name; Tensor.type(dtype or name, non_blocking=): a cast, refused
// where the name is another device's.
Var tensorType(TraceState& s, const std::vector<Var>& args, const Kwargs& kwargs) {
  const ir::TensorMeta m = s.meta(args[0]);
  for (const auto& [key, value] : kwargs)
    if (key != "non_blocking" && key != "dtype") unsupported("Tensor.type() with the keyword " + key);
  std::optional<Var> to = args.size() > 1 ? std::optional<Var>(args[1]) : kwarg(kwargs, "dtype");
  if (args.size() > 2 || (args.size() > 1 && kwarg(kwargs, "dtype")))
    unsupported("Tensor.type() with more than a type");
  bool cuda = m.device.type == ir::DeviceType::Cuda;
  if (!to || (*to)->kind == Kind::None) {
    auto it = tensorTypeNames().find(m.dtype);
    if (it == tensorTypeNames().end()) unsupported("Tensor.type() of a " + std::string(ir::name(m.dtype)) + " tensor");
    return string(std::string(cuda ? "torch.cuda." : "torch.") + it->second);
  }
  if ((*to)->kind == Kind::DType) return toDType(s, args[0], (*to)->dtype);
  if ((*to)->kind != Kind::Str) unsupported("Tensor.type() of a " + kindName((*to)->kind));
  for (const auto& [dtype, type] : tensorTypeNames()) {
    if ((*to)->name == "torch." + type || (*to)->name == "torch.cuda." + type) {
      if (((*to)->name.rfind("torch.cuda.", 0) == 0) != cuda)
        unsupported("Tensor.type('" + (*to)->name + "') moves the tensor");
      return toDType(s, args[0], dtype);
    }
  }
  unsupported("Tensor.type('" + (*to)->name + "')");
}

// var/std in torch's three forms: (input, dim=None, *, correction=1, keepdim=False),
// (input, dim, unbiased, keepdim=False) and (input, unbiased).
Var spread(TraceState& s, const std::string& name, const std::string& op, const std::vector<Var>& args,
           const Kwargs& kwargs) {
  bool unbiasedOnly = args.size() > 1 && args[1]->kind == Kind::Bool;
  Params p = unbiasedOnly ? bindParams(name, args, kwargs, {"self", "unbiased"})
                          : bindParams(name, args, kwargs, {"self", "dim", "unbiased", "keepdim", "correction"}, 4);
  if (p["unbiased"] && p["correction"]) unsupported(name + "() with both unbiased and correction");
  Kwargs bound;
  if (auto dim = p["dim"]; dim && (*dim)->kind != Kind::None) bound.emplace_back("dim", *dim);
  bound.emplace_back("keepdim", boolean(boolArg(name + "'s keepdim", p["keepdim"], false)));
  if (auto correction = p["correction"]; correction && (*correction)->kind != Kind::None)
    bound.emplace_back("correction", *correction);
  else
    bound.emplace_back("correction", integer(s.table.integer(boolArg(name + "'s unbiased", p["unbiased"], true) ? 1 : 0)));
  return s.callOp(op, {*p["self"]}, bound);
}

// max/min: of all elements, along a dim (values and indices), or elementwise of two tensors.
Var extreme(TraceState& s, bool max, std::vector<Var> args, const Kwargs& kwargs) {
  std::string what = max ? "max" : "min";
  bool elementwise = (args.size() > 1 && args[1]->kind == Kind::Tensor) || kwarg(kwargs, "other");
  Params p = elementwise ? bindParams(what, args, kwargs, {"self", "other"})
                         : bindParams(what, args, kwargs, {"self", "dim", "keepdim"});
  Var self = *p["self"];
  if (elementwise) {
    if (self->kind != Kind::Tensor || (*p["other"])->kind != Kind::Tensor) unsupported(what + " of a tensor and a number");
    return s.op(max ? "maximum" : "minimum", {self->value, (*p["other"])->value});
  }
  std::optional<Var> dim = p["dim"];
  if (!dim) {
    if (p["keepdim"]) unsupported(what + "(keepdim=) without a dim");
    return s.op(max ? "amax" : "amin", {self->value});
  }
  bool keepdim = boolArg(what + "'s keepdim", p["keepdim"], false);
  int64_t d = intArg(s, what + "'s dim", *dim);
  Var values = s.op(max ? "amax" : "amin", {self->value}, {{"dim", std::vector<int64_t>{d}}, {"keepdim", keepdim}});
  Var indices = s.op(max ? "argmax" : "argmin", {self->value}, {{"dim", d}, {"keepdim", keepdim}});
  Var result = sequence(Kind::Tuple, {values, indices});
  result->type = {"torch.return_types", max ? "max" : "min"}; // (values, indices), named
  return result;
}

// A number written into a tensor of `dtype` (masked_fill, setitem): torch casts it to
// the tensor's dtype, where kiln's `where` would promote; a float into a non-float
// tensor, or a number other than a bool into a bool one, is left to eager.
void refuseCastingWrite(TraceState& s, DType dtype, const Var& value, const std::string& what) {
  if ((value->kind == Kind::Float && !ir::isFloating(dtype)) ||
      ((value->kind == Kind::Int || value->kind == Kind::Float) && dtype == DType::Bool))
    unsupported(what + " of a " + kindName(value->kind) + " value into a tensor of " +
                std::string(ir::name(dtype)));
}

// Tensor methods and torch functions that are not a plain op of the same name.
// TODO(issue 45): each handler here binds its arguments as tensorTo does (or refuses what
// it does not read), checked by a test that walks every mapped callable.
std::optional<Var> special(TraceState& s, const std::string& name, const std::string& m, std::vector<Var>& args,
                           const Kwargs& kwargs) {
  bool method = name.rfind("Tensor.", 0) == 0;
  if (m == "view" || m == "reshape" || m == "expand") {
    if (!method) return std::nullopt;
    return s.callOp(m, {args[0], sizesOf(args, 1)}, without(kwargs, {"size"}));
  }
  if (m == "permute" && method) {
    if (!kwargs.empty()) return s.callOp("permute", args, kwargs); // permute(dims=...)
    return s.callOp("permute", {args[0], sizesOf(args, 1)}, {});
  }
  if ((m == "zeros" || m == "ones" || m == "empty") && !method)
    return s.callOp(m, {sizesOf(args, 0)}, without(kwargs, {"out", "layout", "pin_memory"}));
  if (m == "full" && !method && args.size() == 2) return s.callOp("full", args, without(kwargs, {"layout", "pin_memory"}));
  if ((m == "new_ones" || m == "new_zeros" || m == "new_full" || m == "new_empty") && method) {
    // x.new_*(size, [fill,] dtype=x.dtype, device=x.device): a fresh tensor, x's dtype and
    // device unless given (requires_grad=True refused).
    for (const auto& [key, value] : kwargs)
      if (key != "dtype" && key != "device" && key != "requires_grad" && key != "layout" && key != "pin_memory")
        return std::nullopt;
    if (auto grad = kwarg(kwargs, "requires_grad"); grad && !((*grad)->kind == Kind::Bool && (*grad)->symbolic.isNull() && !(*grad)->boolean))
      return std::nullopt;
    bool full = m == "new_full";
    if (args.size() < (full ? 3u : 2u) || (full && args.size() != 3)) return std::nullopt;
    Var fill = full ? args[2] : integer(s.table.integer(m == "new_ones" ? 1 : 0));
    std::vector<Var> rest(args.begin(), args.end() - (full ? 1 : 0));
    Var size = sizesOf(rest, 1);
    const ir::TensorMeta& meta = s.meta(args[0]);
    Var dtype = make(Kind::DType), device = make(Kind::Device);
    dtype->dtype = meta.dtype;
    device->device = meta.device;
    if (auto d = kwarg(kwargs, "dtype"); d && (*d)->kind != Kind::None) dtype = *d;
    if (auto d = kwarg(kwargs, "device"); d && (*d)->kind != Kind::None) device = *d;
    return s.callOp("full", {size, fill}, {{"dtype", dtype}, {"device", device}});
  }
  if (m == "t") {
    bindParams(name, args, kwargs, {"self"});
    size_t rank = s.meta(args[0]).dim();
    if (rank < 2) return args[0];
    return s.op("transpose", {args[0]->value}, {{"dim0", int64_t{0}}, {"dim1", int64_t{1}}});
  }
  if (m == "contiguous" && method) {
    bindParams(name, args, kwargs, {"self"}); // memory_format= refused: kiln keeps one layout
    return s.callOp("contiguous", {args[0]}, {});
  }
  if (m == "square" && args.size() == 1 && kwargs.empty()) // x * x keeps x's dtype, as torch's
    return s.op("mul", {args[0]->value, args[0]->value}, {});
  if (m == "max" || m == "min") return extreme(s, m == "max", args, kwargs);
  if (m == "var" || m == "std") return spread(s, name, m, args, kwargs);
  if (auto dtype = dtypeMethod(m); dtype && method && args.size() == 1 && kwargs.empty())
    return toDType(s, args[0], *dtype);
  if (m == "to" && method) return tensorTo(s, args, kwargs);
  if (m == "type" && method) return tensorType(s, args, kwargs);
  if ((m == "masked_fill" || m == "masked_fill_") && method && args.size() == 3) {
    bindParams(name, args, kwargs, {"self", "mask", "value"});
    // where(mask, value, x), written into x for masked_fill_ (the where's out= form).
    refuseCastingWrite(s, s.meta(args[0]).dtype, args[2], "masked_fill");
    if (m == "masked_fill_") return s.callOp("where_out", {args[1], args[2], args[0], args[0]}, {});
    return s.callOp("where", {args[1], args[2], args[0]}, {});
  }
  // Data-dependent results: an unbacked symbol each (issue 9).
  if (m == "item" && method && args.size() == 1) {
    if (auto backed = s.itemOfInput(args[0])) return *backed;
    if (ir::isFloating(s.meta(args[0]).dtype)) return s.itemFloat(args[0]);
    return s.unbackedOp("item", {args[0]->value});
  }
  if (m == "nonzero") {
    Params p = bindParams(name, args, kwargs, {"self", "as_tuple"}, 1);
    if (boolArg("nonzero's as_tuple", p["as_tuple"], false)) unsupported("nonzero(as_tuple=True)");
    return s.unbackedOp("nonzero", {args.at(0)->value});
  }
  if (m == "masked_select") {
    std::optional<Var> mask = args.size() > 1 ? std::optional<Var>(args[1]) : kwarg(kwargs, "mask");
    if (!mask || (*mask)->kind != Kind::Tensor) unsupported("masked_select without a mask tensor");
    return s.unbackedOp("masked_select", {args.at(0)->value, (*mask)->value});
  }
  if (m == "type_as" && method) {
    Params p = bindParams(name, args, kwargs, {"self", "other"});
    if (!p["other"] || (*p["other"])->kind != Kind::Tensor) unsupported("type_as of a non-tensor");
    return toDType(s, args[0], s.meta(*p["other"]).dtype);
  }
  // Questions about the traced value's type, answered from its meta (the entry is
  // guarded on the inputs' dtypes): nn.MultiheadAttention's forward asks them.
  if ((m == "is_floating_point" || m == "is_complex") && args.size() == 1 && kwargs.empty() &&
      args[0]->kind == Kind::Tensor)
    return boolean(m == "is_floating_point" &&
                   ir::isFloating(s.meta(args[0]).dtype)); // no complex dtypes
  if (m == "is_tensor" && !method && args.size() == 1 && kwargs.empty())
    return boolean(args[0]->kind == Kind::Tensor);
  if ((m == "relu" || m == "silu") && isFunctional(name)) { // (input, inplace=False): relu_ writes input
    Params p = bindParams(name, args, kwargs, {"input", "inplace"});
    return s.callOp(boolArg(name + "'s inplace", p["inplace"], false) ? m + "_" : m, {tensorArg(name, p["input"])}, {});
  }
  if ((m == "gelu" || m == "sigmoid" || m == "tanh") && isFunctional(name)) return s.callOp(m, args, kwargs);
  if ((m == "softmax" || m == "log_softmax") && isFunctional(name))
    return s.callOp(m, args, without(kwargs, {"_stacklevel"}));
  if (m == "scaled_dot_product_attention" && isFunctional(name)) {
    // With dropout: the attention op with a random stream of its own (modules.h).
    std::optional<Var> p = args.size() > 4 ? std::optional<Var>(args[4]) : kwarg(kwargs, "dropout_p");
    if (p && (*p)->kind != Kind::None && s.number(*p) > 0) return attentionWithDropout(s, args, kwargs);
    if (auto gqa = kwarg(kwargs, "enable_gqa"); gqa && args.size() >= 3) {
      Kwargs rest = without(kwargs, {"enable_gqa"});
      if (!boolArg(name + "'s enable_gqa", gqa, false)) return s.callOp(m, args, rest);
      std::vector<Var> grouped = args;
      std::tie(grouped[1], grouped[2]) = groupedKeyValue(s, args[0], args[1], args[2]);
      return s.callOp(m, grouped, rest);
    }
  }
  if (m == "dropout" || m == "dropout1d" || m == "dropout2d") {
    // dropout(input, p=0.5, training=True, inplace=False); torch.dropout(input, p, train).
    std::optional<Var> training = args.size() > 2 ? std::optional<Var>(args[2]) : kwarg(kwargs, "training");
    if (!training) training = kwarg(kwargs, "train");
    std::optional<Var> p = args.size() > 1 ? std::optional<Var>(args[1]) : kwarg(kwargs, "p");
    std::optional<Var> inplace = args.size() > 3 ? std::optional<Var>(args[3]) : kwarg(kwargs, "inplace");
    bool train = training ? s.concrete(*training) != 0 : true;
    double prob = p ? s.number(*p) : 0.5;
    if (!train || prob == 0) return args[0];
    if (m != "dropout") unsupported(m + " in training mode (one draw per channel)");
    if (inplace && s.concrete(*inplace)) unsupported("dropout(inplace=True) in training mode");
    if (args.empty() || args[0]->kind != Kind::Tensor) unsupported("dropout of a non-tensor");
    // A fresh random stream per call (the seed is an input the SDK draws), so
    // calls differ as eager's do and torch.manual_seed makes them repeat.
    auto [seed, offset] = s.randomStream(s.meta(args[0]).device);
    return s.op("dropout", {args[0]->value, seed, offset}, {{"p", prob}, {"train", true}});
  }
  if (m == "size" && method) {
    const ir::TensorMeta& meta = s.meta(args[0]);
    std::optional<Var> dim = args.size() > 1 ? std::optional<Var>(args[1]) : kwarg(kwargs, "dim");
    if (!dim) return tensorAttribute(s, args[0], "shape");
    int64_t d = s.concrete(*dim), rank = static_cast<int64_t>(meta.dim());
    if (d < -rank || d >= rank) unsupported("size(" + std::to_string(d) + ") of a " + std::to_string(rank) + "-d tensor");
    return integer(meta.sizes[static_cast<size_t>(d < 0 ? d + rank : d)]);
  }
  if ((m == "dim" || m == "ndimension") && method) return integer(s.table.integer(static_cast<int64_t>(s.meta(args[0]).dim())));
  if ((m == "numel" || m == "nelement") && method) return integer(ir::numel(s.meta(args[0]).sizes, s.table));
  if (m == "stride" && method) {
    const ir::TensorMeta& meta = s.meta(args[0]);
    if (args.size() > 1) return integer(meta.strides.at(static_cast<size_t>(s.concrete(args[1]))));
    std::vector<Var> items;
    for (sym::Expr e : meta.strides) items.push_back(integer(e));
    return sequence(Kind::Tuple, items);
  }
  if (m == "flatten" && !method && args.size() == 1 && kwargs.empty()) return s.callOp("flatten", args, {});
  if (m == "split" && args.size() > 1 && (args[1]->kind == Kind::List || args[1]->kind == Kind::Tuple))
    return s.callOp("split_with_sizes", args, kwargs); // split([2, 4]) is split_with_sizes
  if (m == "tril" || m == "triu") {
    // x where (col - row) <= k (tril) or >= k (triu), over the last two dims.
    const ir::TensorMeta& meta = s.meta(args[0]);
    if (meta.dim() < 2) unsupported(m + " of a tensor of fewer than 2 dims");
    std::optional<Var> diagonal = bindParams(name, args, kwargs, {"self", "diagonal"})["diagonal"];
    int64_t k = diagonal ? intArg(s, m + "'s diagonal", *diagonal) : 0;
    sym::Expr rowsN = meta.sizes[meta.dim() - 2], colsN = meta.sizes[meta.dim() - 1];
    // The positions on x's device; the zeros of x's dtype (a bool mask stays bool, as torch's).
    std::string device = ir::toString(meta.device);
    Var rows = s.op("arange", {}, {{"end", rowsN}, {"dtype", DType::Int64}, {"device", device}});
    Var cols = s.op("arange", {}, {{"end", colsN}, {"dtype", DType::Int64}, {"device", device}});
    Var offset = s.callOp("sub", {cols, s.op("unsqueeze", {rows->value}, {{"dim", int64_t{1}}})}, {});
    Var keep = s.callOp(m == "tril" ? "le" : "ge", {offset, integer(s.table.integer(k))}, {});
    Var zero = meta.dtype == DType::Bool ? boolean(false) : integer(s.table.integer(0));
    return s.callOp("where", {keep, args[0], zero}, {});
  }
  if (m == "embedding" && isFunctional(name)) return embedding(s, args, kwargs);
  return std::nullopt;
}

} // namespace

std::optional<Var> indexedWrite(TraceState& s, const std::string& name, const std::string& m,
                                const std::vector<Var>& args, const Kwargs& kwargs);

std::optional<Var> callTorch(TraceState& s, const std::string& name, std::vector<Var> args, const Kwargs& kwargs) {
  std::string m = shortName(name);
  if (m.empty()) return std::nullopt;
  if (auto r = callComposite(s, name, m, name.rfind("Tensor.", 0) == 0, args, kwargs)) return r;
  if (auto r = callLoss(s, name, m, name.rfind("Tensor.", 0) == 0, args, kwargs)) return r;
  if (auto r = callConvolution(s, name, m, args, kwargs)) return r;
  if (auto r = indexedWrite(s, name, m, args, kwargs)) return r;
  if (auto r = special(s, name, m, args, kwargs)) return r;
  if (auto it = renamed().find(m); it != renamed().end()) m = it->second;
  // In-place methods of the IR (x.add_(y), x.relu_()).
  if (name.rfind("Tensor.", 0) == 0 && m.size() > 1 && m.back() == '_' && ir::findOp(m)) return s.callOp(m, args, kwargs);
  // torch.arange(start, end[, step]): the IR's schema is (end, start, step).
  if (m == "arange" && args.size() >= 2) std::swap(args[0], args[1]);
  if (sameNamed().count(m)) {
    Kwargs kw = without(kwargs, {"out"});
    if (kwarg(kwargs, "out")) unsupported(name + "(out=...)");
    return s.callOp(m, args, kw);
  }
  return std::nullopt;
}

Var tensorBinary(TraceState& s, const std::string& op, const Var& a, const Var& b) {
  if (a->kind == Kind::Tensor) return s.callOp(op, {a, b}, {});
  // A number on the left (2 * x, 1 - x, 2 / x), as torch's reflected operators compute it.
  if (op == "add" || op == "mul" || op == "eq" || op == "ne" || op == "bitwise_and" || op == "bitwise_or" ||
      op == "bitwise_xor")
    return s.callOp(op, {b, a}, {});
  if (op == "sub") return s.callOp("add", {s.op("neg", {b->value}), a}, {});
  if (op == "div") return s.callOp("mul", {s.op("reciprocal", {b->value}), a}, {});
  if (op == "lt") return s.callOp("gt", {b, a}, {});
  if (op == "le") return s.callOp("ge", {b, a}, {});
  if (op == "gt") return s.callOp("lt", {b, a}, {});
  if (op == "ge") return s.callOp("le", {b, a}, {});
  unsupported("a number " + op + " a tensor");
}

std::optional<Var> tensorAttribute(TraceState& s, const Var& t, const std::string& name) {
  const ir::TensorMeta& meta = s.meta(t);
  if (name == "shape") {
    std::vector<Var> items;
    for (sym::Expr e : meta.sizes) items.push_back(integer(e));
    Var size = sequence(Kind::Tuple, items);
    size->type = sizeType();
    return size;
  }
  if (name == "dtype") {
    Var v = make(Kind::DType);
    v->dtype = meta.dtype;
    return v;
  }
  if (name == "device") {
    Var v = make(Kind::Device);
    v->device = meta.device;
    return v;
  }
  if (name == "ndim") return integer(s.table.integer(static_cast<int64_t>(meta.dim())));
  if (name == "is_cuda") return boolean(meta.device.type == ir::DeviceType::Cuda);
  if (name == "requires_grad") return boolean(meta.requiresGrad);
  if (name == "is_cpu") return boolean(meta.device.type == ir::DeviceType::Cpu);
  // Graph inputs are dense strided tensors (the SDK describes no other layout).
  if (name == "is_nested" || name == "is_sparse" || name == "is_quantized" || name == "is_meta" ||
      name == "is_mkldnn")
    return boolean(false);
  if (name == "T" || name == "mT") {
    std::vector<int64_t> dims;
    for (size_t k = meta.dim(); k-- > 0;) dims.push_back(static_cast<int64_t>(k));
    if (name == "mT") {
      if (meta.dim() < 2) unsupported("mT of a tensor of fewer than 2 dims");
      dims.clear();
      for (size_t k = 0; k < meta.dim(); ++k) dims.push_back(static_cast<int64_t>(k));
      std::swap(dims[meta.dim() - 1], dims[meta.dim() - 2]);
    }
    return s.op("permute", {t->value}, {{"dims", dims}});
  }
  // .data: the same memory without autograd's history, as detach() (what differs, the
  // version counter autograd checks, the graph does not keep).
  if (name == "data") return s.op("detach", {t->value});
  if (name == "grad" || name == "grad_fn") unsupported("Tensor." + name);
  return std::nullopt;
}

// x[..., idx, ...] with one int64 tensor among slices, None and ...: idx's dims in
// place of dim `dim` (numpy's rule for a single advanced index), negative indices
// counted from the end, as torch's. With ints beside it (also advanced indices,
// which numpy's rule may move to the front), several tensors, other dtypes or an
// index on another device the call is left to eager.
// TODO(issue 6): the rest of advanced indexing.
// Index values as torch reads them: a negative one counts from the end of a dim of `size`.
Var wrapNegative(TraceState& s, const Var& index, sym::Expr size) {
  Var negative = s.callOp("lt", {index, integer(s.table.integer(0))}, {});
  return s.callOp("where", {negative, s.callOp("add", {index, integer(size)}, {}), index}, {});
}

namespace {

// x with its entries at `index` along dim replaced by value's (accumulate: value's added), as
// index_put_, index_copy_ and index_add_ write them: index a 1-d (or 0-d) int64 tensor, each
// entry range-checked (read through index_select), wrapped where negative if `wrap` (index_put
// and index_fill; index_add and index_copy refuse negatives, as eager); value broadcast to
// x's sizes with index's length at dim. Without accumulate, an entry written twice takes the later
// value, as torch's CPU kernels leave it (torch leaves the choice undefined).
Var indexWriteOf(TraceState& s, const std::string& name, const Var& x, int64_t dim, Var index, Var value,
                 bool accumulate, bool wrap) {
  const ir::TensorMeta meta = s.meta(x);
  auto rank = static_cast<int64_t>(meta.dim());
  if (rank == 0) unsupported(name + " of a 0-d tensor");
  if (dim < -rank || dim >= rank) unsupported(name + " along dim " + std::to_string(dim));
  if (dim < 0) dim += rank;
  ir::TensorMeta im = s.meta(index);
  if (im.dtype != DType::Int64) unsupported(name + " with an index of " + std::string(ir::name(im.dtype)));
  if (im.device != meta.device) unsupported(name + " with an index on another device");
  if (im.dim() > 1) unsupported(name + " with an index of " + std::to_string(im.dim()) + " dims");
  if (im.dim() == 0) index = s.op("unsqueeze", {index->value}, {{"dim", int64_t{0}}});
  sym::Expr n = meta.sizes[static_cast<size_t>(dim)], m = s.meta(index).sizes[0];
  std::string device = ir::toString(meta.device);
  auto arange = [&](sym::Expr end) {
    return s.op("arange", {}, {{"end", end}, {"dtype", DType::Int64}, {"device", device}});
  };
  // In range, as eager checks it: the positions of arange(n) the index reads.
  if (wrap) index = wrapNegative(s, index, n);
  Var at = s.op("index_select", {arange(n)->value, index->value}, {{"dim", int64_t{0}}});
  std::vector<sym::Expr> target = meta.sizes;
  target[static_cast<size_t>(dim)] = m;
  Var dtype = make(Kind::DType);
  dtype->dtype = meta.dtype;
  if (value->kind != Kind::Tensor) {
    Var where = make(Kind::Device);
    where->device = meta.device;
    std::vector<Var> sizes;
    for (sym::Expr e : target) sizes.push_back(integer(e));
    value = s.callOp("full", {sequence(Kind::Tuple, sizes), value}, {{"dtype", dtype}, {"device", where}});
  }
  value = s.op("expand", {toDType(s, value, meta.dtype)->value}, {{"size", target}});
  std::vector<sym::Expr> along(meta.dim(), s.table.integer(1));
  along[static_cast<size_t>(dim)] = m;
  Var spread = s.op("expand", {s.op("reshape", {at->value}, {{"size", along}})->value}, {{"size", target}});
  if (accumulate) return s.op("scatter_add", {x->value, spread->value, value->value}, {{"dim", dim}});
  if (!s.decide(sym::ge(m, 1))) return x;
  // Per entry of x along dim, the last position of the index that names it (-1: none).
  Var hits = s.op("eq", {s.op("unsqueeze", {at->value}, {{"dim", int64_t{0}}})->value,
                         s.op("unsqueeze", {arange(n)->value}, {{"dim", int64_t{1}}})->value});
  Var order = s.op("unsqueeze", {arange(m)->value}, {{"dim", int64_t{0}}});
  Var last = s.op("amax", {s.callOp("where", {hits, order, integer(s.table.integer(-1))}, {})->value},
                  {{"dim", std::vector<int64_t>{1}}});
  Var written = s.op("ge", {last->value}, {{"other", int64_t{0}}});
  Var rows = s.op("index_select", {value->value, s.op("clamp", {last->value}, {{"min", int64_t{0}}})->value},
                  {{"dim", dim}});
  if (s.gradEnabled && s.meta(value).requiresGrad) {
    // torch's derivative gives each entry of value the grad of the position it names, an entry a
    // later one overwrote included: the picked rows carry none, and each entry's zero (v - v,
    // where finite) added at its position carries it.
    Var still = s.op("detach", {value->value});
    Var zero = s.callOp("where", {callTorch(s, "torch.isfinite", {value}, {}).value(),
                                  s.op("sub", {value->value, still->value}), integer(s.table.integer(0))}, {});
    Var carried = s.op("scatter_add", {s.op("zeros_like", {x->value})->value, spread->value, zero->value}, {{"dim", dim}});
    rows = s.op("add", {s.op("detach", {rows->value})->value, carried->value});
  }
  along[static_cast<size_t>(dim)] = n;
  Var mask = s.op("reshape", {written->value}, {{"size", along}});
  return s.op("where", {mask->value, rows->value, x->value});
}

// `x` now holds `value` (its dtype and sizes): an in-place write.
void overwrite(TraceState& s, const Var& x, const Var& value) {
  Var device = make(Kind::Device);
  device->device = s.meta(x).device;
  Var boolType = make(Kind::DType);
  boolType->dtype = DType::Bool;
  Var always = s.callOp("full", {sequence(Kind::Tuple, {}), boolean(true)}, {{"dtype", boolType}, {"device", device}});
  s.callOp("where_out", {always, value, x, x}, {});
}

} // namespace

// index_put(_), index_copy(_), index_add(_) and index_fill(_) (Tensor methods and torch functions).
std::optional<Var> indexedWrite(TraceState& s, const std::string& name, const std::string& m,
                                const std::vector<Var>& args, const Kwargs& kwargs) {
  bool method = name.rfind("Tensor.", 0) == 0;
  if (!method && name.rfind("torch.", 0) != 0) return std::nullopt;
  std::string base = m.back() == '_' ? m.substr(0, m.size() - 1) : m;
  bool inPlace = base != m;
  if (inPlace && !method) return std::nullopt;
  if (base != "index_put" && base != "index_copy" && base != "index_add" && base != "index_fill") return std::nullopt;
  std::string self = method ? "self" : "input";
  Var x, result;
  if (base == "index_put") {
    Params p = bindParams(name, args, kwargs, {self, "indices", "values", "accumulate"});
    x = tensorArg(name, p[self]);
    std::optional<Var> indices = p["indices"];
    if (!indices || ((*indices)->kind != Kind::Tuple && (*indices)->kind != Kind::List))
      unsupported(name + " without a tuple of indices");
    if ((*indices)->items.size() != 1 || (*indices)->items[0]->kind != Kind::Tensor)
      unsupported(name + " with " + std::to_string((*indices)->items.size()) + " indices"); // TODO(issue 45)
    Var values = tensorArg(name, p["values"]);
    refuseCastingWrite(s, s.meta(x).dtype, values, name);
    result = indexWriteOf(s, name, x, 0, (*indices)->items[0], values, boolArg(name, p["accumulate"], false), true);
  } else {
    const char* source = base == "index_fill" ? "value" : "source";
    std::vector<std::string> names = {self, "dim", "index", source};
    if (base == "index_add") names.push_back("alpha");
    Params p = bindParams(name, args, kwargs, names, base == "index_add" ? 4 : SIZE_MAX);
    x = tensorArg(name, p[self]);
    if (!p["dim"] || !p["index"] || !p[source]) unsupported(name + " with arguments missing");
    Var index = tensorArg(name, p["index"]), value = *p[source];
    if (base != "index_fill") value = tensorArg(name, p[source]);
    else if (value->kind == Kind::Tensor && s.meta(value).dim() != 0) unsupported(name + " with a value of dims");
    if (auto alpha = p["alpha"]; alpha && (*alpha)->kind != Kind::None)
      value = s.callOp("mul", {value, *alpha}, {});
    refuseCastingWrite(s, s.meta(x).dtype, value, name);
    result = indexWriteOf(s, name, x, intArg(s, name + "'s dim", *p["dim"]), index, value, base == "index_add",
                          base == "index_fill");
  }
  if (!inPlace) return result;
  overwrite(s, x, result);
  return x;
}

Var integerTensorIndex(TraceState& s, const Var& x, const Var& idx, int64_t dim,
                       const std::vector<Var>& items) {
  const ir::TensorMeta meta = s.meta(x), index = s.meta(idx);
  size_t tensors = 0;
  for (const Var& item : items) {
    if (item->kind == Kind::Int || item->kind == Kind::Bool)
      unsupported("indexing a tensor with ints beside a tensor");
    tensors += item->kind == Kind::Tensor;
  }
  if (tensors > 1) unsupported("indexing a tensor with several tensors");
  if (index.dtype != DType::Int64)
    unsupported("indexing a tensor with a tensor of " + std::string(ir::name(index.dtype)));
  if (index.device != meta.device) unsupported("indexing a tensor with a tensor on another device");
  if (static_cast<size_t>(dim) >= meta.dim())
    unsupported("indexing a tensor with more indices than dims");
  sym::Expr size = meta.sizes[static_cast<size_t>(dim)];
  Var flat =
      index.dim() == 1
          ? idx
          : s.callOp("reshape", {idx, sequence(Kind::Tuple, {integer(s.table.integer(-1))})}, {});
  Var picked = s.op("index_select", {x->value, wrapNegative(s, flat, size)->value}, {{"dim", dim}});
  if (index.dim() == 1) return picked;
  std::vector<Var> sizes;
  for (size_t d = 0; d < meta.dim(); ++d) {
    if (d != static_cast<size_t>(dim)) {
      sizes.push_back(integer(meta.sizes[d]));
      continue;
    }
    for (sym::Expr e : index.sizes) sizes.push_back(integer(e));
  }
  return s.callOp("reshape", {picked, sequence(Kind::Tuple, sizes)}, {});
}

// x[i0, i1, ...] with int64 index tensors for x's leading dims (later dims whole): the
// indices broadcast together (B), each wrapped where negative, picked from those dims
// flattened into one; the result is B followed by x's other dims, as torch places
// adjacent advanced indices.
Var leadingTensorsIndex(TraceState& s, const Var& x, const std::vector<Var>& indices) {
  const ir::TensorMeta meta = s.meta(x);
  if (indices.size() > meta.dim()) unsupported("indexing a tensor with more indices than dims");
  Var linear;
  sym::Expr count = s.table.integer(1);
  for (size_t k = indices.size(); k-- > 0;) {
    const ir::TensorMeta index = s.meta(indices[k]);
    if (index.dtype != DType::Int64) unsupported("indexing a tensor with a tensor of " + std::string(ir::name(index.dtype)));
    if (index.device != meta.device) unsupported("indexing a tensor with a tensor on another device");
    Var scaled = s.callOp("mul", {wrapNegative(s, indices[k], meta.sizes[k]), integer(count)}, {});
    linear = linear ? s.callOp("add", {scaled, linear}, {}) : scaled;
    count = count * meta.sizes[k];
  }
  std::vector<Var> flatSizes = {integer(count)}, outSizes;
  for (sym::Expr e : s.meta(linear).sizes) outSizes.push_back(integer(e));
  for (size_t d = indices.size(); d < meta.dim(); ++d) flatSizes.push_back(integer(meta.sizes[d])), outSizes.push_back(integer(meta.sizes[d]));
  Var flat = s.callOp("reshape", {x, sequence(Kind::Tuple, flatSizes)}, {});
  Var positions = s.callOp("reshape", {linear, sequence(Kind::Tuple, {integer(s.table.integer(-1))})}, {});
  Var picked = s.op("index_select", {flat->value, positions->value}, {{"dim", int64_t{0}}});
  return s.callOp("reshape", {picked, sequence(Kind::Tuple, outSizes)}, {});
}

// x[a:b] along `dim` with step 1, a a non-negative constant (or None) and b symbolic (x[..., :seq]):
// a narrow whose length stays symbolic, b clamped to the size as Python clamps it (the choice
// guarded where the sizes cannot tell). nullopt for other slices: their bounds are specialised.
std::optional<Var> symbolicSlice(TraceState& s, const Var& x, int64_t dim, const Var& slice) {
  const Var &start = slice->items[0], &end = slice->items[1], &step = slice->items[2];
  if (step->kind != Kind::None && !(step->kind == Kind::Int && step->symbolic.asInteger() == std::optional<int64_t>(1)))
    return std::nullopt;
  if (end->kind != Kind::Int || end->symbolic.asInteger() || mentionsUnbacked(end->symbolic)) return std::nullopt;
  int64_t from = 0;
  if (start->kind == Kind::Int && start->symbolic.asInteger()) from = *start->symbolic.asInteger();
  else if (start->kind != Kind::None) return std::nullopt;
  if (from < 0 || s.decide(sym::lt(end->symbolic, 0))) return std::nullopt;
  sym::Expr size = s.meta(x).sizes.at(static_cast<size_t>(dim));
  if (!s.decide(sym::le(from, size))) return std::nullopt;
  sym::Expr stop = s.decide(sym::le(end->symbolic, size)) ? end->symbolic : size;
  sym::Expr length = s.decide(sym::le(from, stop)) ? stop - from : s.table.integer(0);
  return s.op("narrow", {x->value}, {{"dim", dim}, {"start", from}, {"length", length}});
}

Var tensorIndex(TraceState& s, const Var& t, const Var& index) {
  std::vector<Var> items = index->kind == Kind::Tuple ? index->items : std::vector<Var>{index};
  // Several index tensors for the leading dims (HF's padding_mask[batch_idx, kv_idx]).
  size_t leading = 0;
  while (leading < items.size() && items[leading]->kind == Kind::Tensor && s.meta(items[leading]).dtype != DType::Bool)
    ++leading;
  bool restWhole = std::all_of(items.begin() + static_cast<std::ptrdiff_t>(leading), items.end(), [](const Var& i) {
    return i->kind == Kind::Ellipsis || (i->kind == Kind::Slice && std::all_of(i->items.begin(), i->items.end(),
                                                                              [](const Var& b) { return b->kind == Kind::None; }));
  });
  if (leading > 1 && restWhole) return leadingTensorsIndex(s, t, std::vector<Var>(items.begin(), items.begin() + static_cast<std::ptrdiff_t>(leading)));
  size_t specified = 0;
  for (const Var& i : items)
    if (i->kind != Kind::None && i->kind != Kind::Ellipsis) ++specified;
  Var out = t;
  int64_t dim = 0;
  for (const Var& i : items) {
    size_t rank = s.meta(out).dim();
    switch (i->kind) {
    case Kind::Ellipsis: dim += static_cast<int64_t>(rank - static_cast<size_t>(dim)) - static_cast<int64_t>(specified);
      specified = 0;
      continue;
    case Kind::None: out = s.op("unsqueeze", {out->value}, {{"dim", dim}}); ++dim; continue;
    case Kind::Int:
    case Kind::Bool:
      if (i->kind == Kind::Bool) unsupported("indexing a tensor with a bool");
      out = s.op("select", {out->value}, {{"dim", dim}, {"index", s.concrete(i)}});
      --specified;
      continue;
    case Kind::Slice: {
      if (auto narrowed = symbolicSlice(s, out, dim, i)) {
        out = *narrowed;
        ++dim;
        --specified;
        continue;
      }
      std::vector<ir::Attr> attrs = {{"dim", dim}};
      const char* names[] = {"start", "end", "step"};
      for (size_t k = 0; k < 3; ++k)
        if (i->items[k]->kind != Kind::None) attrs.push_back({names[k], s.concrete(i->items[k])});
      out = s.op("slice", {out->value}, attrs);
      ++dim;
      --specified;
      continue;
    }
    case Kind::Tensor:
      // x[mask] with a bool mask of x's shape: its selected elements (data-dependent count).
      if (items.size() == 1 && s.meta(i).dtype == DType::Bool && s.meta(i).dim() == rank)
        return s.unbackedOp("masked_select", {out->value, i->value});
      out = integerTensorIndex(s, out, i, dim, items);
      dim += static_cast<int64_t>(s.meta(i).dim());
      --specified;
      continue;
    default: unsupported("indexing a tensor with a " + kindName(i->kind)); // TODO(issue 6): advanced indexing
    }
  }
  return out;
}

// x[index] = value, as torch's setitem: `value` (a number, or a tensor cast to x's
// dtype) broadcast into the view x[index] of basic indexing, written as where's
// out= form under a true 0-d condition (a write through a view, which
// functionalization carries to x); with a bool mask of x's shape and a number or
// 0-d value, masked_fill_. A float into a non-float tensor (torch casts it),
// tensor indices otherwise, and a tensor through a mask are left to eager.
void tensorSetItem(TraceState& s, const Var& x, const Var& index, const Var& value) {
  std::vector<Var> items = index->kind == Kind::Tuple ? index->items : std::vector<Var>{index};
  DType dtype = s.meta(x).dtype;
  bool number = value->kind == Kind::Int || value->kind == Kind::Float || value->kind == Kind::Bool;
  if (!number && value->kind != Kind::Tensor)
    unsupported("assigning a " + kindName(value->kind) + " to a tensor's items");
  refuseCastingWrite(s, dtype, value, "an item assignment");
  Var written = value->kind == Kind::Tensor ? toDType(s, value, dtype) : value;
  for (size_t k = 0; k < items.size(); ++k) {
    const Var& i = items[k];
    if (i->kind != Kind::Tensor) continue;
    const ir::TensorMeta mask = s.meta(i);
    if (items.size() == 1 && mask.dtype == DType::Bool && mask.dim() == s.meta(x).dim() &&
        (number || s.meta(value).dim() == 0)) {
      callTorch(s, "Tensor.masked_fill_", {x, i, written}, {});
      return;
    }
    // x[..., idx, ...] = v: one int index tensor, every other item a whole dim or an ellipsis.
    auto whole = [](const Var& item) {
      return item->kind == Kind::Ellipsis ||
             (item->kind == Kind::Slice && std::all_of(item->items.begin(), item->items.end(),
                                                       [](const Var& b) { return b->kind == Kind::None; }));
    };
    bool others = true;
    for (size_t j = 0; j < items.size(); ++j) others = others && (j == k || whole(items[j]));
    if (mask.dtype == DType::Int64 && mask.dim() <= 1 && others) {
      auto ellipsis = std::find_if(items.begin(), items.end(), [](const Var& item) { return item->kind == Kind::Ellipsis; });
      auto rank = static_cast<int64_t>(s.meta(x).dim());
      int64_t dim = ellipsis != items.end() && ellipsis < items.begin() + static_cast<std::ptrdiff_t>(k)
                        ? rank - static_cast<int64_t>(items.size() - k)
                        : static_cast<int64_t>(k);
      if (mask.dim() == 0) unsupported("assigning through a 0-d index tensor"); // drops the dim
      overwrite(s, x, indexWriteOf(s, "x[index] = value", x, dim, i, written, false, true));
      return;
    }
    unsupported("assigning to a tensor's items through a tensor index");
  }
  overwrite(s, tensorIndex(s, x, index), written);
}

std::optional<Var> moduleMember(const std::string& module, const std::string& name) {
  static const std::map<std::string, DType> dtypes = {
      {"float32", DType::Float32}, {"float", DType::Float32},   {"float64", DType::Float64}, {"double", DType::Float64},
      {"float16", DType::Float16}, {"half", DType::Float16},    {"bfloat16", DType::BFloat16}, {"int8", DType::Int8},
      {"int16", DType::Int16},     {"short", DType::Int16},     {"int32", DType::Int32},     {"int", DType::Int32},
      {"int64", DType::Int64},     {"long", DType::Int64},      {"uint8", DType::UInt8},     {"bool", DType::Bool}};
  if (module == "torch") {
    if (auto it = dtypes.find(name); it != dtypes.end()) {
      Var v = make(Kind::DType);
      v->dtype = it->second;
      return v;
    }
    if (name == "nn" || name == "special" || name == "linalg") {
      Var v = make(Kind::PyModule);
      v->name = "torch." + name;
      return v;
    }
  }
  if (module == "torch.nn" && name == "functional") {
    Var v = make(Kind::PyModule);
    v->name = "torch.nn.functional";
    return v;
  }
  static const std::set<std::string> mathFunctions = {"sqrt", "exp", "log", "log2", "log10", "tanh", "cos", "sin",
                                                      "floor", "ceil", "erf", "pow"};
  if (module == "math" && mathFunctions.count(name)) return builtin("math." + name);
  if (module == "math" && (name == "pi" || name == "e" || name == "inf" || name == "tau")) {
    double v = name == "pi" ? M_PI : name == "e" ? M_E : name == "tau" ? 2 * M_PI : std::numeric_limits<double>::infinity();
    Var f = make(Kind::Float);
    f->number = v;
    return f;
  }
  std::string m = name;
  if (auto it = renamed().find(m); it != renamed().end()) m = it->second;
  if ((module == "torch" || module == "torch.nn.functional" || module == "torch.special") &&
      (sameNamed().count(m) || m == "zeros" || m == "ones" || m == "empty" || m == "max" ||
       m == "min" || m == "dropout" || m == "no_grad" || m == "enable_grad" || m == "flatten" ||
       m == "tril" || m == "triu" || m == "autocast" || m == "nonzero" || m == "masked_select" ||
       m == "is_autocast_enabled" ||
       (module == "torch" && (m == "is_floating_point" || m == "is_complex" || m == "is_tensor"))))
    return builtin(module + "." + name);
  return std::nullopt;
}

} // namespace kiln::tracer
