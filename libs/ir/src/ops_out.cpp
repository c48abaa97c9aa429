// out= forms: "<op>_out" is <op>'s schema plus a trailing Tensor `out` that the
// call writes (torch.add(x, y, out=z) is add_out(x, y, z)). The value is `out`,
// with out's meta: a mutation op, functionalized later.
//
// As torch: out's device must be the result's, and its dtype must take the
// result's, by the op's rule below. Unlike torch, out's sizes must equal the
// result's: torch resizes a wrong-sized `out`, kiln refuses it (a graph where
// a tensor changes shape under a name is not worth modelling).
#include <algorithm>
#include <string>

#include "infer.h"
#include "kiln/common/error.h"

namespace kiln::ir::detail {
namespace {

// Which dtypes of `out` an op accepts for its result's dtype, as torch checks.
enum class OutDType {
  Cast,    // any that torch.can_cast takes (TensorIterator ops, cat, sum, mean)
  Exact,   // only the result's (neg, where, clamp, amax, argmax, mm, softmax, ...)
  Logical, // b8 or u8 (any, all)
};

void checkDType(const OpCall& call, OutDType rule, DType result, DType out) {
  std::string got = std::string(name(out));
  switch (rule) {
  case OutDType::Cast:
    if (!canCast(result, out))
      call.fail("out", "result dtype " + std::string(name(result)) + " cannot be cast to " + got);
    return;
  case OutDType::Exact:
    if (out != result)
      call.fail("out",
                "expected dtype " + std::string(name(result)) + " (the result's), got " + got);
    return;
  case OutDType::Logical:
    if (out != DType::Bool && out != DType::UInt8)
      call.fail("out", "expected dtype b8 or u8, got " + got);
    return;
  }
}

// The functional op's result, inferred over every input but `out` (the last).
TensorMeta functionalResult(const OpCall& call) {
  const OpInfo& functional = getOp(call.op().functional);
  std::vector<const Value*> inputs(call.inputs().begin(), call.inputs().end() - 1);
  return functional.infer(OpCall(functional, inputs, call.attrs(), call.table())).tensor();
}

// TODO(issue 6): torch refuses out= when grad mode is on and an argument requires
// grad; the graph does not say whether grad mode is on, so the tracer must refuse it.
template <OutDType rule> Value inferOut(const OpCall& call) {
  TensorMeta result = functionalResult(call);
  const TensorMeta& out = call.tensor("out");
  if (out.device != result.device)
    call.fail("out",
              "on " + toString(out.device) + " but the result is on " + toString(result.device));
  std::string resize = "kiln does not resize out= tensors; the result is " + toString(result);
  if (out.dim() != result.dim())
    call.fail("out", "has " + std::to_string(out.dim()) + " dims (" + resize + ")");
  for (size_t i = 0; i < out.dim(); ++i)
    requireEqual(call, "out", out.sizes[i], result.sizes[i],
                 "size at dim " + std::to_string(i) + " differs (" + resize + ")");
  checkDType(call, rule, result.dtype, out.dtype);
  return out;
}

struct OutForm {
  const char* op;
  OutDType rule;
};

// The ops users call with out= (torch has no out= for relu, isnan, isinf).
constexpr OutForm kOutForms[] = {
    {"exp", OutDType::Cast},          {"exp2", OutDType::Cast},
    {"log", OutDType::Cast},          {"log1p", OutDType::Cast},
    {"expm1", OutDType::Cast},        {"sqrt", OutDType::Cast},
    {"rsqrt", OutDType::Cast},        {"sin", OutDType::Cast},
    {"cos", OutDType::Cast},          {"tan", OutDType::Cast},
    {"tanh", OutDType::Cast},         {"sigmoid", OutDType::Cast},
    {"erf", OutDType::Cast},          {"reciprocal", OutDType::Cast},
    {"logical_not", OutDType::Cast},  {"gelu", OutDType::Exact},
    {"silu", OutDType::Exact},        {"neg", OutDType::Exact},
    {"abs", OutDType::Exact},         {"floor", OutDType::Exact},
    {"ceil", OutDType::Exact},        {"round", OutDType::Exact},
    {"trunc", OutDType::Exact},       {"sign", OutDType::Exact},
    {"add", OutDType::Cast},          {"sub", OutDType::Cast},
    {"mul", OutDType::Cast},          {"div", OutDType::Cast},
    {"pow", OutDType::Cast},          {"fmod", OutDType::Cast},
    {"remainder", OutDType::Cast},    {"maximum", OutDType::Cast},
    {"minimum", OutDType::Cast},      {"eq", OutDType::Cast},
    {"ne", OutDType::Cast},           {"lt", OutDType::Cast},
    {"le", OutDType::Cast},           {"gt", OutDType::Cast},
    {"ge", OutDType::Cast},           {"logical_and", OutDType::Cast},
    {"logical_or", OutDType::Cast},   {"bitwise_and", OutDType::Cast},
    {"bitwise_or", OutDType::Cast},   {"bitwise_xor", OutDType::Cast},
    {"where", OutDType::Exact},       {"clamp", OutDType::Exact},
    {"sum", OutDType::Cast},          {"prod", OutDType::Cast},
    {"mean", OutDType::Cast},         {"amax", OutDType::Exact},
    {"amin", OutDType::Exact},        {"argmax", OutDType::Exact},
    {"argmin", OutDType::Exact},      {"any", OutDType::Logical},
    {"all", OutDType::Logical},       {"mm", OutDType::Exact},
    {"bmm", OutDType::Exact},         {"addmm", OutDType::Exact},
    {"matmul", OutDType::Exact},      {"softmax", OutDType::Exact},
    {"log_softmax", OutDType::Exact}, {"cat", OutDType::Cast},
    {"stack", OutDType::Cast},
};

InferFn inferFor(OutDType rule) {
  switch (rule) {
  case OutDType::Cast: return inferOut<OutDType::Cast>;
  case OutDType::Exact: return inferOut<OutDType::Exact>;
  case OutDType::Logical: return inferOut<OutDType::Logical>;
  }
  return nullptr;
}

} // namespace

void addOutForms(std::vector<OpInfo>& ops) {
  for (const OutForm& form : kOutForms) {
    auto it =
        std::find_if(ops.begin(), ops.end(), [&](const OpInfo& op) { return op.name == form.op; });
    if (it == ops.end()) throw Error(ErrorCode::Internal, std::string("no op ") + form.op);
    OpInfo out = *it; // a copy: the push below may move `ops`
    out.name += "_out";
    out.args.push_back({"out", ArgKind::Tensor});
    out.infer = inferFor(form.rule);
    out.decompose = nullptr; // the composite's pure decomposition would drop the write
    out.mutates = out.args.size() - 1;
    out.functional = form.op;
    ops.push_back(std::move(out));
  }
}

} // namespace kiln::ir::detail
