#include "kiln/ir/passes.h"

#include <gtest/gtest.h>

#include "kiln/ir/hash.h"
#include "kiln/ir/print.h"
#include "kiln/ir/verify.h"
#include "sample_graph.h"

namespace kiln::ir {
namespace {

size_t countOp(const Graph& g, std::string_view op) {
  size_t n = 0;
  for (const Node& node : g.nodes()) n += node.kind == NodeKind::Call && node.target == op;
  return n;
}

TEST(Passes, DeadCodeEliminationDropsUnusedCallsOnly) {
  sym::SymbolTable table;
  Graph g = testing::sampleGraph(table);
  Graph d = eliminateDeadCode(g);
  EXPECT_NO_THROW(verify(d));
  EXPECT_EQ(countOp(d, "exp"), 0u);
  EXPECT_EQ(countOp(d, "add"), 2u);
  EXPECT_EQ(d.size(), g.size() - 1);
  EXPECT_EQ(d.node(0).target, "x");
  EXPECT_EQ(d.node(1).target, "w");
  EXPECT_EQ(structuralHash(eliminateDeadCode(d)), structuralHash(d)); // idempotent
  testing::expectRoundTrip(d);
}

TEST(Passes, CommonSubexpressionEliminationMergesIdenticalCalls) {
  sym::SymbolTable table;
  Graph g = testing::sampleGraph(table);
  Graph c = eliminateCommonSubexpressions(g);
  EXPECT_NO_THROW(verify(c));
  EXPECT_EQ(countOp(c, "add"), 1u);
  const Node& mul = c.node(c.outputs()[1]);
  ASSERT_EQ(mul.target, "mul");
  EXPECT_EQ(mul.inputs[0], mul.inputs[1]);
  Graph both = eliminateDeadCode(c);
  EXPECT_EQ(both.size(), g.size() - 2);
  EXPECT_EQ(print(eliminateCommonSubexpressions(both)), print(both));
  testing::expectRoundTrip(both);
}

TEST(Passes, MutationsAreNeitherDroppedNorMerged) {
  sym::SymbolTable table;
  Graph g(table);
  ValueId x =
      g.placeholder("x", testing::tensorOf(table, DType::Float32, testing::ints(table, {4})));
  g.call("add_", {x}, {{"other", 1.0}});
  g.call("add_", {x}, {{"other", 1.0}});
  ValueId y = g.call("exp", {x});
  g.setOutputs({y});
  EXPECT_EQ(countOp(eliminateDeadCode(g), "add_"), 2u);
  EXPECT_EQ(countOp(eliminateCommonSubexpressions(g), "add_"), 2u);
  testing::expectRoundTrip(g);
}

TEST(Passes, CseKeepsCallsWithDifferentAttributes) {
  sym::SymbolTable table;
  Graph g(table);
  ValueId x =
      g.placeholder("x", testing::tensorOf(table, DType::Float32, testing::ints(table, {4, 4})));
  ValueId a = g.call("sum", {x}, {{"dim", std::vector<int64_t>{0}}});
  ValueId b = g.call("sum", {x}, {{"dim", std::vector<int64_t>{1}}});
  g.setOutputs({a, b});
  EXPECT_EQ(eliminateCommonSubexpressions(g).size(), 3u);
}

TEST(Passes, DimsWrittenTwoWaysAreOneCall) {
  sym::SymbolTable table;
  Graph g(table);
  ValueId x =
      g.placeholder("x", testing::tensorOf(table, DType::Float32, testing::ints(table, {4, 4})));
  ValueId a = g.call("sum", {x}, {{"dim", std::vector<int64_t>{-1, 0}}});
  ValueId b = g.call("sum", {x}, {{"dim", std::vector<int64_t>{0, 1}}});
  ValueId c = g.call("unsqueeze", {x}, {{"dim", int64_t{-1}}});
  ValueId d = g.call("unsqueeze", {x}, {{"dim", int64_t{2}}});
  ValueId e = g.call("flatten", {x}, {{"end_dim", int64_t{1}}}); // end_dim's default, -1
  EXPECT_TRUE(g.node(e).attrs.empty());
  EXPECT_EQ(*g.node(a).attr("dim"), AttrValue(std::vector<int64_t>{0, 1}));
  g.setOutputs({a, b, c, d, e});
  EXPECT_EQ(eliminateCommonSubexpressions(g).size(), 4u);
}

} // namespace
} // namespace kiln::ir
