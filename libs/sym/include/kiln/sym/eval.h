// Evaluating, substituting and inspecting expressions.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "kiln/sym/expr.h"

namespace kiln::sym {

using Binding = std::unordered_map<Expr, int64_t>;   // symbol -> value
using Substitution = std::unordered_map<Expr, Expr>; // symbol -> expression

// The value of `e` with its symbols bound (booleans as 0 or 1), computed in
// int64 with floor semantics for // and %. Error{InvalidArgument} naming an
// unbound symbol, on division by zero, and on int64 overflow.
int64_t evaluate(Expr e, const Binding& binding);

// The value with every symbol bound to its hint. Error{InvalidArgument} naming
// the first unbacked symbol met.
int64_t evaluateWithHints(Expr e);

// `e` with symbols replaced (the replacements must come from e's table), and
// re-canonicalised. Symbols not in the map stay.
Expr substitute(Expr e, const Substitution& replacements);

// The symbols `e` mentions, in canonical order (by name).
std::vector<Expr> freeSymbols(Expr e);

} // namespace kiln::sym
