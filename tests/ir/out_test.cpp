// out= forms ("add_out"): mutation ops of their trailing `out`, through
// inference, the passes, the printer and wire, and the reference interpreter.
#include <cmath>
#include <cstring>
#include <optional>

#include <gtest/gtest.h>

#include "helpers.h"
#include "kiln/common/error.h"
#include "kiln/ir/hash.h"
#include "kiln/ir/interpreter.h"
#include "kiln/ir/op_registry.h"
#include "kiln/ir/passes.h"
#include "kiln/ir/print.h"
#include "kiln/ir/verify.h"
#include "kiln/ir/wire.h"

namespace kiln::ir {
namespace {

using testing::ints;
using testing::tensorOf;
using Doubles = std::vector<double>;

struct Out : ::testing::Test {
  sym::SymbolTable table;
  Graph graph{table};
  sym::Expr s0 = table.createBacked(8, {2, sym::kInf});
  sym::Expr s1 = table.createBacked(5, {2, sym::kInf});
  sym::Expr four = table.integer(4);

  ValueId input(DType dtype, Shape sizes, Device device = {}) {
    return graph.placeholder("x" + std::to_string(graph.size()),
                             TensorMeta::contiguous(dtype, std::move(sizes), table, device));
  }
  // The error of a call that must fail; its message must name `out`.
  Error errorOf(std::string_view op, std::vector<ValueId> inputs, std::vector<Attr> attrs = {}) {
    try {
      graph.call(op, std::move(inputs), std::move(attrs));
    } catch (const Error& e) {
      return e;
    }
    ADD_FAILURE() << op << " was accepted";
    return Error(ErrorCode::Internal, "accepted");
  }
  void expectRefusesOut(std::string_view op, std::vector<ValueId> inputs, std::vector<Attr> attrs,
                        std::string_view says) {
    Error e = errorOf(op, std::move(inputs), std::move(attrs));
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.message();
    EXPECT_NE(e.message().find(std::string(op) + ": argument 'out': "), std::string::npos)
        << e.message();
    EXPECT_NE(e.message().find(says), std::string::npos) << e.message();
  }
};

TEST_F(Out, FormsAreMutationOpsOfTheirTrailingOut) {
  size_t forms = 0;
  for (const std::string& n : opNames()) {
    const OpInfo& op = getOp(n);
    if (!isOutForm(op)) continue;
    ++forms;
    const OpInfo& functional = getOp(op.functional);
    EXPECT_EQ(op.name, functional.name + "_out");
    ASSERT_EQ(op.args.size(), functional.args.size() + 1) << n;
    EXPECT_EQ(op.args.back().name, "out");
    EXPECT_EQ(op.args.back().kind, ArgKind::Tensor);
    EXPECT_EQ(op.mutates, std::optional<size_t>(functional.args.size()));
    EXPECT_EQ(op.decompose, nullptr) << n; // a pure decomposition would lose the write
  }
  EXPECT_EQ(forms, 63u);
  for (const char* n : {"exp_out", "where_out", "clamp_out", "sum_out", "argmin_out", "all_out",
                        "mm_out", "bmm_out", "addmm_out", "matmul_out", "cat_out", "stack_out",
                        "softmax_out", "log_softmax_out"})
    EXPECT_TRUE(findOp(n)) << n;
  for (const char* n : {"relu_out", "isnan_out", "view_out", "to_dtype_out", "add__out"})
    EXPECT_FALSE(findOp(n)) << n; // torch has no out= for them
  EXPECT_EQ(getOp("add_").mutates, std::optional<size_t>(0));
  EXPECT_EQ(getOp("add_").functional, "add");
  EXPECT_FALSE(isOutForm(getOp("add_")));
  EXPECT_FALSE(getOp("add").mutates);
}

TEST_F(Out, ValueIsOutsMetaEvenWhenStrided) {
  ValueId x = input(DType::Float32, {s0, four});
  ValueId row = input(DType::Float32, {four});
  TensorMeta strided = tensorOf(table, DType::Float64, {s0, four});
  strided.strides = {table.integer(1), s0}; // a transposed buffer
  ValueId out = graph.placeholder("out", strided);
  ValueId r = graph.call("add_out", {x, row, out}, {{"alpha", int64_t{2}}});
  EXPECT_EQ(graph.value(r), Value(strided));
  EXPECT_EQ(graph.node(r).inputs, std::vector<ValueId>({x, row, out}));
  EXPECT_NO_THROW(verify(graph));
}

TEST_F(Out, OutBindsToTheLastInputPastListsAndAbsentOptionals) {
  ValueId a = input(DType::Float32, {s0, four});
  ValueId b = input(DType::Float32, {s1, four});
  ValueId cat = input(DType::Float32, {s0 + s1, four});
  ValueId stacked = input(DType::Float32, {s0, table.integer(2), four});
  ValueId same = input(DType::Float32, {s0, four});
  ValueId sums = input(DType::Float32, {s0});
  // Each call before reading values: call() may move the graph's nodes.
  ValueId catted = graph.call("cat_out", {a, b, cat});
  ValueId stacks = graph.call("stack_out", {a, a, stacked}, {{"dim", int64_t{1}}});
  ValueId maxOnly = graph.call("clamp_out", {a, same}, {{"max", 1.0}}); // min absent
  ValueId minTensor = graph.call("clamp_out", {a, a, same});
  ValueId summed = graph.call("sum_out", {a, sums}, {{"dim", int64_t{1}}});
  EXPECT_EQ(graph.value(catted), graph.value(cat));
  EXPECT_EQ(graph.value(stacks), graph.value(stacked));
  EXPECT_EQ(graph.node(maxOnly).attrs, std::vector<Attr>({{"max", 1.0}}));
  EXPECT_EQ(graph.node(maxOnly).inputs, std::vector<ValueId>({a, same}));
  EXPECT_EQ(graph.value(maxOnly), graph.value(same));
  EXPECT_EQ(graph.value(minTensor), graph.value(same));
  EXPECT_EQ(graph.value(summed), graph.value(sums));
  Error missing = errorOf("cat_out", {cat});
  EXPECT_EQ(missing.message(), "cat_out: argument 'tensors': needs at least one tensor");
  Error scalar = errorOf("add_out", {a, a, graph.call("sym_size", {a}, {{"dim", int64_t{0}}})});
  EXPECT_NE(scalar.message().find("argument 'out': expected a tensor"), std::string::npos);
}

TEST_F(Out, DTypeFollowsTorchOutRules) {
  ValueId f = input(DType::Float32, {four});
  ValueId i = input(DType::Int64, {four});
  ValueId f64 = input(DType::Float64, {four});
  ValueId i64 = input(DType::Int64, {four});
  ValueId b8 = input(DType::Bool, {four});
  // Cast rule: what torch.can_cast allows.
  EXPECT_EQ(graph.meta(graph.call("add_out", {i, i, f64})).dtype, DType::Float64);
  EXPECT_EQ(graph.meta(graph.call("exp_out", {i, f64})).dtype, DType::Float64);
  EXPECT_EQ(graph.meta(graph.call("lt_out", {f, f, i64})).dtype, DType::Int64); // bool into i64
  expectRefusesOut("exp_out", {f, i64}, {}, "result dtype f32 cannot be cast to i64");
  expectRefusesOut("div_out", {i, i, i64}, {}, "cannot be cast");
  expectRefusesOut("add_out", {f, f, b8}, {}, "cannot be cast to b8");
  // Exact rule: ops whose kernels torch runs in out's dtype only.
  expectRefusesOut("neg_out", {f, f64}, {}, "expected dtype f32 (the result's), got f64");
  expectRefusesOut("where_out", {b8, f, f, f64}, {}, "expected dtype f32");
  ValueId idx = input(DType::Int32, {});
  expectRefusesOut("argmax_out", {f, idx}, {{"dim", int64_t{0}}}, "expected dtype i64");
  // any/all: a bool or u8 result.
  ValueId flag = input(DType::UInt8, {});
  EXPECT_EQ(graph.meta(graph.call("any_out", {f, flag})).dtype, DType::UInt8);
  ValueId real = input(DType::Float32, {});
  expectRefusesOut("all_out", {f, real}, {}, "expected dtype b8 or u8, got f32");
}

TEST_F(Out, RefusesOutOfOtherSizesOrDevice) {
  ValueId x = input(DType::Float32, {s0, four});
  ValueId flat = input(DType::Float32, {s0 * 4});
  expectRefusesOut("add_out", {x, x, flat}, {}, "kiln does not resize out= tensors");
  ValueId wide = input(DType::Float32, {s0, table.integer(5)});
  expectRefusesOut("exp_out", {x, wide}, {}, "size at dim 1 differs");
  ValueId cuda = input(DType::Float32, {s0, four}, Device{DeviceType::Cuda, 0});
  expectRefusesOut("mul_out", {x, x, cuda}, {}, "on cuda:0 but the result is on cpu");
  // Sizes the symbols' ranges cannot compare: the caller must guard first.
  ValueId other = input(DType::Float32, {s1, four});
  EXPECT_EQ(errorOf("exp_out", {x, other}).code(), ErrorCode::Unsupported);
  // The functional op's own errors come first, naming it (as for in-place forms).
  ValueId m = input(DType::Float32, ints(table, {4, 3}));
  Error inner = errorOf("mm_out", {m, m, x});
  EXPECT_EQ(inner.message(), "mm: argument 'mat2': inner sizes differ: 3 != 4");
}

// x, y: f32[4]; z = add_out(x, y, out) unused; w = exp(x) returned.
Graph graphWithUnusedOut(sym::SymbolTable& table, size_t outCalls) {
  Graph g(table);
  ValueId x = g.placeholder("x", tensorOf(table, DType::Float32, ints(table, {4})));
  ValueId out = g.placeholder("out", tensorOf(table, DType::Float32, ints(table, {4})));
  for (size_t i = 0; i < outCalls; ++i) g.call("add_out", {x, x, out}, {{"alpha", 0.5}});
  g.setOutputs({g.call("exp", {x})});
  return g;
}

size_t countOp(const Graph& g, std::string_view op) {
  size_t n = 0;
  for (const Node& node : g.nodes()) n += node.kind == NodeKind::Call && node.target == op;
  return n;
}

TEST_F(Out, DeadCodeEliminationKeepsAnUnusedOutCall) {
  Graph g = graphWithUnusedOut(table, 1);
  Graph d = eliminateDeadCode(g);
  EXPECT_EQ(countOp(d, "add_out"), 1u);
  EXPECT_EQ(d.size(), g.size());
  EXPECT_NO_THROW(verify(d));
}

TEST_F(Out, CommonSubexpressionEliminationNeverMergesOutCalls) {
  Graph g = graphWithUnusedOut(table, 2);
  ASSERT_EQ(nodeHash(g.node(2)), nodeHash(g.node(3))); // identical nodes
  Graph c = eliminateCommonSubexpressions(g);
  EXPECT_EQ(countOp(c, "add_out"), 2u);
  EXPECT_NO_THROW(verify(c));
}

TEST_F(Out, CommonSubexpressionEliminationDoesNotReuseAReadAcrossAWrite) {
  ValueId x = input(DType::Float32, ints(table, {4}));
  ValueId out = input(DType::Float32, ints(table, {4}));
  ValueId before = graph.call("exp", {out});
  graph.call("exp_out", {x, out});
  ValueId after = graph.call("exp", {out}); // reads what exp_out wrote
  ValueId again = graph.call("exp", {out});
  graph.setOutputs({before, after, again});
  Graph c = eliminateCommonSubexpressions(graph);
  EXPECT_EQ(countOp(c, "exp"), 2u);
  EXPECT_NE(c.outputs()[0], c.outputs()[1]);
  EXPECT_EQ(c.outputs()[1], c.outputs()[2]); // two reads after the write still merge
}

TEST_F(Out, DecompositionLeavesOutFormsOfCompositesAlone) {
  ValueId x = input(DType::Float32, {s0, four});
  ValueId out = input(DType::Float32, {s0, four});
  graph.call("gelu_out", {x, out});
  graph.setOutputs({graph.call("softmax_out", {x, out}, {{"dim", int64_t{1}}})});
  Graph d = decompose(graph);
  EXPECT_EQ(countOp(d, "gelu_out"), 1u);
  EXPECT_EQ(countOp(d, "softmax_out"), 1u);
  EXPECT_EQ(structuralHash(d), structuralHash(graph));
}

TEST_F(Out, PrintsAndRoundTripsOnTheWire) {
  ValueId x = input(DType::Int64, {s0, four});
  ValueId rows = input(DType::Float32, {s0, table.integer(1)});
  ValueId list = input(DType::Float32, {s0 * 2, four});
  ValueId r =
      graph.call("sum_out", {x, rows}, {{"dim", std::vector<int64_t>{-1}}, {"keepdim", true}});
  ValueId f = graph.call("to_dtype", {x}, {{"dtype", DType::Float32}});
  ValueId c = graph.call("cat_out", {f, f, list});
  graph.setOutputs({r, c});
  std::string text = print(graph); // dims print canonical: -1 of a 2-d input is 1
  EXPECT_NE(text.find("%3 : f32[s0, 1] = sum_out(%0, %1, dim=[1], keepdim=True)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("cat_out(%4, %4, %2)"), std::string::npos) << text;
  sym::SymbolTable other;
  Graph back = fromBytes(toBytes(graph), other);
  EXPECT_EQ(structuralHash(back), structuralHash(graph));
  EXPECT_EQ(print(back), text);
}

struct OutInterpret : Out {
  static HostTensor t(DType dtype, std::vector<int64_t> sizes, Doubles values) {
    return HostTensor::fromDoubles(dtype, std::move(sizes), values);
  }
  ValueId fixed(DType dtype, std::initializer_list<int64_t> sizes) {
    return input(dtype, ints(table, sizes));
  }
};

TEST_F(OutInterpret, WritesOutsBytesAndReturnsOut) {
  ValueId x = fixed(DType::Float32, {2, 2});
  ValueId y = fixed(DType::Float32, {2});
  ValueId out = fixed(DType::Float32, {2, 2});
  ValueId r = graph.call("add_out", {x, y, out}, {{"alpha", int64_t{10}}});
  graph.setOutputs({r});
  HostTensor buffer = t(DType::Float32, {2, 2}, {-1, -1, -1, -1});
  HostTensor result = interpret(graph, {t(DType::Float32, {2, 2}, {1, 2, 3, 4}),
                                        t(DType::Float32, {2}, {0.5, 1}), buffer})
                          .at(0);
  EXPECT_EQ(buffer.toDoubles(), Doubles({6, 12, 8, 14})); // the input passed as out changed
  EXPECT_EQ(result.storage, buffer.storage);              // and the value aliases it
  EXPECT_EQ(result.toDoubles(), Doubles({6, 12, 8, 14}));
}

TEST_F(OutInterpret, CastsAnIntegralResultIntoAFloatOut) {
  ValueId x = fixed(DType::Int64, {2, 3});
  ValueId out = fixed(DType::Float64, {2});
  graph.call("sum_out", {x, out}, {{"dim", int64_t{1}}});
  graph.setOutputs({x});
  HostTensor buffer = t(DType::Float64, {2}, {0.25, 0.25});
  interpret(graph, {t(DType::Int64, {2, 3}, {1, 2, 3, -4, 5, 60}), buffer});
  EXPECT_EQ(buffer.dtype, DType::Float64);
  EXPECT_EQ(buffer.toDoubles(), Doubles({6, 61}));
}

TEST_F(OutInterpret, CastsABoolResultAndRunsListOps) {
  ValueId x = fixed(DType::Int32, {3});
  ValueId y = fixed(DType::Int32, {3});
  ValueId mask = fixed(DType::Float32, {3});
  ValueId both = fixed(DType::Int64, {6});
  graph.call("gt_out", {x, y, mask});
  graph.call("cat_out", {x, y, both});
  graph.setOutputs({x});
  HostTensor m = t(DType::Float32, {3}, {9, 9, 9});
  HostTensor cat = t(DType::Int64, {6}, {0, 0, 0, 0, 0, 0});
  interpret(graph, {t(DType::Int32, {3}, {1, 5, 3}), t(DType::Int32, {3}, {2, 4, 3}), m, cat});
  EXPECT_EQ(m.toDoubles(), Doubles({0, 1, 0}));
  EXPECT_EQ(cat.toInts(), std::vector<int64_t>({1, 5, 3, 2, 4, 3}));
}

TEST_F(OutInterpret, WritesAStridedOutInItsLayout) {
  ValueId a = fixed(DType::Float32, {2, 2});
  TensorMeta strided = tensorOf(table, DType::Float32, ints(table, {2, 2}));
  strided.strides = ints(table, {1, 2});
  ValueId out = graph.placeholder("out", strided);
  graph.setOutputs({graph.call("mm_out", {a, a, out})});
  HostTensor buffer = t(DType::Float32, {2, 2}, {0, 0, 0, 0});
  buffer.strides = {1, 2}; // column-major
  interpret(graph, {t(DType::Float32, {2, 2}, {1, 2, 3, 4}), buffer});
  EXPECT_EQ(buffer.toDoubles(), Doubles({7, 10, 15, 22})); // [[1,2],[3,4]]^2, logical order
  std::vector<float> raw(4);
  std::memcpy(raw.data(), buffer.storage->data(), sizeof(float) * 4);
  EXPECT_EQ(raw, std::vector<float>({7, 15, 10, 22})); // stored column by column
}

TEST_F(OutInterpret, OutMayAliasAnInput) {
  ValueId x = fixed(DType::Float32, {3});
  ValueId r = graph.call("mul_out", {x, x, x});
  graph.setOutputs({r});
  HostTensor in = t(DType::Float32, {3}, {1, -2, 3});
  interpret(graph, {in});
  EXPECT_EQ(in.toDoubles(), Doubles({1, 4, 9}));
  // softmax reads every element of its row: computed apart, it still sees the input.
  Graph g(table);
  ValueId v = g.placeholder("v", tensorOf(table, DType::Float64, ints(table, {2})));
  g.setOutputs({g.call("softmax_out", {v, v}, {{"dim", int64_t{0}}})});
  HostTensor w = t(DType::Float64, {2}, {0, std::log(3.0)});
  interpret(g, {w});
  EXPECT_NEAR(w.toDoubles()[0], 0.25, 1e-12);
  EXPECT_NEAR(w.toDoubles()[1], 0.75, 1e-12);
}

} // namespace
} // namespace kiln::ir
