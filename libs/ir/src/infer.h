// Helpers shared by the ops' inference functions, and the registration hooks
// of each op family.
#pragma once

#include <initializer_list>
#include <string_view>
#include <vector>

#include "kiln/ir/op_registry.h"
#include "kiln/sym/symbol_table.h"

namespace kiln::ir::detail {

void addPointwiseOps(std::vector<OpInfo>& ops);
void addReductionOps(std::vector<OpInfo>& ops);
void addViewOps(std::vector<OpInfo>& ops);
void addMatmulOps(std::vector<OpInfo>& ops);
void addCreationOps(std::vector<OpInfo>& ops);
void addNnOps(std::vector<OpInfo>& ops);
void addConvolutionOps(std::vector<OpInfo>& ops);
void addDataOps(std::vector<OpInfo>& ops);
void addDecompositions(std::vector<OpInfo>& ops);
void addOutForms(std::vector<OpInfo>& ops);

// Provably true for every binding within the symbols' ranges.
bool provable(sym::Expr condition);

// The broadcast shape of the named arguments that are tensors (scalars and
// absent arguments take no part). Error{InvalidArgument} naming the argument
// and dim whose size provably differs; Error{Unsupported} when the ranges
// cannot decide whether two sizes are equal (the caller must guard first).
Shape broadcast(const OpCall& call, std::initializer_list<std::string_view> args);

// torch.result_type over the named arguments that are present.
DType resultType(const OpCall& call, std::initializer_list<std::string_view> args);

// The device of the first tensor argument; Error{InvalidArgument} naming an
// argument on another device (0-d CPU tensors mix with any device, as in torch).
Device commonDevice(const OpCall& call, std::initializer_list<std::string_view> args);

// Whether any present tensor argument requires grad (only kept for float outputs).
bool anyRequiresGrad(const OpCall& call, std::initializer_list<std::string_view> args);

// A dim in [-rank, rank) (a 0-d tensor accepts 0 and -1) made non-negative.
int64_t wrapDim(const OpCall& call, std::string_view arg, int64_t dim, size_t rank);

// Requires `a == b` for every binding: Error{InvalidArgument} naming `arg` when
// they provably differ, Error{Unsupported} when the ranges cannot decide.
void requireEqual(const OpCall& call, std::string_view arg, sym::Expr a, sym::Expr b,
                  const std::string& what);

// Requires a condition: Error{InvalidArgument} with `message` when provably
// false, Error{Unsupported} when the ranges cannot decide.
void require(const OpCall& call, std::string_view arg, sym::Expr condition,
             const std::string& message);

// The strides torch gives the result of a pointwise op (and of clone/to with
// memory_format=preserve) over the named tensor arguments: dims ordered from
// fastest to slowest as the inputs' strides order them (the first input that
// orders two dims decides; broadcast dims do not take part; equal strides put
// the smaller size first), then dense in that order. Contiguous when every
// input is, and where the ranges cannot decide a comparison.
Shape pointwiseStrides(const OpCall& call, std::initializer_list<std::string_view> args,
                       const Shape& sizes);

// The index of gather (src empty) and scatter_add: i64, self's rank, and the
// sizes torch's gather/scatter shape checks allow.
void checkScatterIndex(const OpCall& call, std::string_view src);

// A new tensor of these sizes with pointwiseStrides over `args`.
TensorMeta freshLike(const OpCall& call, std::initializer_list<std::string_view> args, DType dtype,
                     Shape sizes, Device device, bool requiresGrad);

// OpInfo::canonical of every op with dim attributes of its input (dim, dims, dim0, dim1,
// start_dim, end_dim; the registry sets it): each made non-negative against the input's rank (the
// result's for unsqueeze, cat and stack), a `dim` list sorted without repeats, and one equal to its
// default dropped.
void canonicalDims(const OpCall& call, const Value& result, std::vector<Attr>& attrs);

// The layout torch's empty_like(self) (memory_format=preserve) gives, as clone and the *_like ops
// use it: self's own strides when it is non-overlapping and dense (an empty tensor is, as
// contiguous), else pointwiseStrides over self.
TensorMeta preserveLike(const OpCall& call, const TensorMeta& self, DType dtype, Device device,
                        bool requiresGrad);

// A new contiguous tensor of these sizes.
TensorMeta fresh(const OpCall& call, DType dtype, Shape sizes, Device device, bool requiresGrad);

} // namespace kiln::ir::detail
