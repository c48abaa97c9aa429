// partition(): which values are saved for gelu(x @ w1) @ w2 under each memory
// budget, and that forward then backward give the joint graph's grads.
#include <gtest/gtest.h>

#include <set>

#include "kiln/autograd/partition.h"
#include "kiln/autograd/train.h"
#include "kiln/common/error.h"
#include "kiln/ir/interpreter.h"
#include "kiln/ir/print.h"
#include "kiln/ir/verify.h"
#include "kiln/sym/symbol_table.h"

namespace kiln::autograd {
namespace {

using ir::DType;
using ir::HostTensor;

struct Mlp {
  sym::SymbolTable t;
  ir::Graph g{t};
  ValueId x, w1, w2, h, a;
  Mlp() {
    auto f = [&](int64_t r, int64_t c) {
      return ir::TensorMeta::contiguous(DType::Float64, {t.integer(r), t.integer(c)}, t);
    };
    x = g.placeholder("x", f(4, 8));
    w1 = g.placeholder("w1", f(8, 16));
    w2 = g.placeholder("w2", f(16, 2));
    h = g.call("mm", {x, w1});
    a = g.call("gelu", {h});
    g.setOutputs({g.call("mm", {a, w2})});
  }
  std::set<std::string> saved(const Partition& p, const JointGraph& j) const {
    std::set<std::string> names;
    for (ValueId v : p.saved) {
      const ir::Node& n = j.graph.node(v);
      names.insert(v == h ? "h" : v == a ? "a" : n.target);
    }
    return names;
  }
};

HostTensor ramp(std::vector<int64_t> sizes, double scale) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  std::vector<double> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(scale * static_cast<double>((i * 7) % 11 - 5));
  return HostTensor::fromDoubles(DType::Float64, sizes, v);
}

TEST(Partition, BudgetZeroSavesNothingRecomputable) {
  Mlp m;
  JointGraph j = backward(m.g, {true, true, true});
  Partition p = partition(j, {0.0});
  EXPECT_EQ(m.saved(p, j), (std::set<std::string>{"x", "w1", "w2", "h"}));
  EXPECT_EQ(p.recomputed, std::vector<ValueId>{m.a}); // gelu, in the backward
}

TEST(Partition, BudgetOneRecomputesNothing) {
  Mlp m;
  JointGraph j = backward(m.g, {true, true, true});
  Partition p = partition(j, {1.0});
  EXPECT_EQ(m.saved(p, j), (std::set<std::string>{"x", "w1", "w2", "h", "a"}));
  EXPECT_TRUE(p.recomputed.empty());
}

TEST(Partition, HalfBudgetRecomputesThePointwiseResult) {
  Mlp m;
  JointGraph j = backward(m.g, {true, true, true});
  Partition p = partition(j); // 0.5: gelu's result does not fit
  EXPECT_EQ(m.saved(p, j), (std::set<std::string>{"x", "w1", "w2", "h"}));
}

TEST(Partition, ForwardThenBackwardGiveTheJointGrads) {
  for (double budget : {0.0, 0.5, 1.0}) {
    Mlp m;
    JointGraph j = backward(m.g, {true, true, true});
    Partition p = partition(j, {budget});
    ir::verify(p.forward);
    ir::verify(p.backward);
    std::vector<HostTensor> in = {ramp({4, 8}, 0.1), ramp({8, 16}, 0.05), ramp({16, 2}, 0.2)};
    HostTensor tangent = ramp({4, 2}, 1.0);
    auto all = in;
    all.push_back(tangent);
    auto joint = ir::interpret(j.graph, all);
    auto fw = ir::interpret(p.forward, in);
    std::vector<HostTensor> bwIn(fw.begin() + static_cast<long>(p.forwardOutputs), fw.end());
    bwIn.push_back(tangent);
    auto grads = ir::interpret(p.backward, bwIn);
    ASSERT_EQ(grads.size(), 3u);
    EXPECT_EQ(fw[0].toDoubles(), joint[0].toDoubles());
    for (size_t i = 0; i < 3; ++i)
      EXPECT_EQ(grads[i].toDoubles(), joint[1 + i].toDoubles())
          << "grad " << i << " budget " << budget;
  }
}

// Runs joint and partitioned graphs on the same inputs and tangents: the same grads.
void expectSameGrads(const JointGraph& j, const Partition& p, std::vector<HostTensor> in,
                     std::vector<HostTensor> tangents) {
  auto all = in;
  all.insert(all.end(), tangents.begin(), tangents.end());
  auto joint = ir::interpret(j.graph, all);
  auto fw = ir::interpret(p.forward, in);
  std::vector<HostTensor> bwIn(fw.begin() + static_cast<long>(p.forwardOutputs), fw.end());
  bwIn.insert(bwIn.end(), tangents.begin(), tangents.end());
  auto grads = ir::interpret(p.backward, bwIn);
  for (size_t i = 0; i < grads.size(); ++i)
    EXPECT_EQ(grads[i].toDoubles(), joint[j.forwardOutputs + i].toDoubles()) << "grad " << i;
}

// dropout(x @ w) of f64 [3, 4] and [4, 5], its seed and offset inputs: the
// graph's values, and the inputs and grad its partitions are checked on.
struct DropoutOfAProduct {
  sym::SymbolTable t;
  ir::Graph g{t};
  ValueId x, w, seed, offset, h, d;

