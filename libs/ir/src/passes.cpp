#include "kiln/ir/passes.h"

#include <unordered_map>

#include "kiln/ir/hash.h"
#include "kiln/ir/op_registry.h"

namespace kiln::ir {
namespace {

constexpr ValueId kDropped = ~ValueId{0};

// Copies the nodes `keep` selects into a new graph; `replace[id]` (when not
// kDropped) names an earlier node that stands for node `id`.
Graph rebuild(const Graph& graph, const std::vector<bool>& keep,
              const std::vector<ValueId>& replace) {
  Graph out(graph.symbols());
  std::vector<ValueId> remap(graph.size(), kDropped);
  for (ValueId id = 0; id < graph.size(); ++id) {
    if (replace[id] != kDropped) {
      remap[id] = remap[replace[id]];
      continue;
    }
    if (!keep[id]) continue;
    Node n = graph.node(id);
    for (ValueId& in : n.inputs) in = remap[in];
    remap[id] = out.append(std::move(n));
  }
  std::vector<ValueId> outputs;
  for (ValueId o : graph.outputs()) outputs.push_back(remap[o]);
  out.setOutputs(std::move(outputs));
  return out;
}

} // namespace

// item, nonzero, masked_select: the unbacked symbol the node binds may size
// values that read no data of it.
static bool bindsSymbol(const OpInfo& op) {
  for (const ArgSpec& a : op.args)
    if (a.kind == ArgKind::Symbol) return true;
  return false;
}

Graph mapNodes(const Graph& graph, const NodeMap& map) {
  Graph out(graph.symbols());
  std::vector<ValueId> mapped(graph.size());
  for (ValueId id = 0; id < graph.size(); ++id) {
    Node n = graph.node(id);
    for (ValueId& in : n.inputs) in = mapped[in];
    mapped[id] = map(out, id, std::move(n), mapped);
  }
  std::vector<ValueId> outputs;
  for (ValueId o : graph.outputs()) outputs.push_back(mapped[o]);
  out.setOutputs(std::move(outputs));
  return out;
}

Graph eliminateDeadCode(const Graph& graph) {
  std::vector<bool> live(graph.size(), false);
  for (ValueId o : graph.outputs()) live[o] = true;
  for (ValueId id = static_cast<ValueId>(graph.size()); id-- > 0;) {
    const Node& n = graph.node(id);
    if (n.kind == NodeKind::Placeholder) live[id] = true;
    if (const OpInfo* op = findOp(n.target); op && (op->mutates || op->effect || bindsSymbol(*op)))
      live[id] = true;
    if (!live[id]) continue;
    for (ValueId in : n.inputs) live[in] = true;
  }
  return rebuild(graph, live, std::vector<ValueId>(graph.size(), kDropped));
}

Graph eliminateCommonSubexpressions(const Graph& graph) {
  std::vector<ValueId> replace(graph.size(), kDropped);
  std::unordered_multimap<uint64_t, ValueId> seen;
  for (ValueId id = 0; id < graph.size(); ++id) {
    Node n = graph.node(id);
    if (n.kind == NodeKind::Placeholder) continue;
    if (const OpInfo* op = findOp(n.target); op && op->mutates) {
      seen.clear(); // a call after a write may read other bytes (through any alias)
      continue;
    }
    for (ValueId& in : n.inputs) // compare against the representatives
      if (replace[in] != kDropped) in = replace[in];
    uint64_t h = nodeHash(n);
    auto [begin, end] = seen.equal_range(h);
    for (auto it = begin; it != end; ++it) {
      const Node& other = graph.node(it->second);
      std::vector<ValueId> otherInputs = other.inputs;
      for (ValueId& in : otherInputs)
        if (replace[in] != kDropped) in = replace[in];
      if (other.target == n.target && otherInputs == n.inputs && other.attrs == n.attrs &&
          other.value == n.value) {
        replace[id] = it->second;
        break;
      }
    }
    if (replace[id] == kDropped) seen.emplace(h, id);
  }
  return rebuild(graph, std::vector<bool>(graph.size(), true), replace);
}

} // namespace kiln::ir
