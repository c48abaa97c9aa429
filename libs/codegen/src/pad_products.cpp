#include "kiln/codegen/pad_products.h"

#include <optional>
#include <string>
#include <vector>

#include "kiln/ir/passes.h"
#include "kiln/sym/symbol_table.h"

namespace kiln::codegen {
namespace {

using ir::Graph;
using ir::ValueId;

// Elements in 16 bytes: cuBLASLt's Hopper kernels (TMA) want every matrix dim
// of a 16-bit product a multiple of 8; with one odd dim it falls back to sm75
// kernels 5-7x slower (measured on the H100: 8192x768x50257 bf16, 4.2-6.6 ms
// against 0.8-0.9 ms padded; padding only the leading dimension changes nothing).
std::optional<int64_t> alignmentOf(ir::DType t) {
  if (t == ir::DType::Float16 || t == ir::DType::BFloat16) return 8;
  return std::nullopt;
}

int64_t roundUp(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

size_t axis(int64_t dim, size_t rank) {
  return static_cast<size_t>(dim < 0 ? dim + static_cast<int64_t>(rank) : dim);
}

class Padder {
public:
  explicit Padder(Graph& g) : g_(g) {}

  // `value` with dim `d` grown to `size`, zeros after its elements. Through
  // views that keep that dim (transposes, permutes, reshapes of the leading
  // dims) the view's source is padded instead, so one value read by several
  // products (a grad read as dX's left and dW's right operand) is padded once.
  ValueId pad(ValueId value, size_t d, int64_t size) {
    const ir::Node n = g_.node(value); // copies: calls below grow the graph
    const ir::TensorMeta m = g_.meta(value);
    if (n.kind == ir::NodeKind::Call && !n.inputs.empty()) {
      const ir::TensorMeta in = g_.meta(n.inputs[0]);
      if (n.target == "transpose") {
        size_t d0 = axis(std::get<int64_t>(*n.attr("dim0")), m.dim()),
               d1 = axis(std::get<int64_t>(*n.attr("dim1")), m.dim());
        size_t from = d == d0 ? d1 : d == d1 ? d0 : d;
        return g_.call("transpose", {pad(n.inputs[0], from, size)}, n.attrs);
      }
      if (n.target == "permute") {
        const auto& dims = std::get<std::vector<int64_t>>(*n.attr("dims"));
        return g_.call("permute", {pad(n.inputs[0], axis(dims[d], m.dim()), size)}, n.attrs);
      }
      if ((n.target == "reshape" || n.target == "view") && d + 1 == m.dim() && in.dim() > 0 &&
          in.sizes.back() == m.sizes.back()) {
        ValueId source = pad(n.inputs[0], in.dim() - 1, size);
        ir::Shape sizes = m.sizes;
        sizes.back() = g_.symbols().integer(size);
        return g_.call("reshape", {source}, {{"size", sizes}});
      }
    }
    ir::Shape zeros = m.sizes;
    zeros[d] = g_.symbols().integer(size - *m.sizes[d].asInteger());
    ValueId filler = g_.call("zeros", {},
                             {{"size", zeros}, {"dtype", m.dtype}, {"device", ir::toString(m.device)}});
    return g_.call("cat", {value, filler}, {{"dim", static_cast<int64_t>(d)}});
  }

  // The product `n` (inputs already in g_) over padded operands, sliced back
  // to its own value; nullopt when it keeps its dims.
  std::optional<ValueId> padded(const ir::Node& n, int64_t minWork) {
    bool addmm = n.target == "addmm";
    if (!addmm && n.target != "mm" && n.target != "bmm" && n.target != "matmul") return std::nullopt;
    ValueId a = n.inputs[addmm ? 1 : 0], b = n.inputs[addmm ? 2 : 1];
    const ir::TensorMeta ma = g_.meta(a), mb = g_.meta(b);
    std::optional<int64_t> align = alignmentOf(n.value.tensor().dtype);
    if (!align || ma.dtype != mb.dtype || ma.dim() < 2 || mb.dim() < 2) return std::nullopt;
    std::optional<int64_t> m = ma.sizes[ma.dim() - 2].asInteger(),
                           k = ma.sizes.back().asInteger(), nn = mb.sizes.back().asInteger();
    if (!m || !k || !nn) return std::nullopt;
    std::optional<int64_t> work = ir::numel(n.value.tensor().sizes, g_.symbols()).asInteger();
    if (!work || *work * *k < minWork) return std::nullopt;
    int64_t m2 = roundUp(*m, *align), k2 = roundUp(*k, *align), n2 = roundUp(*nn, *align);
    // addmm's bias is read at the result's shape: its K only.
    if (addmm) m2 = *m, n2 = *nn;
    if (m2 == *m && k2 == *k && n2 == *nn) return std::nullopt;
    if (k2 != *k) a = pad(a, ma.dim() - 1, k2), b = pad(b, mb.dim() - 2, k2);
    if (m2 != *m) a = pad(a, ma.dim() - 2, m2);
    if (n2 != *nn) b = pad(b, mb.dim() - 1, n2);
    std::vector<ValueId> inputs = n.inputs;
    inputs[addmm ? 1 : 0] = a, inputs[addmm ? 2 : 1] = b;
    ValueId result = g_.call(n.target, inputs, n.attrs);
    const ir::TensorMeta out = g_.meta(result);
    auto slice = [&](size_t d, int64_t size) {
      result = g_.call("slice", {result},
                       {{"dim", static_cast<int64_t>(d)}, {"start", int64_t{0}}, {"end", size},
                        {"step", int64_t{1}}});
    };
    if (m2 != *m) slice(out.dim() - 2, *m);
    if (n2 != *nn) slice(out.dim() - 1, *nn);
    if (g_.value(result) != n.value) result = g_.call("contiguous", {result});
    if (g_.value(result) != n.value) return std::nullopt; // a layout the slices do not give
    return result;
  }

private:
  Graph& g_;
};

} // namespace

ir::Graph padProducts(const ir::Graph& graph, int64_t minWork) {
  Graph out(graph.symbols());
  Padder padder(out);
  std::vector<ValueId> remap(graph.size());
  bool changed = false;
  for (ValueId id = 0; id < graph.size(); ++id) {
    ir::Node n = graph.node(id);
    for (ValueId& in : n.inputs) in = remap[in];
    std::optional<ValueId> result;
    if (n.kind == ir::NodeKind::Call) result = padder.padded(n, minWork);
    changed = changed || result;
    remap[id] = result ? *result : out.append(std::move(n));
  }
  std::vector<ValueId> outputs;
  for (ValueId o : graph.outputs()) outputs.push_back(remap[o]);
  out.setOutputs(std::move(outputs));
  if (!changed) return graph;
  // The pads of one value reached through different views are one node now.
  return ir::eliminateDeadCode(ir::eliminateCommonSubexpressions(out));
}

namespace {

// The product and the bias of add(product, bias) that biasedProducts takes.
std::optional<std::pair<ValueId, ValueId>> productWithBias(const Graph& g, const ir::Node& add,
                                                           const std::vector<int>& uses) {
  if (add.kind != ir::NodeKind::Call || add.target != "add" || add.inputs.size() != 2 ||
      add.attr("alpha") || !add.value.isTensor())
    return std::nullopt;
  for (int first : {0, 1}) {
    ValueId product = add.inputs[first], bias = add.inputs[1 - first];
    const ir::Node& p = g.node(product);
    if (p.kind != ir::NodeKind::Call || (p.target != "matmul" && p.target != "mm") ||
        uses[product] != 1 || !p.value.isTensor())
      continue;
    const ir::TensorMeta &out = add.value.tensor(), &a = g.meta(p.inputs[0]),
                         &b = g.meta(p.inputs[1]), &c = g.meta(bias);
    if (a.dim() < 2 || b.dim() != 2 || !a.isContiguous() || c.dim() != 1 ||
        c.dtype != out.dtype || p.value.tensor().dtype != out.dtype ||
        c.sizes[0] != out.sizes.back() || !out.isContiguous())
      continue;
    return std::make_pair(product, bias);
  }
  return std::nullopt;
}

} // namespace

// TODO(issue 7): the activation epilogues (GELU with its pre-activation kept
// for the backward: cuBLASLt's GELU_AUX_BIAS) and the bias grad's (BGRADB)
// are in libs/runtime's reach but chosen by no pass yet.
ir::Graph biasedProducts(const ir::Graph& graph) {
  std::vector<int> uses(graph.size(), 0);
  for (const ir::Node& n : graph.nodes())
    for (ValueId in : n.inputs) ++uses[in];
  for (ValueId o : graph.outputs()) ++uses[o];
  Graph out(graph.symbols());
  std::vector<ValueId> remap(graph.size());
  bool changed = false;
  for (ValueId id = 0; id < graph.size(); ++id) {
    ir::Node n = graph.node(id);
    if (auto fused = productWithBias(graph, n, uses)) {
      const ir::Node& p = graph.node(fused->first);
      const ir::TensorMeta& a = graph.meta(p.inputs[0]);
      ValueId rows = out.call("reshape", {remap[p.inputs[0]]},
                              {{"size", ir::Shape{out.symbols().integer(-1), a.sizes.back()}}});
      ValueId product = out.call("addmm", {remap[fused->second], rows, remap[p.inputs[1]]});
      ValueId result = out.call("reshape", {product}, {{"size", n.value.tensor().sizes}});
      if (out.value(result) == n.value) { // the product's node stays, unread: DCE drops it
        remap[id] = result;
        changed = true;
        continue;
      }
    }
    for (ValueId& in : n.inputs) in = remap[in];
    remap[id] = out.append(std::move(n));
  }
  if (!changed) return graph;
  std::vector<ValueId> outputs;
  for (ValueId o : graph.outputs()) outputs.push_back(remap[o]);
  out.setOutputs(std::move(outputs));
  return ir::eliminateDeadCode(out);
}

} // namespace kiln::codegen
