// partition(): the min-cut choice of saved values, then the two graphs.
#include "kiln/autograd/partition.h"

#include <cmath>
#include <map>
#include <set>
#include <string>

#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/boykov_kolmogorov_max_flow.hpp>

#include "kiln/common/error.h"
#include "kiln/ir/op_registry.h"
#include "kiln/ir/passes.h"
#include "kiln/sym/eval.h"

namespace kiln::autograd {
using ir::ValueId;

namespace {

constexpr int64_t kInf = int64_t{1} << 50;

const std::set<std::string, std::less<>> kBanned = {
    "mm", "bmm", "matmul", "addmm", "linear", "scaled_dot_product_attention", "attention_lse",
    // Binding a symbol or checking one again in the backward would be wrong, not just dear.
    "item", "nonzero", "masked_select", "_assert_scalar"};

// A size with hints put in (symbols without one count as 64).
double hinted(sym::Expr e) {
  try {
    return static_cast<double>(sym::evaluateWithHints(e));
  } catch (const Error&) { // an unbacked symbol
    return 64;
  }
}

double elements(const ir::Value& v) {
  if (!v.isTensor()) return 1;
  double n = 1;
  for (sym::Expr s : v.tensor().sizes) n *= hinted(s);
  return n;
}

double bytes(const ir::Value& v) {
  if (v.isSymInt()) return 8;
  return elements(v) * static_cast<double>(ir::elementSize(v.tensor().dtype));
}

using Traits = boost::adjacency_list_traits<boost::vecS, boost::vecS, boost::directedS>;
using FlowGraph = boost::adjacency_list<
    boost::vecS, boost::vecS, boost::directedS,
    boost::property<boost::vertex_index_t, long,
                    boost::property<boost::vertex_color_t, boost::default_color_type,
                                    boost::property<boost::vertex_distance_t, long,
                                                    boost::property<boost::vertex_predecessor_t,
                                                                    Traits::edge_descriptor>>>>,
    boost::property<
        boost::edge_capacity_t, int64_t,
        boost::property<boost::edge_residual_capacity_t, int64_t,
                        boost::property<boost::edge_reverse_t, Traits::edge_descriptor>>>>;

// One min cut over the forward's values: returns the saved ones. `saveCost` and
// `recomputeCost` give each value's capacities (kInf: never saved / never recomputed).
template <typename Save, typename Recompute>
std::vector<ValueId> minCut(const JointGraph& joint, const std::vector<bool>& needed, Save saveCost,
                            Recompute recomputeCost) {
  const ir::Graph& g = joint.graph;
  size_t n = joint.forwardNodes;
  FlowGraph flow(2 + 2 * n);
  auto capacity = boost::get(boost::edge_capacity, flow);
  auto reverse = boost::get(boost::edge_reverse, flow);
  auto edge = [&](size_t a, size_t b, int64_t c) {
    auto e = boost::add_edge(a, b, flow).first, r = boost::add_edge(b, a, flow).first;
    capacity[e] = c;
    capacity[r] = 0;
    reverse[e] = r;
    reverse[r] = e;
  };
  const size_t source = 0, sink = 1;
  auto in = [](size_t v) { return 2 + 2 * v; };
  auto out = [](size_t v) { return 3 + 2 * v; };
  for (ValueId v = 0; v < n; ++v) {
    edge(in(v), out(v), saveCost(v));
    if (int64_t c = recomputeCost(v)) edge(source, in(v), c);
    for (ValueId u : g.node(v).inputs) edge(out(u), in(v), kInf);
    if (needed[v]) edge(out(v), sink, kInf);
  }
  boost::boykov_kolmogorov_max_flow(flow, source, sink);
  // The source side: what the source reaches through edges with capacity left.
  auto residual = boost::get(boost::edge_residual_capacity, flow);
  std::vector<bool> reached(boost::num_vertices(flow));
  std::vector<size_t> todo = {source};
  reached[source] = true;
  while (!todo.empty()) {
    size_t a = todo.back();
    todo.pop_back();
    for (auto [e, end] = boost::out_edges(a, flow); e != end; ++e) {
      size_t b = boost::target(*e, flow);
      if (!reached[b] && residual[*e] > 0) {
        reached[b] = true;
        todo.push_back(b);
      }
    }
  }
  std::vector<ValueId> saved;
  for (ValueId v = 0; v < n; ++v)
    if (reached[in(v)] && !reached[out(v)]) saved.push_back(v);
  return saved;
}

// The symbols a value or attribute mentions.
void symbolsOf(const ir::Value& v, std::set<std::string>& names, std::vector<sym::Expr>& out) {
  auto add = [&](sym::Expr e) {
    for (sym::Expr s : sym::freeSymbols(e))
      if (names.insert(s.name()).second) out.push_back(s);
  };
  if (v.isSymInt()) add(v.symInt());
  if (v.isTensor()) {
    const ir::TensorMeta& m = v.tensor();
    for (sym::Expr e : m.sizes) add(e);
    for (sym::Expr e : m.strides) add(e);
    add(m.storageOffset);
  }
  if (v.isTuple())
    for (const ir::Value& item : v.tuple()) symbolsOf(item, names, out);
}

// The symbols the backward computes with that none of its inputs give (an input's size or
// stride that is the symbol itself, as the runtime binds them): the sizes of a forward input
// reshaped to constants, whose grad takes that input's sizes back. Each is saved as a sym_int
// of the forward.
std::vector<sym::Expr> unboundSymbols(const ir::Graph& g, const std::vector<ir::ValueId>& backwardInputs,
                                      const std::vector<ir::ValueId>& backwardNodes) {
  std::set<std::string> bound, usedNames;
  auto bind = [&](sym::Expr e) {
    if (!e.isNull() && e.isSymbol()) bound.insert(e.name());
  };
  for (ValueId in : backwardInputs) {
    const ir::Value& v = g.value(in);
    if (v.isSymInt()) bind(v.symInt());
    if (!v.isTensor()) continue;
    for (sym::Expr e : v.tensor().sizes) bind(e);
    for (sym::Expr e : v.tensor().strides) bind(e);
    bind(v.tensor().storageOffset);
  }
  std::vector<sym::Expr> used;
  for (ValueId id : backwardNodes) {
    const ir::Node& node = g.node(id);
    symbolsOf(node.value, usedNames, used);
    for (const ir::Attr& a : node.attrs) {
      if (a.name == "symbol") // bound where the node runs (item, nonzero)
        if (auto* e = std::get_if<sym::Expr>(&a.value)) bind(*e);
      if (auto* e = std::get_if<sym::Expr>(&a.value)) symbolsOf(ir::Value(*e), usedNames, used);
      if (auto* list = std::get_if<std::vector<sym::Expr>>(&a.value))
        for (sym::Expr e : *list) symbolsOf(ir::Value(e), usedNames, used);
    }
  }
  std::vector<sym::Expr> missing;
  for (sym::Expr s : used)
    if (!bound.count(s.name())) missing.push_back(s);
  return missing;
}

// The graphs of a choice of saved values.
Partition build(const JointGraph& joint, std::vector<ValueId> saved) {
  const ir::Graph& g = joint.graph;
  size_t n = joint.forwardNodes;
  std::set<ValueId> isSaved(saved.begin(), saved.end());
  // What the backward recomputes: forward values it reads, back to saved ones.
  std::vector<bool> recompute(n);
  std::vector<ValueId> todo;
  for (ValueId id = static_cast<ValueId>(n); id < g.size(); ++id)
    for (ValueId in : g.node(id).inputs) todo.push_back(in);
  for (size_t i = joint.forwardOutputs; i < g.outputs().size(); ++i) todo.push_back(g.outputs()[i]);
  while (!todo.empty()) {
    ValueId v = todo.back();
    todo.pop_back();
    if (v >= n || isSaved.count(v) || recompute[v]) continue;
    const ir::Node& node = g.node(v);
    if (node.kind == ir::NodeKind::Placeholder || !isRecomputable(node.target))
      throw Error(ErrorCode::Internal, "partition: %" + std::to_string(v) + " (" + node.target +
                                           ") is neither saved nor recomputable");
    recompute[v] = true;
    for (ValueId in : node.inputs) todo.push_back(in);
  }
  Partition p{ir::Graph(g.symbols()), ir::Graph(g.symbols()), saved,       {},
              joint.forwardOutputs,   joint.tangentOf,        joint.gradOf};
  // Forward: the forward's nodes; outputs, then the saved values.
  ir::Graph forward(g.symbols());
  for (ValueId id = 0; id < n; ++id) forward.append(g.node(id));
  std::vector<ValueId> outputs(g.outputs().begin(), g.outputs().begin() + joint.forwardOutputs);
  outputs.insert(outputs.end(), saved.begin(), saved.end());
  forward.setOutputs(outputs);
  p.forward = ir::eliminateDeadCode(forward);
  // Backward: saved values (and the symbols none of them gives) and tangents in, recomputed and
  // backward nodes, grads out.
  std::vector<ValueId> backwardInputs = saved, backwardNodes;
  for (ValueId id = static_cast<ValueId>(n); id < g.size(); ++id)
    (g.node(id).kind == ir::NodeKind::Placeholder ? backwardInputs : backwardNodes).push_back(id);
  for (ValueId id = 0; id < n; ++id)
    if (recompute[id]) backwardNodes.push_back(id);
  std::vector<sym::Expr> symbols = unboundSymbols(g, backwardInputs, backwardNodes);
  if (!symbols.empty()) {
    for (sym::Expr s : symbols) outputs.push_back(forward.call("sym_int", {}, {{"value", s}}));
    forward.setOutputs(outputs);
    p.forward = ir::eliminateDeadCode(forward);
  }
  std::vector<ValueId> remap(g.size());
  for (size_t i = 0; i < saved.size(); ++i)
    remap[saved[i]] = p.backward.placeholder("saved" + std::to_string(i), g.value(saved[i]));
  for (size_t i = 0; i < symbols.size(); ++i)
    p.backward.placeholder("saved" + std::to_string(saved.size() + i), ir::Value(symbols[i]));
  for (ValueId id = static_cast<ValueId>(n); id < g.size(); ++id)
    if (g.node(id).kind == ir::NodeKind::Placeholder)
      remap[id] = p.backward.placeholder(g.node(id).target, g.value(id));
  for (ValueId id = 0; id < g.size(); ++id) {
    const ir::Node& node = g.node(id);
    if (node.kind == ir::NodeKind::Placeholder || (id < n && !recompute[id])) continue;
    if (id < n) p.recomputed.push_back(id);
    ir::Node copy = node;
    for (ValueId& in : copy.inputs) in = remap[in];
    remap[id] = p.backward.append(std::move(copy));
  }
  std::vector<ValueId> grads;
  for (size_t i = joint.forwardOutputs; i < g.outputs().size(); ++i)
    grads.push_back(remap[g.outputs()[i]]);
  p.backward.setOutputs(grads);
  // Rules' values no grad reads (a to_dtype of a recomputed value) would count
  // as readers in lowering, which then stores the value where it is recomputed
  // rather than where it is read (GPT-2's twelve gelus: 0.6 GiB, all at once).
  p.backward = ir::eliminateDeadCode(p.backward);
  return p;
}

} // namespace

bool isRecomputable(std::string_view op) {
  if (kBanned.count(op)) return false;
  const ir::OpInfo* info = ir::findOp(op);
  return info && !info->mutates;
}

Partition partition(const JointGraph& joint, const PartitionOptions& options) {
  double budget = options.memoryBudget;
  if (!(budget >= 0 && budget <= 1))
    throw Error(ErrorCode::InvalidArgument,
                "partition: memory_budget must be in [0, 1], got " + std::to_string(budget));
  const ir::Graph& g = joint.graph;
  size_t n = joint.forwardNodes;
  // The forward values the backward reads directly.
  std::vector<bool> needed(n);
  for (ValueId id = static_cast<ValueId>(n); id < g.size(); ++id)
    for (ValueId in : g.node(id).inputs)
      if (in < n) needed[in] = true;
  for (size_t i = joint.forwardOutputs; i < g.outputs().size(); ++i)
    if (g.outputs()[i] < n) needed[g.outputs()[i]] = true;
  auto recomputable = [&](ValueId v) {
    const ir::Node& node = g.node(v);
    return node.kind == ir::NodeKind::Call && isRecomputable(node.target);
  };
  auto savable = [&](ValueId v) { return !g.value(v).isTuple(); };
  auto weight = [&](ValueId v) { return static_cast<int64_t>(std::ceil(bytes(g.value(v)))) + 1; };
  auto work = [&](ValueId v) {
    return ir::isViewOp(g.node(v).target) ? int64_t{1}
                                          : static_cast<int64_t>(elements(g.value(v))) + 1;
  };

  std::vector<ValueId> everything; // budget 1: recompute nothing
  for (ValueId v = 0; v < n; ++v)
    if (needed[v]) everything.push_back(v);
  if (budget == 1) return build(joint, everything);
  auto least = minCut( // budget 0: save nothing recomputable
      joint, needed, [&](ValueId v) { return savable(v) && !recomputable(v) ? weight(v) : kInf; },
      [&](ValueId v) { return recomputable(v) ? int64_t{1} : kInf; });
  if (budget == 0) return build(joint, least);
  // In between: the least recomputation whose saved bytes fit, for a price of memory
  // found by bisection (a higher price saves fewer bytes).
  auto total = [&](const std::vector<ValueId>& vs) {
    double sum = 0;
    for (ValueId v : vs) sum += bytes(g.value(v));
    return sum;
  };
  double allowed = total(least) + budget * (total(everything) - total(least));
  if (total(everything) <= allowed) return build(joint, everything);
  auto plan = [&](double price) {
    return minCut(
        joint, needed,
        [&](ValueId v) {
          return savable(v) ? static_cast<int64_t>(std::ceil(price * weight(v))) : kInf;
        },
        [&](ValueId v) { return recomputable(v) ? work(v) : kInf; });
  };
  double lo = 1.0 / 1024, hi = 1 << 20;
  std::vector<ValueId> best = least;
  for (int i = 0; i < 40; ++i) {
    double mid = std::sqrt(lo * hi);
    std::vector<ValueId> saved = plan(mid);
    if (total(saved) <= allowed) {
      best = saved;
      hi = mid;
    } else {
      lo = mid;
    }
  }
  return build(joint, best);
}

} // namespace kiln::autograd
