// Internal to libs/runtime: the steps of a plan that bind unbacked symbols or
// check runtime asserts (the IR's item, nonzero and _assert_scalar), on host
// memory. A device executor brings its tensors to the host for them: their
// results decide sizes, which the host needs anyway.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/runtime/plan.h"
#include "kiln/runtime/runtime.h"

namespace kiln::runtime::detail {

// Whether the step is an _assert_scalar (bindsSymbol, plan.h, tells the others).
bool isAssert(const Step& step);

// The unbacked symbol a binding step binds: its `symbol` attribute.
// Error{Malformed} when it has none.
sym::Expr boundSymbol(const Step& step);

// An unbacked symbol's value checked against its range: Error{InvalidArgument}
// "runtime assert failed: u0 = 5 lies outside [6, 6] (...)".
void checkRange(sym::Expr symbol, int64_t value, const std::string& op);

// An _assert_scalar step checked against the binding: Error{InvalidArgument}
// with sym::assertFailure's text when its condition is false.
void checkAssert(const Step& step, const sym::Binding& binding);

// Element 0 of an integer or bool tensor in host memory, as int64.
int64_t readInt(const Tensor& t);
// The number of non-zero elements of a strided host tensor (NaN counts).
int64_t countNonzero(const Tensor& t);
// Their indices, row-major, into `out` (i64 [count, rank], contiguous rows).
void fillNonzero(const Tensor& t, const Tensor& out);

} // namespace kiln::runtime::detail
