// kiln::ir::DType (kiln::DType from libs/common) with PyTorch's type promotion.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

#include "kiln/common/dtype.h"

namespace kiln::ir {

using kiln::DType;
using kiln::elementSize;
using kiln::kDTypeCount;

constexpr DType kDefaultFloat = DType::Float32; // torch.get_default_dtype()

std::string_view name(DType t); // the printer's short name: f32 f64 f16 bf16 i8 ... b8 c64
std::optional<DType> dtypeFromName(std::string_view name);

bool isFloating(DType t); // f16 bf16 f32 f64
bool isComplex(DType t);
bool isIntegral(DType t, bool includeBool); // the int types, and bool if asked

// The dtype torch computes f16/bf16 arithmetic in (its opmath): f32; others their own.
DType opmath(DType t);

// The machine epsilon of a floating dtype (torch.finfo(t).eps).
double epsilon(DType t);

// The promoted type of two tensor dtypes (torch.promote_types): the higher
// category wins (bool < integral < floating < complex), then the wider type;
// u8 with i8 gives i16, f16 with bf16 gives f32.
DType promoteTypes(DType a, DType b);

// Whether an op may write a `from` result into a `to` tensor (torch.can_cast):
// not complex into real, floating into integral, or non-bool into bool.
bool canCast(DType from, DType to);

// How an operand of a binary op takes part in promotion (torch.result_type):
// tensors with at least one dimension decide the type; 0-d tensors and then
// Python scalars only count when they are of a higher category. Checked against
// torch for every pair of dtypes and operand kinds; the one difference:
// f16 meeting a complex 0-d tensor or scalar gives c64 (torch: complex32, which
// kiln does not have).
enum class Operand { Tensor, ZeroDim, Scalar };

class ResultType {
public:
  void add(DType t, Operand kind); // a Scalar's dtype: Bool, Int64, Float64 or Complex128
  DType result() const;            // Error{Internal} if nothing was added

private:
  std::optional<DType> dims_, zeroDim_, scalar_;
};

} // namespace kiln::ir
