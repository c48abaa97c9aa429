#include "kiln/ir/tensor_meta.h"

#include "kiln/sym/print.h"
#include "kiln/sym/range.h"
#include "kiln/sym/symbol_table.h"

namespace kiln::ir {
namespace {

bool provablyEqual(sym::Expr a, sym::Expr b) {
  return a == b || sym::staticallyKnown(sym::eq(a, b)) == std::optional<bool>(true);
}

std::string list(const Shape& xs) {
  std::string out = "[";
  for (size_t i = 0; i < xs.size(); ++i) out += (i ? ", " : "") + sym::toString(xs[i]);
  return out + "]";
}

} // namespace

std::string toString(Device d) {
  std::string out = d.type == DeviceType::Cpu ? "cpu" : "cuda";
  if (d.index >= 0) out += ":" + std::to_string(d.index);
  return out;
}

Shape contiguousStrides(const Shape& sizes, sym::SymbolTable& table) {
  Shape strides(sizes.size());
  sym::Expr running = table.integer(1);
  for (size_t i = sizes.size(); i-- > 0;) {
    strides[i] = running;
    running = running * sym::max(sizes[i], 1); // as torch: a size of 0 counts as 1
  }
  return strides;
}

sym::Expr numel(const Shape& sizes, sym::SymbolTable& table) {
  sym::Expr n = table.integer(1);
  for (sym::Expr s : sizes) n = n * s;
  return n;
}

Shape asRows(const Shape& sizes, sym::SymbolTable& table) {
  return {numel(Shape(sizes.begin(), sizes.end() - 1), table), sizes.back()};
}

bool TensorMeta::isContiguous() const {
  if (sizes.empty()) return true;
  Shape expected = contiguousStrides(sizes, sizes.back().table());
  for (size_t i = 0; i < sizes.size(); ++i) {
    bool sizeOne = sym::staticallyKnown(sym::eq(sizes[i], 1)) == std::optional<bool>(true);
    if (!sizeOne && !provablyEqual(strides[i], expected[i])) return false;
  }
  return true;
}

TensorMeta TensorMeta::contiguous(DType dtype, Shape sizes, sym::SymbolTable& table,
                                  Device device) {
  TensorMeta m;
  m.dtype = dtype;
  m.device = device;
  m.strides = contiguousStrides(sizes, table);
  m.sizes = std::move(sizes);
  m.storageOffset = table.integer(0);
  return m;
}

bool operator==(const TensorMeta& a, const TensorMeta& b) {
  return a.dtype == b.dtype && a.device == b.device && a.sizes == b.sizes &&
         a.strides == b.strides && a.storageOffset == b.storageOffset &&
         a.requiresGrad == b.requiresGrad;
}

std::string toString(const TensorMeta& m) {
  std::string out = std::string(name(m.dtype)) + list(m.sizes);
  if (!m.isContiguous()) out += " stride=" + list(m.strides);
  if (m.device.type != DeviceType::Cpu) out += "@" + toString(m.device);
  if (!m.storageOffset.isNull() && m.storageOffset.asInteger() != std::optional<int64_t>(0))
    out += " offset=" + sym::toString(m.storageOffset);
  if (m.requiresGrad) out += " grad";
  return out;
}

} // namespace kiln::ir
