#include <gtest/gtest.h>

#include "helpers.h"
#include "kiln/ir/interpreter.h"
#include "kiln/common/error.h"
#include "kiln/ir/op_registry.h"
#include "kiln/ir/passes.h"
#include "kiln/ir/print.h"
#include "kiln/ir/verify.h"

namespace kiln::ir {
namespace {

using testing::ints;
using testing::tensorOf;

// Builds `op` over fresh inputs, decomposes, and checks that only core ops are
// left and the result is the same value.
void expectDecomposes(std::string_view op, std::vector<TensorMeta> inputs, std::vector<Attr> attrs,
                      sym::SymbolTable& table) {
  Graph g(table);
  std::vector<ValueId> ids;
  for (TensorMeta& m : inputs) ids.push_back(g.placeholder("x", std::move(m)));
  ValueId y = g.call(op, ids, attrs);
  g.setOutputs({y});
  Graph d = decompose(g);
  ASSERT_NO_THROW(verify(d)) << print(d);
  testing::expectRoundTrip(g);
  testing::expectRoundTrip(d);
  for (const Node& n : d.nodes())
    if (n.kind == NodeKind::Call) {
      EXPECT_EQ(getOp(n.target).decompose, nullptr) << print(d);
    }
  EXPECT_EQ(d.value(d.outputs()[0]), g.value(y)) << print(d);
  EXPECT_GT(d.size(), g.size()) << op;
}

TEST(Decompose, CompositeOpsBecomeCoreOpsWithTheSameResult) {
  sym::SymbolTable table;
  sym::Expr s0 = table.createBacked(8, {2, sym::kInf});
  Shape sizes = {s0, table.integer(16)};
  auto t = [&](DType dtype, Shape s) { return tensorOf(table, dtype, std::move(s)); };
  expectDecomposes("gelu", {t(DType::Float16, sizes)}, {}, table);
  expectDecomposes("gelu", {t(DType::BFloat16, sizes)}, {{"approximate", std::string("tanh")}},
                   table);
  expectDecomposes("silu", {t(DType::Float32, sizes)}, {}, table);
  expectDecomposes("softmax", {t(DType::Float32, sizes)}, {{"dim", int64_t{-1}}}, table);
  expectDecomposes("log_softmax", {t(DType::Float16, sizes)},
                   {{"dim", int64_t{0}}, {"dtype", DType::Float32}}, table);
  expectDecomposes("linear",
                   {t(DType::Float32, sizes), t(DType::Float32, ints(table, {4, 16})),
                    t(DType::Float32, ints(table, {4}))},
                   {}, table);
  expectDecomposes("addmm",
                   {t(DType::Float32, ints(table, {4})), t(DType::Float32, sizes),
                    t(DType::Float32, ints(table, {16, 4}))},
                   {{"alpha", 2.0}, {"beta", 0.5}}, table);
  expectDecomposes("var", {t(DType::Float32, sizes)}, {{"dim", std::vector<int64_t>{0}}}, table);
  expectDecomposes("std", {t(DType::Float64, sizes)}, {{"keepdim", true}}, table);
  expectDecomposes("layer_norm",
                   {t(DType::Float32, sizes), t(DType::Float32, ints(table, {16})),
                    t(DType::Float32, ints(table, {16}))},
                   {{"normalized_shape", std::vector<int64_t>{16}}}, table);
  expectDecomposes("rms_norm", {t(DType::BFloat16, sizes), t(DType::BFloat16, ints(table, {16}))},
                   {{"normalized_shape", std::vector<int64_t>{16}}}, table);
}

TEST(Decompose, CrossEntropyInEveryForm) {
  sym::SymbolTable table;
  sym::Expr s0 = table.createBacked(8, {2, sym::kInf});
  auto t = [&](DType dtype, Shape s) { return tensorOf(table, dtype, std::move(s)); };
  for (const char* reduction : {"mean", "sum", "none"})
    expectDecomposes("cross_entropy",
                     {t(DType::Float32, {s0, table.integer(10)}), t(DType::Int64, {s0})},
                     {{"reduction", std::string(reduction)}}, table);
  expectDecomposes("cross_entropy",
                   {t(DType::Float32, {s0, table.integer(10), table.integer(7)}),
                    t(DType::Int64, {s0, table.integer(7)})},
                   {{"ignore_index", int64_t{0}}}, table);
  expectDecomposes("cross_entropy", {t(DType::Float32, ints(table, {10})), t(DType::Int64, {})}, {},
                   table);
  sym::Expr c = table.createBacked(10, {2, sym::kInf}); // a symbolic class count
  TensorMeta x = t(DType::Float32, {s0, c, table.integer(7)});
  TensorMeta w = t(DType::Float32, {c});
  for (const char* reduction : {"mean", "sum", "none"}) {
    std::vector<Attr> attrs = {{"reduction", std::string(reduction)}, {"label_smoothing", 0.1}};
    expectDecomposes("cross_entropy", {x, t(DType::Int64, {s0, table.integer(7)}), w}, attrs,
                     table);
    expectDecomposes("cross_entropy", {x, x, w}, attrs, table); // probabilities
  }
  expectDecomposes("cross_entropy", {t(DType::Float32, {c}), t(DType::Float32, {c})}, {}, table);
}

TEST(Decompose, AttentionAsSoftmaxOfScores) {
  sym::SymbolTable table;
  sym::Expr l = table.createBacked(8, {2, sym::kInf});
  sym::Expr e = table.createBacked(16, {2, sym::kInf});
  auto t = [&](DType dtype, Shape s) { return tensorOf(table, dtype, std::move(s)); };
  TensorMeta q = t(DType::Float32, {table.integer(2), l, e});
  TensorMeta k = t(DType::Float32, {table.integer(2), table.integer(5), e});
  TensorMeta v = t(DType::Float32, {table.integer(2), table.integer(5), table.integer(3)});
  expectDecomposes("scaled_dot_product_attention", {q, k, v}, {}, table);
  expectDecomposes("scaled_dot_product_attention", {q, q, q}, {{"is_causal", true}}, table);
  expectDecomposes("scaled_dot_product_attention", {q, k, v, t(DType::Bool, {l, table.integer(5)})},
                   {{"scale", 0.5}}, table);
  expectDecomposes("scaled_dot_product_attention", {q, k, v, t(DType::Float32, {table.integer(5)})},
                   {}, table);
}

TEST(Decompose, SoftmaxOverAnEmptyDimNeedsNoMax) {
  sym::SymbolTable table;
  Graph g(table);
  ValueId x = g.placeholder("x", tensorOf(table, DType::Float32, ints(table, {3, 0})));
  g.setOutputs({g.call("softmax", {x}, {{"dim", int64_t{1}}}),
                g.call("log_softmax", {x}, {{"dim", int64_t{-1}}})});
  Graph d = decompose(g);
  EXPECT_NO_THROW(verify(d));
  EXPECT_EQ(d.value(d.outputs()[0]), g.value(g.outputs()[0]));
}

TEST(Decompose, LayerNormTakesABiasWithoutAWeight) {
  sym::SymbolTable table;
  Graph g(table);
  ValueId x = g.placeholder("x", tensorOf(table, DType::Float32, ints(table, {2, 3})));
  ValueId b = g.placeholder("b", tensorOf(table, DType::Float32, ints(table, {3})));
  g.setOutputs({g.call("layer_norm", {x, b},
                       {{"normalized_shape", std::vector<int64_t>{3}}, {"weight", AttrValue{}}})});
  Graph d = decompose(g);
  std::vector<HostTensor> in = {HostTensor::fromDoubles(DType::Float32, {2, 3}, {1, 2, 4, -1, 0, 5}),
                                HostTensor::fromDoubles(DType::Float32, {3}, {10, 20, 30})};
  std::vector<double> expected = interpret(g, in)[0].toDoubles(), got = interpret(d, in)[0].toDoubles();
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], 1e-5) << i;
  EXPECT_NEAR(expected[0], 10 - 1.0690449, 1e-5); // (1 - 7/3) / std + bias 10
}

TEST(Decompose, LeavesCoreGraphsAlone) {
  sym::SymbolTable table;
  Graph g(table);
  ValueId x = g.placeholder("x", tensorOf(table, DType::Float32, ints(table, {4})));
  g.setOutputs({g.call("exp", {x})});
  EXPECT_EQ(print(decompose(g)), print(g));
}

TEST(Decompose, VarianceDividesBySymbolicCount) {
  sym::SymbolTable table;
  sym::Expr s0 = table.createBacked(8, {2, sym::kInf});
  Graph g(table);
  ValueId x = g.placeholder("x", tensorOf(table, DType::Float32, {s0}));
  g.setOutputs({g.call("var", {x})});
  std::string text = print(decompose(g));
  EXPECT_NE(text.find("div(%"), std::string::npos) << text;
  EXPECT_NE(text.find("other=s0 - 1"), std::string::npos) << text;
}

} // namespace
} // namespace kiln::ir
