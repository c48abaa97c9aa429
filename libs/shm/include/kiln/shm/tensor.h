// What a tensor in shared memory is: its element type and its strided layout.
// A plain value type; it does not depend on the Cap'n Proto schemas.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "kiln/common/dtype.h"

namespace kiln::shm {

using kiln::DType;
using kiln::dtypeName;
using kiln::elementSize;

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
