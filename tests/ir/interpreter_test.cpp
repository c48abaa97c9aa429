// The reference interpreter against hand-computed values.
#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "helpers.h"
#include "kiln/common/error.h"
#include "kiln/ir/interpreter.h"
#include "kiln/ir/passes.h"
#include "kiln/ir/wire.h"

namespace kiln::ir {
namespace {

using testing::ints;
using testing::tensorOf;
using Doubles = std::vector<double>;

struct Interpret : testing::GraphTest {
  sym::Expr s0 = table.createBacked(3, {2, sym::kInf});
  sym::Expr s1 = table.createBacked(2, {0, sym::kInf});

  ValueId input(DType dtype, Shape sizes) {
    return graph.placeholder("x" + std::to_string(graph.size()), tensorOf(table, dtype, sizes));
  }
  HostTensor run1(ValueId out, std::vector<HostTensor> inputs) {
    graph.setOutputs({out});
    return interpret(graph, std::move(inputs)).at(0);
  }
  static HostTensor t(DType dtype, std::vector<int64_t> sizes, Doubles values) {
    return HostTensor::fromDoubles(dtype, std::move(sizes), values);
  }
};

TEST_F(Interpret, AViewPastTheStorageIsAnError) {
  ValueId x = input(DType::Float32, ints(table, {2, 3}));
  ValueId v =
      graph.call("as_strided", {x},
                 {{"size", std::vector<int64_t>{4, 2}}, {"stride", std::vector<int64_t>{2, 1}}});
  EXPECT_THROW(run1(v, {t(DType::Float32, {2, 3}, {0, 1, 2, 3, 4, 5})}), Error);
}

TEST_F(Interpret, ReshapeAliasesWhereItViewsAndCopiesElsewhere) {
  ValueId x = input(DType::Float32, ints(table, {2, 3}));
  ValueId flat = graph.call("reshape", {x}, {{"size", std::vector<int64_t>{6}}});
  ValueId tr = graph.call("transpose", {x}, {{"dim0", int64_t{0}}, {"dim1", int64_t{1}}});
  ValueId copied = graph.call("reshape", {tr}, {{"size", std::vector<int64_t>{6}}});
  graph.setOutputs({flat, copied});
  HostTensor in = t(DType::Float32, {2, 3}, {0, 1, 2, 3, 4, 5});
  std::vector<HostTensor> out = interpret(graph, {in});
  EXPECT_EQ(out[0].storage, in.storage);
  EXPECT_NE(out[1].storage, in.storage);
  EXPECT_EQ(out[1].toDoubles(), Doubles({0, 3, 1, 4, 2, 5}));
}

TEST_F(Interpret, ReturnsInputsAndBindsSymbols) {
  ValueId x = input(DType::Float32, {s0, s1});
  ValueId n = graph.call("sym_size", {x}, {{"dim", int64_t{0}}});
  graph.setOutputs({x, n});
  std::vector<HostTensor> out = interpret(graph, {t(DType::Float32, {2, 2}, {1, 2, 3, 4})});
  EXPECT_EQ(out[0].toDoubles(), Doubles({1, 2, 3, 4}));
  EXPECT_EQ(out[1].sizes, std::vector<int64_t>{});
  EXPECT_EQ(out[1].toInts(), std::vector<int64_t>({2}));
}

TEST_F(Interpret, RejectsInconsistentSymbols) {
  ValueId x = input(DType::Float32, {s0});
  ValueId y = input(DType::Float32, {s0});
  graph.setOutputs({graph.call("add", {x, y})});
  try {
    interpret(graph, {t(DType::Float32, {2}, {1, 2}), t(DType::Float32, {3}, {1, 2, 3})});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(e.message().find(s0.name()), std::string::npos) << e.message();
  }
  EXPECT_THROW(interpret(graph, {t(DType::Float32, {2}, {1, 2})}), Error); // one input
  EXPECT_THROW(interpret(graph, {t(DType::Float64, {2}, {1, 2}), t(DType::Float32, {2}, {1, 2})}),
               Error); // dtype
}

TEST_F(Interpret, RejectsASymbolOutsideItsRange) {
  graph.setOutputs({input(DType::Float32, {s0})});
  EXPECT_THROW(interpret(graph, {t(DType::Float32, {1}, {1})}), Error); // s0 >= 2
}

TEST_F(Interpret, RejectsAWrongConstantSize) {
  graph.setOutputs({input(DType::Float32, ints(table, {2}))});
  try {
    interpret(graph, {t(DType::Float32, {3}, {1, 2, 3})});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
  }
}

TEST_F(Interpret, ComplexDTypesAreUnsupported) {
  ValueId x = input(DType::Complex64, ints(table, {2}));
  try {
    HostTensor in{DType::Complex64,
                  {2},
                  {1},
                  0,
                  std::make_shared<std::vector<std::byte>>(2 * elementSize(DType::Complex64))};
    run1(graph.call("neg", {x}), {in});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Unsupported);
    EXPECT_NE(e.message().find("c64"), std::string::npos) << e.message();
  }
}

TEST_F(Interpret, BinaryOpsBroadcast) {
  ValueId a = input(DType::Float32, ints(table, {2, 1}));
  ValueId b = input(DType::Float32, ints(table, {3}));
  HostTensor out = run1(graph.call("sub", {a, b}, {{"alpha", 2.0}}),
                        {t(DType::Float32, {2, 1}, {10, 20}), t(DType::Float32, {3}, {1, 2, 3})});
  EXPECT_EQ(out.sizes, std::vector<int64_t>({2, 3}));
  EXPECT_EQ(out.toDoubles(), Doubles({8, 6, 4, 18, 16, 14}));
}

TEST_F(Interpret, IntegerDivisionAndRemainderFollowPython) {
  ValueId a = input(DType::Int64, ints(table, {4}));
  ValueId b = input(DType::Int64, ints(table, {4}));
  HostTensor in = t(DType::Int64, {4}, {7, -7, 7, -7});
  HostTensor by = t(DType::Int64, {4}, {2, 2, -2, -2});
  ValueId fl = graph.call("div", {a, b}, {{"rounding_mode", std::string("floor")}});
  ValueId tr = graph.call("div", {a, b}, {{"rounding_mode", std::string("trunc")}});
  ValueId rem = graph.call("remainder", {a, b});
  ValueId fm = graph.call("fmod", {a, b});
  ValueId tdiv = graph.call("div", {a, b});
  graph.setOutputs({fl, tr, rem, fm, tdiv});
  std::vector<HostTensor> out = interpret(graph, {in, by});
  EXPECT_EQ(out[0].toInts(), std::vector<int64_t>({3, -4, -4, 3}));
  EXPECT_EQ(out[1].toInts(), std::vector<int64_t>({3, -3, -3, 3}));
  EXPECT_EQ(out[2].toInts(), std::vector<int64_t>({1, 1, -1, -1}));
  EXPECT_EQ(out[3].toInts(), std::vector<int64_t>({1, -1, 1, -1}));
  EXPECT_EQ(out[4].dtype, DType::Float32);
  EXPECT_EQ(out[4].toDoubles(), Doubles({3.5, -3.5, -3.5, 3.5}));
  EXPECT_THROW(interpret(graph, {in, t(DType::Int64, {4}, {1, 0, 1, 1})}), Error);
}

TEST_F(Interpret, FloatRemainderTakesTheDivisorsSign) {
  ValueId a = input(DType::Float64, ints(table, {2}));
  HostTensor out =
      run1(graph.call("remainder", {a}, {{"other", -3.0}}), {t(DType::Float64, {2}, {5.5, -1})});
  EXPECT_EQ(out.toDoubles(), Doubles({-0.5, -1}));
}

TEST_F(Interpret, IntegerResultsWrapToTheirDType) {
  ValueId a = input(DType::UInt8, ints(table, {2}));
  HostTensor out =
      run1(graph.call("add", {a}, {{"other", int64_t{200}}}), {t(DType::UInt8, {2}, {100, 3})});
  EXPECT_EQ(out.dtype, DType::UInt8);
  EXPECT_EQ(out.toInts(), std::vector<int64_t>({44, 203}));
}

TEST_F(Interpret, ScalarOperandsCastToTheResultDType) {
  // 0.1 in f16 is 0.0999755859375, so 1 + 0.1 rounds to 1.099609375 (not 1.10009765625).
  ValueId a = input(DType::Float16, ints(table, {1}));
  HostTensor out = run1(graph.call("add", {a}, {{"other", 0.1}}), {t(DType::Float16, {1}, {1})});
  EXPECT_EQ(out.dtype, DType::Float16);
  EXPECT_EQ(out.toDoubles(), Doubles({1.099609375}));
}

TEST_F(Interpret, HalfAndBFloat16RoundToNearestEven) {
  EXPECT_EQ(toHalfBits(1.0), 0x3C00);
  EXPECT_EQ(toHalfBits(-2.0), 0xC000);
  EXPECT_EQ(toHalfBits(1.0 + std::ldexp(1, -11)), 0x3C00);     // tie: to even
  EXPECT_EQ(toHalfBits(1.0 + 3 * std::ldexp(1, -11)), 0x3C02); // tie: to even, upward
  EXPECT_EQ(toHalfBits(65504), 0x7BFF);
  EXPECT_EQ(toHalfBits(65520), 0x7C00); // rounds to infinity
  EXPECT_EQ(toHalfBits(std::ldexp(1, -24)), 0x0001);
  EXPECT_EQ(toHalfBits(std::ldexp(1, -25)), 0x0000); // tie with 0: to even
  EXPECT_EQ(toHalfBits(std::ldexp(1023, -24)), 0x03FF);
  EXPECT_TRUE(std::isnan(fromHalfBits(toHalfBits(NAN))));
  EXPECT_EQ(fromHalfBits(0x03FF), std::ldexp(1023, -24));
  EXPECT_EQ(fromHalfBits(0xFC00), -INFINITY);
  EXPECT_EQ(toBFloat16Bits(1.0), 0x3F80);
  EXPECT_EQ(toBFloat16Bits(1.0 + std::ldexp(1, -8)), 0x3F80);
  EXPECT_EQ(toBFloat16Bits(1.0 + 3 * std::ldexp(1, -8)), 0x3F82);
  EXPECT_EQ(fromBFloat16Bits(0x4049), 3.140625);
  EXPECT_EQ(toBFloat16Bits(3.14159), 0x4049);
}

TEST_F(Interpret, ToDTypeConverts) {
  ValueId a = input(DType::Float32, ints(table, {4}));
  ValueId i = graph.call("to_dtype", {a}, {{"dtype", DType::Int8}});
  ValueId b = graph.call("to_dtype", {a}, {{"dtype", DType::Bool}});
  ValueId h = graph.call("to_dtype", {a}, {{"dtype", DType::BFloat16}});
  graph.setOutputs({i, b, h});
  std::vector<HostTensor> out = interpret(graph, {t(DType::Float32, {4}, {-1.5, 0, 2.7, 300})});
  EXPECT_EQ(out[0].toInts(), std::vector<int64_t>({-1, 0, 2, 44}));
  EXPECT_EQ(out[1].toInts(), std::vector<int64_t>({1, 0, 1, 1}));
  EXPECT_EQ(out[2].toDoubles(), Doubles({-1.5, 0, 2.703125, 300}));
}

TEST_F(Interpret, UnaryOps) {
  ValueId a = input(DType::Float64, ints(table, {3}));
  ValueId i = input(DType::Int32, ints(table, {3}));
  graph.setOutputs({graph.call("neg", {a}), graph.call("relu", {a}), graph.call("round", {a}),
                    graph.call("exp", {i}), graph.call("abs", {i}), graph.call("isnan", {a})});
  std::vector<HostTensor> out = interpret(
      graph, {t(DType::Float64, {3}, {-2.5, 0.5, NAN}), t(DType::Int32, {3}, {0, -1, 2})});
  EXPECT_EQ(out[0].toDoubles()[0], 2.5);
  EXPECT_EQ(out[1].toDoubles()[0], 0);
  EXPECT_TRUE(std::isnan(out[1].toDoubles()[2]));
  EXPECT_EQ(out[2].toDoubles()[0], -2);
  EXPECT_EQ(out[2].toDoubles()[1], 0);
  EXPECT_EQ(out[3].dtype, DType::Float32);
  EXPECT_FLOAT_EQ(out[3].toDoubles()[2], std::exp(2.0f));
  EXPECT_EQ(out[4].toInts(), std::vector<int64_t>({0, 1, 2}));
  EXPECT_EQ(out[5].toInts(), std::vector<int64_t>({0, 0, 1}));
}

TEST_F(Interpret, CompareWhereClamp) {
  ValueId a = input(DType::Int64, ints(table, {3}));
  ValueId c = graph.call("lt", {a}, {{"other", 0.5}});
  ValueId w = graph.call("where", {c, a}, {{"other", 9.0}});
  ValueId k = graph.call("clamp", {a}, {{"min", int64_t{-1}}, {"max", int64_t{1}}});
  graph.setOutputs({c, w, k});
  std::vector<HostTensor> out = interpret(graph, {t(DType::Int64, {3}, {-3, 1, 0})});
  EXPECT_EQ(out[0].toInts(), std::vector<int64_t>({1, 0, 1}));
  EXPECT_EQ(out[1].dtype, DType::Float32);
  EXPECT_EQ(out[1].toDoubles(), Doubles({-3, 9, 0}));
  EXPECT_EQ(out[2].toInts(), std::vector<int64_t>({-1, 1, 0}));
}

TEST_F(Interpret, ZeroDimSizeOneAndEmpty) {
  ValueId a = input(DType::Float32, {});
  ValueId b = input(DType::Float32, ints(table, {1, 0}));
  ValueId c = input(DType::Float32, ints(table, {2, 1}));
  graph.setOutputs({graph.call("mul", {a, c}), graph.call("add", {b, a})});
  std::vector<HostTensor> out =
      interpret(graph, {t(DType::Float32, {}, {3}), t(DType::Float32, {1, 0}, {}),
                        t(DType::Float32, {2, 1}, {1, 2})});
  EXPECT_EQ(out[0].toDoubles(), Doubles({3, 6}));
  EXPECT_EQ(out[1].sizes, std::vector<int64_t>({1, 0}));
  EXPECT_EQ(out[1].toDoubles(), Doubles({}));
}

TEST_F(Interpret, ReadsNonContiguousInputs) {
  TensorMeta m = tensorOf(table, DType::Float32, ints(table, {2, 3}));
  m.strides = ints(table, {1, 2}); // the transpose of a contiguous [3, 2]
  ValueId x = graph.placeholder("x", m);
  HostTensor in = t(DType::Float32, {3, 2}, {1, 2, 3, 4, 5, 6});
  in.sizes = {2, 3};
  in.strides = {1, 2};
  HostTensor out = run1(graph.call("mul", {x}, {{"other", int64_t{10}}}), {in});
  EXPECT_EQ(out.toDoubles(), Doubles({10, 30, 50, 20, 40, 60}));
  HostTensor wrong = in;
  wrong.strides = {3, 1};
  EXPECT_THROW(interpret(graph, {wrong}), Error);
}

TEST_F(Interpret, ViewsOfAnOffsetInputCountFromItsOffset) {
  ValueId x = input(DType::Float32, ints(table, {2, 2}));
  ValueId row = graph.call("select", {x}, {{"dim", int64_t{0}}, {"index", int64_t{1}}});
  HostTensor in = t(DType::Float32, {3, 2}, {1, 2, 3, 4, 5, 6});
  in.sizes = {2, 2};
  in.storageOffset = 2; // rows 1 and 2 of the [3, 2] tensor
  HostTensor out = run1(row, {in});
  EXPECT_EQ(out.storageOffset, 4);
  EXPECT_EQ(out.toDoubles(), Doubles({5, 6}));
}

TEST_F(Interpret, Reductions) {
  ValueId x = input(DType::Float32, ints(table, {2, 3}));
  graph.setOutputs({graph.call("sum", {x}, {{"dim", std::vector<int64_t>{1}}}),
                    graph.call("mean", {x}, {{"dim", std::vector<int64_t>{0}}, {"keepdim", true}}),
                    graph.call("amax", {x}),
                    graph.call("amin", {x}, {{"dim", std::vector<int64_t>{-1}}}),
                    graph.call("prod", {x}), graph.call("argmax", {x}, {{"dim", int64_t{0}}}),
                    graph.call("argmin", {x}), graph.call("any", {x}, {{"dim", int64_t{1}}}),
                    graph.call("all", {x})});
  std::vector<HostTensor> out = interpret(graph, {t(DType::Float32, {2, 3}, {1, -2, 3, 4, 0, 3})});
  EXPECT_EQ(out[0].toDoubles(), Doubles({2, 7}));
  EXPECT_EQ(out[1].sizes, std::vector<int64_t>({1, 3}));
  EXPECT_EQ(out[1].toDoubles(), Doubles({2.5, -1, 3}));
  EXPECT_EQ(out[2].sizes, std::vector<int64_t>{});
  EXPECT_EQ(out[2].toDoubles(), Doubles({4}));
  EXPECT_EQ(out[3].toDoubles(), Doubles({-2, 0}));
  EXPECT_EQ(out[4].toDoubles(), Doubles({0}));
  EXPECT_EQ(out[5].toInts(), std::vector<int64_t>({1, 1, 0})); // ties: the first
  EXPECT_EQ(out[6].toInts(), std::vector<int64_t>({1}));
  EXPECT_EQ(out[7].toInts(), std::vector<int64_t>({1, 1}));
  EXPECT_EQ(out[8].toInts(), std::vector<int64_t>({0}));
}

TEST_F(Interpret, IntegralSumsGiveInt64AndEmptyReductionsTheirIdentity) {
  ValueId x = input(DType::Int8, ints(table, {2, 0}));
  ValueId y = input(DType::Int8, ints(table, {2}));
  graph.setOutputs({graph.call("sum", {x}, {{"dim", std::vector<int64_t>{1}}}),
                    graph.call("prod", {x}, {{"dim", int64_t{1}}}),
                    graph.call("all", {x}, {{"dim", int64_t{1}}}), graph.call("sum", {y})});
  std::vector<HostTensor> out =
      interpret(graph, {t(DType::Int8, {2, 0}, {}), t(DType::Int8, {2}, {100, 100})});
  EXPECT_EQ(out[0].dtype, DType::Int64);
  EXPECT_EQ(out[0].toInts(), std::vector<int64_t>({0, 0}));
  EXPECT_EQ(out[1].toInts(), std::vector<int64_t>({1, 1}));
  EXPECT_EQ(out[2].toInts(), std::vector<int64_t>({1, 1}));
  EXPECT_EQ(out[3].toInts(), std::vector<int64_t>({200}));
  // amax has no identity: an error at inference where the dim is provably empty, else at run time.
  EXPECT_THROW(graph.call("amax", {x}, {{"dim", std::vector<int64_t>{1}}}), Error);
  ValueId z = input(DType::Int8, {table.integer(2), s1});
  graph.setOutputs({graph.call("amax", {z}, {{"dim", std::vector<int64_t>{1}}})});
  EXPECT_THROW(interpret(graph, {t(DType::Int8, {2, 0}, {}), t(DType::Int8, {2}, {1, 1}),
                                 t(DType::Int8, {2, 0}, {})}),
               Error);
}

TEST_F(Interpret, VarAndStdApplyTheCorrection) {
  ValueId x = input(DType::Float64, ints(table, {2, 2}));
  graph.setOutputs({graph.call("var", {x}, {{"dim", std::vector<int64_t>{1}}}),
                    graph.call("std", {x}, {{"correction", int64_t{0}}})});
  std::vector<HostTensor> out = interpret(graph, {t(DType::Float64, {2, 2}, {1, 3, 2, 2})});
  EXPECT_EQ(out[0].toDoubles(), Doubles({2, 0}));
  EXPECT_EQ(out[1].toDoubles(), Doubles({std::sqrt(0.5)})); // mean 2, squares 1 + 1 + 0 + 0
}

TEST_F(Interpret, CatAndStackPromote) {
  ValueId a = input(DType::Int32, ints(table, {1, 2}));
  ValueId b = input(DType::Float32, ints(table, {2, 2}));
  ValueId c = input(DType::Float32, ints(table, {1, 2}));
  ValueId cat = graph.call("cat", {a, b});
  ValueId stack = graph.call("stack", {a, c}, {{"dim", int64_t{-1}}});
  graph.setOutputs({cat, stack});
  std::vector<HostTensor> out =
      interpret(graph, {t(DType::Int32, {1, 2}, {1, 2}), t(DType::Float32, {2, 2}, {3, 4, 5, 6}),
                        t(DType::Float32, {1, 2}, {7, 8})});
  EXPECT_EQ(out[0].dtype, DType::Float32);
  EXPECT_EQ(out[0].toDoubles(), Doubles({1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(out[1].sizes, std::vector<int64_t>({1, 2, 2}));
  EXPECT_EQ(out[1].toDoubles(), Doubles({1, 7, 2, 8}));
}

TEST_F(Interpret, IntegerPowAndSymbolicScalarOperands) {
  ValueId x = input(DType::Int64, {s0});
  ValueId n = graph.call("sym_size", {x}, {{"dim", int64_t{0}}});
  ValueId p = graph.call("pow", {x, n}); // n is a Python-like scalar: i64 stays i64
  ValueId q = graph.call("mul", {x}, {{"other", s0 * 2}});
  graph.setOutputs({p, q});
  std::vector<HostTensor> out = interpret(graph, {t(DType::Int64, {3}, {2, -3, 10})});
  EXPECT_EQ(out[0].toInts(), std::vector<int64_t>({8, -27, 1000}));
  EXPECT_EQ(out[1].toInts(), std::vector<int64_t>({12, -18, 60}));
}

TEST_F(Interpret, CreationOps) {
  ValueId x = input(DType::Int32, {s0});
  graph.setOutputs(
      {graph.call("full", {}, {{"size", std::vector<sym::Expr>{s0}}, {"fill_value", 2.5}}),
       graph.call("ones_like", {x}),
       graph.call("zeros", {}, {{"size", std::vector<int64_t>{2}}, {"dtype", DType::Bool}}),
       graph.call("arange", {},
                  {{"end", int64_t{-3}}, {"start", int64_t{2}}, {"step", int64_t{-2}}}),
       graph.call("arange", {}, {{"end", 1.0}, {"step", 0.25}})});
  std::vector<HostTensor> out = interpret(graph, {t(DType::Int32, {2}, {7, 7})});
  EXPECT_EQ(out[0].dtype, DType::Float32);
  EXPECT_EQ(out[0].toDoubles(), Doubles({2.5, 2.5}));
  EXPECT_EQ(out[1].dtype, DType::Int32);
  EXPECT_EQ(out[1].toInts(), std::vector<int64_t>({1, 1}));
  EXPECT_EQ(out[2].toInts(), std::vector<int64_t>({0, 0}));
  EXPECT_EQ(out[3].dtype, DType::Int64);
  EXPECT_EQ(out[3].toInts(), std::vector<int64_t>({2, 0, -2}));
  EXPECT_EQ(out[4].toDoubles(), Doubles({0, 0.25, 0.5, 0.75}));
}

TEST_F(Interpret, MatrixProductsBroadcastAndDropVectorDims) {
  ValueId a = input(DType::Float32, ints(table, {2, 1, 2, 3}));
  ValueId b = input(DType::Float32, ints(table, {3, 2}));
  ValueId v = input(DType::Float32, ints(table, {3}));
  ValueId bias = input(DType::Float32, ints(table, {2}));
  graph.setOutputs(
      {graph.call("matmul", {a, b}), graph.call("matmul", {v, b}), graph.call("matmul", {v, v}),
       graph.call("linear", {bias, b, v}),
       graph.call(
           "addmm",
           {bias, graph.call("transpose", {b}, {{"dim0", int64_t{0}}, {"dim1", int64_t{1}}}), b},
           {{"alpha", 2.0}})});
  HostTensor at = t(DType::Float32, {2, 1, 2, 3}, {1, 0, 0, 0, 1, 0, 0, 0, 1, 1, 1, 1});
  HostTensor bt = t(DType::Float32, {3, 2}, {1, 2, 3, 4, 5, 6});
  std::vector<HostTensor> out = interpret(
      graph, {at, bt, t(DType::Float32, {3}, {1, -1, 2}), t(DType::Float32, {2}, {10, 20})});
  EXPECT_EQ(out[0].sizes, std::vector<int64_t>({2, 1, 2, 2}));
  EXPECT_EQ(out[0].toDoubles(), Doubles({1, 2, 3, 4, 5, 6, 9, 12}));
  EXPECT_EQ(out[1].toDoubles(), Doubles({8, 10}));
  EXPECT_EQ(out[2].sizes, std::vector<int64_t>{});
  EXPECT_EQ(out[2].toDoubles(), Doubles({6}));
  EXPECT_EQ(out[3].toDoubles(), Doubles({51, 109, 172}));     // [10, 20] @ b^T + [1, -1, 2]
  EXPECT_EQ(out[4].toDoubles(), Doubles({80, 108, 98, 132})); // 2 * b^T @ b + [10, 20]
}

TEST_F(Interpret, IndexingOpsAndSoftmax) {
  ValueId x = input(DType::Float32, ints(table, {2, 3}));
  ValueId i = input(DType::Int64, ints(table, {2}));
  ValueId g = input(DType::Int64, ints(table, {2, 1}));
  ValueId e = input(DType::Int64, ints(table, {2}));
  graph.setOutputs({graph.call("index_select", {x, i}, {{"dim", int64_t{1}}}),
                    graph.call("gather", {x, g}, {{"dim", int64_t{1}}}),
                    graph.call("embedding", {x, e}),
                    graph.call("softmax", {x}, {{"dim", int64_t{-1}}}),
                    graph.call("log_softmax", {x}, {{"dim", int64_t{0}}})});
  HostTensor xt = t(DType::Float32, {2, 3}, {1, 2, 3, 0, 0, 0});
  std::vector<HostTensor> out =
      interpret(graph, {xt, t(DType::Int64, {2}, {2, 0}), t(DType::Int64, {2, 1}, {1, 2}),
                        t(DType::Int64, {2}, {1, 0})});
  EXPECT_EQ(out[0].toDoubles(), Doubles({3, 1, 0, 0}));
  EXPECT_EQ(out[1].toDoubles(), Doubles({2, 0}));
  EXPECT_EQ(out[2].toDoubles(), Doubles({0, 0, 0, 1, 2, 3}));
  std::vector<double> s = out[3].toDoubles();
  double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  EXPECT_FLOAT_EQ(s[0], std::exp(1.0) / z);
  EXPECT_FLOAT_EQ(s[2], std::exp(3.0) / z);
  EXPECT_FLOAT_EQ(s[4], 1.0 / 3);
  EXPECT_FLOAT_EQ(out[4].toDoubles()[1], 2 - std::log(std::exp(2.0) + 1));
  EXPECT_THROW(interpret(graph, {xt, t(DType::Int64, {2}, {3, 0}), t(DType::Int64, {2, 1}, {1, 2}),
                                 t(DType::Int64, {2}, {1, 0})}),
               Error); // index 3 of 3 columns
}

TEST_F(Interpret, ScatterAddAccumulatesRepeatedIndices) {
  ValueId x = input(DType::Float32, ints(table, {3}));
  ValueId i = input(DType::Int64, ints(table, {4}));
  ValueId src = input(DType::Float32, ints(table, {4}));
  HostTensor out = run1(graph.call("scatter_add", {x, i, src}, {{"dim", int64_t{0}}}),
                        {t(DType::Float32, {3}, {1, 1, 1}), t(DType::Int64, {4}, {2, 0, 2, 2}),
                         t(DType::Float32, {4}, {1, 2, 3, 4})});
  EXPECT_EQ(out.toDoubles(), Doubles({3, 1, 9}));
}

TEST_F(Interpret, LayerNormAndRmsNorm) {
  ValueId x = input(DType::Float64, ints(table, {2, 2}));
  ValueId w = input(DType::Float64, ints(table, {2}));
  std::vector<int64_t> last = {2};
  graph.setOutputs({graph.call("layer_norm", {x, w, w}, {{"normalized_shape", last}, {"eps", 0.0}}),
                    graph.call("rms_norm", {x}, {{"normalized_shape", last}, {"eps", 0.0}}),
                    graph.call("layer_norm", {x},
                               {{"normalized_shape", std::vector<int64_t>{2, 2}}, {"eps", 0.0}})});
  std::vector<HostTensor> out =
      interpret(graph, {t(DType::Float64, {2, 2}, {1, 3, -2, 2}), t(DType::Float64, {2}, {2, 10})});
  EXPECT_EQ(out[0].toDoubles(), Doubles({0, 20, -0, 20})); // (x - mean) / std * w + w
  EXPECT_EQ(out[1].toDoubles()[1], 3 / std::sqrt(5.0));
  EXPECT_EQ(out[1].toDoubles()[2], -1);
  // mean 1, variance (0 + 4 + 9 + 1) / 4 = 3.5
  EXPECT_DOUBLE_EQ(out[2].toDoubles()[3], 1 / std::sqrt(3.5));
}

TEST_F(Interpret, AttentionWithCausalMask) {
  ValueId q = input(DType::Float64, ints(table, {1, 2, 2}));
  ValueId v = input(DType::Float64, ints(table, {1, 2, 1}));
  graph.setOutputs({graph.call("scaled_dot_product_attention", {q, q, v}),
                    graph.call("scaled_dot_product_attention", {q, q, v}, {{"is_causal", true}})});
  std::vector<HostTensor> out = interpret(
      graph, {t(DType::Float64, {1, 2, 2}, {1, 0, 0, 1}), t(DType::Float64, {1, 2, 1}, {1, 3})});
  double e = std::exp(1 / std::sqrt(2.0));
  EXPECT_DOUBLE_EQ(out[0].toDoubles()[0], (e * 1 + 3) / (e + 1));
  EXPECT_DOUBLE_EQ(out[0].toDoubles()[1], (1 + e * 3) / (1 + e));
  EXPECT_DOUBLE_EQ(out[1].toDoubles()[0], 1);
  EXPECT_DOUBLE_EQ(out[1].toDoubles()[1], (1 + e * 3) / (1 + e));
}

TEST_F(Interpret, CrossEntropyWeightsAndIgnoresClasses) {
  ValueId x = input(DType::Float64, ints(table, {2, 3}));
  ValueId y = input(DType::Int64, ints(table, {2}));
  ValueId w = input(DType::Float64, ints(table, {3}));
  graph.setOutputs({graph.call("cross_entropy", {x, y}),
                    graph.call("cross_entropy", {x, y}, {{"ignore_index", int64_t{0}}}),
                    graph.call("cross_entropy", {x, y, w}),
                    graph.call("cross_entropy", {x, y}, {{"reduction", std::string("none")}})});
  std::vector<HostTensor> out =
      interpret(graph, {t(DType::Float64, {2, 3}, {0, 0, 0, 1, 2, 3}), t(DType::Int64, {2}, {0, 2}),
                        t(DType::Float64, {3}, {1, 1, 2})});
  double loss0 = std::log(3.0);
  double loss1 = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0)) - 3;
  EXPECT_NEAR(out[0].toDoubles()[0], (loss0 + loss1) / 2, 1e-12);
  EXPECT_NEAR(out[1].toDoubles()[0], loss1, 1e-12);
  EXPECT_NEAR(out[2].toDoubles()[0], (loss0 + 2 * loss1) / 3, 1e-12);
  EXPECT_EQ(out[3].sizes, std::vector<int64_t>({2}));
  EXPECT_NEAR(out[3].toDoubles()[1], loss1, 1e-12);
}

TEST_F(Interpret, DecompositionsKeepTheValues) {
  ValueId x = input(DType::Float64, ints(table, {2, 3}));
  ValueId w = input(DType::Float64, ints(table, {4, 3}));
  ValueId b = input(DType::Float64, ints(table, {3}));
  ValueId y = input(DType::Int64, ints(table, {2}));
  std::vector<int64_t> last = {3};
  graph.setOutputs({graph.call("gelu", {x}),
                    graph.call("gelu", {x}, {{"approximate", std::string("tanh")}}),
                    graph.call("silu", {x}), graph.call("softmax", {x}, {{"dim", int64_t{0}}}),
                    graph.call("log_softmax", {x}, {{"dim", int64_t{1}}}),
                    graph.call("linear", {x, w}), graph.call("var", {x}, {{"dim", int64_t{1}}}),
                    graph.call("std", {x}, {{"correction", int64_t{0}}}),
                    graph.call("layer_norm", {x, b, b}, {{"normalized_shape", last}}),
                    graph.call("rms_norm", {x, b}, {{"normalized_shape", last}}),
                    graph.call("cross_entropy", {x, y})});
  std::vector<HostTensor> inputs = {
      t(DType::Float64, {2, 3}, {-1.5, 0.25, 2, 3, -0.5, 1}),
      t(DType::Float64, {4, 3}, {1, 2, 3, 4, 5, 6, -1, -2, -3, 0.5, 0, 1}),
      t(DType::Float64, {3}, {0.5, -1, 2}), t(DType::Int64, {2}, {2, 0})};
  std::vector<HostTensor> direct = interpret(graph, inputs);
  std::vector<HostTensor> decomposed = interpret(decompose(graph), inputs);
  ASSERT_EQ(direct.size(), decomposed.size());
  for (size_t i = 0; i < direct.size(); ++i) {
    EXPECT_EQ(direct[i].sizes, decomposed[i].sizes) << "output " << i;
    std::vector<double> a = direct[i].toDoubles(), c = decomposed[i].toDoubles();
    ASSERT_EQ(a.size(), c.size()) << "output " << i;
    for (size_t j = 0; j < a.size(); ++j) EXPECT_NEAR(a[j], c[j], 1e-12) << "output " << i;
  }
}

TEST_F(Interpret, AddmmDropsTheTermOfAZeroFactor) {
  ValueId withNan = input(DType::Float32, ints(table, {1, 2}));
  ValueId a = input(DType::Float32, ints(table, {1, 1}));
  ValueId m = input(DType::Float32, ints(table, {1, 2}));
  graph.setOutputs({graph.call("addmm", {withNan, a, m}, {{"beta", 0.0}}),
                    graph.call("addmm", {m, a, withNan}, {{"alpha", int64_t{0}}})});
  double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<HostTensor> out =
      interpret(graph, {t(DType::Float32, {1, 2}, {nan, 2}), t(DType::Float32, {1, 1}, {3}),
                        t(DType::Float32, {1, 2}, {1, 2})});
  EXPECT_EQ(out[0].toDoubles(), Doubles({3, 6})); // as torch: self's NaN ignored
  EXPECT_EQ(out[1].toDoubles(), Doubles({1, 2})); // and the product's
}

// A 0-d tensor stands for one of size 1 beside 1-d ones, as torch's ensure_nonempty.
TEST_F(Interpret, GatherAndScatterAddMixZeroAndOneDims) {
  ValueId scalar = input(DType::Float32, {});
  ValueId vec = input(DType::Float32, ints(table, {3}));
  ValueId i0 = input(DType::Int64, {});
  ValueId i1 = input(DType::Int64, ints(table, {1}));
  std::vector<Attr> dim0 = {{"dim", int64_t{0}}};
  graph.setOutputs({graph.call("gather", {vec, i0}, dim0), graph.call("gather", {scalar, i1}, dim0),
                    graph.call("scatter_add", {vec, i1, scalar}, dim0),
                    graph.call("scatter_add", {scalar, i1, scalar}, dim0)});
  std::vector<HostTensor> out =
      interpret(graph, {t(DType::Float32, {}, {5}), t(DType::Float32, {3}, {1, 2, 3}),
                        t(DType::Int64, {}, {2}), t(DType::Int64, {1}, {0})});
  EXPECT_EQ(out[0].toDoubles(), Doubles({3}));
  EXPECT_EQ(out[1].toDoubles(), Doubles({5}));
  EXPECT_EQ(out[2].toDoubles(), Doubles({6, 2, 3}));
  EXPECT_EQ(out[3].toDoubles(), Doubles({10}));
  EXPECT_EQ(out[3].sizes, std::vector<int64_t>{});
  // i1 = [1] is out of range for the 0-d self, of size 1
  EXPECT_THROW(interpret(graph, {t(DType::Float32, {}, {5}), t(DType::Float32, {3}, {1, 2, 3}),
                                 t(DType::Int64, {}, {2}), t(DType::Int64, {1}, {1})}),
               Error);
}

// The stream is Philox-4x32-10 (docs/ir.md): its known answer for key 0 and
// counter 0 is 0x6627e8d5, so element 0 of seed 0, offset 0 draws
// 0x6627e8 / 2^24 = 0.39904...; elements are kept when their draw is >= p.
TEST_F(Interpret, DropoutDrawsFromPhiloxAtSeedAndOffset) {
  ValueId x = input(DType::Float64, ints(table, {1}));
  ValueId seed = input(DType::Int64, {});
  ValueId offset = input(DType::Int64, {});
  graph.setOutputs({graph.call("dropout", {x, seed, offset}, {{"p", 0.399}}),
                    graph.call("dropout", {x, seed, offset}, {{"p", 0.400}}),
                    graph.call("dropout", {x, seed, offset}, {{"train", false}})});
  std::vector<HostTensor> out = interpret(
      graph, {t(DType::Float64, {1}, {6}), t(DType::Int64, {}, {0}), t(DType::Int64, {}, {0})});
  EXPECT_DOUBLE_EQ(out[0].toDoubles()[0], 6 / (1 - 0.399));
  EXPECT_EQ(out[1].toDoubles(), Doubles({0}));
  EXPECT_EQ(out[2].toDoubles(), Doubles({6}));
}

TEST_F(Interpret, CrossEntropySmoothingAndProbabilitiesDecomposeToTheSameValues) {
  ValueId x = input(DType::Float64, ints(table, {2, 3}));
  ValueId y = input(DType::Int64, ints(table, {2}));
  ValueId p = input(DType::Float64, ints(table, {2, 3}));
  ValueId w = input(DType::Float64, ints(table, {3}));
  ValueId mask = input(DType::Bool, ints(table, {2, 2}));
  std::vector<ValueId> outs;
  for (const char* reduction : {"mean", "sum", "none"}) {
    std::vector<Attr> attrs = {{"reduction", std::string(reduction)},
                               {"label_smoothing", 0.2},
                               {"ignore_index", int64_t{1}}};
    outs.push_back(graph.call("cross_entropy", {x, y, w}, attrs));
    outs.push_back(graph.call("cross_entropy", {x, y}, attrs));
    attrs.pop_back();
    outs.push_back(graph.call("cross_entropy", {x, p, w}, attrs));
  }
  ValueId q = graph.call("unsqueeze", {x}, {{"dim", int64_t{0}}});
  outs.push_back(graph.call("scaled_dot_product_attention", {x, x, x}));
  outs.push_back(graph.call("scaled_dot_product_attention", {q, q, q}, {{"is_causal", true}}));
  outs.push_back(graph.call("scaled_dot_product_attention", {x, x, x, mask}, {{"scale", 0.3}}));
  graph.setOutputs(outs);
  std::vector<HostTensor> inputs = {
      t(DType::Float64, {2, 3}, {-1.5, 0.25, 2, 3, -0.5, 1}), t(DType::Int64, {2}, {2, 1}),
      t(DType::Float64, {2, 3}, {0.2, 0.3, 0.5, 1, 0, 0}), t(DType::Float64, {3}, {0.5, 1, 2}),
      t(DType::Bool, {2, 2}, {1, 0, 1, 1})};
  std::vector<HostTensor> direct = interpret(graph, inputs);
  std::vector<HostTensor> decomposed = interpret(decompose(graph), inputs);
  // torch: F.cross_entropy(x, y, w, ignore_index=1, label_smoothing=0.2)
  EXPECT_NEAR(direct[0].toDoubles()[0], 0.28682340, 1e-7);
  for (size_t i = 0; i < direct.size(); ++i) {
    std::vector<double> a = direct[i].toDoubles(), c = decomposed[i].toDoubles();
    ASSERT_EQ(a.size(), c.size()) << "output " << i;
    for (size_t j = 0; j < a.size(); ++j) EXPECT_NEAR(a[j], c[j], 1e-12) << "output " << i;
  }
}

TEST_F(Interpret, ViewsAliasTheirInput) {
  ValueId x = input(DType::Float32, {s0, s1});
  ValueId tr = graph.call("transpose", {x}, {{"dim0", int64_t{0}}, {"dim1", int64_t{1}}});
  ValueId sl = graph.call("select", {x}, {{"dim", int64_t{0}}, {"index", int64_t{1}}});
  ValueId ex = graph.call("expand", {graph.call("unsqueeze", {sl}, {{"dim", int64_t{0}}})},
                          {{"size", std::vector<int64_t>{2, -1}}});
  ValueId cl = graph.call("contiguous", {tr});
  graph.setOutputs({tr, sl, ex, cl});
  HostTensor in = t(DType::Float32, {3, 2}, {1, 2, 3, 4, 5, 6});
  std::vector<HostTensor> out = interpret(graph, {in});
  EXPECT_EQ(out[0].toDoubles(), Doubles({1, 3, 5, 2, 4, 6}));
  EXPECT_EQ(out[0].storage, in.storage);
  EXPECT_EQ(out[1].toDoubles(), Doubles({3, 4}));
  EXPECT_EQ(out[1].storageOffset, 2);
  EXPECT_EQ(out[2].toDoubles(), Doubles({3, 4, 3, 4}));
  EXPECT_EQ(out[2].strides[0], 0);
  EXPECT_EQ(out[3].toDoubles(), Doubles({1, 3, 5, 2, 4, 6}));
  EXPECT_NE(out[3].storage, in.storage);
  EXPECT_EQ(out[3].strides, std::vector<int64_t>({3, 1}));
}

TEST_F(Interpret, ReshapeCopiesWhenItMust) {
  ValueId x = input(DType::Float32, ints(table, {2, 3}));
  ValueId tr = graph.call("transpose", {x}, {{"dim0", int64_t{0}}, {"dim1", int64_t{1}}});
  HostTensor out = run1(graph.call("reshape", {tr}, {{"size", std::vector<int64_t>{-1}}}),
                        {t(DType::Float32, {2, 3}, {1, 2, 3, 4, 5, 6})});
  EXPECT_EQ(out.toDoubles(), Doubles({1, 4, 2, 5, 3, 6}));
}

TEST_F(Interpret, IntegerPowOfNegativeTensorExponentsIsTorchs) {
  ValueId x = input(DType::Int64, ints(table, {4}));
  ValueId y = input(DType::Int64, ints(table, {4}));
  HostTensor out = run1(graph.call("pow", {x, y}), {t(DType::Int64, {4}, {1, -1, -1, 2}),
                                                    t(DType::Int64, {4}, {-3, -3, -2, -1})});
  EXPECT_EQ(out.toInts(), std::vector<int64_t>({1, -1, 1, 0}));
}

TEST_F(Interpret, FloatFloorDivisionIsTorchsFmodFormula) {
  // floor(a / b) would give 10, -0 and -0: 1 / 0.1f rounds up to 10 in float, and -7 / inf
  // is -0; torch computes (a - fmod(a, b)) / b, then corrects toward the floor.
  double inf = std::numeric_limits<double>::infinity();
  for (DType dtype : {DType::Float32, DType::Float64}) {
    Graph g{table};
    ValueId a = g.placeholder("a", tensorOf(table, dtype, ints(table, {3})));
    ValueId b = g.placeholder("b", tensorOf(table, dtype, ints(table, {3})));
    g.setOutputs({g.call("div", {a, b}, {{"rounding_mode", std::string("floor")}})});
    HostTensor out =
        interpret(g, {t(dtype, {3}, {1, -7, 7}), t(dtype, {3}, {0.1, inf, -inf})}).at(0);
    EXPECT_EQ(out.toDoubles(), Doubles({9, -1, -1}));
  }
}

TEST_F(Interpret, InPlaceOpsComputeInThePromotedDType) {
  // torch: u8 % i8 is computed in i16 (5 % -3 = -1), then cast to u8
  ValueId x = input(DType::UInt8, ints(table, {2}));
  ValueId y = input(DType::Int8, ints(table, {2}));
  graph.call("remainder_", {x, y});
  HostTensor in = t(DType::UInt8, {2}, {5, 7});
  graph.setOutputs({x});
  interpret(graph, {in, t(DType::Int8, {2}, {-3, 2})});
  EXPECT_EQ(in.toInts(), std::vector<int64_t>({255, 1}));
}

TEST_F(Interpret, ClampWithOnlyAMaxTensor) {
  ValueId x = input(DType::Float32, ints(table, {3}));
  ValueId hi = input(DType::Float32, ints(table, {3}));
  ValueId c = graph.call("clamp", {x, hi}, {{"min", std::monostate{}}});
  graph.setOutputs({c});
  sym::SymbolTable other;
  Graph back = fromBytes(toBytes(graph), other);
  for (const Graph* g : {&graph, &back}) {
    HostTensor out =
        interpret(*g, {t(DType::Float32, {3}, {-5, 0, 5}), t(DType::Float32, {3}, {1, 1, 1})})
            .at(0);
    EXPECT_EQ(out.toDoubles(), Doubles({-5, 0, 1}));
  }
}

TEST_F(Interpret, InPlaceOpsWriteTheirInput) {
  ValueId x = input(DType::Int32, ints(table, {2}));
  graph.call("add_", {x}, {{"other", int64_t{5}}});
  HostTensor in = t(DType::Int32, {2}, {1, 2});
  graph.setOutputs({x});
  interpret(graph, {in});
  EXPECT_EQ(in.toInts(), std::vector<int64_t>({6, 7}));
}

} // namespace
} // namespace kiln::ir
