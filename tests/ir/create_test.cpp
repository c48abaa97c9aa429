// Creation, matmul/linear and indexing ops; expectations from torch.
#include <gtest/gtest.h>

#include "helpers.h"
#include "kiln/common/error.h"
#include "kiln/ir/graph.h"

namespace kiln::ir {
namespace {

using testing::ints;
using testing::tensorOf;

struct Create : testing::GraphTest {
  sym::Expr s0 = table.createBacked(8, {2, sym::kInf});

  TensorMeta make(std::string_view op, std::vector<Attr> attrs, std::vector<ValueId> in = {}) {
    return graph.meta(graph.call(op, std::move(in), std::move(attrs)));
  }
  ValueId input(DType dtype, Shape sizes) {
    return graph.placeholder("x", tensorOf(table, dtype, std::move(sizes)));
  }
};

TEST_F(Create, ArangeOfFloatBoundsTruncatesThemForAnIntegralDType) {
  // torch.arange(2.25, dtype=int64): the length from truncated bounds, 2; int32: from doubles, 3.
  auto length = [&](DType dtype) {
    return make("arange", {{"end", 2.25}, {"dtype", dtype}}).sizes.at(0).asInteger();
  };
  EXPECT_EQ(length(DType::Int64), 2);
  EXPECT_EQ(length(DType::Int32), 3);
  EXPECT_EQ(length(DType::Float32), 3);
  EXPECT_THROW(make("arange", {{"end", -1.5}}), Error); // the step's sign
  EXPECT_THROW(make("arange", {{"end", 3}, {"step", 0.5}, {"dtype", DType::Int32}}), Error);
}

TEST_F(Create, FullRejectsAFillValueThatOverflowsTheDType) {
  std::vector<int64_t> size = {2};
  EXPECT_THROW(make("full", {{"size", size}, {"fill_value", 70000.0}, {"dtype", DType::Float16}}),
               Error);
  EXPECT_THROW(make("full", {{"size", size}, {"fill_value", int64_t{128}}, {"dtype", DType::Int8}}),
               Error);
  EXPECT_EQ(
      make("full", {{"size", size}, {"fill_value", int64_t{-255}}, {"dtype", DType::UInt8}}).dtype,
      DType::UInt8); // wraps, as in torch
}

TEST_F(Create, FullTakesItsDTypeFromTheFillValue) {
  std::vector<sym::Expr> size = {s0, table.integer(3)};
  TensorMeta m = make("full", {{"size", size}, {"fill_value", int64_t{7}}});
  EXPECT_EQ(m.dtype, DType::Int64);
  EXPECT_EQ(m.sizes, Shape({s0, table.integer(3)}));
  EXPECT_EQ(m.strides, Shape({table.integer(3), table.integer(1)}));
  EXPECT_EQ(make("full", {{"size", size}, {"fill_value", true}}).dtype, DType::Bool);
  EXPECT_EQ(make("full", {{"size", size}, {"fill_value", 1.5}}).dtype, DType::Float32);
  EXPECT_EQ(make("zeros", {{"size", size}}).dtype, DType::Float32);
  EXPECT_EQ(make("ones", {{"size", size}, {"dtype", DType::Int8}}).dtype, DType::Int8);
  EXPECT_THROW(make("empty", {{"size", std::vector<int64_t>{-1}}}), Error);
  ValueId i = input(DType::Int32, {s0});
  EXPECT_EQ(make("zeros_like", {}, {i}).dtype, DType::Int32);
  EXPECT_EQ(make("full_like", {{"fill_value", 0.5}, {"dtype", DType::Float16}}, {i}).dtype,
            DType::Float16);
}

TEST_F(Create, ArangeLengths) {
  auto length = [&](std::vector<Attr> attrs) { return make("arange", std::move(attrs)).sizes[0]; };
  EXPECT_EQ(length({{"end", int64_t{5}}}), table.integer(5));
  EXPECT_EQ(length({{"start", int64_t{1}}, {"end", int64_t{10}}, {"step", int64_t{3}}}),
            table.integer(3));
  EXPECT_EQ(length({{"start", int64_t{0}}, {"end", int64_t{1}}, {"step", 0.3}}), table.integer(4));
  EXPECT_EQ(length({{"start", int64_t{10}}, {"end", int64_t{0}}, {"step", int64_t{-3}}}),
            table.integer(4));
  EXPECT_EQ(length({{"end", s0}}), s0);
  EXPECT_EQ(length({{"end", s0 * 2}, {"step", int64_t{2}}}), s0);
  EXPECT_EQ(make("arange", {{"end", int64_t{5}}}).dtype, DType::Int64);
  EXPECT_EQ(make("arange", {{"end", 2.5}}).dtype, DType::Float32);
  EXPECT_THROW(make("arange", {{"start", int64_t{5}}, {"end", int64_t{1}}}), Error);
  EXPECT_THROW(make("arange", {{"end", s0}, {"step", 0.5}}), Error);
}

TEST_F(Create, MatmulCoversTorchsCases) {
  auto mm = [&](std::vector<int64_t> a, std::vector<int64_t> b) {
    Shape x, y;
    for (int64_t v : a) x.push_back(table.integer(v));
    for (int64_t v : b) y.push_back(table.integer(v));
    return make("matmul", {}, {input(DType::Float32, x), input(DType::Float32, y)}).sizes;
  };
  EXPECT_EQ(mm({4}, {4}), Shape());
  EXPECT_EQ(mm({3, 4}, {4}), ints(table, {3}));
  EXPECT_EQ(mm({4}, {4, 5}), ints(table, {5}));
  EXPECT_EQ(mm({2, 1, 3, 4}, {5, 4, 6}), ints(table, {2, 5, 3, 6}));
  EXPECT_EQ(mm({4}, {2, 4, 5}), ints(table, {2, 5}));
  EXPECT_THROW(mm({3, 4}, {5, 6}), Error);
  ValueId a = input(DType::Float32, {s0, table.integer(3), table.integer(4)});
  ValueId w = input(DType::Float32, ints(table, {5, 4}));
  ValueId b = input(DType::Float32, ints(table, {5}));
  EXPECT_EQ(make("linear", {}, {a, w, b}).sizes, Shape({s0, table.integer(3), table.integer(5)}));
  EXPECT_EQ(make("linear", {}, {a, w}).sizes, Shape({s0, table.integer(3), table.integer(5)}));
  EXPECT_THROW(make("linear", {}, {a, w, w}), Error);
}

TEST_F(Create, IndexingOpsTakeTheIndexSizes) {
  ValueId x = input(DType::Float32, {s0, table.integer(4)});
  ValueId idx = input(DType::Int64, ints(table, {3}));
  EXPECT_EQ(make("index_select", {{"dim", int64_t{1}}}, {x, idx}).sizes,
            Shape({s0, table.integer(3)}));
  ValueId g = input(DType::Int64, {s0, table.integer(2)});
  EXPECT_EQ(make("gather", {{"dim", int64_t{1}}}, {x, g}).sizes, Shape({s0, table.integer(2)}));
  EXPECT_THROW(make("gather", {{"dim", int64_t{1}}}, {x, idx}), Error);
  ValueId weight = input(DType::Float32, ints(table, {10, 8}));
  ValueId tokens = input(DType::Int64, {table.integer(2), s0});
  EXPECT_EQ(make("embedding", {}, {weight, tokens}).sizes,
            Shape({table.integer(2), s0, table.integer(8)}));
  EXPECT_THROW(make("embedding", {}, {weight, x}), Error);
}

} // namespace
} // namespace kiln::ir
