// Creation ops: new tensors from sizes and a fill value (full, zeros, ones,
// empty, arange) or shaped like another (*_like). All on the CPU so far.
#include <cmath>
#include <limits>
#include <string>
#include <tuple>

#include "infer.h"
#include "kiln/sym/print.h"

namespace kiln::ir::detail {
namespace {

// What a Scalar argument holds: an integer expression, or a float constant.
struct Number {
  std::optional<sym::Expr> integer;
  double real = 0;
  bool isBool = false;
};

Number number(const OpCall& call, std::string_view arg) {
  if (const Value* v = call.input(arg)) {
    if (v->isTensor()) call.fail(arg, "expected a number, got a tensor");
    return {v->symInt()};
  }
  const AttrValue& a = call.attr(arg);
  if (auto* d = std::get_if<double>(&a)) return {std::nullopt, *d};
  if (auto* b = std::get_if<bool>(&a)) return {call.table().integer(*b), 0, true};
  return {call.symInt(arg)};
}

// The device asked for, as torch spells it: "cpu", "cuda" or "cuda:N"; `otherwise` when absent.
Device deviceArg(const OpCall& call, Device otherwise = Device{}) {
  if (!call.has("device")) return otherwise;
  std::string text = call.string("device");
  if (text == "cpu") return Device{};
  if (text == "cuda") return Device{DeviceType::Cuda, -1};
  if (text.rfind("cuda:", 0) == 0 && text.size() > 5 && text.size() < 10 &&
      text.find_first_not_of("0123456789", 5) == std::string::npos)
    return Device{DeviceType::Cuda, static_cast<int16_t>(std::stoi(text.substr(5)))};
  call.fail("device", "expected \"cpu\", \"cuda\" or \"cuda:N\", got \"" + text + "\"");
}

// requires_grad, which torch allows only for floating and complex tensors.
bool gradArg(const OpCall& call, DType dtype) {
  bool grad = call.boolArg("requires_grad");
  if (grad && !isFloating(dtype) && !isComplex(dtype))
    call.fail("requires_grad", "only floating and complex tensors can require grad, got " +
                                   std::string(name(dtype)));
  return grad;
}

Shape sizesArg(const OpCall& call) {
  Shape sizes = call.symIntList("size");
  for (sym::Expr s : sizes)
    require(call, "size", sym::ge(s, 0), "negative size " + sym::toString(s));
  return sizes;
}

// Requires a constant fill value to convert to dtype without overflow, as torch's
// c10::checked_convert: floats within the finite range (or not finite), integers within the
// type's range (an unsigned type also takes values down to -max, which wrap); bool takes anything.
void requireFits(const OpCall& call, const Number& fill, DType dtype) {
  std::optional<int64_t> asInt = fill.integer ? fill.integer->asInteger() : std::nullopt;
  if ((fill.integer && !asInt) || dtype == DType::Bool || isComplex(dtype)) return;
  double v = asInt ? static_cast<double>(*asInt) : fill.real;
  double lo = 0, hi = 0;
  switch (dtype) {
  case DType::Float16: hi = 65504; break;
  case DType::BFloat16: hi = 3.3895313892515355e38; break;
  case DType::Float32: hi = std::numeric_limits<float>::max(); break;
  case DType::Float64: hi = std::numeric_limits<double>::max(); break;
  case DType::Int8: lo = -128, hi = 127; break;
  case DType::Int16: lo = -32768, hi = 32767; break;
  case DType::Int32: lo = -2147483648.0, hi = 2147483647; break;
  case DType::Int64: lo = -9223372036854775808.0, hi = 9223372036854775807.0; break;
  case DType::UInt8: lo = -255, hi = 255; break;
  default: return;
  }
  bool fits = isFloating(dtype) ? !std::isfinite(v) || std::fabs(v) <= hi
                                : !std::isnan(v) && v >= lo && v <= hi;
  if (!fits)
    call.fail("fill_value", "cannot be converted to " + std::string(name(dtype)) +
                                " without overflow, as in torch");
}

Value inferFull(const OpCall& call) {
  Number fill = number(call, "fill_value");
  DType dtype = fill.isBool ? DType::Bool : fill.integer ? DType::Int64 : kDefaultFloat;
  if (call.has("dtype")) dtype = call.dtype("dtype");
  requireFits(call, fill, dtype);
  return fresh(call, dtype, sizesArg(call), deviceArg(call), gradArg(call, dtype));
}

Value inferFilled(const OpCall& call) { // zeros, ones, empty
  DType dtype = call.has("dtype") ? call.dtype("dtype") : kDefaultFloat;
  return fresh(call, dtype, sizesArg(call), deviceArg(call), gradArg(call, dtype));
}

Value inferLike(const OpCall& call) {
  const TensorMeta& self = call.tensor("self");
  DType dtype = call.has("dtype") ? call.dtype("dtype") : self.dtype;
  const Value* tensorFill = call.takes("fill_value") ? call.input("fill_value") : nullptr;
  if (call.takes("fill_value") && !(tensorFill && tensorFill->isTensor())) // a number, not a tensor
    requireFits(call, number(call, "fill_value"), dtype);
  return preserveLike(call, self, dtype, deviceArg(call, self.device), gradArg(call, dtype));
}

// arange(start, end, step): ceil((end - start) / step) elements; an error when
// the bounds disagree with the step's sign, as in torch. Integers may be symbolic (a positive or negative constant step);
// floats must all be constants.
Value inferArange(const OpCall& call) {
  Number end = number(call, "end");
  Number start = call.has("start") ? number(call, "start") : Number{call.table().integer(0)};
  Number step = call.has("step") ? number(call, "step") : Number{call.table().integer(1)};
  bool integral = end.integer && start.integer && step.integer;
  DType dtype = call.has("dtype") ? call.dtype("dtype") : integral ? DType::Int64 : kDefaultFloat;
  if (dtype == DType::Bool) call.fail("dtype", "arange of bool is not implemented, as in torch");
  sym::Expr length;
  if (integral) {
    std::optional<int64_t> by = step.integer->asInteger();
    if (!by || *by == 0) call.fail("step", "must be a non-zero integer constant");
    sym::Expr span = *by > 0 ? *end.integer - *start.integer : *start.integer - *end.integer;
    int64_t magnitude = *by > 0 ? *by : -*by;
    require(call, "end", sym::ge(span, 0), "bounds are inconsistent with the step's sign");
    length = sym::floorDiv(span + (magnitude - 1), magnitude);
  } else {
    auto real = [&](const Number& n, std::string_view arg) {
      if (!n.integer) return n.real;
      std::optional<int64_t> v = n.integer->asInteger();
      if (!v) call.fail(arg, "symbolic bounds need integer start, end and step");
      return static_cast<double>(*v);
    };
    double e = real(end, "end"), s = real(start, "start"), d = real(step, "step");
    if (!std::isfinite(e) || !std::isfinite(s) || !std::isfinite(d))
      call.fail("step", "needs finite bounds and step");
    // As torch: the checks on the bounds as given, then as the dtype's accumulator holds
    // them (an integral dtype truncates); the length from doubles (for i64, from the
    // truncated bounds).
    bool truncate = isIntegral(dtype, false);
    double xe = truncate ? std::trunc(e) : e, xs = truncate ? std::trunc(s) : s;
    double xd = truncate ? std::trunc(d) : d;
    for (auto [to, from, by] : {std::tuple{e, s, d}, std::tuple{xe, xs, xd}}) {
      if (by == 0) call.fail("step", "must be non-zero");
      if (!((by > 0 && to >= from) || (by < 0 && to <= from)))
        call.fail("end", "bounds are inconsistent with the step's sign");
    }
    double n = dtype == DType::Int64 ? std::ceil((xe - xs) / xd) : std::ceil((e - s) / d);
    length = call.table().integer(static_cast<int64_t>(n));
  }
  return fresh(call, dtype, {length}, deviceArg(call), gradArg(call, dtype));
}

} // namespace

namespace {

// Whether torch counts the tensor non-overlapping and dense (its elements fill a block of storage
// exactly): its dims of size 2 or more, ordered by stride, have strides 1, n0, n0 * n1, ...;
// nullopt when the ranges cannot decide.
std::optional<bool> denseLayout(const TensorMeta& t) {
  std::vector<size_t> dims;
  for (size_t i = 0; i < t.dim(); ++i) {
    std::optional<bool> many = sym::staticallyKnown(sym::ge(t.sizes[i], 2));
    if (!many) return std::nullopt;
    if (*many) dims.push_back(i);
  }
  for (size_t i = 1; i < dims.size(); ++i) // insertion sort by stride
    for (size_t k = i; k > 0; --k) {
      std::optional<bool> less =
          sym::staticallyKnown(sym::lt(t.strides[dims[k]], t.strides[dims[k - 1]]));
      if (!less) return std::nullopt;
      if (!*less) break;
      std::swap(dims[k], dims[k - 1]);
    }
  sym::Expr expected = t.sizes.empty() ? sym::Expr() : t.sizes[0].table().integer(1);
  for (size_t d : dims) {
    std::optional<bool> equal = sym::staticallyKnown(sym::eq(t.strides[d], expected));
    if (equal != std::optional<bool>(true)) return equal;
    expected = expected * t.sizes[d];
  }
  return true;
}

} // namespace

TensorMeta preserveLike(const OpCall& call, const TensorMeta& self, DType dtype, Device device,
                        bool requiresGrad) {
  TensorMeta m = freshLike(call, {"self"}, dtype, self.sizes, device, requiresGrad);
  if (provable(sym::eq(numel(self.sizes, call.table()), 0)) ||
      denseLayout(self) == std::optional<bool>(true))
    m.strides = self.strides;
  return m;
}

void addCreationOps(std::vector<OpInfo>& ops) {
  ArgSpec size{"size", ArgKind::SymIntList}, dtype{"dtype", ArgKind::DType, true, {}, true};
  // As torch: the CPU unless asked; *_like: the input's device unless asked.
  ArgSpec device{"device", ArgKind::String, false, std::string("cpu"), true};
  ArgSpec grad{"requires_grad", ArgKind::Bool, false, false, true};
  ops.push_back({"full", {size, {"fill_value", ArgKind::Scalar}, dtype, device, grad}, inferFull});
  for (const char* n : {"zeros", "ones", "empty"})
    ops.push_back({n, {size, dtype, device, grad}, inferFilled});
  ArgSpec self{"self", ArgKind::Tensor};
  ArgSpec likeDevice{"device", ArgKind::String, true, {}, true};
  ops.push_back(
      {"full_like", {self, {"fill_value", ArgKind::Scalar}, dtype, likeDevice, grad}, inferLike});
  for (const char* n : {"zeros_like", "ones_like", "empty_like"})
    ops.push_back({n, {self, dtype, likeDevice, grad}, inferLike});
  ops.push_back({"arange",
                 {{"end", ArgKind::Scalar},
                  {"start", ArgKind::Scalar, true},
                  {"step", ArgKind::Scalar, true},
                  dtype,
                  device,
                  grad},
                 inferArange});
}

} // namespace kiln::ir::detail
