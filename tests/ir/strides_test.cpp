// Result strides of pointwise ops, clone, to_dtype and *_like follow the inputs'
// layout as torch's TensorIterator does; expectations from torch.
#include <gtest/gtest.h>

#include "helpers.h"
#include "kiln/ir/graph.h"

namespace kiln::ir {
namespace {

using testing::ints;

struct Strides : testing::GraphTest {

  ValueId strided(std::initializer_list<int64_t> sizes, std::initializer_list<int64_t> strides) {
    TensorMeta m = TensorMeta::contiguous(DType::Float32, ints(table, sizes), table);
    m.strides = ints(table, strides);
    return graph.placeholder("x", m);
  }
  Shape stridesOf(std::string_view op, std::vector<ValueId> in, std::vector<Attr> attrs = {}) {
    return graph.meta(graph.call(op, std::move(in), std::move(attrs))).strides;
  }
};

TEST_F(Strides, PointwiseResultsFollowTheFirstDecidingInput) {
  ValueId t = strided({4, 3}, {1, 4}); // a transposed [3, 4]
  ValueId c = strided({4, 3}, {3, 1});
  EXPECT_EQ(stridesOf("exp", {t}), ints(table, {1, 4}));
  EXPECT_EQ(stridesOf("add", {t, c}), ints(table, {1, 4}));
  EXPECT_EQ(stridesOf("add", {c, t}), ints(table, {3, 1}));
  EXPECT_EQ(stridesOf("exp", {strided({2, 3, 4}, {1, 8, 2})}), ints(table, {1, 8, 2}));
  EXPECT_EQ(stridesOf("exp", {strided({3, 2}, {8, 2})}), ints(table, {2, 1})); // dense again
  EXPECT_EQ(stridesOf("add", {strided({3}, {1}), t}), ints(table, {1, 4}));
  EXPECT_EQ(stridesOf("add", {strided({4, 1}, {1, 1}), strided({3}, {1})}), ints(table, {3, 1}));
  EXPECT_EQ(stridesOf("clone", {t}), ints(table, {1, 4}));
  EXPECT_EQ(stridesOf("contiguous", {t}), ints(table, {3, 1}));
  EXPECT_EQ(stridesOf("to_dtype", {t}, {{"dtype", DType::Float16}}), ints(table, {1, 4}));
  EXPECT_EQ(stridesOf("zeros_like", {t}), ints(table, {1, 4}));
}

TEST_F(Strides, SymbolicLayoutsAreFollowedWhenRangesDecide) {
  sym::Expr s0 = table.createBacked(8, {2, sym::kInf});
  ValueId x = graph.placeholder(
      "x", TensorMeta::contiguous(DType::Float32, {s0, table.integer(768)}, table));
  ValueId t = graph.call("transpose", {x}, {{"dim0", int64_t{0}}, {"dim1", int64_t{1}}});
  EXPECT_EQ(stridesOf("sigmoid", {t}), Shape({table.integer(1), table.integer(768)}));
  EXPECT_EQ(stridesOf("exp",
                      {graph.call("transpose", {t}, {{"dim0", int64_t{0}}, {"dim1", int64_t{1}}})}),
            Shape({table.integer(768), table.integer(1)}));
  sym::Expr s1 = table.createBacked(8, {2, sym::kInf}); // s0 < s1 is undecidable: contiguous
  TensorMeta odd = TensorMeta::contiguous(DType::Float32, ints(table, {2, 3}), table);
  odd.strides = {s0, s1};
  EXPECT_EQ(stridesOf("exp", {graph.placeholder("odd", odd)}), ints(table, {3, 1}));
}

} // namespace
} // namespace kiln::ir
