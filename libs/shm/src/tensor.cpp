#include "kiln/shm/tensor.h"

#include <fmt/format.h>

#include "kiln/common/error.h"

namespace kiln::shm {

TensorMeta TensorMeta::contiguous(DType dtype, std::vector<int64_t> sizes) {
  std::vector<int64_t> strides(sizes.size());
  int64_t stride = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= sizes[i] > 0 ? sizes[i] : 1;
  }
  return TensorMeta{dtype, std::move(sizes), std::move(strides), 0};
}

int64_t TensorMeta::numel() const {
  int64_t n = 1;
  for (const int64_t size : sizes) n *= size;
  return n;
}

size_t TensorMeta::storageBytes() const {
  auto invalid = [](const std::string& what) {
    return Error(ErrorCode::InvalidArgument, "tensor meta: " + what);
  };
  const size_t itemSize = elementSize(dtype);
  if (sizes.size() != strides.size())
    throw invalid(fmt::format("{} sizes but {} strides", sizes.size(), strides.size()));
  if (storageOffset < 0) throw invalid(fmt::format("negative storage offset {}", storageOffset));
  // Elements from the storage start through the farthest one: offset + 1 + sum((size-1)*stride).
  uint64_t last = 0;
  bool empty = false;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] < 0) throw invalid(fmt::format("negative size {} in dim {}", sizes[i], i));
    if (strides[i] < 0) throw invalid(fmt::format("negative stride {} in dim {}", strides[i], i));
    if (sizes[i] == 0) empty = true;
    uint64_t reach = 0;
    if (sizes[i] > 0 &&
        (__builtin_mul_overflow(uint64_t(sizes[i] - 1), uint64_t(strides[i]), &reach) ||
         __builtin_add_overflow(last, reach, &last)))
      throw invalid("size overflows");
  }
  if (last > uint64_t(INT64_MAX)) throw invalid("size overflows");
  uint64_t elements = uint64_t(storageOffset);
  uint64_t bytes = 0;
  if ((!empty && __builtin_add_overflow(elements, last + 1, &elements)) ||
      __builtin_mul_overflow(elements, uint64_t(itemSize), &bytes) || bytes > uint64_t(INT64_MAX))
    throw invalid("size overflows");
  return size_t(bytes);
}

bool TensorMeta::operator==(const TensorMeta& other) const {
  return dtype == other.dtype && sizes == other.sizes && strides == other.strides &&
         storageOffset == other.storageOffset;
}

} // namespace kiln::shm
