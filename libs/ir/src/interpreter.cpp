// The reference interpreter: binds the graph's symbols from the inputs, then
// computes each node element by element (see interpreter.h).
#include "kiln/ir/interpreter.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <string>

#include "interpreter_ops.h"
#include "kiln/common/error.h"
#include "kiln/ir/op_registry.h"
#include "kiln/sym/eval.h"
#include "kiln/sym/print.h"
#include "kiln/sym/range.h"

// Complex dtypes are refused (Error{Unsupported}): the IR carries them, but no stage
// computes with them yet.

namespace kiln::ir {
namespace {

[[noreturn]] void fail(ErrorCode code, const std::string& message) {
  throw Error(code, "interpret: " + message);
}

// --- conversions ---------------------------------------------------------

// The bits of the floating format with `mantBits` stored mantissa bits and an
// exponent of `expBits` bits nearest to x, ties to even.
uint16_t encodeSmallFloat(double x, int mantBits, int expBits) {
  int bias = (1 << (expBits - 1)) - 1;
  uint16_t expMask = static_cast<uint16_t>(((1 << expBits) - 1) << mantBits);
  uint16_t sign = std::signbit(x) ? static_cast<uint16_t>(1u << (mantBits + expBits)) : 0;
  if (std::isnan(x)) return static_cast<uint16_t>(expMask | (1u << (mantBits - 1)));
  double a = std::fabs(x);
  if (std::isinf(a)) return sign | expMask;
  int minExp = 1 - bias;
  if (a < std::ldexp(1.0, minExp)) { // subnormal: a multiple of 2^(minExp - mantBits)
    double q = std::nearbyint(std::ldexp(a, mantBits - minExp));
    return sign | static_cast<uint16_t>(q); // q == 2^mantBits is the smallest normal
  }
  int e = std::ilogb(a);
  double q = std::nearbyint(std::ldexp(a, mantBits - e)); // in [2^m, 2^(m+1)]
  if (q == std::ldexp(1.0, mantBits + 1)) {
    q /= 2;
    ++e;
  }
  if (e > bias) return sign | expMask; // overflow to infinity
  uint16_t mant = static_cast<uint16_t>(q - std::ldexp(1.0, mantBits));
  return sign | static_cast<uint16_t>((e + bias) << mantBits) | mant;
}

double decodeSmallFloat(uint16_t bits, int mantBits, int expBits) {
  int bias = (1 << (expBits - 1)) - 1;
  bool negative = (bits >> (mantBits + expBits)) & 1;
  int exp = (bits >> mantBits) & ((1 << expBits) - 1);
  int mant = bits & ((1 << mantBits) - 1);
  double v;
  if (exp == (1 << expBits) - 1)
    v = mant ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else if (exp == 0)
    v = std::ldexp(mant, 1 - bias - mantBits);
  else
    v = std::ldexp(mant + (1 << mantBits), exp - bias - mantBits);
  return negative ? -v : v;
}

template <typename T> T loadAs(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}
template <typename T> void storeAs(std::byte* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

double loadF(DType t, const std::byte* p) {
  switch (t) {
  case DType::Float32: return loadAs<float>(p);
  case DType::Float64: return loadAs<double>(p);
  case DType::Float16: return fromHalfBits(loadAs<uint16_t>(p));
  case DType::BFloat16: return fromBFloat16Bits(loadAs<uint16_t>(p));
  case DType::Int8: return loadAs<int8_t>(p);
  case DType::Int16: return loadAs<int16_t>(p);
  case DType::Int32: return loadAs<int32_t>(p);
  case DType::Int64: return static_cast<double>(loadAs<int64_t>(p));
  case DType::UInt8: return loadAs<uint8_t>(p);
  case DType::Bool: return loadAs<uint8_t>(p) != 0;
  default: fail(ErrorCode::Unsupported, "dtype " + std::string(name(t)));
  }
}

int64_t loadI(DType t, const std::byte* p) {
  switch (t) {
  case DType::Int8: return loadAs<int8_t>(p);
  case DType::Int16: return loadAs<int16_t>(p);
  case DType::Int32: return loadAs<int32_t>(p);
  case DType::Int64: return loadAs<int64_t>(p);
  case DType::UInt8: return loadAs<uint8_t>(p);
  case DType::Bool: return loadAs<uint8_t>(p) != 0;
  default: return static_cast<int64_t>(loadF(t, p)); // floats truncate, as a C cast
  }
}

void storeI(DType t, std::byte* p, int64_t v) {
  switch (t) {
  case DType::Int8: return storeAs(p, static_cast<int8_t>(v));
  case DType::Int16: return storeAs(p, static_cast<int16_t>(v));
  case DType::Int32: return storeAs(p, static_cast<int32_t>(v));
  case DType::Int64: return storeAs(p, v);
  case DType::UInt8: return storeAs(p, static_cast<uint8_t>(v));
  case DType::Bool: return storeAs(p, static_cast<uint8_t>(v != 0));
  case DType::Float32: return storeAs(p, static_cast<float>(v));
  case DType::Float64: return storeAs(p, static_cast<double>(v));
  case DType::Float16: return storeAs(p, toHalfBits(static_cast<double>(v)));
  case DType::BFloat16: return storeAs(p, toBFloat16Bits(static_cast<double>(v)));
  default: fail(ErrorCode::Unsupported, "dtype " + std::string(name(t)));
  }
}

void storeF(DType t, std::byte* p, double v) {
  switch (t) {
  case DType::Float32: return storeAs(p, static_cast<float>(v));
  case DType::Float64: return storeAs(p, v);
  case DType::Float16: return storeAs(p, toHalfBits(v));
  case DType::BFloat16: return storeAs(p, toBFloat16Bits(v));
  case DType::Bool: return storeAs(p, static_cast<uint8_t>(v != 0));
  default: return storeI(t, p, static_cast<int64_t>(v)); // truncates toward zero
  }
}

// x as a `t` would hold it.
double castF(DType t, double x) {
  std::byte buf[8];
  storeF(t, buf, x);
  return loadF(t, buf);
}
int64_t castI(DType t, int64_t x) {
  std::byte buf[8];
  storeI(t, buf, x);
  return loadI(t, buf);
}

// --- tensors -------------------------------------------------------------

int64_t product(const std::vector<int64_t>& sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

std::vector<int64_t> contiguousStridesOf(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> strides(sizes.size(), 1);
  for (size_t i = sizes.size(); i-- > 1;)
    strides[i - 1] = strides[i] * std::max<int64_t>(sizes[i], 1);
  return strides;
}

// A tensor of this layout on fresh zeroed storage just large enough for it.
HostTensor allocate(DType dtype, std::vector<int64_t> sizes, std::vector<int64_t> strides,
                    int64_t offset) {
  int64_t extent = offset;
  if (product(sizes) > 0) {
    extent += 1;
    for (size_t i = 0; i < sizes.size(); ++i) extent += (sizes[i] - 1) * std::abs(strides[i]);
  }
  HostTensor t{dtype, std::move(sizes), std::move(strides), offset, nullptr};
  t.storage = std::make_shared<std::vector<std::byte>>(extent * elementSize(dtype));
  return t;
}

// Calls fn(index) for every index of `sizes` in row-major order.
void forEachIndex(const std::vector<int64_t>& sizes,
                  const std::function<void(const std::vector<int64_t>&)>& fn) {
  if (product(sizes) == 0) return;
  std::vector<int64_t> idx(sizes.size(), 0);
  while (true) {
    fn(idx);
    size_t d = sizes.size();
    while (d > 0 && ++idx[d - 1] == sizes[d - 1]) idx[--d] = 0;
    if (d == 0) return;
  }
}

// The address of the element at `idx` of the output-rank index space, with
// `t` broadcast against it (its dims align to the right; size-1 dims stay 0).
std::byte* at(const HostTensor& t, const std::vector<int64_t>& idx) {
  size_t lead = idx.size() - t.sizes.size();
  int64_t off = t.storageOffset;
  for (size_t i = 0; i < t.sizes.size(); ++i)
    if (t.sizes[i] != 1) off += idx[lead + i] * t.strides[i];
  return t.storage->data() + off * elementSize(t.dtype);
}

// --- symbols -------------------------------------------------------------

class Binder {
public:
  // Binds a symbol to v, checks a constant, and defers anything else.
  void bind(sym::Expr e, int64_t v, const std::string& what) {
    if (e.isSymbol()) {
      sym::Range r = sym::range(e);
      if (!r.contains(v))
        fail(ErrorCode::InvalidArgument, "symbol " + e.name() + " = " + std::to_string(v) + " (" +
                                             what + ") lies outside its range");
      auto [it, fresh] = binding_.emplace(e, v);
      if (!fresh && it->second != v)
        fail(ErrorCode::InvalidArgument, "symbol " + e.name() + " is bound to " +
                                             std::to_string(it->second) + " and to " +
                                             std::to_string(v) + " (" + what + ")");
    } else {
      deferred_.push_back({e, v, what});
    }
  }
  // An unbacked symbol's value, as a data-dependent op found it, checked against
  // its range: a runtime assert that bounds one symbol became its range.
  void bindData(sym::Expr symbol, int64_t v, const std::string& op) {
    if (!sym::range(symbol).contains(v)) fail(ErrorCode::InvalidArgument, sym::rangeFailure(symbol, v, op));
    binding_[symbol] = v;
  }
  void checkDeferred() {
    for (const auto& d : deferred_) {
      int64_t got = sym::evaluate(d.e, binding_);
      if (got != d.v)
        fail(ErrorCode::InvalidArgument, d.what + " is " + std::to_string(d.v) + ", expected " +
                                             sym::toString(d.e) + " = " + std::to_string(got));
    }
  }
  const sym::Binding& binding() const { return binding_; }

private:
  struct Deferred {
    sym::Expr e;
    int64_t v;
    std::string what;
  };
  sym::Binding binding_;
  std::vector<Deferred> deferred_;
};

// --- arguments -----------------------------------------------------------

// The arguments of one call node, bound to its op's schema as OpCall does.
class Args {
public:
  Args(const Graph& graph, const Node& node, const OpInfo& op,
       const std::vector<HostTensor>& values, const sym::Binding& binding)
      : node_(node), op_(op) {
    size_t next = 0;
    for (const ArgSpec& a : op.args) {
      const AttrValue* given = node.attr(a.name);
      if (given && std::holds_alternative<std::monostate>(*given)) continue; // marked absent
      bool isInput = a.kind == ArgKind::Tensor || a.kind == ArgKind::SymInt ||
                     (a.kind == ArgKind::Scalar && !node.attr(a.name));
      if (a.kind == ArgKind::TensorList) {
        while (next < node.inputs.size()) list_.push_back(values[node.inputs[next++]]);
      } else if (isInput && next < node.inputs.size()) {
        ValueId id = node.inputs[next++];
        tensors_.emplace_back(a.name, values[id]);
        if (graph.value(id).isSymInt()) scalars_.push_back(a.name);
      } else if (a.kind == ArgKind::Scalar && node.attr(a.name)) {
        tensors_.emplace_back(a.name, scalarTensor(*node.attr(a.name), binding));
        scalars_.push_back(a.name);
      }
    }
  }

  const HostTensor* tensor(std::string_view name) const {
    for (const auto& [n, t] : tensors_)
      if (n == name) return &t;
    return nullptr;
  }
  const std::vector<HostTensor>& list() const { return list_; }
  // Whether the argument is a number (attribute or symbolic scalar), not a tensor.
  bool isScalar(std::string_view name) const {
    return std::find(scalars_.begin(), scalars_.end(), name) != scalars_.end();
  }
  const AttrValue& attr(std::string_view name) const {
    if (const AttrValue* v = node_.attr(name)) return *v;
    for (const ArgSpec& a : op_.args)
      if (a.name == name) return a.defaultValue;
    fail(ErrorCode::Internal, op_.name + " has no argument " + std::string(name));
  }
  bool has(std::string_view name) const {
    return !std::holds_alternative<std::monostate>(attr(name));
  }
  double number(std::string_view name) const {
    const AttrValue& v = attr(name);
    if (auto* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
    if (auto* b = std::get_if<bool>(&v)) return *b;
    return std::get<double>(v);
  }
  std::vector<int64_t> intList(std::string_view name) const {
    const AttrValue& v = attr(name);
    if (auto* i = std::get_if<int64_t>(&v)) return {*i};
    return std::get<std::vector<int64_t>>(v);
  }

private:
  static HostTensor scalarTensor(const AttrValue& v, const sym::Binding& binding) {
    if (auto* i = std::get_if<int64_t>(&v))
      return HostTensor::fromDoubles(DType::Int64, {}, {double(*i)});
    if (auto* d = std::get_if<double>(&v)) return HostTensor::fromDoubles(DType::Float64, {}, {*d});
    if (auto* b = std::get_if<bool>(&v))
      return HostTensor::fromDoubles(DType::Bool, {}, {double(*b)});
    HostTensor t = allocate(DType::Int64, {}, {}, 0);
    storeI(DType::Int64, t.storage->data(), sym::evaluate(std::get<sym::Expr>(v), binding));
    return t;
  }

  const Node& node_;
  const OpInfo& op_;
  std::vector<std::pair<std::string, HostTensor>> tensors_;
  std::vector<HostTensor> list_;
  std::vector<std::string> scalars_;
};

} // namespace

double floorDivide(DType t, double x, double y) {
  if (y == 0) return x / y;
  auto in = [&](double v) { return detail::castToF(t, v); };
  double mod = std::fmod(x, y);
  double div = in(in(x - mod) / y);
  if (mod != 0 && (y < 0) != (mod < 0)) div = in(div - 1);
  if (div == 0) return std::copysign(0.0, in(x / y));
  double floored = std::floor(div);
  return div - floored > 0.5 ? floored + 1 : floored;
}

uint16_t toHalfBits(double x) {
  return encodeSmallFloat(x, 10, 5);
}
uint16_t toBFloat16Bits(double x) {
  return encodeSmallFloat(x, 7, 8);
}
double fromHalfBits(uint16_t bits) {
  return decodeSmallFloat(bits, 10, 5);
}
double fromBFloat16Bits(uint16_t bits) {
  return decodeSmallFloat(bits, 7, 8);
}

int64_t HostTensor::numel() const {
  return product(sizes);
}

HostTensor HostTensor::fromDoubles(DType dtype, std::vector<int64_t> sizes,
                                   const std::vector<double>& values) {
  if (static_cast<int64_t>(values.size()) != product(sizes))
    fail(ErrorCode::InvalidArgument, "fromDoubles: " + std::to_string(values.size()) +
                                         " values for " + std::to_string(product(sizes)) +
                                         " elements");
  std::vector<int64_t> strides = contiguousStridesOf(sizes);
  HostTensor t = allocate(dtype, std::move(sizes), std::move(strides), 0);
  for (size_t i = 0; i < values.size(); ++i)
    storeF(dtype, t.storage->data() + i * elementSize(dtype), values[i]);
  return t;
}

std::vector<double> HostTensor::toDoubles() const {
  std::vector<double> out;
  forEachIndex(
      sizes, [&](const std::vector<int64_t>& idx) { out.push_back(loadF(dtype, at(*this, idx))); });
  return out;
}

std::vector<int64_t> HostTensor::toInts() const {
  std::vector<int64_t> out;
  forEachIndex(
      sizes, [&](const std::vector<int64_t>& idx) { out.push_back(loadI(dtype, at(*this, idx))); });
  return out;
}

namespace detail {
double loadElementF(const HostTensor& t, const std::vector<int64_t>& idx) {
  return loadF(t.dtype, at(t, idx));
}
int64_t loadElementI(const HostTensor& t, const std::vector<int64_t>& idx) {
  return loadI(t.dtype, at(t, idx));
}
void storeElementF(const HostTensor& t, const std::vector<int64_t>& idx, double v) {
  storeF(t.dtype, at(t, idx), v);
}
void storeElementI(const HostTensor& t, const std::vector<int64_t>& idx, int64_t v) {
  storeI(t.dtype, at(t, idx), v);
}
double castToF(DType t, double x) {
  return castF(t, x);
}
int64_t castToI(DType t, int64_t x) {
  return castI(t, x);
}
void eachIndex(const std::vector<int64_t>& sizes,
               const std::function<void(const std::vector<int64_t>&)>& fn) {
  forEachIndex(sizes, fn);
}
} // namespace detail

namespace {

std::vector<int64_t> evalAll(const Shape& exprs, const sym::Binding& b) {
  std::vector<int64_t> out;
  for (sym::Expr e : exprs) out.push_back(sym::evaluate(e, b));
  return out;
}

// Copies the elements of `src` in row-major order into a fresh tensor laid out as `meta`.
HostTensor materialize(const HostTensor& src, const TensorMeta& meta, const sym::Binding& b) {
  HostTensor out = allocate(meta.dtype, evalAll(meta.sizes, b), evalAll(meta.strides, b),
                            sym::evaluate(meta.storageOffset, b));
  std::vector<double> fs;
  std::vector<int64_t> is;
  bool isFloat = isFloating(src.dtype);
  if (isFloat)
    fs = src.toDoubles();
  else
    is = src.toInts();
  size_t i = 0;
  forEachIndex(out.sizes, [&](const std::vector<int64_t>& idx) {
    if (isFloat)
      storeF(out.dtype, at(out, idx), fs[i++]);
    else
      storeI(out.dtype, at(out, idx), is[i++]);
  });
  return out;
}

// `self`'s bytes laid out as `meta`. An inferred offset counts from the
// input's inferred one, which `base` maps to the input's actual offset.
HostTensor alias(const HostTensor& self, const TensorMeta& meta, int64_t base,
                 const sym::Binding& b) {
  HostTensor out = self;
  out.sizes = evalAll(meta.sizes, b);
  out.strides = evalAll(meta.strides, b);
  out.storageOffset = base + sym::evaluate(meta.storageOffset, b);
  return out;
}

// What an input's inferred offset of 0 is in its actual bytes.
int64_t offsetBase(const Graph& graph, ValueId input, const std::vector<HostTensor>& values,
                   const sym::Binding& b) {
  return values[input].storageOffset - sym::evaluate(graph.meta(input).storageOffset, b);
}

// split, split_with_sizes, chunk, unbind: every piece a view of the input (so
// far every op giving a tuple gives views of its first input).
std::vector<HostTensor> runPieces(const Graph& graph, const Node& node,
                                  const std::vector<HostTensor>& values, const sym::Binding& b) {
  ValueId self = node.inputs.at(0);
  int64_t base = offsetBase(graph, self, values, b);
  std::vector<HostTensor> out;
  for (const TensorMeta& m : node.value.tuple()) out.push_back(alias(values[self], m, base, b));
  return out;
}

// Whether `view` reads the elements of `t` at the same addresses, in row-major order (t's
// elements seen through another shape).
bool sameElements(const HostTensor& view, const HostTensor& t) {
  if (view.numel() != t.numel()) return false;
  auto address = [](const HostTensor& x, int64_t k) {
    int64_t off = x.storageOffset;
    for (size_t i = x.sizes.size(); i-- > 0;) {
      off += (k % x.sizes[i]) * x.strides[i];
      k /= x.sizes[i];
    }
    return off;
  };
  for (int64_t k = 0; k < t.numel(); ++k)
    if (address(view, k) != address(t, k)) return false;
  return true;
}

// cat and stack: each output element read from the input holding it.
HostTensor concatenate(const std::string& op, const std::vector<HostTensor>& ins, int64_t dim,
                       HostTensor out) {
  size_t d = static_cast<size_t>(dim < 0 ? dim + int64_t(out.sizes.size()) : dim);
  std::vector<HostTensor> parts; // cat: inputs without elements add none (torch skips empty 1-d)
  for (const HostTensor& t : ins)
    if (op == "stack" || t.numel() > 0) parts.push_back(t);
  detail::eachIndex(out.sizes, [&](const std::vector<int64_t>& idx) {
    std::vector<int64_t> at = idx;
    size_t k = 0;
    if (op == "stack") {
      k = static_cast<size_t>(idx[d]);
      at.erase(at.begin() + d);
    } else {
      while (at[d] >= parts[k].sizes[d]) at[d] -= parts[k++].sizes[d];
    }
    if (isFloating(parts[k].dtype))
      detail::storeElementF(out, idx, detail::loadElementF(parts[k], at));
    else
      detail::storeElementI(out, idx, detail::loadElementI(parts[k], at));
  });
  return out;
}

// full, zeros, ones, empty and their _like forms (empty is zeroed), and arange.
bool create(const std::string& op, const Args& args, HostTensor& out) {
  if (op == "arange") {
    const HostTensor* start = args.tensor("start");
    const HostTensor* step = args.tensor("step");
    // As torch: start + i * step in the result dtype's accumulator, int64 (truncated bounds) for
    // integral results, double otherwise.
    bool integral = !isFloating(out.dtype);
    std::vector<int64_t> i(1, 0);
    for (; i[0] < out.sizes[0]; ++i[0]) {
      if (integral) {
        int64_t from = start ? start->toInts()[0] : 0, by = step ? step->toInts()[0] : 1;
        detail::storeElementI(out, i, from + i[0] * by);
      } else {
        double from = start ? start->toDoubles()[0] : 0, by = step ? step->toDoubles()[0] : 1;
        detail::storeElementF(out, i, from + double(i[0]) * by);
      }
    }
    return true;
  }
  std::string base =
      op.size() > 5 && op.substr(op.size() - 5) == "_like" ? op.substr(0, op.size() - 5) : op;
  if (base != "full" && base != "zeros" && base != "ones" && base != "empty") return false;
  const HostTensor* fill = base == "full" ? args.tensor("fill_value") : nullptr;
  bool isFloat = fill && isFloating(fill->dtype);
  double f = isFloat ? fill->toDoubles()[0] : 0;
  int64_t n = fill && !isFloat ? fill->toInts()[0] : base == "ones" ? 1 : 0;
  detail::eachIndex(out.sizes, [&](const std::vector<int64_t>& idx) {
    if (isFloat)
      detail::storeElementF(out, idx, f);
    else
      detail::storeElementI(out, idx, n);
  });
  return true;
}

HostTensor runCall(const Graph& graph, const Node& node, const std::vector<HostTensor>& values,
                   const sym::Binding& binding) {
  const OpInfo& op = getOp(node.target);
  Args args(graph, node, op, values, binding);
  if (node.value.isSymInt()) {
    HostTensor t = allocate(DType::Int64, {}, {}, 0);
    storeI(DType::Int64, t.storage->data(), sym::evaluate(node.value.symInt(), binding));
    return t;
  }
  const TensorMeta& meta = node.value.tensor();
  const std::string& name = op.name;
  // reshape, flatten and contiguous give their input or a view of it where inference says so
  // (the inferred layout reads the input's elements in place), else a copy.
  bool mayView = name == "reshape" || name == "flatten" || name == "contiguous";
  if (isViewOp(name) || mayView) { // aliases its input, with the inferred layout
    HostTensor out = *args.tensor("self");
    out.sizes = evalAll(meta.sizes, binding);
    out.strides = evalAll(meta.strides, binding);
    int64_t offset = sym::evaluate(meta.storageOffset, binding);
    // The inferred offset counts from the input's inferred one (as_strided's is absolute).
    if (name != "as_strided")
      offset +=
          out.storageOffset - sym::evaluate(graph.meta(node.inputs[0]).storageOffset, binding);
    out.storageOffset = offset;
    // As torch's setStorage, a view must lie within the storage (reshape, flatten and contiguous
    // view only where they read the input's own elements: sameElements).
    if (!mayView && out.numel() > 0) {
      int64_t last = offset;
      for (size_t d = 0; d < out.sizes.size(); ++d) last += (out.sizes[d] - 1) * out.strides[d];
      auto elements = static_cast<int64_t>(out.storage->size() / elementSize(out.dtype));
      if (offset < 0 || last >= elements)
        fail(ErrorCode::InvalidArgument, name + ": the view reaches element " +
                                             std::to_string(last) + " of a storage of " +
                                             std::to_string(elements));
    }
    if (!mayView || sameElements(out, *args.tensor("self"))) return out;
  }
  if (mayView || name == "clone") return materialize(*args.tensor("self"), meta, binding);

  HostTensor out =
      allocate(meta.dtype, evalAll(meta.sizes, binding), evalAll(meta.strides, binding),
               sym::evaluate(meta.storageOffset, binding));
  if (name == "cat" || name == "stack")
    return concatenate(name, args.list(), std::get<int64_t>(args.attr("dim")), out);
  if (create(name, args, out)) return out;
  std::string base = name;
  if (op.mutates) { // an in-place form: computes into self
    base = op.functional;
    out = *args.tensor("self");
  }
  std::vector<const HostTensor*> operands;
  std::vector<Operand> kinds;
  for (const char* a : {"grad_output", "condition", "self", "other", "min", "max"}) {
    if (const HostTensor* t = args.tensor(a)) {
      operands.push_back(t);
      kinds.push_back(args.isScalar(a)   ? Operand::Scalar
                      : t->sizes.empty() ? Operand::ZeroDim
                                         : Operand::Tensor);
    }
  }
  double alpha = op.args.size() == 3 && op.args[2].name == "alpha" ? args.number("alpha") : 1.0;
  std::string mode;
  if (base == "div" && args.has("rounding_mode"))
    mode = std::get<std::string>(args.attr("rounding_mode"));
  if (base == "gelu" || base == "gelu_backward")
    mode = std::get<std::string>(args.attr("approximate"));
  if (base == "clamp")
    mode = std::string(args.tensor("min") ? "min" : "") + (args.tensor("max") ? "max" : "");
  if (detail::runPointwise(base, operands, kinds, alpha, mode, op.mutates.has_value(), out)) return out;
  auto tensorArg = [&](std::string_view a) { return args.tensor(a); };
  auto numberArg = [&](std::string_view a) {
    if (!args.has(a)) return std::numeric_limits<double>::quiet_NaN();
    const AttrValue& v = args.attr(a);
    if (auto* ints = std::get_if<std::vector<int64_t>>(&v)) return double(ints->size());
    if (auto* exprs = std::get_if<std::vector<sym::Expr>>(&v)) return double(exprs->size());
    return args.number(a);
  };
  auto stringArg = [&](std::string_view a) { return std::get<std::string>(args.attr(a)); };
  if (detail::runLinalg(base, tensorArg, numberArg, stringArg, out)) return out;
  if (base == "convolution") {
    detail::convolve(*args.tensor("input"), *args.tensor("weight"), args.tensor("bias"),
                     args.intList("stride"), args.intList("padding"), args.intList("dilation"),
                     int64_t(args.number("groups")), out);
    return out;
  }

  std::optional<std::vector<int64_t>> dims;
  if (op.args.size() > 1 && op.args[1].name == "dim" && args.has("dim")) dims = args.intList("dim");
  double correction = base == "var" || base == "std" ? args.number("correction") : 0;
  if (detail::runReduction(base, *args.tensor("self"), dims, correction, out)) return out;
  fail(ErrorCode::Unsupported, "op " + name + " is not implemented yet");
}

// Writes each element of `src` into `dst` of the same sizes, cast to dst's dtype.
void copyInto(const HostTensor& src, const HostTensor& dst) {
  bool isFloat = isFloating(src.dtype);
  forEachIndex(dst.sizes, [&](const std::vector<int64_t>& idx) {
    if (isFloat)
      storeF(dst.dtype, at(dst, idx), loadF(src.dtype, at(src, idx)));
    else
      storeI(dst.dtype, at(dst, idx), loadI(src.dtype, at(src, idx)));
  });
}

// An out= form: the functional op's result (computed apart, so that `out` may
// alias an input), cast into out's bytes. The value is `out` itself. As torch,
// sum, mean and prod into a wider floating `out` accumulate in out's
// dtype; pointwise ops compute in their own result dtype, then cast.
HostTensor runOutForm(const Graph& graph, const Node& node, const OpInfo& op,
                      const std::vector<HostTensor>& values, const sym::Binding& binding) {
  Node functional = node;
  functional.target = op.functional;
  functional.inputs.pop_back();
  std::vector<const Value*> inputs;
  for (ValueId in : functional.inputs) inputs.push_back(&graph.value(in));
  functional.value = inferCall(functional.target, inputs, functional.attrs, graph.symbols());
  HostTensor out = values[node.inputs.back()];
  TensorMeta result = functional.value.tensor();
  bool accumulates = op.functional == "sum" || op.functional == "mean" || op.functional == "prod";
  if (accumulates && isFloating(result.dtype) && isFloating(out.dtype) &&
      elementSize(out.dtype) > elementSize(result.dtype)) {
    result.dtype = out.dtype;
    functional.value = result;
  }
  copyInto(runCall(graph, functional, values, binding), out);
  return out;
}

// masked_select: the elements of self where the mask is true, over their broadcast.
HostTensor maskedSelect(const HostTensor& self, const HostTensor& mask, sym::Expr symbol, Binder& binder) {
  size_t rank = std::max(self.sizes.size(), mask.sizes.size());
  std::vector<int64_t> shape(rank, 1);
  for (const HostTensor* t : {&self, &mask})
    for (size_t d = 0; d < t->sizes.size(); ++d)
      if (t->sizes[d] != 1) shape[rank - t->sizes.size() + d] = t->sizes[d];
  std::vector<std::vector<int64_t>> picked;
  forEachIndex(shape, [&](const std::vector<int64_t>& idx) {
    if (loadI(mask.dtype, at(mask, idx))) picked.push_back(idx);
  });
  auto count = static_cast<int64_t>(picked.size());
  binder.bindData(symbol, count, "masked_select");
  HostTensor out = allocate(self.dtype, {count}, {1}, 0);
  bool floating = isFloating(self.dtype);
  for (int64_t k = 0; k < count; ++k) {
    std::byte* dst = out.storage->data() + k * static_cast<int64_t>(elementSize(self.dtype));
    if (floating)
      storeF(self.dtype, dst, loadF(self.dtype, at(self, picked[static_cast<size_t>(k)])));
    else
      storeI(self.dtype, dst, loadI(self.dtype, at(self, picked[static_cast<size_t>(k)])));
  }
  return out;
}

// item, nonzero, masked_select and _assert_scalar: what they compute binds a
// symbol or checks the binding (ops_data.cpp).
HostTensor runDataDependent(const Node& node, const std::vector<HostTensor>& values, Binder& binder) {
  if (node.target == "_assert_scalar") {
    sym::Expr condition = std::get<sym::Expr>(*node.attr("condition"));
    int64_t holds = sym::evaluate(condition, binder.binding());
    if (!holds)
      fail(ErrorCode::InvalidArgument,
           sym::assertFailure(condition, std::get<std::string>(*node.attr("message")),
                              binder.binding()));
    HostTensor t = allocate(DType::Int64, {}, {}, 0);
    storeI(DType::Int64, t.storage->data(), holds);
    return t;
  }
  sym::Expr symbol = std::get<sym::Expr>(*node.attr("symbol"));
  const HostTensor& self = values.at(node.inputs.at(0));
  if (node.target == "masked_select") return maskedSelect(self, values.at(node.inputs.at(1)), symbol, binder);
  if (node.target == "item") {
    int64_t v = self.toInts().at(0);
    binder.bindData(symbol, v, "item");
    HostTensor t = allocate(DType::Int64, {}, {}, 0);
    storeI(DType::Int64, t.storage->data(), v);
    return t;
  }
  std::vector<double> elements = self.toDoubles(); // nonzero: row-major, as torch orders them
  std::vector<int64_t> coordinates;
  int64_t count = 0;
  forEachIndex(self.sizes, [&](const std::vector<int64_t>& idx) {
    if (elements[static_cast<size_t>(count++)] == 0) return;
    coordinates.insert(coordinates.end(), idx.begin(), idx.end());
  });
  auto rank = static_cast<int64_t>(self.sizes.size());
  int64_t found = rank ? static_cast<int64_t>(coordinates.size()) / rank : (elements.at(0) != 0);
  binder.bindData(symbol, found, "nonzero");
  HostTensor t = allocate(DType::Int64, {found, rank}, {1, std::max<int64_t>(found, 1)}, 0);
  for (int64_t row = 0; row < found; ++row)
    for (int64_t d = 0; d < rank; ++d)
      storeI(DType::Int64, t.storage->data() + (row + d * t.strides[1]) * sizeof(int64_t),
             coordinates[static_cast<size_t>(row * rank + d)]);
  return t;
}

HostTensor runNode(const Graph& graph, const Node& node, const std::vector<HostTensor>& values,
                   const sym::Binding& binding) {
  const OpInfo& op = getOp(node.target);
  if (isOutForm(op)) return runOutForm(graph, node, op, values, binding);
  return runCall(graph, node, values, binding);
}

} // namespace

std::vector<HostTensor> interpret(const Graph& graph, std::vector<HostTensor> inputs) {
  Binder binder;
  std::vector<const Node*> placeholders;
  for (const Node& n : graph.nodes())
    if (n.kind == NodeKind::Placeholder) placeholders.push_back(&n);
  if (placeholders.size() != inputs.size())
    fail(ErrorCode::InvalidArgument, "the graph takes " + std::to_string(placeholders.size()) +
                                         " inputs, got " + std::to_string(inputs.size()));
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Node& p = *placeholders[i];
    const HostTensor& t = inputs[i];
    std::string who = "input " + p.target;
    if (!p.value.isTensor()) {
      if (!t.sizes.empty()) fail(ErrorCode::InvalidArgument, who + ": expected a 0-d scalar");
      binder.bind(p.value.symInt(), t.toInts().at(0), who);
      continue;
    }
    const TensorMeta& m = p.value.tensor();
    if (isComplex(t.dtype))
      fail(ErrorCode::Unsupported, who + ": complex dtypes (" + std::string(name(t.dtype)) +
                                       ") are not supported by the interpreter yet");
    if (t.dtype != m.dtype)
      fail(ErrorCode::InvalidArgument, who + ": expected dtype " + std::string(name(m.dtype)) +
                                           ", got " + std::string(name(t.dtype)));
    if (t.sizes.size() != m.dim() || t.strides.size() != m.dim())
      fail(ErrorCode::InvalidArgument, who + ": expected " + std::to_string(m.dim()) +
                                           " dims, got " + std::to_string(t.sizes.size()));
    for (size_t d = 0; d < m.dim(); ++d)
      binder.bind(m.sizes[d], t.sizes[d], who + " size " + std::to_string(d));
  }
  // Strides and offsets after every size, so that they may be expressions of sizes;
  // a dim of size 1 may have any stride.
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Node& p = *placeholders[i];
    if (!p.value.isTensor()) continue;
    const TensorMeta& m = p.value.tensor();
    const HostTensor& t = inputs[i];
    std::string who = "input " + p.target;
    for (size_t d = 0; d < m.dim(); ++d)
      if (t.sizes[d] != 1)
        binder.bind(m.strides[d], t.strides[d], who + " stride " + std::to_string(d));
    if (!m.storageOffset.asInteger()) // a constant offset may differ: views are relative
      binder.bind(m.storageOffset, t.storageOffset, who + " storage offset");
  }
  binder.checkDeferred();

  std::vector<HostTensor> values(graph.size());
  std::vector<std::vector<HostTensor>> tuples(graph.size()); // of the nodes defining tuples
  size_t next = 0;
  for (size_t id = 0; id < graph.size(); ++id) {
    const Node& n = graph.nodes()[id];
    if (n.kind == NodeKind::Placeholder)
      values[id] = inputs[next++];
    else if (n.value.isTuple())
      tuples[id] = runPieces(graph, n, values, binder.binding());
    else if (n.target == "getitem")
      values[id] = tuples.at(n.inputs.at(0)).at(std::get<int64_t>(*n.attr("index")));
    else if (n.target == "item" || n.target == "nonzero" || n.target == "masked_select" ||
             n.target == "_assert_scalar")
      values[id] = runDataDependent(n, values, binder);
    else
      values[id] = runNode(graph, n, values, binder.binding());
  }
  std::vector<HostTensor> outputs;
  for (ValueId id : graph.outputs()) outputs.push_back(values.at(id));
  return outputs;
}

} // namespace kiln::ir
