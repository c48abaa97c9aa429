#include "kiln/ir/op_registry.h"

#include <algorithm>
#include <unordered_map>

#include "infer.h"
#include "kiln/common/error.h"
#include "kiln/sym/print.h"
#include "kiln/sym/range.h"
#include "kiln/sym/symbol_table.h"

namespace kiln::ir {
namespace {

// The argument the op writes when it is the schema's last (and not its only one,
// which binds as any first argument does).
std::optional<size_t> writtenLast(const OpInfo& op) {
  if (op.mutates && *op.mutates > 0 && *op.mutates + 1 == op.args.size()) return op.mutates;
  return std::nullopt;
}

// A broken mutation op is a bug of ours: refuse to start rather than misbind.
void checkMutation(const OpInfo& op,
                   const std::unordered_map<std::string_view, const OpInfo*>& byName) {
  if (!op.mutates) return;
  size_t w = *op.mutates;
  if (w >= op.args.size() || op.args[w].kind != ArgKind::Tensor ||
      (w != 0 && w + 1 != op.args.size()) || !byName.count(op.functional))
    throw Error(ErrorCode::Internal,
                "mutation op " + op.name + ": bad written argument or functional op");
}

// Whether the op takes dims of its input (self or tensors) as attributes: dim, dims, ...
bool takesDims(const OpInfo& op) {
  bool input = false, dims = false;
  for (const ArgSpec& a : op.args) {
    input = input || (a.name == "self" && a.kind == ArgKind::Tensor) ||
            (a.name == "tensors" && a.kind == ArgKind::TensorList);
    dims = dims || ((a.kind == ArgKind::Int || a.kind == ArgKind::IntList) &&
                    (a.name == "dim" || a.name == "dims" || a.name == "dim0" || a.name == "dim1" ||
                     a.name == "start_dim" || a.name == "end_dim"));
  }
  return input && dims;
}

struct Registry {
  std::vector<OpInfo> ops;
  std::unordered_map<std::string_view, const OpInfo*> byName;

