#include "kiln/codegen/product_epilogues.h"

#include <optional>
#include <utility>
#include <vector>

#include "kiln/ir/op_registry.h"
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

bool isTanhGelu(const ir::Node& n) {
  if (n.kind != ir::NodeKind::Call || n.target != "gelu" || n.inputs.size() != 1 ||
      !n.value.isTensor())
    return false;
  const ir::AttrValue* a = n.attr("approximate");
  const auto* approximate = a ? std::get_if<std::string>(a) : nullptr;
  ir::DType dtype = n.value.tensor().dtype;
  return approximate && *approximate == "tanh" &&
         (dtype == ir::DType::Float16 || dtype == ir::DType::BFloat16);
}

bool isCall(const ir::Node& n, const char* op) {
  return n.kind == ir::NodeKind::Call && n.target == op;
}

} // namespace

bool hasMutations(const Graph& g) {
  for (const ir::Node& n : g.nodes())
    if (n.kind == ir::NodeKind::Call && ir::getOp(n.target).mutates) return true;
  return false;
}

bool geluOfABiasedProduct(const Graph& g, const ir::Node& gelu) {
  if (!isTanhGelu(gelu)) return false;
  const ir::Node* in = &g.node(gelu.inputs[0]);
  if (isCall(*in, "reshape")) in = &g.node(in->inputs[0]);
  if (isCall(*in, "addmm")) return true;
  if (!isCall(*in, "add") || in->inputs.size() != 2) return false;
  for (int first : {0, 1}) {
    const ir::Node& product = g.node(in->inputs[first]);
    const ir::Value& bias = g.value(in->inputs[1 - first]);
    if ((isCall(product, "matmul") || isCall(product, "mm")) && bias.isTensor() &&
        bias.tensor().dim() == 1)
      return true;
  }
  return false;
}

std::optional<ValueId> geluProduct(const Graph& g, ValueId gelu) {
  const ir::Node& n = g.node(gelu);
  if (!isTanhGelu(n) || !n.value.tensor().isContiguous()) return std::nullopt;
  ValueId product = n.inputs[0];
  if (isCall(g.node(product), "reshape")) {
    product = g.node(product).inputs[0];
    if (!g.value(product).isTensor() || !g.meta(product).isContiguous()) return std::nullopt;
  }
  const ir::Node& p = g.node(product);
  if (!isCall(p, "addmm") || p.inputs.size() != 3 || p.attr("alpha") || p.attr("beta") ||
      !p.value.isTensor() || p.value.tensor().dtype != n.value.tensor().dtype ||
      !p.value.tensor().isContiguous())
    return std::nullopt;
  const ir::Value &bias = g.value(p.inputs[0]), &a = g.value(p.inputs[1]);
  if (!bias.isTensor() || bias.tensor().dim() != 1 || !bias.tensor().isContiguous() ||
      bias.tensor().dtype != n.value.tensor().dtype || !a.isTensor() || a.tensor().dim() != 2)
    return std::nullopt;
  std::optional<int64_t> inner = a.tensor().sizes[1].asInteger();
  if (!inner || *inner < 1) return std::nullopt;
  return product;
}

std::optional<ValueId> reluProduct(const Graph& g, ValueId relu, const std::vector<size_t>& uses) {
  const ir::Node& n = g.node(relu);
  if (!isCall(n, "relu") || n.inputs.size() != 1 || !n.value.isTensor()) return std::nullopt;
  ir::DType dtype = n.value.tensor().dtype;
  if (dtype != ir::DType::Float32 && dtype != ir::DType::Float16 && dtype != ir::DType::BFloat16)
    return std::nullopt;
  ValueId product = n.inputs[0];
  if (uses[product] != 1) return std::nullopt;
  if (isCall(g.node(product), "reshape")) {
    product = g.node(product).inputs[0];
    if (uses[product] != 1) return std::nullopt;
  }
  const ir::Node& p = g.node(product);
  bool addmm = isCall(p, "addmm") && p.inputs.size() == 3;
  bool product2 =
      (isCall(p, "mm") || isCall(p, "bmm") || isCall(p, "matmul")) && p.inputs.size() == 2;
  if ((!addmm && !product2) || !p.value.isTensor() || p.value.tensor().dtype != dtype)
    return std::nullopt;
  // Matrices (a batch of them: the epilogue applies to each), not vector products.
  const ir::Value &a = g.value(p.inputs[addmm ? 1 : 0]), &b = g.value(p.inputs[addmm ? 2 : 1]);
  if (!a.isTensor() || !b.isTensor() || a.tensor().dim() < 2 || b.tensor().dim() < 2)
    return std::nullopt;
  std::optional<int64_t> inner = a.tensor().sizes.back().asInteger();
  if (!inner || *inner < 1) return std::nullopt; // cuBLASLt takes no epilogue without products
  return product;
}

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
  if (hasMutations(graph)) return graph;
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

// The tanh GELU's forward (geluProduct) and ReLU (reluProduct) become the
// product's epilogue in lowering. The backward's DGELU was built and measured
// slower on the H100 (cuBLASLt 13's DGELU is an xmma kernel of 96 us for
// GPT-2's fc1 grad against the plain product's 57 plus 34 of the fused kernel
// it saves; DGELU_BGRAD adds a separate 185 us epilogue kernel).
ir::Graph biasedProducts(const ir::Graph& graph) {
  if (hasMutations(graph)) return graph;
  std::vector<int> uses(graph.size(), 0);
  for (const ir::Node& n : graph.nodes())
    for (ValueId in : n.inputs) ++uses[in];
  for (ValueId o : graph.outputs()) ++uses[o];
  bool changed = false;
  Graph out = ir::mapNodes(graph, [&](Graph& out, ValueId id, ir::Node n,
                                      const std::vector<ValueId>& remap) {
    if (auto fused = productWithBias(graph, graph.node(id), uses)) {
      const ir::Node& p = graph.node(fused->first);
      const ir::TensorMeta& a = graph.meta(p.inputs[0]);
      ValueId rows =
          out.call("reshape", {remap[p.inputs[0]]}, {{"size", ir::asRows(a.sizes, out.symbols())}});
      ValueId product = out.call("addmm", {remap[fused->second], rows, remap[p.inputs[1]]});
      ValueId result = out.call("reshape", {product}, {{"size", n.value.tensor().sizes}});
      if (out.value(result) == n.value) { // the product's node stays, unread: DCE drops it
        changed = true;
        return result;
      }
    }
    return out.append(std::move(n));
  });
  return changed ? ir::eliminateDeadCode(out) : graph;
}

} // namespace kiln::codegen
