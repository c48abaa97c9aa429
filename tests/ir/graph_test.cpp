#include <gtest/gtest.h>

#include "helpers.h"
#include "kiln/common/error.h"
#include "kiln/ir/graph.h"
#include "kiln/ir/op_registry.h"
#include "kiln/ir/verify.h"

namespace kiln::ir {
namespace {

using testing::tensorOf;

TEST(Graph, CanonicalisesAttributesToSchemaOrderWithoutDefaults) {
  sym::SymbolTable table;
  Graph g(table);
  ValueId x = g.placeholder("x", tensorOf(table, DType::Float32, {table.createBacked(4)}));
  ValueId y =
      g.call("sum", {x}, {{"keepdim", false}, {"dtype", DType::Float64}, {"dim", int64_t{0}}});
  ASSERT_EQ(g.node(y).attrs.size(), 2u);
  EXPECT_EQ(g.node(y).attrs[0].name, "dim");
  EXPECT_EQ(g.node(y).attrs[1].name, "dtype");
  EXPECT_EQ(g.node(g.call("gelu", {x}, {{"approximate", std::string("none")}})).attrs.size(), 0u);
}

TEST(Graph, RejectsUndefinedInputsAndOutputs) {
  sym::SymbolTable table;
  Graph g(table);
  EXPECT_THROW(g.call("neg", {0}), Error);
  EXPECT_THROW(g.setOutputs({0}), Error);
}

TEST(Registry, ListsTheOpsOfThisSlice) {
  std::vector<std::string> names = opNames();
  for (const char* op : {"add", "div", "where", "clamp", "to_dtype", "sum", "argmax", "view",
                         "expand", "bitwise_xor", "isinf", "gelu"})
    EXPECT_NE(std::find(names.begin(), names.end(), op), names.end()) << op;
  EXPECT_EQ(findOp("nonexistent"), nullptr);
  EXPECT_EQ(getOp("where").args.size(), 3u);
}

TEST(Verify, AcceptsBuiltGraphsAndRejectsBadOnes) {
  sym::SymbolTable table;
  Graph g(table);
  sym::Expr s0 = table.createBacked(4, {2, sym::kInf});
  ValueId x = g.placeholder("x", tensorOf(table, DType::Float32, {s0}));
  ValueId y = g.call("exp", {x});
  g.setOutputs({y});
  EXPECT_NO_THROW(verify(g));

  Graph wrongMeta(table);
  wrongMeta.placeholder("x", tensorOf(table, DType::Float32, {s0}));
  wrongMeta.append(Node{NodeKind::Call, "exp", {0}, {}, tensorOf(table, DType::Float64, {s0})});
  try {
    verify(wrongMeta);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "%1 (exp): stored f64[s0] but inference gives f32[s0]");
  }

  Graph useBeforeDef(table);
  useBeforeDef.append(Node{NodeKind::Call, "exp", {0}, {}, tensorOf(table, DType::Float32, {s0})});
  EXPECT_THROW(verify(useBeforeDef), Error);
}

} // namespace
} // namespace kiln::ir

namespace kiln::ir {
namespace {

TEST(TensorMeta, ContiguousStridesCountZeroSizesAsOneLikeTorch) {
  sym::SymbolTable table;
  EXPECT_EQ(contiguousStrides(testing::ints(table, {3, 0}), table), testing::ints(table, {1, 1}));
  EXPECT_EQ(contiguousStrides(testing::ints(table, {2, 3, 4}), table),
            testing::ints(table, {12, 4, 1}));
  sym::Expr s0 = table.createBacked(8, {2, sym::kInf});
  sym::Expr maybeZero = table.createBacked(8);
  EXPECT_EQ(contiguousStrides({table.integer(5), s0}, table), Shape({s0, table.integer(1)}));
  EXPECT_EQ(contiguousStrides({s0, maybeZero}, table),
            Shape({sym::max(maybeZero, 1), table.integer(1)}));
  TensorMeta m = TensorMeta::contiguous(DType::Float32, {s0, maybeZero}, table);
  EXPECT_TRUE(m.isContiguous());
  EXPECT_EQ(toString(m), "f32[s0, s1]");
  std::swap(m.strides[0], m.strides[1]);
  EXPECT_FALSE(m.isContiguous());
}

} // namespace
} // namespace kiln::ir
