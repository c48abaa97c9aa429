#include "kiln/ir/pad_products.h"

#include <optional>
#include <string>
#include <vector>

#include "kiln/common/error.h"
#include "kiln/ir/passes.h"
#include "kiln/sym/symbol_table.h"

namespace kiln::ir {

namespace {

// Elements in 16 bytes: cuBLASLt's Hopper kernels (TMA) want every matrix dim
// of a 16-bit product a multiple of 8; with one odd dim it falls back to sm75
// kernels 5-7x slower (measured on the H100: 8192x768x50257 bf16, 4.2-6.6 ms
// against 0.8-0.9 ms padded; padding only the leading dimension changes nothing).
std::optional<int64_t> alignmentOf(DType t) {
  if (t == DType::Float16 || t == DType::BFloat16) return 8;
  return std::nullopt;
}

int64_t roundUp(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

size_t axis(int64_t dim, size_t rank) {
  return static_cast<size_t>(dim < 0 ? dim + static_cast<int64_t>(rank) : dim);
}

class Padder {
public:
  Padder(Graph& g, PaddedLayout layout) : g_(g), layout_(layout) {}

  // `value` with dim `d` grown to `size`, zeros after its elements. Through
  // views that keep that dim (transposes, permutes, reshapes of the leading
  // dims) the view's source is padded instead, so one value read by several
  // products (a grad read as dX's left and dW's right operand) is padded once.
  ValueId pad(ValueId value, size_t d, int64_t size) {
    const Node n = g_.node(value); // copies: calls below grow the graph
    const TensorMeta m = g_.meta(value);
    if (n.kind == NodeKind::Call && !n.inputs.empty()) {
      const TensorMeta in = g_.meta(n.inputs[0]);
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
        Shape sizes = m.sizes;
        sizes.back() = g_.symbols().integer(size);
        return g_.call("reshape", {source}, {{"size", sizes}});
      }
    }
    Shape zeros = m.sizes;
    zeros[d] = g_.symbols().integer(size - *m.sizes[d].asInteger());
    ValueId filler = g_.call("zeros", {},
                             {{"size", zeros}, {"dtype", m.dtype}, {"device", toString(m.device)}});
    return g_.call("cat", {value, filler}, {{"dim", static_cast<int64_t>(d)}});
  }

  // The product `n` (inputs already in g_) over padded operands, sliced back
  // to its own value; nullopt when it keeps its dims. linear(x, w[, bias])
  // reads w as [N, K] (traced models' nn.Linear: GPT-2's vocabulary head).
  std::optional<ValueId> padded(const Node& n, int64_t minWork) {
    bool addmm = n.target == "addmm", linear = n.target == "linear";
    if (!addmm && !linear && n.target != "mm" && n.target != "bmm" && n.target != "matmul")
      return std::nullopt;
    ValueId a = n.inputs[addmm ? 1 : 0], b = n.inputs[addmm ? 2 : 1];
    const TensorMeta ma = g_.meta(a), mb = g_.meta(b);
    if ((linear || n.target == "matmul") && ma.dim() > 2 && mb.dim() == 2)
      return folded(n, minWork);
    std::optional<int64_t> align = alignmentOf(n.value.tensor().dtype);
    if (!align || ma.dtype != mb.dtype || ma.dim() < 2 || mb.dim() < 2 || (linear && mb.dim() != 2))
      return std::nullopt;
    size_t bK = linear ? 1 : mb.dim() - 2, bN = linear ? 0 : mb.dim() - 1;
    std::optional<int64_t> m = ma.sizes[ma.dim() - 2].asInteger(),
                           k = ma.sizes.back().asInteger(), nn = mb.sizes[bN].asInteger();
    if (!m || !k || !nn) return std::nullopt;
    std::optional<int64_t> work = numel(n.value.tensor().sizes, g_.symbols()).asInteger();
    if (!work || *work * *k < minWork) return std::nullopt;
    int64_t m2 = roundUp(*m, *align), k2 = roundUp(*k, *align), n2 = roundUp(*nn, *align);
    // addmm's bias is read at the result's shape: its K only.
    if (addmm) m2 = *m, n2 = *nn;
    if (m2 == *m && k2 == *k && n2 == *nn) return std::nullopt;
    if (k2 != *k) a = pad(a, ma.dim() - 1, k2), b = pad(b, bK, k2);
    if (m2 != *m) a = pad(a, ma.dim() - 2, m2);
    if (n2 != *nn) b = pad(b, bN, n2);
    std::vector<ValueId> inputs = n.inputs;
    inputs[addmm ? 1 : 0] = a, inputs[addmm ? 2 : 1] = b;
    if (linear && inputs.size() > 2 && n2 != *nn) inputs[2] = pad(inputs[2], 0, n2); // its bias
    ValueId result = g_.call(n.target, inputs, n.attrs);
    const TensorMeta out = g_.meta(result);
    auto slice = [&](size_t d, int64_t size) {
      result = g_.call("slice", {result},
                       {{"dim", static_cast<int64_t>(d)}, {"start", int64_t{0}}, {"end", size},
                        {"step", int64_t{1}}});
    };
    if (m2 != *m) slice(out.dim() - 2, *m);
    if (n2 != *nn) slice(out.dim() - 1, *nn);
    return asValueOf(result, n);
  }

private:
  // A product of [..., K] by a matrix as one of [-1, K] rows, padded, then
  // viewed as [..., N] again: its slice's grad is then a row-wise pad that
  // fuses into the kernel over the rows (GPT-2's [8192] vocabulary rows).
  std::optional<ValueId> folded(const Node& n, int64_t minWork) {
    const TensorMeta ma = g_.meta(n.inputs[0]);
    Node flat = n;
    flat.inputs[0] = g_.call("reshape", {n.inputs[0]}, {{"size", asRows(ma.sizes, g_.symbols())}});
    flat.value = g_.value(g_.call(n.target, flat.inputs, n.attrs)); // unread: DCE drops it
    std::optional<ValueId> result = padded(flat, minWork);
    if (!result) return std::nullopt;
    return asValueOf(g_.call("reshape", {*result}, {{"size", n.value.tensor().sizes}}), n);
  }

  // `result` standing for `n`'s value: as it is (Viewed), else copied into
  // n's layout; nullopt where that still differs.
  std::optional<ValueId> asValueOf(ValueId result, const Node& n) {
    if (layout_ == PaddedLayout::Viewed) return result;
    if (g_.value(result) != n.value) result = g_.call("contiguous", {result});
    if (g_.value(result) != n.value) return std::nullopt; // a layout the slices do not give
    return result;
  }

  Graph& g_;
  PaddedLayout layout_;
};

} // namespace

Graph padProducts(const Graph& graph, int64_t minWork, PaddedLayout layout) {
  Graph out(graph.symbols());
  Padder padder(out, layout);
  std::vector<ValueId> remap(graph.size());
  std::vector<bool> relaid(graph.size(), false); // its value's layout is not the graph's
  bool changed = false;
  for (ValueId id = 0; id < graph.size(); ++id) {
    Node n = graph.node(id);
    bool readsRelaid = false;
    for (ValueId& in : n.inputs) readsRelaid = readsRelaid || relaid[in], in = remap[in];
    std::optional<ValueId> result;
    if (n.kind == NodeKind::Call) result = padder.padded(n, minWork);
    changed = changed || result;
    if (!result && readsRelaid) {
      // Inferred again over the new layouts; a view that cannot view them
      // (never in Kept mode: there, no layout changes) gives up the mode.
      try {
        result = out.call(n.target, n.inputs, n.attrs);
      } catch (const Error&) {
        return padProducts(graph, minWork, PaddedLayout::Kept);
      }
    }
    remap[id] = result ? *result : out.append(std::move(n));
    relaid[id] = out.value(remap[id]) != graph.value(id);
  }
  std::vector<ValueId> outputs;
  for (ValueId o : graph.outputs()) {
    ValueId v = remap[o];
    if (relaid[o]) v = out.call("contiguous", {v});
    if (out.value(v) != graph.value(o)) return padProducts(graph, minWork, PaddedLayout::Kept);
    outputs.push_back(v);
  }
  out.setOutputs(std::move(outputs));
  if (!changed) return graph;
  // The pads of one value reached through different views are one node now.
  return eliminateDeadCode(eliminateCommonSubexpressions(out));
}

} // namespace kiln::ir
