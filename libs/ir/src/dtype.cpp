#include "kiln/ir/dtype.h"

#include <cmath>

#include "kiln/common/error.h"

namespace kiln::ir {
namespace {

// The printer's short names, by DType value.
constexpr std::string_view kNames[kDTypeCount] = {"f32", "f64", "f16", "bf16", "i8",  "i16",
                                                  "i32", "i64", "u8",  "b8",   "c64", "c128"};

std::string_view shortName(DType t) {
  auto i = static_cast<int>(t);
  if (i < 0 || i >= kDTypeCount) throw Error(ErrorCode::Internal, "not a dtype");
  return kNames[i];
}

int category(DType t) {
  if (t == DType::Bool) return 0;
  if (isComplex(t)) return 3;
  if (isFloating(t)) return 2;
  return 1;
}

// Where a lower category meets a higher one: the higher category's type, but a
// complex lower type turns a floating higher one into complex of its width.
DType toComplex(DType t) {
  return t == DType::Float64 ? DType::Complex128 : DType::Complex64;
}

// torch's category rule for combining the dims result (higher) with the
// lower-priority results: a lower operand only matters when of a higher category.
std::optional<DType> combine(std::optional<DType> higher, std::optional<DType> lower) {
  if (!higher) return lower;
  if (!lower) return higher;
  if (isComplex(*higher)) return higher;
  if (isComplex(*lower)) return isFloating(*higher) ? toComplex(*higher) : *lower;
  if (isFloating(*higher)) return higher;
  if (*higher == DType::Bool || isFloating(*lower)) return promoteTypes(*higher, *lower);
  return higher;
}

} // namespace

std::string_view name(DType t) {
  return shortName(t);
}

std::optional<DType> dtypeFromName(std::string_view n) {
  for (int i = 0; i < kDTypeCount; ++i)
    if (kNames[i] == n) return static_cast<DType>(i);
  return std::nullopt;
}

bool isFloating(DType t) {
  return t == DType::Float32 || t == DType::Float64 || t == DType::Float16 || t == DType::BFloat16;
}
bool isComplex(DType t) {
  return t == DType::Complex64 || t == DType::Complex128;
}
bool isIntegral(DType t, bool includeBool) {
  if (t == DType::Bool) return includeBool;
  return !isFloating(t) && !isComplex(t);
}

DType opmath(DType t) {
  return t == DType::Float16 || t == DType::BFloat16 ? DType::Float32 : t;
}

double epsilon(DType t) {
  switch (t) {
  case DType::Float64: return std::ldexp(1.0, -52);
  case DType::Float16: return std::ldexp(1.0, -10);
  case DType::BFloat16: return std::ldexp(1.0, -7);
  default: return std::ldexp(1.0, -23);
  }
}

DType promoteTypes(DType a, DType b) {
  if (a == b) return a;
  int ca = category(a), cb = category(b);
  if (ca != cb) {
    DType hi = ca > cb ? a : b, lo = ca > cb ? b : a;
    if (isComplex(hi) && lo == DType::Float64) return DType::Complex128;
    return hi;
  }
  if (ca == 1) {
    bool unsignedA = a == DType::UInt8, unsignedB = b == DType::UInt8;
    if (unsignedA || unsignedB) {
      DType other = unsignedA ? b : a;
      return other == DType::Int8 ? DType::Int16 : other; // every other int holds u8
    }
  }
  if (ca == 2 && elementSize(a) == 2 && elementSize(b) == 2) return DType::Float32; // f16, bf16
  return elementSize(a) >= elementSize(b) ? a : b;
}

bool canCast(DType from, DType to) {
  if (isComplex(from) && !isComplex(to)) return false;
  if (isFloating(from) && isIntegral(to, true)) return false;
  return from == DType::Bool || to != DType::Bool;
}

void ResultType::add(DType t, Operand kind) {
  std::optional<DType>& slot = kind == Operand::Tensor    ? dims_
                               : kind == Operand::ZeroDim ? zeroDim_
                                                          : scalar_;
  if (kind == Operand::Scalar) { // a Python number stands for the default type of its kind
    if (isComplex(t))
      t = toComplex(kDefaultFloat);
    else if (isFloating(t))
      t = kDefaultFloat;
    else if (t != DType::Bool)
      t = DType::Int64;
  }
  slot = slot ? promoteTypes(*slot, t) : t;
}

DType ResultType::result() const {
  std::optional<DType> r = combine(dims_, combine(zeroDim_, scalar_));
  if (!r) throw Error(ErrorCode::Internal, "result type of no operands");
  return *r;
}

} // namespace kiln::ir
