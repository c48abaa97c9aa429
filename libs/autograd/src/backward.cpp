// backward(): the joint forward + backward graph from the derivative rules.
#include "kiln/autograd/backward.h"

#include <map>
#include <set>
#include <string>

#include "kiln/autograd/grad_builder.h"
#include "kiln/autograd/rules.h"
#include "kiln/common/error.h"
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
// Attention's rule is flash attention's, without a mask.
bool keptWhole(const ir::Graph&, const ir::Node& n) {
  if (!ir::getOp(n.target).decompose || !findRule(n.target)) return false;
  return n.target != "scaled_dot_product_attention" || n.inputs.size() == 3;
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

} // namespace

JointGraph backward(const ir::Graph& input, const std::vector<bool>& requiresGrad) {
  ir::Graph forward = ir::decompose(input, keptWhole);
  JointGraph joint{ir::Graph(forward.symbols())};
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
  return joint;
}

} // namespace kiln::autograd
