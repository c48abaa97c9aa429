// kiln::ir::TensorMeta: what the compiler knows about a tensor without its data:
// dtype, device, symbolic sizes and strides (in elements), storage offset and
// whether it requires grad.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/ir/dtype.h"
#include "kiln/sym/expr.h"

namespace kiln::ir {

enum class DeviceType { Cpu = 0, Cuda = 1 }; // mirrors schema::DeviceType

struct Device {
  DeviceType type = DeviceType::Cpu;
  int16_t index = -1; // -1: the current device
  friend bool operator==(Device a, Device b) { return a.type == b.type && a.index == b.index; }
  friend bool operator!=(Device a, Device b) { return !(a == b); }
};

std::string toString(Device d); // "cpu", "cuda:0"

using Shape = std::vector<sym::Expr>;

// Row-major strides for `sizes`: the last is 1, each other the product of the
// sizes after it, each taken as max(size, 1) as torch does (so [3, 0] has
// strides [1, 1]; for sizes known to be >= 1 the max folds away). All Exprs are
// of `table`.
Shape contiguousStrides(const Shape& sizes, sym::SymbolTable& table);

sym::Expr numel(const Shape& sizes, sym::SymbolTable& table);
// `sizes` as a matrix: [rows (every dim but the last), last]. Not [-1, last]: no row
// count follows from a last dim of 0.
Shape asRows(const Shape& sizes, sym::SymbolTable& table);

struct TensorMeta {
  DType dtype = DType::Float32;
  Device device;
  Shape sizes;
  Shape strides;
  sym::Expr storageOffset;
  bool requiresGrad = false;

  size_t dim() const { return sizes.size(); }
  // Whether the strides are provably the contiguous ones (sizes of 1 may have
  // any stride, as in torch).
  bool isContiguous() const;

  // A contiguous tensor of these sizes at offset 0; `sizes` must not be empty
  // of a table, so 0-d tensors take the table explicitly.
  static TensorMeta contiguous(DType dtype, Shape sizes, sym::SymbolTable& table,
                               Device device = {});

  friend bool operator==(const TensorMeta& a, const TensorMeta& b);
  friend bool operator!=(const TensorMeta& a, const TensorMeta& b) { return !(a == b); }
};

// "f32[s0, 768]", with " stride=[...]" when not contiguous, "@cuda:0" when not
// on the CPU, " offset=..." when not 0 and " grad" when it requires grad.
std::string toString(const TensorMeta& meta);

} // namespace kiln::ir
