#include "kiln/ir/print.h"

#include <gtest/gtest.h>

#include "helpers.h"

namespace kiln::ir {
namespace {

using testing::tensorOf;

TEST(Print, GoldenText) {
  sym::SymbolTable table;
  sym::Expr s0 = table.createBacked(8, {2, sym::kInf});
  sym::Expr u0 = table.createUnbacked({0, 100});
  Graph g(table);
  ValueId x = g.placeholder("x", tensorOf(table, DType::Float32, {s0, table.integer(768)}));
  ValueId bias = g.placeholder("bias", tensorOf(table, DType::Float32, {table.integer(768)}));
  ValueId n = g.placeholder("n", Value(u0));
  ValueId y = g.call("add", {x, bias});
  ValueId s = g.call("sum", {y}, {{"dim", std::vector<int64_t>{1}}, {"keepdim", true}});
  ValueId t = g.call("transpose", {y}, {{"dim0", int64_t{0}}, {"dim1", int64_t{1}}});
  ValueId m = g.call("mul", {s}, {{"other", 0.5}});
  ValueId a = g.call("add", {m, n});
  g.setOutputs({t, a});
  EXPECT_EQ(print(g), R"(symbol s0 in [2, inf] hint 8
symbol u0 in [0, 100]
%0 : f32[s0, 768] = placeholder("x")
%1 : f32[768] = placeholder("bias")
%2 : sym(u0) = placeholder("n")
%3 : f32[s0, 768] = add(%0, %1)
%4 : f32[s0, 1] = sum(%3, dim=[1], keepdim=True)
%5 : f32[768, s0] stride=[1, 768] = transpose(%3, dim0=0, dim1=1)
%6 : f32[s0, 1] = mul(%4, other=0.5)
%7 : f32[s0, 1] = add(%6, %2)
return (%5, %7)
)");
}

TEST(Print, FloatsAreTheShortestTextThatReadsBack) {
  EXPECT_EQ(toString(AttrValue(1e-5)), "1e-05");
  EXPECT_EQ(toString(AttrValue(0.044715)), "0.044715");
  EXPECT_EQ(toString(AttrValue(2.0)), "2.0");
  EXPECT_EQ(toString(AttrValue(0.1 + 0.2)), "0.30000000000000004");
}

} // namespace
} // namespace kiln::ir