  Registry() {
    detail::addPointwiseOps(ops);
    detail::addReductionOps(ops);
    detail::addViewOps(ops);
    detail::addMatmulOps(ops);
    detail::addCreationOps(ops);
    detail::addNnOps(ops);
    detail::addConvolutionOps(ops);
    detail::addDataOps(ops);
    detail::addDecompositions(ops);
    for (OpInfo& op : ops)
      if (!op.canonical && takesDims(op)) op.canonical = detail::canonicalDims;
    detail::addOutForms(ops); // last: copies of the ops above, without their decompositions
    for (const OpInfo& op : ops)
      if (!byName.emplace(op.name, &op).second)
        throw Error(ErrorCode::Internal, "op registered twice: " + op.name);
    for (const OpInfo& op : ops) checkMutation(op, byName);
  }
};

const Registry& registry() {
  static const Registry r;
  return r;
}

bool attrFits(ArgKind kind, const AttrValue& v) {
  switch (kind) {
  case ArgKind::Scalar:
    return std::holds_alternative<int64_t>(v) || std::holds_alternative<double>(v) ||
           std::holds_alternative<bool>(v) ||
           (std::holds_alternative<sym::Expr>(v) && !std::get<sym::Expr>(v).isBool());
  case ArgKind::Int: return std::holds_alternative<int64_t>(v);
  case ArgKind::IntList:
    return std::holds_alternative<int64_t>(v) || std::holds_alternative<std::vector<int64_t>>(v);
  case ArgKind::SymIntList:
    return std::holds_alternative<std::vector<int64_t>>(v) ||
           std::holds_alternative<std::vector<sym::Expr>>(v);
  case ArgKind::Float: // a bool is a number too, as in Python (add's alpha=True)
    return std::holds_alternative<double>(v) || std::holds_alternative<int64_t>(v) ||
           std::holds_alternative<bool>(v);
  case ArgKind::Bool: return std::holds_alternative<bool>(v);
  case ArgKind::DType: return std::holds_alternative<DType>(v);
  case ArgKind::String: return std::holds_alternative<std::string>(v);
  case ArgKind::Symbol:
    return std::holds_alternative<sym::Expr>(v) && std::get<sym::Expr>(v).isSymbol();
  case ArgKind::Condition:
    return std::holds_alternative<sym::Expr>(v) && std::get<sym::Expr>(v).isBool();
  default: return false;
  }
}

// Whether argument i's None attribute must stay: it is an absent optional
// tensor or scalar before an argument bound to an input, which would take
// that input without it.
bool marksAbsentInput(const OpInfo& op, const OpCall& call, size_t i) {
  const ArgSpec& spec = op.args[i];
  if (!spec.optional || (spec.kind != ArgKind::Tensor && spec.kind != ArgKind::Scalar))
    return false;
  for (size_t later = i + 1; later < op.args.size(); ++later)
    if (call.input(op.args[later].name) && (!op.mutates || later != *op.mutates)) return true;
  return false;
}

bool isInputKind(ArgKind kind) {
  return kind == ArgKind::Tensor || kind == ArgKind::SymInt || kind == ArgKind::TensorList ||
         kind == ArgKind::Tuple;
}

} // namespace

std::string_view argKindName(ArgKind kind) {
  switch (kind) {
  case ArgKind::Tensor: return "tensor";
  case ArgKind::TensorList: return "tensor list";
  case ArgKind::Tuple: return "tuple";
  case ArgKind::Scalar: return "scalar";
  case ArgKind::SymInt: return "symbolic int";
  case ArgKind::Int: return "int";
  case ArgKind::IntList: return "int list";
  case ArgKind::SymIntList: return "size list";
  case ArgKind::Float: return "float";
  case ArgKind::Bool: return "bool";
  case ArgKind::DType: return "dtype";
  case ArgKind::String: return "string";
  case ArgKind::Symbol: return "symbol";
  case ArgKind::Condition: return "condition";
  }
  return "?";
}

bool isOutForm(const OpInfo& op) {
  return writtenLast(op) && op.args.back().name == "out";
}

bool isViewOp(std::string_view op) {
  for (const char* v : {"view", "permute", "transpose", "expand", "squeeze", "unsqueeze", "slice",
                        "select", "narrow", "unflatten", "as_strided", "detach"})
    if (op == v) return true;
  return false;
}

const OpInfo* findOp(std::string_view name) {
  const auto& byName = registry().byName;
  auto it = byName.find(name);
  return it == byName.end() ? nullptr : it->second;
}

const OpInfo& getOp(std::string_view name) {
  if (const OpInfo* op = findOp(name)) return *op;
  throw Error(ErrorCode::NotFound, "unknown op '" + std::string(name) + "'");
}

std::vector<std::string> opNames() {
  std::vector<std::string> names;
  for (const OpInfo& op : registry().ops) names.push_back(op.name);
  std::sort(names.begin(), names.end());
  return names;
}

OpCall::OpCall(const OpInfo& op, const std::vector<const Value*>& inputs,
               const std::vector<Attr>& attrs, sym::SymbolTable& table)
    : op_(&op), inputs_(&inputs), attrs_(&attrs), table_(&table), bound_(op.args.size()) {
  for (size_t i = 0; i < attrs.size(); ++i) {
    const std::string& name = attrs[i].name;
    auto spec = std::find_if(op.args.begin(), op.args.end(),
                             [&](const ArgSpec& a) { return a.name == name; });
    if (spec == op.args.end()) fail(name, "no such argument");
    bool absent = std::holds_alternative<std::monostate>(attrs[i].value);
    if (isInputKind(spec->kind) && !(absent && spec->optional))
      fail(name, "is an input, not an attribute");
    for (size_t j = 0; j < i; ++j)
      if (attrs[j].name == name) fail(name, "given twice");
  }
  size_t next = 0, end = inputs.size();
  std::optional<size_t> last = writtenLast(op);
  if (last && end > 0) {
    if (!inputs[--end]->isTensor())
      fail(op.args[*last].name, "expected a tensor, got " + toString(*inputs[end]));
    bound_[*last].input = inputs[end];
  }
  for (size_t i = 0; i < op.args.size(); ++i) {
    const ArgSpec& spec = op.args[i];
    if (bound_[i].input) continue; // the written last argument, bound above
    auto attr = std::find_if(attrs.begin(), attrs.end(),
                             [&](const Attr& a) { return a.name == spec.name; });
    Bound& b = bound_[i];
    if (attr != attrs.end() && !std::holds_alternative<std::monostate>(attr->value)) {
      if (!attrFits(spec.kind, attr->value))
        fail(spec.name,
             "expected " + std::string(argKindName(spec.kind)) + ", got " + toString(attr->value));
      b.attr = &attr->value;
    } else if (attr != attrs.end() && !spec.optional) {
      fail(spec.name, "is not optional");
    } else if (spec.kind == ArgKind::TensorList && attr == attrs.end()) {
      for (; next < end; ++next) {
        if (!inputs[next]->isTensor())
          fail(spec.name, "expected tensors, got " + toString(*inputs[next]));
        b.list.push_back(inputs[next]);
      }
      if (b.list.empty()) fail(spec.name, "needs at least one tensor");
      b.input = b.list[0];
    } else if ((isInputKind(spec.kind) || spec.kind == ArgKind::Scalar) && attr == attrs.end() &&
               next < end) {
      const Value* v = inputs[next++];
      if (spec.kind == ArgKind::Tensor && !v->isTensor())
        fail(spec.name, "expected a tensor, got " + toString(*v));
      if (spec.kind == ArgKind::SymInt && !v->isSymInt())
        fail(spec.name, "expected a symbolic int, got " + toString(*v));
      if (spec.kind == ArgKind::Tuple && !v->isTuple())
        fail(spec.name, "expected a tuple, got " + toString(*v));
      // A tuple stands for no scalar: only getitem takes one.
      if (spec.kind == ArgKind::Scalar && v->isTuple())
        fail(spec.name, "expected a tensor or a symbolic scalar, got the tuple " + toString(*v) +
                            "; take an element with getitem");
      b.input = v;
    } else if (!std::holds_alternative<std::monostate>(spec.defaultValue)) {
      b.attr = &spec.defaultValue;
    } else if (!spec.optional && attr == attrs.end()) {
      fail(spec.name, "missing");
    }
  }
  if (next != end)
    throw Error(ErrorCode::InvalidArgument,
                op.name + ": takes at most " + std::to_string(next + inputs.size() - end) +
                    " inputs here, got " + std::to_string(inputs.size()));
}

const OpCall::Bound& OpCall::bound(std::string_view arg) const {
  for (size_t i = 0; i < op_->args.size(); ++i)
    if (op_->args[i].name == arg) return bound_[i];
  throw Error(ErrorCode::Internal, op_->name + ": no argument '" + std::string(arg) + "'");
}

bool OpCall::takes(std::string_view arg) const {
  for (const ArgSpec& a : op_->args)
    if (a.name == arg) return true;
  return false;
}

bool OpCall::has(std::string_view arg) const {
  const Bound& b = bound(arg);
  return b.input || b.attr;
}

const Value* OpCall::input(std::string_view arg) const {
  return bound(arg).input;
}

std::vector<const TensorMeta*> OpCall::tensors(std::string_view arg) const {
  std::vector<const TensorMeta*> out;
  for (const Value* v : bound(arg).list) out.push_back(&v->tensor());
  return out;
}

const Value::Tuple& OpCall::tuple(std::string_view arg) const {
  const Value* v = bound(arg).input;
  if (!v || !v->isTuple()) fail(arg, "expected a tuple");
  return v->tuple();
}

const TensorMeta& OpCall::tensor(std::string_view arg) const {
  const Value* v = bound(arg).input;
  if (!v || !v->isTensor()) fail(arg, "expected a tensor");
  return v->tensor();
}

const AttrValue& OpCall::attr(std::string_view arg) const {
  const Bound& b = bound(arg);
  if (!b.attr) fail(arg, "missing");
  return *b.attr;
}

int64_t OpCall::intArg(std::string_view arg) const {
  return std::get<int64_t>(attr(arg));
}

std::vector<int64_t> OpCall::intList(std::string_view arg) const {
  const AttrValue& v = attr(arg);
  if (auto* i = std::get_if<int64_t>(&v)) return {*i};
  return std::get<std::vector<int64_t>>(v);
}

Shape OpCall::symIntList(std::string_view arg) const {
  const AttrValue& v = attr(arg);
  if (auto* exprs = std::get_if<std::vector<sym::Expr>>(&v)) {
    for (sym::Expr e : *exprs)
      if (e.isNull() || &e.table() != table_) fail(arg, "a size of another symbol table");
    return *exprs;
  }
  Shape out;
  for (int64_t i : std::get<std::vector<int64_t>>(v)) out.push_back(table_->integer(i));
  return out;
}

sym::Expr OpCall::symInt(std::string_view arg) const {
  const Bound& b = bound(arg);
  if (b.input && b.input->isSymInt()) return b.input->symInt();
  if (b.attr) {
    if (auto* i = std::get_if<int64_t>(b.attr)) return table_->integer(*i);
    if (auto* e = std::get_if<sym::Expr>(b.attr); e && &e->table() == table_) return *e;
  }
  fail(arg, "expected an integer or a symbolic int");
}

double OpCall::floatArg(std::string_view arg) const {
  const AttrValue& v = attr(arg);
  if (auto* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
  if (auto* b = std::get_if<bool>(&v)) return *b;
  return std::get<double>(v);
}

bool OpCall::boolArg(std::string_view arg) const {
  return std::get<bool>(attr(arg));
}
DType OpCall::dtype(std::string_view arg) const {
  return std::get<DType>(attr(arg));
}
std::string OpCall::string(std::string_view arg) const {
  return std::get<std::string>(attr(arg));
}

void OpCall::fail(std::string_view arg, const std::string& message) const {
  throw Error(ErrorCode::InvalidArgument,
              op_->name + ": argument '" + std::string(arg) + "': " + message);
}

Value inferCall(std::string_view opName, const std::vector<const Value*>& inputs,
                std::vector<Attr>& attrs, sym::SymbolTable& table) {
  const OpInfo& op = getOp(opName);
  OpCall call(op, inputs, attrs, table);
  Value result = op.infer(call);
  if (op.canonical) op.canonical(call, result, attrs);
  std::vector<Attr> canonical;
  for (size_t i = 0; i < op.args.size(); ++i) {
    const ArgSpec& spec = op.args[i];
    auto attr = std::find_if(attrs.begin(), attrs.end(),
                             [&](const Attr& a) { return a.name == spec.name; });
    if (attr == attrs.end()) continue;
    bool absent = std::holds_alternative<std::monostate>(attr->value);
    if (absent ? !marksAbsentInput(op, call, i) : attr->value == spec.defaultValue) continue;
    canonical.push_back(*attr);
  }
  attrs = std::move(canonical);
  return result;
}

namespace detail {

bool provable(sym::Expr condition) {
  return sym::staticallyKnown(condition) == std::optional<bool>(true);
}

Shape broadcast(const OpCall& call, std::initializer_list<std::string_view> args) {
  Shape out;
  std::vector<std::string_view> from; // which argument each size of `out` came from
  for (std::string_view arg : args) {
    const Value* v = call.input(arg);
    if (!v || !v->isTensor()) continue;
    const Shape& sizes = v->tensor().sizes;
    if (sizes.size() > out.size()) {
      out.insert(out.begin(), sizes.size() - out.size(), sym::Expr());
      from.insert(from.begin(), sizes.size() - from.size(), std::string_view());
    }
    size_t shift = out.size() - sizes.size();
    for (size_t i = 0; i < sizes.size(); ++i) {
      sym::Expr& o = out[shift + i];
      sym::Expr s = sizes[i];
      if (o.isNull() || provable(sym::eq(o, 1))) {
        if (o.isNull() || !provable(sym::eq(s, 1))) o = s, from[shift + i] = arg;
        continue;
      }
      if (o == s || provable(sym::eq(s, 1)) || provable(sym::eq(o, s))) continue;
      std::string what = "size " + sym::toString(s) + " at dim " + std::to_string(i) +
                         " against size " + sym::toString(o) + " of '" +
                         std::string(from[shift + i]) + "'";
      std::optional<bool> differ = sym::staticallyKnown(
          sym::logicalAnd(sym::ne(s, 1), sym::logicalAnd(sym::ne(o, 1), sym::ne(o, s))));
      if (differ == std::optional<bool>(true)) call.fail(arg, "does not broadcast: " + what);
      // The condition taken (as torch's size-oblivious checks): the sizes are equal.
      throw Undecided(call.op().name + ": argument '" + std::string(arg) +
                          "': cannot decide whether it broadcasts: " + what,
                      sym::eq(o, s));
    }
  }
  return out;
}

DType resultType(const OpCall& call, std::initializer_list<std::string_view> args) {
  ResultType r;
  for (std::string_view arg : args) {
    if (!call.has(arg)) continue;
    if (const Value* v = call.input(arg)) {
      if (!v->isTensor())
        r.add(DType::Int64, Operand::Scalar);
      else
        r.add(v->tensor().dtype, v->tensor().dim() ? Operand::Tensor : Operand::ZeroDim);
      continue;
    }
    const AttrValue& a = call.attr(arg);
    DType t = std::holds_alternative<double>(a) ? DType::Float64
              : std::holds_alternative<bool>(a) ? DType::Bool
                                                : DType::Int64;
    r.add(t, Operand::Scalar);
  }
  return r.result();
}

Device commonDevice(const OpCall& call, std::initializer_list<std::string_view> args) {
  std::optional<Device> device;
  std::string_view first;
  for (std::string_view arg : args) {
    const Value* v = call.input(arg);
    if (!v || !v->isTensor()) continue;
    const TensorMeta& m = v->tensor();
    if (m.dim() == 0 && m.device.type == DeviceType::Cpu) continue;
    if (!device)
      device = m.device, first = arg;
    else if (*device != m.device)
      call.fail(arg, "on " + toString(m.device) + " but '" + std::string(first) + "' is on " +
                         toString(*device));
  }
  if (device) return *device;
  for (std::string_view arg : args) // only 0-d CPU tensors
    if (const Value* v = call.input(arg); v && v->isTensor()) return v->tensor().device;
  return Device{};
}

bool anyRequiresGrad(const OpCall& call, std::initializer_list<std::string_view> args) {
  for (std::string_view arg : args)
    if (const Value* v = call.input(arg); v && v->isTensor() && v->tensor().requiresGrad)
      return true;
  return false;
}

int64_t wrapDim(const OpCall& call, std::string_view arg, int64_t dim, size_t rank) {
  auto n = static_cast<int64_t>(std::max<size_t>(rank, 1));
  if (dim < -n || dim >= n)
    call.fail(arg, "dim " + std::to_string(dim) + " out of range [" + std::to_string(-n) + ", " +
                       std::to_string(n - 1) + "]");
  return dim < 0 ? dim + n : dim;
}

void require(const OpCall& call, std::string_view arg, sym::Expr condition,
             const std::string& message) {
  std::optional<bool> known = sym::staticallyKnown(condition);
  if (known == std::optional<bool>(true)) return;
  if (known == std::optional<bool>(false)) call.fail(arg, message);
  throw Undecided(call.op().name + ": argument '" + std::string(arg) + "': cannot decide whether " +
                      sym::toString(condition) + " holds; if not: " + message,
                  condition);
}

void requireEqual(const OpCall& call, std::string_view arg, sym::Expr a, sym::Expr b,
                  const std::string& what) {
  if (a == b) return;
  require(call, arg, sym::eq(a, b), what + ": " + sym::toString(a) + " != " + sym::toString(b));
}

namespace {

// Whether dim `a` should come after dim `b` in fastest-first order: 1 yes, -1
// no, 0 no input decides; nullopt when the ranges cannot tell.
std::optional<int> laterDim(const std::vector<Shape>& operands, const Shape& sizes, size_t a,
                            size_t b) {
  for (const Shape& strides : operands) {
    std::optional<bool> zeroA = sym::staticallyKnown(sym::eq(strides[a], 0));
    std::optional<bool> zeroB = sym::staticallyKnown(sym::eq(strides[b], 0));
    if (!zeroA || !zeroB) return std::nullopt;
    if (*zeroA || *zeroB) continue; // broadcast along one of them: no say
    std::optional<bool> less = sym::staticallyKnown(sym::lt(strides[a], strides[b]));
    std::optional<bool> more = sym::staticallyKnown(sym::lt(strides[b], strides[a]));
    if (!less || !more) return std::nullopt;
    if (*less) return -1;
    if (*more) return 1;
    std::optional<bool> larger = sym::staticallyKnown(sym::lt(sizes[b], sizes[a]));
    if (!larger) return std::nullopt;
    if (*larger) return 1;
  }
  return 0;
}

} // namespace

Shape pointwiseStrides(const OpCall& call, std::initializer_list<std::string_view> args,
                       const Shape& sizes) {
  sym::SymbolTable& table = call.table();
  Shape contiguous = contiguousStrides(sizes, table);
  size_t n = sizes.size();
  std::vector<Shape> operands; // strides aligned to the result's dims; 0 where broadcast
  bool allContiguous = true;
  for (std::string_view arg : args) {
    const Value* v = call.input(arg);
    if (!v || !v->isTensor()) continue;
    const TensorMeta& t = v->tensor();
    // torch counts an empty tensor as contiguous
    bool empty = std::any_of(t.sizes.begin(), t.sizes.end(),
                             [](sym::Expr s) { return provable(sym::eq(s, 0)); });
    allContiguous = allContiguous && t.sizes == sizes && (empty || t.isContiguous());
    Shape strides(n, table.integer(0));
    for (size_t i = 0; i < t.dim(); ++i) {
      size_t j = n - t.dim() + i;
      if (t.sizes[i] == sizes[j]) {
        strides[j] = t.strides[i];
        continue;
      }
      std::optional<bool> outOne = sym::staticallyKnown(sym::eq(sizes[j], 1));
      if (!outOne) return contiguous;
      if (*outOne) strides[j] = t.strides[i];
    }
    operands.push_back(std::move(strides));
  }
  if (n < 2 || allContiguous) return contiguous;
  std::vector<size_t> perm(n); // fastest first
  for (size_t i = 0; i < n; ++i) perm[i] = n - 1 - i;
  for (size_t i = 1; i < n; ++i) { // insertion sort, moving a dim only past those it must pass
    size_t at = i;
    for (size_t k = i; k-- > 0;) {
      std::optional<int> order = laterDim(operands, sizes, perm[k], perm[at]);
      if (!order) return contiguous;
      if (*order > 0) {
        std::swap(perm[k], perm[at]);
        at = k;
      } else if (*order < 0) {
        break;
      }
    }
  }
  bool identity = true;
  for (size_t i = 0; i < n; ++i) identity = identity && perm[i] == n - 1 - i;
  if (identity) return contiguous;
  Shape strides(n);
  sym::Expr running = table.integer(1);
  for (size_t d : perm) {
    strides[d] = running;
    running = running * sizes[d];
  }
  return strides;
}

TensorMeta freshLike(const OpCall& call, std::initializer_list<std::string_view> args, DType dtype,
                     Shape sizes, Device device, bool requiresGrad) {
  TensorMeta m = fresh(call, dtype, sizes, device, requiresGrad);
  m.strides = pointwiseStrides(call, args, m.sizes);
  return m;
}

TensorMeta fresh(const OpCall& call, DType dtype, Shape sizes, Device device, bool requiresGrad) {
  TensorMeta m = TensorMeta::contiguous(dtype, std::move(sizes), call.table(), device);
  m.requiresGrad = requiresGrad && (isFloating(dtype) || isComplex(dtype));
  return m;
}

} // namespace detail
} // namespace kiln::ir
