// Scheduling: the kernel counts the fusion rules promise.
#include <gtest/gtest.h>

#include "kiln/codegen/lower.h"
#include "kiln/codegen/schedule.h"
#include "kiln/sym/symbol_table.h"

namespace kiln::codegen {
namespace {

using ir::DType;
using ir::TensorMeta;
using ir::ValueId;

struct Fusion : ::testing::Test {
  sym::SymbolTable table;
  ir::Graph graph{table};
  sym::Expr s0 = table.createBacked(8, {1, sym::kInf});

  ValueId input(const char* name, ir::Shape sizes) {
    return graph.placeholder(name,
                             ir::Value(TensorMeta::contiguous(DType::Float32, sizes, table)));
  }
  sym::Expr n(int64_t v) { return table.integer(v); }

  struct Counts {
    size_t kernels = 0, externs = 0;
    std::string text;
  };
  Counts scheduled() {
    Program p = lower(graph);
    Schedule s = schedule(p);
    Counts c;
    for (const Step& step : s.steps) (step.kind == Step::RunKernel ? c.kernels : c.externs)++;
    c.text = print(p) + explain(s, p);
    return c;
  }
};

TEST_F(Fusion, PointwiseChainIsOneKernel) {
  ValueId x = input("x", {s0, n(64)});
  ValueId a = input("a", {n(64)});
  ValueId b = input("b", {n(64)});
  ValueId y = graph.call("gelu", {graph.call("add", {graph.call("mul", {x, a}), b})});
  graph.setOutputs({graph.call("mul", {y, graph.call("sigmoid", {x})})});
  Counts c = scheduled();
  EXPECT_EQ(c.kernels, 1u) << c.text;
  EXPECT_EQ(c.externs, 0u) << c.text;
}

TEST_F(Fusion, SoftmaxOverTheLastDimIsOneKernel) {
  ValueId x = input("x", {s0, n(128)});
  graph.setOutputs({graph.call("softmax", {x}, {{"dim", int64_t{-1}}})});
  Counts c = scheduled();
  EXPECT_EQ(c.kernels, 1u) << c.text;
}

TEST_F(Fusion, ResidualAndLayerNormIsOneKernel) {
  ValueId x = input("x", {s0, n(768)});
  ValueId r = input("r", {s0, n(768)});
  ValueId w = input("w", {n(768)});
  ValueId b = input("b", {n(768)});
  ValueId h = graph.call("add", {x, r});
  graph.setOutputs({graph.call("layer_norm", {h, w, b}, {{"normalized_shape", std::vector<int64_t>{768}}}), h});
  Counts c = scheduled();
  EXPECT_EQ(c.kernels, 1u) << c.text;
}

TEST_F(Fusion, TwoLayerMlpIsTwoMatmulsAndAtMostTwoKernels) {
  ValueId x = input("x", {s0, n(64)});
  ValueId w1 = input("w1", {n(256), n(64)});
  ValueId b1 = input("b1", {n(256)});
  ValueId w2 = input("w2", {n(64), n(256)});
  ValueId b2 = input("b2", {n(64)});
  ValueId h = graph.call("gelu", {graph.call("linear", {x, w1, b1})});
  graph.setOutputs({graph.call("linear", {h, w2, b2})});
  Counts c = scheduled();
  EXPECT_EQ(c.externs, 2u) << c.text;
  EXPECT_LE(c.kernels, 2u) << c.text;
}

TEST_F(Fusion, ReadsAtAnotherIndexSplitKernels) {
  ValueId x = input("x", {n(4), n(6)});
  ValueId e = x; // too big to recompute in both readers: stored
  for (int k = 0; k < 8; ++k) e = graph.call(k % 2 ? "sin" : "exp", {graph.call("neg", {e})});
  ValueId t = graph.call("transpose", {e}, {{"dim0", int64_t{0}}, {"dim1", int64_t{1}}});
  graph.setOutputs({e, graph.call("contiguous", {graph.call("add", {t}, {{"other", 1.0}})})});
  Counts c = scheduled();
  EXPECT_EQ(c.kernels, 2u) << c.text; // the transposed read needs all of e first
}

TEST_F(Fusion, PermutedResultsLoopInMemoryOrder) {
  ValueId x = input("x", {n(4), n(6)});
  ValueId e = x;
  for (int k = 0; k < 8; ++k) e = graph.call(k % 2 ? "sin" : "exp", {graph.call("neg", {e})});
  ValueId t = graph.call("transpose", {e}, {{"dim0", int64_t{0}}, {"dim1", int64_t{1}}});
  // add keeps t's strides: stored as e is, each item reads what it stored.
  graph.setOutputs({e, graph.call("add", {t}, {{"other", 1.0}})});
  Counts c = scheduled();
  EXPECT_EQ(c.kernels, 1u) << c.text;
  EXPECT_NE(c.text.find("buf2 : f32[4, 6] = pointwise [4, 6] over (i33, i32)"), std::string::npos)
      << c.text; // its dims in memory order
}

TEST_F(Fusion, ViewsOfBodiesFuseWithTheirProducer) {
  ValueId x = input("x", {s0, n(64)});
  ValueId b = input("b", {n(64)});
  ValueId heads = graph.call("view", {graph.call("add", {x, b})},
                             {{"size", std::vector<sym::Expr>{s0, n(4), n(16)}}});
  ValueId permuted = graph.call("permute", {heads}, {{"dims", std::vector<int64_t>{1, 0, 2}}});
  graph.setOutputs({graph.call("mul", {permuted}, {{"other", 2.0}})});
  Counts c = scheduled();
  EXPECT_EQ(c.kernels, 1u) << c.text;
}

TEST_F(Fusion, SoftmaxOfATransposedBodyIsOneKernel) {
  ValueId x = input("x", {n(64), s0});
  ValueId t = graph.call("transpose", {graph.call("exp", {x})},
                         {{"dim0", int64_t{0}}, {"dim1", int64_t{1}}});
  graph.setOutputs({graph.call("softmax", {t}, {{"dim", int64_t{-1}}})});
  Counts c = scheduled();
  EXPECT_EQ(c.kernels, 1u) << c.text;
}

TEST_F(Fusion, ExplainNamesEachKernelsBuffers) {
  ValueId x = input("x", {s0, n(16)});
  graph.setOutputs({graph.call("softmax", {x}, {{"dim", int64_t{1}}})});
  Counts c = scheduled();
  EXPECT_NE(c.text.find("kernel 0 over [s0]: buf1 (max of [16]), buf2 (sum of [16]), buf3 "
                        "(pointwise [16])"),
            std::string::npos)
      << c.text;
}

} // namespace
} // namespace kiln::codegen