  DropoutOfAProduct() {
    auto f = [&](int64_t r, int64_t c) {
      return ir::TensorMeta::contiguous(DType::Float64, {t.integer(r), t.integer(c)}, t);
    };
    auto scalar = ir::TensorMeta::contiguous(DType::Int64, {}, t);
    x = g.placeholder("x", f(3, 4));
    w = g.placeholder("w", f(4, 5));
    seed = g.placeholder("seed", scalar);
    offset = g.placeholder("offset", scalar);
    h = g.call("mm", {x, w});
    d = g.call("dropout", {h, seed, offset}, {{"p", 0.4}});
  }

  void expectGrads(const JointGraph& j, const Partition& p) {
    auto i64 = [](int64_t v) { return HostTensor::fromDoubles(DType::Int64, {}, {double(v)}); };
    expectSameGrads(j, p, {ramp({3, 4}, 0.1), ramp({4, 5}, 0.2), i64(7), i64(0)},
                    {ramp({3, 5}, 1.0)});
  }
};

// dropout(x @ w) squared: its mask is replayed from the seed in the backward,
// never saved at budget 0.
TEST(Partition, DropoutIsRecomputedFromItsSeed) {
  DropoutOfAProduct m;
  m.g.setOutputs({m.g.call("mul", {m.d, m.d})});
  JointGraph j = backward(m.g, {true, true, false, false});
  Partition p = partition(j, {0.0});
  std::set<ValueId> saved(p.saved.begin(), p.saved.end());
  EXPECT_TRUE(saved.count(m.h) && saved.count(m.seed) && saved.count(m.offset));
  EXPECT_FALSE(saved.count(m.d));
  m.expectGrads(j, p);
}

// dropout's backward is dropout of the grad: it reads the seed and offset, not
// its input, so the product before it is not kept for its shape at any budget.
TEST(Partition, DropoutsBackwardKeepsItsSeedNotItsInput) {
  for (double budget : {0.0, 1.0}) {
    DropoutOfAProduct m;
    m.g.setOutputs({m.d});
    JointGraph j = backward(m.g, {false, true, false, false});
    Partition p = partition(j, {budget});
    std::set<ValueId> saved(p.saved.begin(), p.saved.end());
    EXPECT_TRUE(saved.count(m.x) && saved.count(m.seed) && saved.count(m.offset)) << budget;
    EXPECT_FALSE(saved.count(m.h)) << budget;
    m.expectGrads(j, p);
  }
}

// A tuple (chunk) is never saved; its pieces may be, or be recomputed with it.
TEST(Partition, PiecesOfATupleRecomputeThroughIt) {
  for (double budget : {0.0, 0.5, 1.0}) {
    sym::SymbolTable t;
    ir::Graph g(t);
    ValueId x = g.placeholder("x", ir::TensorMeta::contiguous(DType::Float64, {t.integer(6)}, t));
    ValueId parts = g.call("chunk", {g.call("exp", {x})}, {{"chunks", int64_t{2}}});
    ValueId a = g.call("getitem", {parts}, {{"index", int64_t{0}}});
    ValueId b = g.call("getitem", {parts}, {{"index", int64_t{1}}});
    g.setOutputs({g.call("mul", {a, b})});
    JointGraph j = backward(g, {true});
    Partition p = partition(j, {budget});
    for (ValueId v : p.saved) EXPECT_FALSE(j.graph.value(v).isTuple());
    expectSameGrads(j, p, {ramp({6}, 0.3)}, {ramp({3}, 1.0)});
  }
}

// log_softmax (a classifier's loss) and softmax of a product the backward
// reads anyway (here through a square of it): the backward reads the
// softmax's result, which the forward computes from its rows' logsumexp; the
// logsumexp (a value per row) is saved and the [rows, classes] result is
// recomputed from the product. The grads are the rule's: the joint's, and
// finite differences of the forward.
TEST(Partition, SoftmaxesSaveTheirRowsLogsumexp) {
  for (const char* op : {"log_softmax", "softmax"}) {
    for (double budget : {0.25, 0.5}) {
      sym::SymbolTable t;
      ir::Graph g(t);
      auto f = [&](int64_t r, int64_t c) {
        return ir::TensorMeta::contiguous(DType::Float64, {t.integer(r), t.integer(c)}, t);
      };
      ValueId x = g.placeholder("x", f(3, 4)), w = g.placeholder("w", f(4, 6));
      ValueId c = g.placeholder("c", f(3, 6));
      ValueId logits = g.call("mm", {x, w});
      ValueId y = g.call(op, {logits}, {{"dim", int64_t{-1}}});
      ValueId loss = g.call("add", {g.call("sum", {g.call("mul", {y, c})}),
                                    g.call("sum", {g.call("mul", {logits, logits})})});
      g.setOutputs({loss});
      JointGraph j = backward(g, {true, true, false});
      ir::verify(j.graph);
      Partition p = partition(j, {budget});
      std::set<ValueId> saved(p.saved.begin(), p.saved.end());
      EXPECT_TRUE(saved.count(logits)) << op << " budget " << budget;
      size_t rows = 0, wide = 0; // [3, 1] and [3, 6] values saved besides the product and c
      for (ValueId v : p.saved) {
        std::vector<std::optional<int64_t>> sizes;
        for (sym::Expr s : j.graph.meta(v).sizes) sizes.push_back(s.asInteger());
        rows += sizes == std::vector<std::optional<int64_t>>{3, 1};
        wide += sizes == std::vector<std::optional<int64_t>>{3, 6} && v != logits && v != c;
      }
      EXPECT_EQ(rows, 1u) << op << " budget " << budget;
      EXPECT_EQ(wide, 0u) << op << " budget " << budget;
      HostTensor one = HostTensor::fromDoubles(DType::Float64, {}, {1.0});
      std::vector<HostTensor> in = {ramp({3, 4}, 0.3), ramp({4, 6}, 0.2), ramp({3, 6}, 0.1)};
      expectSameGrads(j, p, in, {one});
      std::vector<double> xs = in[0].toDoubles();
      std::vector<double> dx = ir::interpret(j.graph, {in[0], in[1], in[2], one})[1].toDoubles();
      for (size_t i = 0; i < xs.size(); ++i) {
        auto at = [&](double h) {
          std::vector<double> moved = xs;
          moved[i] += h;
          HostTensor mx = HostTensor::fromDoubles(DType::Float64, {3, 4}, moved);
          return ir::interpret(g, {mx, in[1], in[2]})[0].toDoubles()[0];
        };
        EXPECT_NEAR(dx[i], (at(1e-6) - at(-1e-6)) / 2e-6, 1e-6) << op << " element " << i;
      }
    }
  }
}

TEST(Partition, RefusesABudgetOutOfRange) {
  Mlp m;
  JointGraph j = backward(m.g, {true, true, true});
  EXPECT_THROW(partition(j, {1.5}), Error);
}

// A CUDA training graph's odd-sized bf16 product (GPT-2's vocabulary: rows of
// 50257) is padded before the partition: the value saved from it is a view of
// the padded product (rows 1032 apart here: 16-byte aligned), nothing copies
// it into a contiguous tensor, and the backward's products are padded too.
TEST(Partition, CudaProductsArePaddedBeforeThePartition) {
  sym::SymbolTable t;
  ir::Graph g{t};
  ir::Device cuda{ir::DeviceType::Cuda, 0};
  auto bf16 = [&](int64_t r, int64_t c) {
    return ir::TensorMeta::contiguous(DType::BFloat16, {t.integer(r), t.integer(c)}, t, cuda);
  };
  ir::TensorMeta batch = ir::TensorMeta::contiguous(
      DType::BFloat16, {t.integer(2), t.integer(512), t.integer(1024)}, t, cuda);
  ValueId x = g.placeholder("x", batch), w = g.placeholder("w", bf16(1025, 1024));
  ValueId logits = g.call("linear", {x, w}); // as traced from nn.Linear
  logits = g.call("view", {logits}, {{"size", std::vector<int64_t>{-1, 1025}}});
  ValueId wide = g.call("to_dtype", {logits}, {{"dtype", DType::Float32}});
  g.setOutputs({g.call("sum", {g.call("exp", {wide})})});
  TrainingGraphs padded = partitionForTraining(g, {true, true});
  const ir::Graph& forward = padded.partition.forward;
  bool savedAView = false;
  for (size_t k = 1; k < forward.outputs().size(); ++k) {
    const ir::TensorMeta& m = forward.meta(forward.outputs()[k]);
    savedAView = savedAView || (m.dim() == 2 && m.sizes[1].asInteger() == 1025 &&
                                m.strides[0].asInteger() == 1032);
  }
  EXPECT_TRUE(savedAView) << ir::print(forward);
  for (const ir::Node& n : forward.nodes()) EXPECT_NE(n.target, "contiguous") << ir::print(forward);
  size_t products = 0;
  for (const ir::Node& n : padded.partition.backward.nodes()) {
    if (n.target != "mm" && n.target != "matmul") continue;
    ++products;
    const ir::Shape& sizes = n.value.tensor().sizes; // its matrix dims
    for (size_t d = sizes.size() - 2; d < sizes.size(); ++d)
      EXPECT_EQ(*sizes[d].asInteger() % 8, 0) << ir::print(padded.partition.backward);
  }
  EXPECT_EQ(products, 2u) << ir::print(padded.partition.backward);
  // On the CPU nothing is padded: the saved product is the product.
  ir::Graph cpu{t};
  auto host = [&](int64_t r, int64_t c) {
    return ir::TensorMeta::contiguous(DType::BFloat16, {t.integer(r), t.integer(c)}, t);
  };
  ValueId hx = cpu.placeholder("x", host(1024, 1024)), hw = cpu.placeholder("w", host(1025, 1024));
  ValueId hl = cpu.call("mm", {hx, cpu.call("transpose", {hw}, {{"dim0", int64_t{0}}, {"dim1", int64_t{1}}})});
  cpu.setOutputs({cpu.call("sum", {cpu.call("exp", {cpu.call("to_dtype", {hl}, {{"dtype", DType::Float32}})})})});
  for (const ir::Node& n : partitionForTraining(cpu, {true, true}).partition.forward.nodes())
    EXPECT_NE(n.target, "cat");
}

} // namespace
} // namespace kiln::autograd
