// kiln::DType: the element type of a tensor, as every library names it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace kiln {

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

constexpr int kDTypeCount = 12;

// Bytes per element; throws Error{InvalidArgument} for a value outside the enum.
size_t elementSize(DType dtype);
// The schema's spelling: "float32", "bfloat16", "complex64", ...; "?" outside the enum.
std::string_view dtypeName(DType dtype);

} // namespace kiln
