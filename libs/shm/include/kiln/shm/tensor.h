// What a tensor in shared memory is: its element type and its strided layout.
// A plain value type; it does not depend on the Cap'n Proto schemas.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace kiln::shm {

// Mirrors schema::DType (schemas/common.capnp); keep the two in step.
enum class DType : int32_t {
  Float32 = 0,
  Float64 = 1,
  Float16 = 2,
  BFloat16 = 3,
  Int8 = 4,
  Int16 = 5,
  Int32 = 6,
  Int64 = 7,
  UInt8 = 8,
  Bool = 9,
  Complex64 = 10,
  Complex128 = 11,
};

// Bytes per element; throws Error{InvalidArgument} for a value outside the enum.
size_t elementSize(DType dtype);
// The schema's spelling: "float32", "bfloat16", "complex64", ...; "?" outside the enum.
std::string_view dtypeName(DType dtype);

struct TensorMeta {
  DType dtype = DType::Float32;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides; // in elements, one per size
  int64_t storageOffset = 0;    // in elements, from the start of the storage

  // Row-major strides for `sizes`, offset 0.
  static TensorMeta contiguous(DType dtype, std::vector<int64_t> sizes);

  int64_t numel() const;
  // Bytes of storage the tensor needs: up to and including its farthest element.
  // Throws Error{InvalidArgument} for negative sizes, strides or offset, a
  // strides/sizes length mismatch, or a size that overflows.
  size_t storageBytes() const;

  bool operator==(const TensorMeta& other) const;
  bool operator!=(const TensorMeta& other) const { return !(*this == other); }
};

} // namespace kiln::shm
