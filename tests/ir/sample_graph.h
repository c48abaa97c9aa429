// A small graph used by the hash, pass and wire tests.
#pragma once

#include "helpers.h"

namespace kiln::ir::testing {

// x: f32[s0, 768], w: f32[768]; two identical adds, a dead exp, a reduction.
inline Graph sampleGraph(sym::SymbolTable& table, const std::string& xName = "x") {
  sym::Expr s0 = table.lookup("s0") ? *table.lookup("s0") : table.createBacked(8, {2, sym::kInf});
  Graph g(table);
  ValueId x = g.placeholder(xName, tensorOf(table, DType::Float32, {s0, table.integer(768)}));
  ValueId w = g.placeholder("w", tensorOf(table, DType::Float32, {table.integer(768)}));
  ValueId a = g.call("add", {x, w});
  ValueId b = g.call("add", {x, w});
  g.call("exp", {a});
  ValueId c = g.call("mul", {a, b});
  ValueId d = g.call("sum", {c}, {{"dim", std::vector<int64_t>{-1}}, {"keepdim", true}});
  ValueId v = g.call("view", {d}, {{"size", std::vector<sym::Expr>{s0}}});
  ValueId z = g.call("clamp", {v}, {{"min", 0.0}, {"max", int64_t{6}}});
  ValueId n = g.call("sym_size", {x}, {{"dim", int64_t{0}}});
  ValueId r = g.call("div", {z, n}, {{"rounding_mode", std::string("floor")}});
  g.setOutputs({r, c});
  return g;
}

} // namespace kiln::ir::testing
