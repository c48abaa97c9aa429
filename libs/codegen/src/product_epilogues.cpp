#include "kiln/codegen/product_epilogues.h"

#include <optional>
#include <utility>
#include <vector>

#include "kiln/ir/passes.h"
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
