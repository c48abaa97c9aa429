#include "kiln/common/dtype.h"

#include <string>

#include "kiln/common/error.h"

namespace kiln {

size_t elementSize(DType dtype) {
  switch (dtype) {
  case DType::Bool:
  case DType::Int8:
  case DType::UInt8: return 1;
  case DType::Float16:
  case DType::BFloat16:
  case DType::Int16: return 2;
  case DType::Float32:
  case DType::Int32: return 4;
  case DType::Float64:
  case DType::Int64:
  case DType::Complex64: return 8;
  case DType::Complex128: return 16;
  }
  throw Error(ErrorCode::InvalidArgument, "unknown dtype " + std::to_string(int(dtype)));
}

std::string_view dtypeName(DType dtype) {
  switch (dtype) {
  case DType::Float32: return "float32";
  case DType::Float64: return "float64";
  case DType::Float16: return "float16";
  case DType::BFloat16: return "bfloat16";
  case DType::Int8: return "int8";
  case DType::Int16: return "int16";
  case DType::Int32: return "int32";
  case DType::Int64: return "int64";
  case DType::UInt8: return "uint8";
  case DType::Bool: return "bool";
  case DType::Complex64: return "complex64";
  case DType::Complex128: return "complex128";
  }
  return "?";
}

} // namespace kiln
