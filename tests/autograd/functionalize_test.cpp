// functionalize(): pure graphs whose outputs and epilogue equal what the mutating
// graph computes and leaves in its inputs (the interpreter runs both).
#include <gtest/gtest.h>

#include <algorithm>

#include "kiln/autograd/functionalize.h"
#include "kiln/autograd/train.h"
#include "kiln/common/error.h"
#include "kiln/ir/interpreter.h"
#include "kiln/ir/verify.h"
#include "kiln/sym/symbol_table.h"

namespace kiln::autograd {
namespace {

using ir::DType;
using ir::HostTensor;

struct G {
  sym::SymbolTable t;
  ir::Graph g{t};
  ir::TensorMeta f(std::vector<int64_t> sizes) {
    ir::Shape s;
    for (int64_t v : sizes) s.push_back(t.integer(v));
    return ir::TensorMeta::contiguous(DType::Float64, s, t);
  }
};

HostTensor ramp(std::vector<int64_t> sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  std::vector<double> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(static_cast<double>((i * 7) % 11) - 5);
  return HostTensor::fromDoubles(DType::Float64, sizes, v);
}

HostTensor copy(const HostTensor& h) {
  return HostTensor::fromDoubles(h.dtype, h.sizes, h.toDoubles());
}

// The functionalized graph's outputs equal the original's, and its epilogue the
// inputs the original left behind.
void expectSameAsMutating(const ir::Graph& g, const std::vector<HostTensor>& inputs) {
  Functionalized pure = functionalize(g);
  ir::verify(pure.graph);
  EXPECT_FALSE(mutates(pure.graph));
  std::vector<HostTensor> mutated, fresh;
  for (const HostTensor& h : inputs) {
    mutated.push_back(copy(h));
    fresh.push_back(copy(h));
  }
  auto want = ir::interpret(g, mutated);
  auto got = ir::interpret(pure.graph, fresh);
  ASSERT_EQ(got.size(), pure.userOutputs + pure.mutatedInputs.size());
  for (size_t i = 0; i < pure.userOutputs; ++i)
    EXPECT_EQ(got[i].toDoubles(), want[i].toDoubles()) << "output " << i;
  for (size_t k = 0; k < pure.mutatedInputs.size(); ++k)
    EXPECT_EQ(got[pure.userOutputs + k].toDoubles(), mutated[pure.mutatedInputs[k]].toDoubles())
        << "input " << pure.mutatedInputs[k];
  for (size_t i = 0; i < inputs.size(); ++i) { // untouched: not in the epilogue
    auto& m = pure.mutatedInputs;
    if (std::find(m.begin(), m.end(), i) == m.end()) {
      EXPECT_EQ(mutated[i].toDoubles(), inputs[i].toDoubles()) << "input " << i;
    }
  }
}

TEST(Functionalize, InPlaceOnInputsAndIntermediates) {
  G m;
  auto x = m.g.placeholder("x", m.f({3, 4}));
  auto y = m.g.placeholder("y", m.f({4}));
  auto h = m.g.call("mul", {x, y});
  m.g.call("add_", {h}, {{"other", 1.0}});
  m.g.call("mul_", {x, y}); // an input, after h read it
  m.g.setOutputs({h, m.g.call("sum", {x})});
  Functionalized pure = functionalize(m.g);
  EXPECT_EQ(pure.mutatedInputs, std::vector<size_t>{0});
  expectSameAsMutating(m.g, {ramp({3, 4}), ramp({4})});
}

TEST(Functionalize, WritesThroughViewsReachTheBaseAndOtherViews) {
  G m;
  auto x = m.g.placeholder("x", m.f({3, 4}));
  auto row = m.g.call("select", {x}, {{"dim", int64_t{0}}, {"index", int64_t{1}}});
  auto col =
      m.g.call("select", {m.g.call("transpose", {x}, {{"dim0", int64_t{0}}, {"dim1", int64_t{1}}})},
               {{"dim", int64_t{0}}, {"index", int64_t{2}}});
  m.g.call("add_", {row}, {{"other", 10.0}});
  m.g.call("mul_", {col}, {{"other", 3.0}}); // col (x[:, 2]) sees row's write at x[1, 2]
  m.g.setOutputs({row, col, m.g.call("mul", {x}, {{"other", 1.0}})});
  expectSameAsMutating(m.g, {ramp({3, 4})});
}

TEST(Functionalize, OutFormsAndSplitPieces) {
  G m;
  auto x = m.g.placeholder("x", m.f({4, 2}));
  auto out = m.g.placeholder("out", m.f({4, 2}));
  auto pieces = m.g.call("split", {x}, {{"split_size", int64_t{2}}, {"dim", int64_t{0}}});
  auto first = m.g.call("getitem", {pieces}, {{"index", int64_t{0}}});
  m.g.call("tanh_out", {x, out});
  m.g.call("sub_", {first}, {{"other", 1.0}});
  m.g.setOutputs({m.g.call("add", {x, out})});
  Functionalized pure = functionalize(m.g);
  EXPECT_EQ(pure.mutatedInputs, (std::vector<size_t>{0, 1}));
  expectSameAsMutating(m.g, {ramp({4, 2}), ramp({4, 2})});
}

TEST(Functionalize, PureGraphsAreUnchanged) {
  G m;
  auto x = m.g.placeholder("x", m.f({3}));
  m.g.setOutputs({m.g.call("sin", {x})});
  Functionalized pure = functionalize(m.g);
  EXPECT_EQ(pure.graph.size(), m.g.size());
  EXPECT_TRUE(pure.mutatedInputs.empty());
}

TEST(PartitionForTraining, TypedErrorsForWhatCannotBeDifferentiated) {
  G m;
  auto x = m.g.placeholder("x", m.f({3}));
  m.g.setOutputs({m.g.call("sin", {x})});
  try {
    partitionForTraining(m.g, {false});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
  }
  try {
    partitionForTraining(m.g, {true, true});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
  }
  TrainingGraphs t = partitionForTraining(m.g, {true});
  EXPECT_EQ(t.userOutputs, 1u);
  EXPECT_EQ(t.partition.gradOf, std::vector<size_t>{0});
}

} // namespace
} // namespace kiln::autograd
