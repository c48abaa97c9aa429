#include "kiln/shm/tensor.h"

#include <gtest/gtest.h>

#include "shm_fixture.h"

namespace kiln::shm {
namespace {

using test::errorOf;

TEST(TensorMeta, DTypeValuesMirrorTheSchema) {
  // schemas/common.capnp: float32 @0 ... complex128 @11.
  EXPECT_EQ(int(DType::Float32), 0);
  EXPECT_EQ(int(DType::BFloat16), 3);
  EXPECT_EQ(int(DType::Int64), 7);
  EXPECT_EQ(int(DType::Bool), 9);
  EXPECT_EQ(int(DType::Complex128), 11);
  EXPECT_EQ(dtypeName(DType::BFloat16), "bfloat16");
  EXPECT_EQ(dtypeName(DType::Complex64), "complex64");
}

TEST(TensorMeta, ElementSizes) {
  EXPECT_EQ(elementSize(DType::Bool), 1u);
  EXPECT_EQ(elementSize(DType::Float16), 2u);
  EXPECT_EQ(elementSize(DType::Int32), 4u);
  EXPECT_EQ(elementSize(DType::Complex64), 8u);
  EXPECT_EQ(elementSize(DType::Complex128), 16u);
  EXPECT_EQ(errorOf([] { elementSize(DType(42)); }), ErrorCode::InvalidArgument);
}

TEST(TensorMeta, ContiguousHasRowMajorStrides) {
  const TensorMeta meta = TensorMeta::contiguous(DType::Float32, {2, 3, 4});
  EXPECT_EQ(meta.strides, (std::vector<int64_t>{12, 4, 1}));
  EXPECT_EQ(meta.numel(), 24);
  EXPECT_EQ(meta.storageBytes(), 96u);
}

TEST(TensorMeta, StorageBytesCoverOffsetAndFarthestElement) {
  // A transposed 3x4 view at offset 5: farthest element 5 + 2*1 + 3*3 = 16.
  const TensorMeta view{DType::Int64, {3, 4}, {1, 3}, 5};
  EXPECT_EQ(view.storageBytes(), 17u * 8);
  // Broadcast (stride 0) needs one row only.
  EXPECT_EQ((TensorMeta{DType::Float32, {1000, 8}, {0, 1}, 0}.storageBytes()), 32u);
  // Empty tensors need only their offset; scalars one element.
  EXPECT_EQ((TensorMeta{DType::Float32, {0, 8}, {8, 1}, 2}.storageBytes()), 8u);
  EXPECT_EQ((TensorMeta{DType::Float64, {}, {}, 0}.storageBytes()), 8u);
}

TEST(TensorMeta, RejectsBadLayouts) {
  auto bytesOf = [](TensorMeta meta) { return errorOf([&] { meta.storageBytes(); }); };
  EXPECT_EQ(bytesOf({DType::Float32, {-1}, {1}, 0}), ErrorCode::InvalidArgument);
  EXPECT_EQ(bytesOf({DType::Float32, {4}, {-1}, 0}), ErrorCode::InvalidArgument);
  EXPECT_EQ(bytesOf({DType::Float32, {4}, {1}, -2}), ErrorCode::InvalidArgument);
  EXPECT_EQ(bytesOf({DType::Float32, {4, 4}, {1}, 0}), ErrorCode::InvalidArgument);
  EXPECT_EQ(bytesOf({DType::Float32, {int64_t{1} << 62, 4}, {4, 1}, 0}),
            ErrorCode::InvalidArgument);
}

} // namespace
} // namespace kiln::shm
