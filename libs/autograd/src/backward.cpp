// backward(): the joint forward + backward graph from the derivative rules.
#include "kiln/autograd/backward.h"

#include <map>
#include <set>
#include <string>

#include "kiln/autograd/grad_builder.h"
#include "kiln/autograd/rules.h"
#include "kiln/common/error.h"
#include "kiln/ir/attention.h"
#include "kiln/ir/op_registry.h"
#include "kiln/ir/passes.h"

namespace kiln::autograd {
namespace {

bool floating(const ir::Value& v) {
  if (v.isTensor()) return ir::isFloating(v.tensor().dtype);
  if (v.isTuple()) return !v.tuple().empty() && ir::isFloating(v.tuple()[0].dtype);
  return false;
}

// Composites with a rule of their own stay whole; the others are decomposed.
// Attention's rule is flash attention's, which gives no mask a grad: a mask
// that needs one is differentiated through the decomposition.
bool keptWhole(const ir::Graph& g, const ir::Node& n) {
  if (!ir::getOp(n.target).decompose || !findRule(n.target)) return false;
  if (n.target != "scaled_dot_product_attention") return true;
  std::optional<ValueId> mask = ir::attentionMask(n);
  return !mask || !g.meta(*mask).requiresGrad;
}

// Grads of the values, added up as uses are met.
class GradMap {
public:
  explicit GradMap(Graph& g) : g_(g) {}
  void add(ValueId v, ValueId grad) {
    auto [it, fresh] = grads_.emplace(v, grad);
    if (!fresh) it->second = g_.call("add", {it->second, grad});
  }
  void addPiece(ValueId tuple, size_t index, ValueId grad) {
    auto& pieces = pieces_[tuple];
    pieces.resize(g_.value(tuple).tuple().size());
    pieces[index] = pieces[index] ? g_.call("add", {*pieces[index], grad}) : grad;
  }
  std::optional<ValueId> of(ValueId v) const {
    auto it = grads_.find(v);
    return it == grads_.end() ? std::nullopt : std::optional(it->second);
  }
  std::vector<std::optional<ValueId>> piecesOf(ValueId v) const {
    auto it = pieces_.find(v);
    return it == pieces_.end() ? std::vector<std::optional<ValueId>>{} : it->second;
  }

private:
  Graph& g_;
  std::map<ValueId, ValueId> grads_;
  std::map<ValueId, std::vector<std::optional<ValueId>>> pieces_;
};

int64_t rowDim(const ir::Node& softmax) {
  const ir::AttrValue* dim = softmax.attr("dim");
  return dim ? std::get<int64_t>(*dim) : 0;
}

// A softmax or log_softmax of a float32/64 row (its own opmath) that the
// backward reads.
bool splitsRows(const ir::Graph& g, ValueId id, const std::vector<bool>& readBack) {
  const ir::Node& n = g.node(id);
  if (!readBack[id] || n.kind != ir::NodeKind::Call || n.attr("dtype") ||
      (n.target != "softmax" && n.target != "log_softmax"))
    return false;
  const ir::TensorMeta& x = g.meta(n.inputs[0]);
  if (x.dim() == 0 || ir::opmath(x.dtype) != x.dtype || !x.isContiguous()) return false;
  int64_t d = rowDim(n);
  sym::Expr size = x.sizes.at(static_cast<size_t>(d < 0 ? d + static_cast<int64_t>(x.dim()) : d));
  return size.asInteger() != std::optional<int64_t>(0); // an empty row has no max
}

// The joint graph as `out`, whose node remap[id] is the old node id and whose
// first `forwardNodes` nodes are the forward.
JointGraph rebuilt(JointGraph joint, Graph out, const std::vector<ValueId>& remap,
                   size_t forwardNodes) {
  std::vector<ValueId> outputs;
  for (ValueId o : joint.graph.outputs()) outputs.push_back(remap[o]);
  out.setOutputs(std::move(outputs));
  joint.graph = std::move(out);
  joint.forwardNodes = forwardNodes;
  return joint;
}

// The forward's softmax and log_softmax whose result the backward reads, as
// their rows' logsumexp and a pointwise rest (x - lse, exp(x - lse)): the
// partition may then save a value per row and recompute the result from x in
// the backward, fused into the grad's kernel, where it would otherwise save
// the whole result or recompute the rows' max and sum (as AOTAutograd's
// decompositions give Inductor).
JointGraph withRowLogsumexps(JointGraph joint) {
  const Graph& g = joint.graph;
  std::vector<bool> readBack(joint.forwardNodes);
  for (ValueId id = static_cast<ValueId>(joint.forwardNodes); id < g.size(); ++id)
    for (ValueId in : g.node(id).inputs)
      if (in < joint.forwardNodes) readBack[in] = true;
  bool any = false;
  for (ValueId id = 0; id < joint.forwardNodes && !any; ++id) any = splitsRows(g, id, readBack);
  if (!any) return joint;

  Graph out(g.symbols());
  std::vector<ValueId> remap(g.size());
  size_t forwardNodes = 0;
  for (ValueId id = 0; id < g.size(); ++id) {
    ir::Node n = g.node(id);
    for (ValueId& in : n.inputs) in = remap[in];
    if (id < joint.forwardNodes && splitsRows(g, id, readBack)) {
      std::vector<ir::Attr> along = {{"dim", std::vector<int64_t>{rowDim(n)}}, {"keepdim", true}};
      ValueId x = n.inputs[0], max = out.call("amax", {x}, along);
      ValueId sum = out.call("sum", {out.call("exp", {out.call("sub", {x, max})})}, along);
      ValueId lse = out.call("add", {max, out.call("log", {sum})});
      ValueId y = out.call("sub", {x, lse});
      remap[id] = n.target == "softmax" ? out.call("exp", {y}) : y;
      if (out.value(remap[id]) != n.value)
        throw Error(ErrorCode::Internal, n.target + " by its rows' logsumexp gives " +
                                             ir::toString(out.value(remap[id])));
    } else {
      remap[id] = out.append(std::move(n));
    }
    if (id + 1 == joint.forwardNodes) forwardNodes = out.size();
  }
  return rebuilt(std::move(joint), std::move(out), remap, forwardNodes);
}

// The backward's attention_lse of a forward attention's own inputs and
// attributes (attention's rule), moved into the forward right after that
// attention: codegen's flash forward writes it beside the output, and the
// partition saves it (it is never recomputed), where the backward would run
// the scores' product once more for it.
JointGraph withAttentionLogsumexps(JointGraph joint) {
  const Graph& g = joint.graph;
  std::map<ValueId, ValueId> lseOf; // forward attention -> the backward's lse of it
  for (ValueId id = static_cast<ValueId>(joint.forwardNodes); id < g.size(); ++id) {
    const ir::Node& n = g.node(id);
    if (n.kind != ir::NodeKind::Call || n.target != "attention_lse") continue;
    for (ValueId f = 0; f < joint.forwardNodes; ++f) {
      const ir::Node& forward = g.node(f);
      if (ir::lseOfAttention(forward, n) && !lseOf.count(f)) {
        lseOf[f] = id;
        break;
      }
    }
  }
  if (lseOf.empty()) return joint;

  Graph out(g.symbols());
  std::vector<ValueId> remap(g.size());
  std::set<ValueId> moved;
  size_t forwardNodes = 0;
  for (ValueId id = 0; id < g.size(); ++id) {
    if (moved.count(id)) continue;
    ir::Node n = g.node(id);
    for (ValueId& in : n.inputs) in = remap[in];
    remap[id] = out.append(std::move(n));
    if (auto lse = lseOf.find(id); lse != lseOf.end()) {
      ir::Node rows = g.node(lse->second);
      for (ValueId& in : rows.inputs) in = remap[in];
      remap[lse->second] = out.append(std::move(rows));
      moved.insert(lse->second);
    }
    if (id + 1 == joint.forwardNodes) forwardNodes = out.size();
  }
  return rebuilt(std::move(joint), std::move(out), remap, forwardNodes);
}

} // namespace

JointGraph backward(const ir::Graph& input, const std::vector<bool>& requiresGrad) {
  ir::Graph forward = ir::decompose(input, keptWhole);
  JointGraph joint{ir::Graph(forward.symbols()), 0, 0, {}, {}};
  Graph& g = joint.graph;
  // The forward, and which of its values carry grad from a marked input.
  std::vector<bool> carries(forward.size());
  std::vector<ValueId> placeholders;
  for (ValueId id = 0; id < forward.size(); ++id) {
    const ir::Node& n = forward.node(id);
    g.append(n);
    if (n.kind == ir::NodeKind::Placeholder) {
      size_t i = placeholders.size();
      placeholders.push_back(id);
      bool marked = i < requiresGrad.size() && requiresGrad[i];
      if (marked && !floating(n.value))
        throw Error(ErrorCode::InvalidArgument, "backward: input " + std::to_string(i) + " ('" +
                                                    n.target + "') of " + ir::toString(n.value) +
                                                    " cannot require grad");
      carries[id] = marked;
      continue;
    }
    bool any = false;
    for (ValueId in : n.inputs) any = any || carries[in];
    if (!any || !floating(n.value)) continue;
    Differentiability d = differentiability(n.target);
    if (d == Differentiability::Unsupported)
      throw Error(ErrorCode::Unsupported,
                  "backward: no derivative rule for '" + n.target + "'" +
                      (ir::getOp(n.target).mutates ? " (a mutation op: functionalize first)" : ""));
    carries[id] = d == Differentiability::Rule || n.target == "getitem";
  }
  if (placeholders.size() != requiresGrad.size())
    throw Error(ErrorCode::InvalidArgument, "backward: " + std::to_string(requiresGrad.size()) +
                                                " requires_grad flags for " +
                                                std::to_string(placeholders.size()) + " inputs");
  joint.forwardNodes = g.size();
  joint.forwardOutputs = forward.outputs().size();

  // A tangent per output that carries grad.
  GradMap grads(g);
  for (size_t i = 0; i < forward.outputs().size(); ++i) {
    ValueId out = forward.outputs()[i];
    if (!carries[out] || !forward.value(out).isTensor()) continue;
    const ir::TensorMeta& m = forward.meta(out);
    ValueId t = g.placeholder("tangent" + std::to_string(i),
                              ir::TensorMeta::contiguous(m.dtype, m.sizes, g.symbols(), m.device));
    joint.tangentOf.push_back(i);
    grads.add(out, t);
  }

  // The backward, node by node from the last.
  for (ValueId id = static_cast<ValueId>(joint.forwardNodes); id-- > 0;) {
    const ir::Node node = g.node(id); // a copy: the graph grows
    if (node.kind == ir::NodeKind::Placeholder || !carries[id]) continue;
    if (node.target == "getitem") {
      if (auto grad = grads.of(id))
        grads.addPiece(node.inputs[0], std::get<int64_t>(*node.attr("index")), *grad);
      continue;
    }
    RuleContext ctx{g, node, id, grads.of(id), grads.piecesOf(id), {}};
    if (!ctx.grad && ctx.pieceGrads.empty()) continue;
    for (ValueId in : node.inputs) ctx.needs.push_back(carries[in] && g.value(in).isTensor());
    Grads result = findRule(node.target)(ctx);
    for (size_t i = 0; i < node.inputs.size() && i < result.size(); ++i)
      if (ctx.needs[i] && result[i]) {
        const ir::TensorMeta target = g.meta(node.inputs[i]);
        grads.add(node.inputs[i], reduceTo(g, *result[i], target));
      }
  }

  std::vector<ValueId> outputs = forward.outputs();
  for (size_t i = 0; i < placeholders.size(); ++i) {
    if (!requiresGrad[i]) continue;
    auto grad = grads.of(placeholders[i]);
    outputs.push_back(grad ? *grad : zerosOf(g, g.meta(placeholders[i])));
    joint.gradOf.push_back(i);
  }
  g.setOutputs(std::move(outputs));
  return withAttentionLogsumexps(withRowLogsumexps(std::move(joint)));
}

} // namespace kiln::autograd
