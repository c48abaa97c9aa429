// Data-dependent ops: item (a tensor's one value as a symbol), nonzero and
// masked_select (sizes counted from the data), and _assert_scalar (a deferred
// runtime assert); and sym_int, an integer expression of symbols the
// graph binds (a graph output such as `2*u0`).
//
// item, nonzero and masked_select bind an unbacked symbol, given as their
// `symbol` attribute: whoever builds the node creates it
// (SymbolTable::createUnbacked), so inferring the node again gives the same
// value, and the binding is recorded at the node that defines it (PyTorch's
// unbacked_bindings). The symbol's range is narrowed to what the op can give.
#include <string>

#include "infer.h"
#include "kiln/common/error.h"
#include "kiln/sym/print.h"
#include "kiln/sym/range.h"
#include "kiln/sym/symbol_table.h"

namespace kiln::ir::detail {
namespace {

sym::Expr boundSymbol(const OpCall& call) {
  sym::Expr s = std::get<sym::Expr>(call.attr("symbol"));
  if (call.table().isBacked(s))
    call.fail("symbol", s.name() + " has a hint: the op binds a fresh unbacked symbol");
  return s;
}

// Narrows `s` to [lo, hi], where the narrowing fits its current range (a
// symbol bound by an earlier inference of the same node is already there).
void narrowTo(const OpCall& call, sym::Expr s, sym::Range r) {
  sym::Range now = sym::range(s);
  sym::Range next{std::max(now.lo, r.lo), std::min(now.hi, r.hi)};
  if (next.lo > next.hi) call.fail("symbol", s.name() + " cannot lie in " + sym::toString(r));
  call.table().narrow(s, next);
}

// The range of values a dtype holds, as far as an int64 symbol sees it.
sym::Range dtypeRange(DType t) {
  switch (t) {
  case DType::Bool: return {0, 1};
  case DType::UInt8: return {0, 255};
  case DType::Int8: return {-128, 127};
  case DType::Int16: return {-32768, 32767};
  case DType::Int32: return {INT32_MIN, INT32_MAX};
  default: return sym::Range::unbounded();
  }
}

// item(self, symbol): the one element of an integer or bool tensor.
Value inferItem(const OpCall& call) {
  const TensorMeta& self = call.tensor("self");
  if (!provable(sym::eq(numel(self.sizes, call.table()), 1)))
    call.fail("self", "item() needs a tensor of one element, got sizes " + toString(Value(self)));
  if (isFloating(self.dtype) || isComplex(self.dtype))
    call.fail("self", "item() of a " + std::string(name(self.dtype)) +
                          " tensor: kiln's symbols are integers");
  sym::Expr s = boundSymbol(call);
  narrowTo(call, s, dtypeRange(self.dtype));
  return Value(s);
}

// nonzero(self, symbol): the indices of the non-zero elements, i64[symbol, rank],
// column-major as torch lays it out (strides [1, symbol]).
Value inferNonzero(const OpCall& call) {
  const TensorMeta& self = call.tensor("self");
  sym::SymbolTable& table = call.table();
  sym::Expr count = boundSymbol(call);
  narrowTo(call, count, {0, sym::range(numel(self.sizes, table)).hi});
  TensorMeta out = TensorMeta::contiguous(DType::Int64, {count, table.integer(static_cast<int64_t>(self.dim()))},
                                          table, self.device);
  out.strides = {table.integer(1), count};
  return Value(out);
}

// masked_select(self, mask, symbol): the elements where the mask is true, in
// order, over the broadcast of both: [symbol].
Value inferMaskedSelect(const OpCall& call) {
  if (call.tensor("mask").dtype != DType::Bool) call.fail("mask", "must be a bool tensor");
  Shape shape = broadcast(call, {"self", "mask"});
  sym::SymbolTable& table = call.table();
  sym::Expr count = boundSymbol(call);
  narrowTo(call, count, {0, sym::range(numel(shape, table)).hi});
  const TensorMeta& self = call.tensor("self");
  TensorMeta out = TensorMeta::contiguous(self.dtype, {count}, table,
                                          commonDevice(call, {"self", "mask"}));
  out.requiresGrad = self.requiresGrad;
  return Value(out);
}

// _assert_scalar(condition, message): fails the run when the condition is
// false; from here on the table takes it as a fact (so later ops may rely on
// it). Its value is 1, as the condition's once it held (a value is an integer).
Value inferAssertScalar(const OpCall& call) {
  sym::Expr condition = std::get<sym::Expr>(call.attr("condition"));
  if (sym::staticallyKnown(condition) == std::optional<bool>(false))
    call.fail("condition", sym::toString(condition) + " is false for every value (" +
                               call.string("message") + ")");
  call.table().assume(condition);
  return Value(call.table().integer(1));
}

// sym_int(value): the value of an integer expression over the graph's symbols.
Value inferSymInt(const OpCall& call) {
  return Value(call.symInt("value"));
}

ValueId decomposeMaskedSelect(Graph& g, const Node& node, const std::vector<ValueId>& in) {
  sym::SymbolTable& table = g.symbols();
  // The broadcast shape (inference checked it): the longer rank, each dim the
  // non-1 size of the two.
  const TensorMeta &a = g.meta(in[0]), &b = g.meta(in[1]);
  size_t rank = std::max(a.dim(), b.dim());
  Shape shape(rank, table.integer(1));
  for (size_t d = 0; d < rank; ++d) {
    for (const TensorMeta* m : {&a, &b}) {
      if (d + m->dim() < rank) continue;
      sym::Expr size = m->sizes[d + m->dim() - rank];
      if (size.asInteger() != std::optional<int64_t>(1)) shape[d] = size;
    }
  }
  auto flat = [&](ValueId x) {
    if (g.meta(x).sizes != shape) x = g.call("expand", {x}, {{"size", shape}});
    return g.call("reshape", {x}, {{"size", std::vector<int64_t>{-1}}});
  };
  ValueId values = flat(in[0]), mask = flat(in[1]);
  sym::Expr count = std::get<sym::Expr>(*node.attr("symbol"));
  ValueId indices = g.call("nonzero", {mask}, {{"symbol", count}});
  ValueId column = g.call("view", {indices}, {{"size", std::vector<sym::Expr>{count}}});
  return g.call("index_select", {values, column}, {{"dim", int64_t{0}}});
}

} // namespace

void addDataOps(std::vector<OpInfo>& ops) {
  ArgSpec self{"self", ArgKind::Tensor}, symbol{"symbol", ArgKind::Symbol};
  ops.push_back({"item", {self, symbol}, inferItem});
  ops.push_back({"nonzero", {self, symbol}, inferNonzero});
  ops.push_back({"sym_int", {{"value", ArgKind::Scalar}}, inferSymInt});
  ops.push_back({"masked_select", {self, {"mask", ArgKind::Tensor}, symbol}, inferMaskedSelect,
                 decomposeMaskedSelect});
  OpInfo check{"_assert_scalar",
               {{"condition", ArgKind::Condition}, {"message", ArgKind::String}},
               inferAssertScalar};
  check.effect = true;
  ops.push_back(std::move(check));
}

} // namespace kiln::ir::detail
