#include "kiln/ir/verify.h"

#include <optional>

#include "kiln/common/error.h"
#include "kiln/ir/op_registry.h"

namespace kiln::ir {

void verify(const Graph& graph) {
  const std::vector<Node>& nodes = graph.nodes();
  for (ValueId id = 0; id < nodes.size(); ++id) {
    const Node& n = nodes[id];
    std::string where = "%" + std::to_string(id) + " (" + n.target + "): ";
    auto bad = [&](const std::string& message) {
      throw Error(ErrorCode::InvalidArgument, where + message);
    };
    if (n.kind == NodeKind::Placeholder) {
      if (!n.inputs.empty() || !n.attrs.empty()) bad("a placeholder takes no arguments");
      if (n.value.isTuple()) bad("a placeholder cannot be a tuple");
      continue;
    }
    std::vector<const Value*> inputs;
    for (ValueId in : n.inputs) {
      if (in >= id) bad("input %" + std::to_string(in) + " is not defined before its use");
      inputs.push_back(&nodes[in].value);
    }
    std::vector<Attr> attrs = n.attrs;
    std::optional<Value> inferred;
    try {
      inferred = inferCall(n.target, inputs, attrs, graph.symbols());
    } catch (const Error& e) {
      bad(e.message());
    }
    if (!(attrs == n.attrs)) bad("attributes are not in canonical form");
    if (*inferred != n.value)
      bad("stored " + toString(n.value) + " but inference gives " + toString(*inferred));
  }
  for (ValueId out : graph.outputs()) {
    if (out >= nodes.size())
      throw Error(ErrorCode::InvalidArgument, "output %" + std::to_string(out) + " is not defined");
    if (nodes[out].value.isTuple()) // a graph's results are flat, as its inputs are
      throw Error(ErrorCode::InvalidArgument, "output %" + std::to_string(out) + " is a tuple");
  }
}

} // namespace kiln::ir
