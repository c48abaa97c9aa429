// backward(): the joint graph's shape, and its grads run through the interpreter
// against finite differences.
#include <gtest/gtest.h>

#include <cmath>

#include "kiln/autograd/backward.h"
#include "kiln/autograd/rules.h"
#include "kiln/common/error.h"
#include "kiln/ir/interpreter.h"
#include "kiln/ir/verify.h"
#include "kiln/sym/symbol_table.h"

namespace kiln::autograd {
namespace {

using ir::DType;
using ir::HostTensor;

ir::TensorMeta f64(sym::SymbolTable& t, std::initializer_list<int64_t> sizes) {
  ir::Shape s;
  for (int64_t x : sizes) s.push_back(t.integer(x));
  return ir::TensorMeta::contiguous(DType::Float64, s, t);
}

HostTensor tensor(std::vector<int64_t> sizes, std::vector<double> values) {
  return HostTensor::fromDoubles(DType::Float64, std::move(sizes), values);
}

TEST(Backward, JointGraphHasForwardTangentsAndGrads) {
  sym::SymbolTable t;
  ir::Graph g(t);
  ValueId x = g.placeholder("x", f64(t, {2, 3}));
  ValueId b = g.placeholder("b", f64(t, {3}));
  ValueId y = g.call("exp", {g.call("add", {x, b})});
  g.setOutputs({g.call("sum", {y})});
  JointGraph j = backward(g, {true, true});
  ir::verify(j.graph);
  EXPECT_EQ(j.forwardNodes, g.size());
  EXPECT_EQ(j.tangentOf, std::vector<size_t>{0});
  EXPECT_EQ(j.gradOf, (std::vector<size_t>{0, 1}));
  ASSERT_EQ(j.graph.outputs().size(), 3u);
  // d/db sums the broadcast grad back to b's sizes.
  EXPECT_EQ(j.graph.meta(j.graph.outputs()[2]).sizes, f64(t, {3}).sizes);
}

// f(x) = sum(tanh(x) * x): the grad matches central differences.
TEST(Backward, GradMatchesFiniteDifferences) {
  sym::SymbolTable t;
  ir::Graph g(t);
  ValueId x = g.placeholder("x", f64(t, {4}));
  g.setOutputs({g.call("sum", {g.call("mul", {g.call("tanh", {x}), x})})});
  JointGraph j = backward(g, {true});
  std::vector<double> xs = {-1.5, -0.2, 0.3, 2.0};
  auto out = ir::interpret(j.graph, {tensor({4}, xs), tensor({}, {1.0})});
  std::vector<double> grad = out[1].toDoubles();
  for (size_t i = 0; i < xs.size(); ++i) {
    double h = 1e-6, xp = xs[i] + h, xm = xs[i] - h;
    double fd = (std::tanh(xp) * xp - std::tanh(xm) * xm) / (2 * h);
    EXPECT_NEAR(grad[i], fd, 1e-6) << "element " << i;
  }
}

// Symbolic sizes: one joint graph for every s0, checked against finite differences at two.
TEST(Backward, SymbolicSizesMatchFiniteDifferences) {
  sym::SymbolTable t;
  sym::Expr s0 = t.declare("s0", 4, {2, 64});
  ir::Graph g(t);
  ValueId x = g.placeholder("x", ir::TensorMeta::contiguous(DType::Float64, {s0, t.integer(3)}, t));
  ValueId w = g.placeholder("w", f64(t, {3}));
  ValueId rows =
      g.call("slice", {g.call("softmax", {x}, {{"dim", int64_t{1}}})}, {{"start", int64_t{1}}});
  g.setOutputs({g.call("sum", {g.call("mul", {rows, w})})});
  JointGraph j = backward(g, {true, false});
  ir::verify(j.graph);
  for (int64_t n : {2, 5}) {
    std::vector<double> xs;
    for (int64_t i = 0; i < 3 * n; ++i) xs.push_back(0.3 * static_cast<double>((i * 5) % 7) - 1);
    HostTensor wt = tensor({3}, {0.5, -1, 2});
    auto f = [&](const std::vector<double>& v) {
      return ir::interpret(g, {tensor({n, 3}, v), wt})[0].toDoubles()[0];
    };
    auto grad = ir::interpret(j.graph, {tensor({n, 3}, xs), wt, tensor({}, {1.0})})[1].toDoubles();
    for (size_t i = 0; i < xs.size(); ++i) {
      auto up = xs, down = xs;
      up[i] += 1e-6;
      down[i] -= 1e-6;
      EXPECT_NEAR(grad[i], (f(up) - f(down)) / 2e-6, 1e-6) << "s0=" << n << " element " << i;
    }
  }
}

TEST(Backward, ValuesUsedTwiceAccumulate) {
  sym::SymbolTable t;
  ir::Graph g(t);
  ValueId x = g.placeholder("x", f64(t, {2}));
  g.setOutputs({g.call("mul", {x, x})});
  JointGraph j = backward(g, {true});
  auto out = ir::interpret(j.graph, {tensor({2}, {3, -1}), tensor({2}, {1, 1})});
  EXPECT_EQ(out[1].toDoubles(), (std::vector<double>{6, -2}));
}

TEST(Backward, SplitPiecesWithoutGradGetZeros) {
  sym::SymbolTable t;
  ir::Graph g(t);
  ValueId x = g.placeholder("x", f64(t, {4}));
  ValueId parts = g.call("split", {x}, {{"split_size", int64_t{2}}});
  g.setOutputs({g.call("getitem", {parts}, {{"index", int64_t{1}}})});
  JointGraph j = backward(g, {true});
  auto out = ir::interpret(j.graph, {tensor({4}, {1, 2, 3, 4}), tensor({2}, {5, 6})});
  EXPECT_EQ(out[1].toDoubles(), (std::vector<double>{0, 0, 5, 6}));
}

// A linear layer's x @ w.t(): w's grad comes out contiguous, like w (autograd
// copies a grad whose strides differ from its parameter's), for mm and for
// matmul over a batch of rows; its values are dy's columns against x's.
TEST(Backward, GradsOfTransposedWeightsKeepTheWeightsLayout) {
  for (const char* op : {"mm", "matmul"}) {
    sym::SymbolTable t;
    ir::Graph g(t);
    bool batched = std::string(op) == "matmul";
    ValueId x = g.placeholder("x", batched ? f64(t, {1, 2, 3}) : f64(t, {2, 3}));
    ValueId w = g.placeholder("w", f64(t, {4, 3}));
    ValueId wt = g.call("transpose", {w}, {{"dim0", int64_t{0}}, {"dim1", int64_t{1}}});
    g.setOutputs({g.call(op, {x, wt})});
    JointGraph j = backward(g, {true, true});
    ir::verify(j.graph);
    ir::TensorMeta grad = j.graph.meta(j.graph.outputs()[2]);
    EXPECT_TRUE(grad.isContiguous()) << op << ": " << ir::toString(grad);
    std::vector<int64_t> xs = batched ? std::vector<int64_t>{1, 2, 3} : std::vector<int64_t>{2, 3};
    std::vector<int64_t> ys = batched ? std::vector<int64_t>{1, 2, 4} : std::vector<int64_t>{2, 4};
    auto out = ir::interpret(j.graph, {tensor(xs, {1, 2, 3, 4, 5, 6}),
                                       tensor({4, 3}, std::vector<double>(12, 0.5)),
                                       tensor(ys, {1, 0, 0, 2, 0, 1, 0, 0})});
    // dw[j, k] = sum_i dy[i, j] * x[i, k]
    EXPECT_EQ(out[2].toDoubles(), (std::vector<double>{1, 2, 3, 4, 5, 6, 0, 0, 0, 2, 4, 6}))
        << op;
  }
}

TEST(Backward, RefusesBadRequests) {
  sym::SymbolTable t;
  ir::Graph g(t);
  ValueId x = g.placeholder("x", f64(t, {2}));
  ValueId i = g.placeholder("i", ir::TensorMeta::contiguous(DType::Int64, {t.integer(2)}, t));
  g.setOutputs({g.call("add_", {x, x})});
  try {
    backward(g, {true, false});
    FAIL() << "a mutation op was differentiated";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Unsupported);
  }
  g.setOutputs({x});
  EXPECT_THROW(backward(g, {true}), Error);        // one flag for two inputs
  EXPECT_THROW(backward(g, {false, true}), Error); // an integer input
  (void)i;
}

TEST(Rules, EveryOpIsClassified) {
  EXPECT_EQ(differentiability("mm"), Differentiability::Rule);
  EXPECT_EQ(differentiability("layer_norm"), Differentiability::Decompose);
  EXPECT_EQ(differentiability("argmax"), Differentiability::None);
  EXPECT_EQ(differentiability("add_"), Differentiability::Unsupported);
}

} // namespace
} // namespace kiln::autograd
