#include <gtest/gtest.h>

#include "helpers.h"
#include "kiln/common/error.h"
#include "kiln/ir/graph.h"

namespace kiln::ir {
namespace {

using testing::tensorOf;

struct Reduce : testing::GraphTest {
  sym::Expr s0 = table.createBacked(8, {2, sym::kInf});
  sym::Expr k = table.integer(768);
  ValueId f = graph.placeholder("f", tensorOf(table, DType::Float16, {s0, k}));
  ValueId i = graph.placeholder("i", tensorOf(table, DType::Int32, {s0, k}));
  ValueId b = graph.placeholder("b", tensorOf(table, DType::Bool, {s0, k}));

  TensorMeta reduce(std::string_view op, ValueId x, std::vector<Attr> attrs = {}) {
    return graph.meta(graph.call(op, {x}, std::move(attrs)));
  }
};

TEST_F(Reduce, DimsAndKeepdimShapeTheResult) {
  EXPECT_EQ(reduce("sum", f).sizes, Shape());
  EXPECT_EQ(reduce("sum", f, {{"dim", std::vector<int64_t>{-1}}}).sizes, Shape({s0}));
  const TensorMeta& kept = reduce("amax", f, {{"dim", std::vector<int64_t>{0}}, {"keepdim", true}});
  EXPECT_EQ(kept.sizes, Shape({table.integer(1), k}));
  EXPECT_EQ(kept.strides, Shape({k, table.integer(1)}));
  EXPECT_EQ(reduce("argmax", f, {{"dim", int64_t{1}}}).sizes, Shape({s0}));
  EXPECT_EQ(reduce("argmax", f).sizes, Shape());
}

TEST_F(Reduce, DTypesFollowTorch) {
  EXPECT_EQ(reduce("sum", i).dtype, DType::Int64);
  EXPECT_EQ(reduce("sum", b).dtype, DType::Int64);
  EXPECT_EQ(reduce("prod", i, {{"dtype", DType::Int32}}).dtype, DType::Int32);
  EXPECT_EQ(reduce("sum", f).dtype, DType::Float16);
  EXPECT_EQ(reduce("mean", f).dtype, DType::Float16);
  EXPECT_EQ(reduce("mean", i, {{"dtype", DType::Float64}}).dtype, DType::Float64);
  EXPECT_EQ(reduce("amin", i).dtype, DType::Int32);
  EXPECT_EQ(reduce("argmin", f).dtype, DType::Int64);
  EXPECT_EQ(reduce("any", f).dtype, DType::Bool);
  EXPECT_EQ(reduce("all", i, {{"dim", int64_t{0}}}).dtype, DType::Bool);
}

TEST_F(Reduce, VarAndStdNeedFloatsAndTakeACorrection) {
  EXPECT_EQ(reduce("var", f, {{"dim", std::vector<int64_t>{1}}, {"correction", int64_t{0}}}).sizes,
            Shape({s0}));
  EXPECT_EQ(reduce("std", f, {{"keepdim", true}}).sizes,
            Shape({table.integer(1), table.integer(1)}));
  EXPECT_THROW(reduce("var", i), Error);
}

TEST_F(Reduce, RejectsBadDimsAndIntegralMean) {
  EXPECT_THROW(reduce("mean", i), Error);
  try {
    reduce("sum", f, {{"dim", std::vector<int64_t>{2}}});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "sum: argument 'dim': dim 2 out of range [-2, 1]");
  }
  EXPECT_THROW(reduce("sum", f, {{"dim", std::vector<int64_t>{0, -2}}}), Error);
}

} // namespace
} // namespace kiln::ir
