// Creation ops: new tensors from sizes and a fill value (full, zeros, ones,
// empty, arange) or shaped like another (*_like). All on the CPU so far.
#include <cmath>
#include <string>

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

Value inferFull(const OpCall& call) {
  Number fill = number(call, "fill_value");
  DType dtype = fill.isBool ? DType::Bool : fill.integer ? DType::Int64 : kDefaultFloat;
  if (call.has("dtype")) dtype = call.dtype("dtype");
  return fresh(call, dtype, sizesArg(call), deviceArg(call), gradArg(call, dtype));
}

Value inferFilled(const OpCall& call) { // zeros, ones, empty
  DType dtype = call.has("dtype") ? call.dtype("dtype") : kDefaultFloat;
  return fresh(call, dtype, sizesArg(call), deviceArg(call), gradArg(call, dtype));
}

Value inferLike(const OpCall& call) {
  const TensorMeta& self = call.tensor("self");
  DType dtype = call.has("dtype") ? call.dtype("dtype") : self.dtype;
  return preserveLike(call, self, dtype, deviceArg(call, self.device), gradArg(call, dtype));
}

// arange(start, end, step): ceil((end - start) / step) elements; an error when
// that is negative, as in torch. Integers may be symbolic (a positive or negative constant step);
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
    if (d == 0 || !std::isfinite(e) || !std::isfinite(s) || !std::isfinite(d))
      call.fail("step", "needs finite bounds and a non-zero step");
    length =
        call.table().integer(std::max<int64_t>(0, static_cast<int64_t>(std::ceil((e - s) / d))));
  }
  return fresh(call, dtype, {length}, deviceArg(call), gradArg(call, dtype));
}

} // namespace

TensorMeta preserveLike(const OpCall& call, const TensorMeta& self, DType dtype, Device device,
                        bool requiresGrad) {
  TensorMeta m = freshLike(call, {"self"}, dtype, self.sizes, device, requiresGrad);
  if (provable(sym::eq(numel(self.sizes, call.table()), 0))) m.strides = self.strides;
  return m;
}

void addCreationOps(std::vector<OpInfo>& ops) {
  ArgSpec size{"size", ArgKind::SymIntList}, dtype{"dtype", ArgKind::DType, true};
  // As torch: the CPU unless asked; *_like: the input's device unless asked.
  ArgSpec device{"device", ArgKind::String, false, std::string("cpu")};
  ArgSpec grad{"requires_grad", ArgKind::Bool, false, false};
  ops.push_back({"full", {size, {"fill_value", ArgKind::Scalar}, dtype, device, grad}, inferFull});
  for (const char* n : {"zeros", "ones", "empty"})
    ops.push_back({n, {size, dtype, device, grad}, inferFilled});
  ArgSpec self{"self", ArgKind::Tensor};
  ArgSpec likeDevice{"device", ArgKind::String, true};
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
