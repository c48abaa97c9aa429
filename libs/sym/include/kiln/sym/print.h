// Printing expressions: human text for logs and `explain`, and C++ for
// generated code.
#pragma once

#include <ostream>
#include <string>
#include <unordered_map>

#include "kiln/sym/expr.h"

namespace kiln::sym {

// Deterministic human text: "s0*s1 + 2*s0 - 3", "s0^2", "(s0 + 1)//2",
// "s0 % 8", "min(s0, s1)", "s0 < s1 + 2", "s0 == 4 && s1 != 0", "!(...)".
std::string toString(Expr e);
std::ostream& operator<<(std::ostream& out, Expr e);

// A failed runtime assert for its error: "runtime assert failed: <condition>
// (<message>) with u0 = 5, s0 = 3" (the bound symbols it mentions).
std::string assertFailure(Expr condition, const std::string& message,
                          const std::unordered_map<Expr, int64_t>& binding);
// A value a data-dependent op (`op`) gave outside its symbol's range, for its
// error: "runtime assert failed: u0 = 5 lies outside [0, 4] (...)".
std::string rangeFailure(Expr symbol, int64_t value, const std::string& op);

// A C++ expression of type int64_t (bool for boolean expressions) over int64_t
// variables named as the symbols. // and % go through the prelude's helpers,
// which keep Python's floor semantics for negative operands, except where the
// ranges show that the dividend is non-negative and the divisor a positive
// constant (then plain / and %). int64 overflow in the generated code is the
// caller's responsibility, as in any int64_t arithmetic.
std::string toCpp(Expr e);

// The helpers toCpp's output calls (kiln_floordiv, kiln_mod, kiln_min,
// kiln_max) as static inline int64_t functions; valid C, C++ and CUDA (where
// they are __host__ __device__), guarded against a second inclusion.
const std::string& cppPrelude();

} // namespace kiln::sym
