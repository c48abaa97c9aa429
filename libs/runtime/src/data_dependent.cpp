#include "data_dependent.h"

#include <cstring>

#include "kiln/common/error.h"
#include "kiln/sym/print.h"
#include "kiln/sym/range.h"

namespace kiln::runtime::detail {
namespace {

const ir::AttrValue* findAttr(const Step& step, const char* name) {
  for (const ir::Attr& a : step.attrs)
    if (a.name == name) return &a.value;
  return nullptr;
}

[[noreturn]] void malformed(const Step& step, const std::string& what) {
  throw Error(ErrorCode::Malformed, "runtime: a " + step.op + " step " + what);
}

// Whether the element at `p` of dtype `t` is non-zero (for floats: not ±0).
bool isNonzero(const std::byte* p, ir::DType t) {
  switch (t) {
  case ir::DType::Float16:
  case ir::DType::BFloat16: {
    uint16_t bits;
    std::memcpy(&bits, p, 2);
    return (bits & 0x7fff) != 0;
  }
  case ir::DType::Float32: {
    float v;
    std::memcpy(&v, p, 4);
    return v != 0;
  }
  case ir::DType::Float64: {
    double v;
    std::memcpy(&v, p, 8);
    return v != 0;
  }
  default: { // integers and bool: any set byte
    for (size_t k = 0; k < ir::elementSize(t); ++k)
      if (p[k] != std::byte{0}) return true;
    return false;
  }
  }
}

// Calls fn(index, element address) for every element in row-major order.
template <class Fn> void forEachElement(const Tensor& t, Fn fn) {
  for (int64_t s : t.sizes)
    if (s == 0) return;
  std::vector<int64_t> idx(t.sizes.size(), 0);
  size_t width = ir::elementSize(t.dtype);
  for (;;) {
    int64_t offset = 0;
    for (size_t d = 0; d < idx.size(); ++d) offset += idx[d] * t.strides[d];
    fn(idx, static_cast<const std::byte*>(t.data) + offset * static_cast<int64_t>(width));
    size_t d = idx.size();
    while (d > 0 && ++idx[d - 1] == t.sizes[d - 1]) idx[--d] = 0;
    if (d == 0) return;
  }
}

} // namespace

bool isAssert(const Step& step) {
  return step.kind == Step::CallExtern && step.op == "_assert_scalar";
}

sym::Expr boundSymbol(const Step& step) {
  const ir::AttrValue* v = findAttr(step, "symbol");
  const sym::Expr* e = v ? std::get_if<sym::Expr>(v) : nullptr;
  if (!e || !e->isSymbol()) malformed(step, "without the symbol it binds");
  return *e;
}

void checkRange(sym::Expr symbol, int64_t value, const std::string& op) {
  if (!sym::range(symbol).contains(value))
    throw Error(ErrorCode::InvalidArgument, sym::rangeFailure(symbol, value, op));
}

void checkAssert(const Step& step, const sym::Binding& binding) {
  const ir::AttrValue* c = findAttr(step, "condition");
  const ir::AttrValue* m = findAttr(step, "message");
  const sym::Expr* condition = c ? std::get_if<sym::Expr>(c) : nullptr;
  const std::string* message = m ? std::get_if<std::string>(m) : nullptr;
  if (!condition || !condition->isBool() || !message) malformed(step, "without a condition and a message");
  if (!sym::evaluate(*condition, binding))
    throw Error(ErrorCode::InvalidArgument, sym::assertFailure(*condition, *message, binding));
}

int64_t readInt(const Tensor& t) {
  const auto* p = static_cast<const std::byte*>(t.data);
  switch (t.dtype) {
  case ir::DType::Bool:
  case ir::DType::UInt8: return static_cast<int64_t>(std::to_integer<uint8_t>(p[0]));
  case ir::DType::Int8: return static_cast<int8_t>(std::to_integer<uint8_t>(p[0]));
  case ir::DType::Int16: { int16_t v; std::memcpy(&v, p, 2); return v; }
  case ir::DType::Int32: { int32_t v; std::memcpy(&v, p, 4); return v; }
  case ir::DType::Int64: { int64_t v; std::memcpy(&v, p, 8); return v; }
  default:
    throw Error(ErrorCode::InvalidArgument,
                "runtime: item() of a " + std::string(ir::name(t.dtype)) + " tensor");
  }
}

int64_t countNonzero(const Tensor& t) {
  int64_t count = 0;
  forEachElement(t, [&](const std::vector<int64_t>&, const std::byte* p) { count += isNonzero(p, t.dtype); });
  return count;
}

void fillNonzero(const Tensor& t, const Tensor& out) {
  auto* dst = static_cast<int64_t*>(out.data);
  int64_t row = 0, rank = static_cast<int64_t>(t.sizes.size());
  forEachElement(t, [&](const std::vector<int64_t>& idx, const std::byte* p) {
    if (!isNonzero(p, t.dtype)) return;
    for (int64_t d = 0; d < rank; ++d) dst[row * out.strides[0] + d * out.strides[1]] = idx[d];
    ++row;
  });
}

} // namespace kiln::runtime::detail

namespace kiln::runtime {

bool bindsSymbol(const Step& step) {
  return step.kind == Step::CallExtern && (step.op == "item" || step.op == "nonzero");
}

} // namespace kiln::runtime
