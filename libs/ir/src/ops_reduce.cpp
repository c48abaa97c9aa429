// Reductions over some or all dims, with keepdim and torch's dtype rules.
#include <algorithm>
#include <string>

#include "infer.h"

namespace kiln::ir::detail {
namespace {

enum class Reduce {
  Accumulate, // sum, prod: integral and bool give i64 unless a dtype is asked for
  Mean,       // floating or complex only
  Same,       // amax, amin
  Index,      // argmax, argmin: i64; one dim or all
  Logical,    // any, all: bool (u8 stays u8)
};

template <Reduce rule> Value inferReduce(const OpCall& call) {
  const TensorMeta& self = call.tensor("self");
  size_t rank = self.dim();
  std::vector<bool> reduced(rank, !call.has("dim"));
  if (call.has("dim")) {
    std::vector<int64_t> dims = call.intList("dim");
    if (dims.empty()) reduced.assign(rank, true);             // as torch: dim=[] reduces everything
    std::vector<bool> seen(std::max<size_t>(rank, 1), false); // a 0-d tensor takes 0 and -1
    for (int64_t d : dims) {
      int64_t w = wrapDim(call, "dim", d, rank);
      if (seen[w]) call.fail("dim", "dim " + std::to_string(d) + " appears twice");
      seen[w] = true;
      if (rank > 0) reduced[w] = true;
    }
  }
  DType out = self.dtype;
  bool asked = call.takes("dtype") && call.has("dtype");
  if (asked) out = call.dtype("dtype");
  switch (rule) {
  case Reduce::Accumulate:
    if (!asked && isIntegral(out, true)) out = DType::Int64;
    break;
  case Reduce::Mean:
    if (!isFloating(out) && !isComplex(out))
      call.fail(asked ? "dtype" : "self",
                "needs a floating or complex dtype, got " + std::string(name(out)));
    if (call.op().name != "mean" && isComplex(out)) // var, std: the real spread
      out = out == DType::Complex64 ? DType::Float32 : DType::Float64;
    break;
  case Reduce::Same: break;
  case Reduce::Index:
    if (out == DType::Bool) call.fail("self", "is not implemented for bool, as in torch");
    out = DType::Int64;
    break;
  case Reduce::Logical: out = self.dtype == DType::UInt8 ? DType::UInt8 : DType::Bool; break;
  }
  if (rule == Reduce::Same || rule == Reduce::Index) { // no identity: nothing to reduce is an error
    for (size_t i = 0; i < rank; ++i)
      if (reduced[i] && provable(sym::eq(self.sizes[i], 0)))
        call.fail(call.has("dim") ? "dim" : "self",
                  call.has("dim") ? "dim " + std::to_string(i) + " has size 0 and no identity"
                                  : "is empty: give a dim to reduce");
  }
  bool keepdim = call.boolArg("keepdim");
  Shape sizes;
  for (size_t i = 0; i < rank; ++i) {
    if (!reduced[i])
      sizes.push_back(self.sizes[i]);
    else if (keepdim)
      sizes.push_back(call.table().integer(1));
  }
  return fresh(call, out, sizes, self.device, self.requiresGrad);
}

} // namespace

void addReductionOps(std::vector<OpInfo>& ops) {
  auto reduction = [&](const char* n, ArgKind dimKind, bool withDType, InferFn fn) {
    std::vector<ArgSpec> args = {{"self", ArgKind::Tensor},
                                 {"dim", dimKind, true},
                                 {"keepdim", ArgKind::Bool, false, false}};
    if (withDType) args.push_back({"dtype", ArgKind::DType, true, {}, true});
    ops.push_back({n, std::move(args), fn});
  };
  reduction("sum", ArgKind::IntList, true, inferReduce<Reduce::Accumulate>);
  reduction("prod", ArgKind::Int, true, inferReduce<Reduce::Accumulate>);
  reduction("mean", ArgKind::IntList, true, inferReduce<Reduce::Mean>);
  reduction("amax", ArgKind::IntList, false, inferReduce<Reduce::Same>);
  reduction("amin", ArgKind::IntList, false, inferReduce<Reduce::Same>);
  for (const char* n : {"var", "std"})
    ops.push_back({n,
                   {{"self", ArgKind::Tensor},
                    {"dim", ArgKind::IntList, true},
                    {"keepdim", ArgKind::Bool, false, false},
                    {"correction", ArgKind::Float, false, int64_t{1}}},
                   inferReduce<Reduce::Mean>});
  reduction("argmax", ArgKind::Int, false, inferReduce<Reduce::Index>);
  reduction("argmin", ArgKind::Int, false, inferReduce<Reduce::Index>);
  reduction("any", ArgKind::Int, false, inferReduce<Reduce::Logical>);
  reduction("all", ArgKind::Int, false, inferReduce<Reduce::Logical>);
}

} // namespace kiln::ir::detail
