// Normalisations, losses, dropout, attention and scatter_add; shapes from torch.
#include <gtest/gtest.h>

#include "helpers.h"
#include "kiln/common/error.h"
#include "kiln/ir/graph.h"

namespace kiln::ir {
namespace {

using testing::ints;
using testing::tensorOf;

struct Nn : testing::GraphTest {
  sym::Expr s0 = table.createBacked(8, {2, sym::kInf});

  ValueId input(DType dtype, Shape sizes) {
    return graph.placeholder("x", tensorOf(table, dtype, std::move(sizes)));
  }
  TensorMeta call(std::string_view op, std::vector<ValueId> in, std::vector<Attr> attrs = {}) {
    return graph.meta(graph.call(op, std::move(in), std::move(attrs)));
  }
};

TEST_F(Nn, LayerNormChecksTrailingSizes) {
  ValueId x = input(DType::Float32, {s0, table.integer(3), table.integer(4)});
  ValueId w = input(DType::Float32, ints(table, {3, 4}));
  std::vector<int64_t> shape = {3, 4};
  EXPECT_EQ(call("layer_norm", {x, w, w}, {{"normalized_shape", shape}}).sizes,
            Shape({s0, table.integer(3), table.integer(4)}));
  EXPECT_EQ(call("rms_norm", {x}, {{"normalized_shape", std::vector<int64_t>{4}}}).dtype,
            DType::Float32);
  EXPECT_THROW(call("layer_norm", {x}, {{"normalized_shape", std::vector<int64_t>{5}}}), Error);
  EXPECT_THROW(call("layer_norm", {x, x}, {{"normalized_shape", shape}}), Error);
  ValueId i = input(DType::Int64, ints(table, {4}));
  EXPECT_THROW(call("layer_norm", {i}, {{"normalized_shape", std::vector<int64_t>{4}}}), Error);
}

TEST_F(Nn, CrossEntropyReducesUnlessAskedNotTo) {
  ValueId logits = input(DType::Float32, {s0, table.integer(3), table.integer(7)});
  ValueId target = input(DType::Int64, {s0, table.integer(7)});
  EXPECT_EQ(call("cross_entropy", {logits, target}).sizes, Shape());
  EXPECT_EQ(call("cross_entropy", {logits, target}, {{"reduction", std::string("none")}}).sizes,
            Shape({s0, table.integer(7)}));
  ValueId probs = input(DType::Float32, {s0, table.integer(3), table.integer(7)});
  EXPECT_EQ(call("cross_entropy", {logits, probs}).sizes, Shape());
  ValueId bad = input(DType::Int64, {s0});
  EXPECT_THROW(call("cross_entropy", {logits, bad}), Error);
  EXPECT_THROW(call("cross_entropy", {logits, target}, {{"reduction", std::string("avg")}}), Error);
}

TEST_F(Nn, DropoutTakesAnExplicitSeedAndOffset) {
  ValueId x = input(DType::Float16, {s0, table.integer(4)});
  ValueId seed = input(DType::Int64, {});
  EXPECT_EQ(call("dropout", {x, seed, seed}, {{"p", 0.1}}).sizes, Shape({s0, table.integer(4)}));
  EXPECT_THROW(call("dropout", {x, x, seed}), Error);
  EXPECT_THROW(call("dropout", {x, seed, seed}, {{"p", 1.5}}), Error);
}

TEST_F(Nn, AttentionGivesQueryLengthByValueWidth) {
  sym::Expr l = table.createBacked(16, {2, sym::kInf});
  ValueId q = input(DType::BFloat16, {s0, table.integer(8), l, table.integer(64)});
  ValueId v = input(DType::BFloat16, {s0, table.integer(8), l, table.integer(32)});
  EXPECT_EQ(call("scaled_dot_product_attention", {q, q, v}, {{"is_causal", true}}).sizes,
            Shape({s0, table.integer(8), l, table.integer(32)}));
  EXPECT_THROW(call("scaled_dot_product_attention", {q, v, v}), Error);
}

TEST_F(Nn, ScatterAddKeepsSelf) {
  ValueId self = input(DType::Float32, {s0, table.integer(4)});
  ValueId index = input(DType::Int64, ints(table, {2, 4}));
  ValueId src = input(DType::Float32, ints(table, {2, 4}));
  EXPECT_EQ(call("scatter_add", {self, index, src}, {{"dim", int64_t{0}}}).sizes,
            Shape({s0, table.integer(4)}));
  EXPECT_THROW(call("scatter_add", {self, src, src}, {{"dim", int64_t{0}}}), Error);
}

// torch's gather_shape_check and scatter_shape_check: index.size(d) <= self.size(d)
// for d != dim, <= src.size(d) for every d; an empty index is not checked.
TEST_F(Nn, GatherAndScatterAddBoundTheIndexSizes) {
  ValueId self = input(DType::Float32, ints(table, {3, 4}));
  auto index = [&](int64_t a, int64_t b) { return input(DType::Int64, ints(table, {a, b})); };
  std::vector<Attr> dim1 = {{"dim", int64_t{1}}};
  EXPECT_EQ(call("gather", {self, index(2, 6)}, dim1).sizes, ints(table, {2, 6}));
  EXPECT_THROW(call("gather", {self, index(4, 2)}, dim1), Error);
  EXPECT_EQ(call("gather", {self, index(4, 0)}, dim1).sizes, ints(table, {4, 0}));
  ValueId src = input(DType::Float32, ints(table, {3, 2}));
  EXPECT_NO_THROW(call("scatter_add", {self, index(3, 2), src}, dim1));
  EXPECT_THROW(call("scatter_add", {self, index(3, 3), src}, dim1), Error);
  ValueId tall = input(DType::Float32, ints(table, {4, 1}));
  EXPECT_THROW(call("scatter_add", {self, index(4, 1), tall}, dim1), Error);
}

} // namespace
} // namespace kiln::ir
