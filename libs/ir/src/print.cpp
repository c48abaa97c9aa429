#include "kiln/ir/print.h"

#include "kiln/sym/print.h"
#include "kiln/sym/range.h"
#include "kiln/sym/symbol_table.h"

namespace kiln::ir {

std::string print(const Graph& graph) {
  std::string out;
  for (sym::Expr s : mentionedSymbols(graph)) {
    out += "symbol " + s.name() + " in " + sym::toString(sym::range(s));
    if (auto hint = graph.symbols().hint(s)) out += " hint " + std::to_string(*hint);
    out += "\n";
  }
  const std::vector<Node>& nodes = graph.nodes();
  for (size_t id = 0; id < nodes.size(); ++id) {
    const Node& n = nodes[id];
    out += "%" + std::to_string(id) + " : " + toString(n.value) + " = ";
    if (n.kind == NodeKind::Placeholder) {
      out += "placeholder(\"" + n.target + "\")\n";
      continue;
    }
    out += n.target + "(";
    bool first = true;
    for (ValueId in : n.inputs)
      out += (first ? "" : ", ") + ("%" + std::to_string(in)), first = false;
    for (const Attr& a : n.attrs)
      out += (first ? "" : ", ") + a.name + "=" + toString(a.value), first = false;
    out += ")\n";
  }
  out += "return (";
  for (size_t i = 0; i < graph.outputs().size(); ++i)
    out += (i ? ", %" : "%") + std::to_string(graph.outputs()[i]);
  return out + ")\n";
}

} // namespace kiln::ir
