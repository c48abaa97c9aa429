// Expectations checked against torch (torch.promote_types, torch.result_type).
#include "kiln/ir/dtype.h"

#include <gtest/gtest.h>

namespace kiln::ir {
namespace {

DType resultOf(std::initializer_list<std::pair<DType, Operand>> operands) {
  ResultType r;
  for (auto [t, kind] : operands) r.add(t, kind);
  return r.result();
}

TEST(DType, NamesAndSizes) {
  EXPECT_EQ(name(DType::Float32), "f32");
  EXPECT_EQ(name(DType::BFloat16), "bf16");
  EXPECT_EQ(name(DType::Bool), "b8");
  EXPECT_EQ(name(DType::Int64), "i64");
  EXPECT_EQ(elementSize(DType::Float16), 2u);
  EXPECT_EQ(elementSize(DType::Complex128), 16u);
  EXPECT_EQ(dtypeFromName("i32"), DType::Int32);
  EXPECT_EQ(dtypeFromName("f8"), std::nullopt);
}

TEST(DType, PromoteTypesMatchesTorch) {
  EXPECT_EQ(promoteTypes(DType::UInt8, DType::Int8), DType::Int16);
  EXPECT_EQ(promoteTypes(DType::Float16, DType::BFloat16), DType::Float32);
  EXPECT_EQ(promoteTypes(DType::Bool, DType::Int8), DType::Int8);
  EXPECT_EQ(promoteTypes(DType::Int32, DType::Float16), DType::Float16);
  EXPECT_EQ(promoteTypes(DType::Complex64, DType::Float64), DType::Complex128);
  EXPECT_EQ(promoteTypes(DType::Int64, DType::Int32), DType::Int64);
  EXPECT_EQ(promoteTypes(DType::UInt8, DType::Int32), DType::Int32);
}

TEST(DType, ResultTypeCategoriesMatchTorch) {
  using O = Operand;
  EXPECT_EQ(resultOf({{DType::Int8, O::Tensor}, {DType::Int64, O::Scalar}}), DType::Int8);
  EXPECT_EQ(resultOf({{DType::Int8, O::Tensor}, {DType::Int64, O::ZeroDim}}), DType::Int8);
  EXPECT_EQ(resultOf({{DType::Float16, O::Tensor}, {DType::Float64, O::ZeroDim}}), DType::Float16);
  EXPECT_EQ(resultOf({{DType::Bool, O::Tensor}, {DType::Float64, O::Scalar}}), DType::Float32);
  EXPECT_EQ(resultOf({{DType::UInt8, O::Tensor}, {DType::Int8, O::ZeroDim}}), DType::UInt8);
  EXPECT_EQ(resultOf({{DType::Int32, O::ZeroDim}, {DType::Float64, O::Scalar}}), DType::Float32);
  EXPECT_EQ(resultOf({{DType::Int64, O::Tensor}, {DType::Float64, O::ZeroDim}}), DType::Float64);
  EXPECT_EQ(resultOf({{DType::Bool, O::Tensor}, {DType::Int64, O::Scalar}}), DType::Int64);
  EXPECT_EQ(resultOf({{DType::Int32, O::Tensor}, {DType::Int64, O::Tensor}}), DType::Int64);
}

} // namespace
} // namespace kiln::ir
