// slice, select, narrow, flatten, contiguous, clone; expectations from torch.
#include <gtest/gtest.h>

#include "helpers.h"
#include "kiln/common/error.h"
#include "kiln/ir/graph.h"

namespace kiln::ir {
namespace {

using testing::ints;
using testing::tensorOf;

struct Slice : testing::GraphTest {
  ValueId x = graph.placeholder("x", tensorOf(table, DType::Float32, ints(table, {6, 4, 5})));

  TensorMeta apply(std::string_view op, ValueId in, std::vector<Attr> attrs) {
    return graph.meta(graph.call(op, {in}, std::move(attrs)));
  }
  void expectMeta(const TensorMeta& m, std::initializer_list<int64_t> sizes,
                  std::initializer_list<int64_t> strides, int64_t offset) {
    EXPECT_EQ(m.sizes, ints(table, sizes));
    EXPECT_EQ(m.strides, ints(table, strides));
    EXPECT_EQ(m.storageOffset, table.integer(offset));
  }
};

TEST_F(Slice, SliceClampsBoundsLikePython) {
  auto i = [](int64_t v) { return AttrValue(v); };
  expectMeta(apply("slice", x, {{"start", i(1)}, {"end", i(5)}, {"step", i(2)}}), {2, 4, 5},
             {40, 5, 1}, 20);
  expectMeta(apply("slice", x, {{"dim", i(1)}, {"start", i(-3)}}), {6, 3, 5}, {20, 5, 1}, 5);
  expectMeta(apply("slice", x, {{"dim", i(2)}, {"start", i(10)}}), {6, 4, 0}, {20, 5, 1}, 5);
  expectMeta(apply("slice", x, {{"dim", i(2)}, {"start", i(3)}, {"end", i(1)}}), {6, 4, 0},
             {20, 5, 1}, 3);
  expectMeta(apply("slice", x, {{"start", i(-100)}, {"end", i(2)}}), {2, 4, 5}, {20, 5, 1}, 0);
  EXPECT_THROW(apply("slice", x, {{"step", i(0)}}), Error);
}

TEST_F(Slice, SymbolicSliceSimplifiesWithRanges) {
  sym::Expr s0 = table.createBacked(8, {2, sym::kInf});
  ValueId y = graph.placeholder("y", tensorOf(table, DType::Float32, {s0, table.integer(3)}));
  TensorMeta m = apply("slice", y, {{"start", int64_t{1}}});
  EXPECT_EQ(m.sizes[0], s0 - 1);
  EXPECT_EQ(m.storageOffset, table.integer(3));
  TensorMeta last = apply("select", y, {{"dim", int64_t{0}}, {"index", int64_t{-1}}});
  EXPECT_EQ(last.sizes, ints(table, {3}));
  EXPECT_EQ(last.storageOffset, (s0 - 1) * 3);
  try {
    apply("select", y, {{"dim", int64_t{0}}, {"index", int64_t{5}}}); // s0 may be <= 5
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Unsupported);
  }
  ValueId n = graph.call("sym_size", {y}, {{"dim", int64_t{0}}});
  TensorMeta head =
      graph.meta(graph.call("narrow", {y, n}, {{"dim", int64_t{0}}, {"start", int64_t{0}}}));
  EXPECT_EQ(head.sizes[0], s0);
}

TEST_F(Slice, SelectNarrowFlattenMatchTorch) {
  expectMeta(apply("select", x, {{"dim", int64_t{1}}, {"index", int64_t{-1}}}), {6, 5}, {20, 1},
             15);
  EXPECT_THROW(apply("select", x, {{"dim", int64_t{1}}, {"index", int64_t{4}}}), Error);
  expectMeta(
      apply("narrow", x, {{"dim", int64_t{2}}, {"start", int64_t{1}}, {"length", int64_t{3}}}),
      {6, 4, 3}, {20, 5, 1}, 1);
  EXPECT_THROW(
      apply("narrow", x, {{"dim", int64_t{2}}, {"start", int64_t{3}}, {"length", int64_t{3}}}),
      Error);
  expectMeta(apply("flatten", x, {{"start_dim", int64_t{1}}}), {6, 20}, {20, 1}, 0);
  expectMeta(apply("flatten", x, {{"start_dim", int64_t{1}}, {"end_dim", int64_t{1}}}), {6, 4, 5},
             {20, 5, 1}, 0);
  ValueId t = graph.call("transpose", {x}, {{"dim0", int64_t{0}}, {"dim1", int64_t{1}}});
  expectMeta(apply("flatten", t, {}), {120}, {1}, 0);
  expectMeta(apply("contiguous", t, {}), {4, 6, 5}, {30, 5, 1}, 0);
  expectMeta(apply("clone", x, {}), {6, 4, 5}, {20, 5, 1}, 0);
  ValueId scalar = graph.placeholder("s", tensorOf(table, DType::Float32, {}));
  expectMeta(apply("flatten", scalar, {}), {1}, {1}, 0);
}

TEST_F(Slice, UnflattenAndAsStridedAreViews) {
  ValueId y = graph.placeholder("y", tensorOf(table, DType::Float32, ints(table, {6, 12})));
  expectMeta(apply("unflatten", y, {{"dim", int64_t{1}}, {"sizes", std::vector<int64_t>{3, -1}}}),
             {6, 3, 4}, {12, 4, 1}, 0);
  ValueId t = graph.call("transpose", {y}, {{"dim0", int64_t{0}}, {"dim1", int64_t{1}}});
  expectMeta(apply("unflatten", t, {{"dim", int64_t{0}}, {"sizes", std::vector<int64_t>{4, 3}}}),
             {4, 3, 6}, {3, 1, 12}, 0);
  EXPECT_THROW(apply("unflatten", y, {{"dim", int64_t{1}}, {"sizes", std::vector<int64_t>{5, -1}}}),
               Error);
  expectMeta(apply("as_strided", y,
                   {{"size", std::vector<int64_t>{2, 2}},
                    {"stride", std::vector<int64_t>{1, 2}},
                    {"storage_offset", int64_t{3}}}),
             {2, 2}, {1, 2}, 3);
  EXPECT_THROW(apply("as_strided", y,
                     {{"size", std::vector<int64_t>{2}}, {"stride", std::vector<int64_t>{}}}),
               Error);
}

TEST(Cat, AddsSizesAlongDimAndPromotes) {
  sym::SymbolTable table;
  Graph g(table);
  sym::Expr s0 = table.createBacked(8, {2, sym::kInf});
  ValueId a = g.placeholder("a", tensorOf(table, DType::Float32, {s0, table.integer(3)}));
  ValueId b = g.placeholder("b", tensorOf(table, DType::Float64, ints(table, {4, 3})));
  TensorMeta c = g.meta(g.call("cat", {a, b, a}));
  EXPECT_EQ(c.sizes, Shape({s0 * 2 + 4, table.integer(3)}));
  EXPECT_EQ(c.dtype, DType::Float64);
  EXPECT_THROW(g.call("cat", {a, b}, {{"dim", int64_t{1}}}), Error); // s0 vs 4: undecidable
  TensorMeta s = g.meta(g.call("stack", {a, a}, {{"dim", int64_t{1}}}));
  EXPECT_EQ(s.sizes, Shape({s0, table.integer(2), table.integer(3)}));
  EXPECT_EQ(s.strides, Shape({table.integer(6), table.integer(3), table.integer(1)}));
  EXPECT_EQ(g.meta(g.call("stack", {a}, {{"dim", int64_t{-1}}})).sizes,
            Shape({s0, table.integer(3), table.integer(1)}));
  EXPECT_THROW(g.call("stack", {a, b}), Error);
  EXPECT_THROW(g.call("cat", {}), Error);
}

TEST(Matmul, ShapesAndDTypesMatchTorch) {
  sym::SymbolTable table;
  Graph g(table);
  sym::Expr s0 = table.createBacked(8, {2, sym::kInf});
  sym::Expr k = table.integer(64);
  ValueId a = g.placeholder("a", tensorOf(table, DType::Float32, {s0, k}));
  ValueId b = g.placeholder("b", tensorOf(table, DType::Float32, {k, table.integer(7)}));
  EXPECT_EQ(g.meta(g.call("mm", {a, b})).sizes, Shape({s0, table.integer(7)}));
  ValueId d = g.placeholder("d", tensorOf(table, DType::Float64, {k, table.integer(7)}));
  EXPECT_THROW(g.call("mm", {a, d}), Error);
  EXPECT_THROW(g.call("mm", {a, a}), Error); // 64 != s0 is not decidable: refused
  ValueId p = g.placeholder("p", tensorOf(table, DType::Float32, {s0, table.integer(3), k}));
  ValueId q = g.placeholder("q", tensorOf(table, DType::Float32, {s0, k, table.integer(5)}));
  EXPECT_EQ(g.meta(g.call("bmm", {p, q})).sizes, Shape({s0, table.integer(3), table.integer(5)}));
  EXPECT_THROW(g.call("bmm", {a, b}), Error);
  EXPECT_EQ(
      g.meta(g.call("log_softmax", {a}, {{"dim", int64_t{0}}, {"dtype", DType::Float64}})).dtype,
      DType::Float64);
  ValueId bias = g.placeholder("bias", tensorOf(table, DType::Float32, {table.integer(7)}));
  EXPECT_EQ(g.meta(g.call("addmm", {bias, a, b}, {{"beta", 0.5}})).sizes,
            Shape({s0, table.integer(7)}));
  EXPECT_THROW(g.call("addmm", {a, a, b}), Error);
  ValueId i = g.placeholder("i", tensorOf(table, DType::Int64, {k}));
  EXPECT_THROW(g.call("softmax", {i}, {{"dim", int64_t{0}}}), Error);
}

} // namespace
} // namespace kiln::ir
