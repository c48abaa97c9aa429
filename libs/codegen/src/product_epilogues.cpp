#include "kiln/codegen/product_epilogues.h"

#include <optional>
#include <utility>
#include <vector>

#include "kiln/ir/passes.h"
#include "kiln/ir/tensor_meta.h"
#include "kiln/sym/symbol_table.h"

namespace kiln::codegen {

using ir::Graph;
using ir::ValueId;

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

// The value a chain of views starts from: transposes and permutes, and
// reshapes of contiguous values (which view them).
ValueId viewedFrom(const Graph& g, ValueId id) {
  for (;;) {
    const ir::Node& n = g.node(id);
    if (n.kind != ir::NodeKind::Call || n.inputs.empty() || !g.value(n.inputs[0]).isTensor())
      return id;
    const std::string& op = n.target;
    bool view = op == "transpose" || op == "permute" ||
                ((op == "reshape" || op == "view") && g.meta(n.inputs[0]).isContiguous());
    if (!view) return id;
    id = n.inputs[0];
  }
}

// sum(dy, every dim but the last) of a contiguous f16/bf16 dy, in its dtype.
bool sumsColumns(const Graph& g, const ir::Node& sum) {
  if (sum.kind != ir::NodeKind::Call || sum.target != "sum" || sum.inputs.size() != 1 ||
      !sum.value.isTensor() || !g.value(sum.inputs[0]).isTensor())
    return false;
  const ir::TensorMeta &dy = g.meta(sum.inputs[0]), &out = sum.value.tensor();
  if (dy.dim() < 2 || out.dim() != 1 || out.dtype != dy.dtype || !dy.isContiguous() ||
      (dy.dtype != ir::DType::Float16 && dy.dtype != ir::DType::BFloat16))
    return false;
  if (const ir::AttrValue* keep = sum.attr("keepdim"))
    if (const bool* k = std::get_if<bool>(keep); k && *k) return false;
  const ir::AttrValue* dims = sum.attr("dim");
  std::vector<int64_t> list;
  if (const auto* l = dims ? std::get_if<std::vector<int64_t>>(dims) : nullptr) list = *l;
  else if (const auto* d = dims ? std::get_if<int64_t>(dims) : nullptr) list = {*d};
  auto rank = static_cast<int64_t>(dy.dim());
  std::vector<bool> reduced(dy.dim(), false);
  for (int64_t d : list) {
    if (d < -rank || d >= rank) return false;
    reduced[static_cast<size_t>((d + rank) % rank)] = true;
  }
  for (size_t d = 0; d < dy.dim(); ++d)
    if (reduced[d] != (d + 1 < dy.dim())) return false;
  return true;
}

} // namespace

std::optional<ValueId> productSummingRows(const Graph& g, ValueId sum) {
  const ir::Node& s = g.node(sum);
  if (!sumsColumns(g, s)) return std::nullopt;
  const ir::TensorMeta& dy = g.meta(s.inputs[0]);
  ValueId root = viewedFrom(g, s.inputs[0]);
  sym::Expr columns = dy.sizes.back();
  for (ValueId id = 0; id < g.size(); ++id) {
    const ir::Node& p = g.node(id);
    if (p.kind != ir::NodeKind::Call || (p.target != "mm" && p.target != "matmul") ||
        p.inputs.size() != 2 || !p.value.isTensor() || p.value.tensor().dtype != dy.dtype ||
        !g.value(p.inputs[0]).isTensor() || !g.value(p.inputs[1]).isTensor())
      continue;
    const ir::TensorMeta &a = g.meta(p.inputs[0]), &b = g.meta(p.inputs[1]);
    if (a.dim() != 2 || b.dim() != 2 || a.dtype != dy.dtype || b.dtype != dy.dtype ||
        viewedFrom(g, p.inputs[0]) != root)
      continue;
    // a[i, r] is dy's element (r, i) of dy as [rows, columns]: both view one storage.
    if (a.sizes[0] == columns && a.strides[0].asInteger() == 1 && a.strides[1] == columns &&
        a.storageOffset == dy.storageOffset &&
        a.sizes[0] * a.sizes[1] == ir::numel(dy.sizes, g.symbols()))
      return id;
  }
  return std::nullopt;
}

ir::Graph biasGradsAfterProducts(const ir::Graph& graph) {
  std::vector<std::vector<ValueId>> after(graph.size()); // the sums placed after each product
  std::vector<bool> moved(graph.size(), false), paired(graph.size(), false);
  bool any = false;
  for (ValueId sum = 0; sum < graph.size(); ++sum) {
    std::optional<ValueId> product = productSummingRows(graph, sum);
    if (!product || paired[*product]) continue;
    if (*product > sum) {
      // Nothing up to the product may read the sum (the first to read it
      // through other values would read it itself).
      bool read = false;
      for (ValueId id = sum + 1; id <= *product && !read; ++id)
        for (ValueId in : graph.node(id).inputs) read = read || in == sum;
      if (read) continue;
      after[*product].push_back(sum);
      moved[sum] = any = true;
    }
    paired[*product] = true;
  }
  if (!any) return graph;
  Graph out(graph.symbols());
  std::vector<ValueId> remap(graph.size());
  auto emit = [&](ValueId id) {
    ir::Node n = graph.node(id);
    for (ValueId& in : n.inputs) in = remap[in];
    remap[id] = out.append(std::move(n));
  };
  for (ValueId id = 0; id < graph.size(); ++id) {
    if (moved[id]) continue;
    emit(id);
    for (ValueId sum : after[id]) emit(sum);
  }
  std::vector<ValueId> outputs;
  for (ValueId o : graph.outputs()) outputs.push_back(remap[o]);
  out.setOutputs(std::move(outputs));
  return out;
}

// TODO(issue 7): the activation epilogues (GELU with its pre-activation kept
// for the backward: cuBLASLt's GELU_AUX_BIAS) are in libs/runtime's reach but
// chosen by no pass yet.
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
