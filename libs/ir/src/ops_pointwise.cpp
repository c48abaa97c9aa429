// Pointwise ops: unary, binary (broadcasting, type promotion), where, clamp, to_dtype.
// Results follow the inputs' stride order as torch's TensorIterator does
// (exp of a transposed tensor is transposed): see pointwiseStrides.
#include <string>

#include "infer.h"
#include "kiln/common/error.h"

namespace kiln::ir::detail {
namespace {

ArgSpec tensor(std::string name) {
  return {std::move(name), ArgKind::Tensor};
}
ArgSpec scalar(std::string name, bool optional = false) {
  return {std::move(name), ArgKind::Scalar, optional};
}

// How a unary op's result dtype follows its input's.
enum class Unary {
  ToFloat,   // integral and bool inputs give the default float (exp, sin, ...)
  FloatOnly, // only floating inputs (gelu, silu)
  NoBool,    // same dtype; bool is refused (neg, abs, floor, ...)
  Same,      // same dtype (sign)
  ToBool,    // bool result (logical_not, isnan, isinf)
};

bool isEmpty(const Shape& sizes) {
  for (sym::Expr s : sizes)
    if (provable(sym::eq(s, 0))) return true;
  return false;
}

// gelu's `approximate`: "none" (erf) or "tanh".
void checkApproximate(const OpCall& call) {
  std::string approximate = call.string("approximate");
  if (approximate != "none" && approximate != "tanh")
    call.fail("approximate", "expected 'none' or 'tanh', got '" + approximate + "'");
}

template <Unary rule> Value inferUnary(const OpCall& call) {
  const TensorMeta& self = call.tensor("self");
  DType out = self.dtype;
  std::string got = "not supported for dtype " + std::string(name(self.dtype));
  switch (rule) {
  case Unary::ToFloat:
    if (isIntegral(self.dtype, true)) out = kDefaultFloat;
    break;
  case Unary::FloatOnly:
    if (!isFloating(self.dtype)) call.fail("self", got);
    break;
  case Unary::NoBool:
    if (self.dtype == DType::Bool) call.fail("self", got);
    break;
  case Unary::Same: break;
  case Unary::ToBool: out = DType::Bool; break;
  }
  if (call.op().name == "gelu") checkApproximate(call);
  return freshLike(call, {"self"}, out, self.sizes, self.device, self.requiresGrad);
}

// How a binary op's result dtype follows the promoted dtype of its operands.
enum class Binary {
  Promote,  // add mul maximum minimum
  NoBool,   // pow fmod remainder: bool operands are refused (but pow of a bool tensor by a bool)
  Subtract, // sub: any bool operand is refused
  Divide,   // true division gives a float for integral operands; floor and trunc refuse bool
  Compare,  // bool result
  Logical,  // bool result, any operand dtypes
  Bitwise,  // integral or bool operands only
};

// Whether the argument is a bool tensor or a bool number.
bool isBool(const OpCall& call, std::string_view arg) {
  if (const Value* v = call.input(arg)) return v->isTensor() && v->tensor().dtype == DType::Bool;
  return call.has(arg) && std::holds_alternative<bool>(call.attr(arg));
}

template <Binary rule> Value inferBinary(const OpCall& call) {
  Shape sizes = broadcast(call, {"self", "other"});
  Device device = commonDevice(call, {"self", "other"});
  DType promoted = resultType(call, {"self", "other"});
  DType out = promoted;
  switch (rule) {
  case Binary::Promote: break;
  case Binary::NoBool:
    // As torch: a bool tensor to a bool number's power is itself (true) or ones (false);
    // two bool tensors, and fmod or remainder of bools, are refused.
    if (promoted == DType::Bool && !(call.op().name == "pow" && !call.input("other")))
      call.fail("other", "not supported for two bool operands");
    if (call.op().name == "pow" && isIntegral(call.tensor("self").dtype, true) &&
        !call.input("other") && std::holds_alternative<int64_t>(call.attr("other")) &&
        std::get<int64_t>(call.attr("other")) < 0)
      call.fail("other", "integers to negative integer powers are not allowed");
    break;
  case Binary::Subtract: // as torch: a bool tensor or number on either side
    for (const char* arg : {"self", "other"})
      if (isBool(call, arg))
        call.fail(arg, "subtraction of a bool is not supported; use logical_not or bitwise_xor");
    break;
  case Binary::Divide: {
    std::string mode = call.has("rounding_mode") ? call.string("rounding_mode") : "none";
    if (mode != "none" && mode != "floor" && mode != "trunc")
      call.fail("rounding_mode", "expected 'floor', 'trunc' or none, got '" + mode + "'");
    if (mode == "none" && isIntegral(promoted, true)) out = kDefaultFloat;
    if (mode != "none" && promoted == DType::Bool)
      call.fail("other", "rounding division of two bool operands is not supported");
    break;
  }
  case Binary::Compare:
  case Binary::Logical: out = DType::Bool; break;
  case Binary::Bitwise:
    if (!isIntegral(promoted, true))
      call.fail("other", "needs integral or bool operands, got " + std::string(name(promoted)));
    break;
  }
  bool hasAlpha = call.op().args.size() == 3 && call.op().args[2].name == "alpha";
  if (hasAlpha && isIntegral(promoted, true) && std::holds_alternative<double>(call.attr("alpha")))
    call.fail("alpha", "must not be a floating point number for integral inputs");
  if (hasAlpha && promoted != DType::Bool && std::holds_alternative<bool>(call.attr("alpha")))
    call.fail("alpha", "a bool alpha needs bool operands");
  return freshLike(call, {"self", "other"}, out, sizes, device,
                   anyRequiresGrad(call, {"self", "other"}));
}

// gelu's derivative times the grad (torch's gelu_backward, the autograd rule's
// result): floating operands, broadcast and promoted as a binary op.
Value inferGeluBackward(const OpCall& call) {
  Shape sizes = broadcast(call, {"grad_output", "self"});
  Device device = commonDevice(call, {"grad_output", "self"});
  DType out = resultType(call, {"grad_output", "self"});
  for (const char* arg : {"grad_output", "self"})
    if (!isFloating(call.tensor(arg).dtype))
      call.fail(arg, "not supported for dtype " + std::string(name(call.tensor(arg).dtype)));
  checkApproximate(call);
  return freshLike(call, {"grad_output", "self"}, out, sizes, device,
                   anyRequiresGrad(call, {"grad_output", "self"}));
}

Value inferWhere(const OpCall& call) {
  DType condition = call.tensor("condition").dtype;
  if (condition != DType::Bool && condition != DType::UInt8) // u8: deprecated in torch, accepted
    call.fail("condition", "expected dtype b8, got " + std::string(name(condition)));
  Shape sizes = broadcast(call, {"condition", "self", "other"});
  Device device = commonDevice(call, {"condition", "self", "other"});
  DType out = resultType(call, {"self", "other"});
  return freshLike(call, {"condition", "self", "other"}, out, sizes, device,
                   anyRequiresGrad(call, {"self", "other"}));
}

Value inferClamp(const OpCall& call) {
  if (!call.has("min") && !call.has("max")) call.fail("min", "at least one of min, max is needed");
  auto isTensor = [&](const char* bound) {
    const Value* v = call.input(bound);
    return v && v->isTensor();
  };
  if (call.has("min") && call.has("max") && isTensor("min") != isTensor("max"))
    call.fail(isTensor("min") ? "max" : "min", "must be a tensor too, as the other bound is");
  Shape sizes = broadcast(call, {"self", "min", "max"});
  Device device = commonDevice(call, {"self", "min", "max"});
  DType out = resultType(call, {"self", "min", "max"});
  // torch clamps bools only between tensor bounds (clamp.Tensor is maximum/minimum)
  for (const char* bound : {"min", "max"})
    if (out == DType::Bool && call.has(bound) && !call.input(bound))
      call.fail(bound, "a number bound is not supported for dtype b8");
  return freshLike(call, {"self", "min", "max"}, out, sizes, device,
                   anyRequiresGrad(call, {"self", "min", "max"}));
}

Value inferToDType(const OpCall& call) {
  const TensorMeta& self = call.tensor("self");
  TensorMeta out =
      freshLike(call, {"self"}, call.dtype("dtype"), self.sizes, self.device, self.requiresGrad);
  if (isEmpty(self.sizes)) out.strides = self.strides; // as torch's empty_like: kept when dense
  return out;
}

// The in-place form "op_" of a pointwise op: the out-of-place result must keep
// self's sizes (self does not broadcast) and cast to self's dtype.
Value inferInPlace(const OpCall& call) {
  const OpInfo& base = getOp(call.op().functional);
  const TensorMeta& self = call.tensor("self");
  Value result = base.infer(call.rebind(base));
  const TensorMeta& out = result.tensor();
  if (out.dim() != self.dim())
    call.fail("self", "cannot take the broadcast result in place: " + toString(out));
  for (size_t i = 0; i < self.dim(); ++i)
    requireEqual(call, "self", out.sizes[i], self.sizes[i],
                 "the broadcast result differs at dim " + std::to_string(i));
  for (size_t i = 0; i < self.dim(); ++i) // as torch: no two elements written at one place
    if (provable(sym::eq(self.strides[i], 0)) && provable(sym::lt(1, self.sizes[i])))
      call.fail("self", "dim " + std::to_string(i) +
                            " has stride 0: more than one element would be written to one place");
  if (!canCast(out.dtype, self.dtype))
    call.fail("self", "result dtype " + std::string(ir::name(out.dtype)) + " cannot be cast to " +
                          std::string(ir::name(self.dtype)));
  return self;
}

} // namespace

void addPointwiseOps(std::vector<OpInfo>& ops) {
  auto unary = [&](std::initializer_list<const char*> names, InferFn fn) {
    for (const char* n : names) ops.push_back({n, {tensor("self")}, fn});
  };
  unary({"exp", "exp2", "log", "log1p", "expm1", "sqrt", "rsqrt", "sin", "cos", "tan", "tanh",
         "sigmoid", "erf", "reciprocal"},
        inferUnary<Unary::ToFloat>);
  unary({"silu"}, inferUnary<Unary::FloatOnly>);
  ops.push_back({"gelu",
                 {tensor("self"), {"approximate", ArgKind::String, false, std::string("none")}},
                 inferUnary<Unary::FloatOnly>});
  unary({"neg", "abs", "relu", "floor", "ceil", "round", "trunc"}, inferUnary<Unary::NoBool>);
  unary({"sign"}, inferUnary<Unary::Same>);
  unary({"logical_not", "isnan", "isinf"}, inferUnary<Unary::ToBool>);

  auto binary = [&](std::initializer_list<const char*> names, InferFn fn) {
    for (const char* n : names) ops.push_back({n, {tensor("self"), scalar("other")}, fn});
  };
  ArgSpec alpha{"alpha", ArgKind::Float, false, int64_t{1}, true}; // other is scaled by it
  ops.push_back({"add", {tensor("self"), scalar("other"), alpha}, inferBinary<Binary::Promote>});
  ops.push_back({"sub", {tensor("self"), scalar("other"), alpha}, inferBinary<Binary::Subtract>});
  binary({"mul"}, inferBinary<Binary::Promote>);
  binary({"pow", "fmod", "remainder"}, inferBinary<Binary::NoBool>);
  binary({"eq", "ne", "lt", "le", "gt", "ge"}, inferBinary<Binary::Compare>);
  binary({"bitwise_and", "bitwise_or", "bitwise_xor"}, inferBinary<Binary::Bitwise>);
  for (const char* n : {"logical_and", "logical_or"}) // tensors only, as torch
    ops.push_back({n, {tensor("self"), tensor("other")}, inferBinary<Binary::Logical>});
  for (const char* n : {"maximum", "minimum"})
    ops.push_back({n, {tensor("self"), tensor("other")}, inferBinary<Binary::Promote>});
  ops.push_back({"div",
                 {tensor("self"), scalar("other"), {"rounding_mode", ArgKind::String, true}},
                 inferBinary<Binary::Divide>});
  ops.push_back({"where", {tensor("condition"), scalar("self"), scalar("other")}, inferWhere});
  ops.push_back({"clamp", {tensor("self"), scalar("min", true), scalar("max", true)}, inferClamp});
  ops.push_back({"to_dtype", {tensor("self"), {"dtype", ArgKind::DType}}, inferToDType});
  // In-place forms, as torch has them: none for isnan, isinf, maximum, minimum, where, to_dtype.
  size_t outOfPlace = ops.size();
  for (size_t i = 0; i < outOfPlace; ++i) {
    const std::string& n = ops[i].name;
    if (n == "isnan" || n == "isinf" || n == "maximum" || n == "minimum" || n == "where" ||
        n == "to_dtype")
      continue;
    OpInfo inPlace = ops[i];
    inPlace.name += "_";
    inPlace.infer = inferInPlace;
    inPlace.mutates = 0; // self
    inPlace.functional = ops[i].name;
    ops.push_back(std::move(inPlace));
  }
  ops.push_back({"gelu_backward",
                 {tensor("grad_output"),
                  tensor("self"),
                  {"approximate", ArgKind::String, false, std::string("none")}},
                 inferGeluBackward});
}

} // namespace kiln::ir::detail
