// Reading relations as facts about one symbol: bounds, single values, replacements.
#pragma once

#include <cstdint>
#include <optional>

#include "kiln/sym/expr.h"
#include "kiln/sym/range.h"

namespace kiln::shapes::detail {

// A relation `a OP b` as `d OP' 0` with d = a - b: Le (d <= 0; a < b is d + 1 <= 0),
// Eq, Ne. nullopt for anything else, or when a - b overflows.
struct Relation {
  sym::Kind kind;
  sym::Expr difference;
};
std::optional<Relation> relationOf(sym::Expr e);

// `d` as coeff*symbol + constant (coeff != 0), when it has that form.
struct Affine {
  sym::Expr symbol;
  int64_t coeff = 1;
  int64_t constant = 0;
};
std::optional<Affine> affine(sym::Expr d);

// What a relation over one symbol says of it, as a range: `2*s0 + 1 <= 9` is
// s0 in [-inf, 4]; `s0 == 3` is [3, 3]. An empty range (lo > hi) when the
// relation holds for no value. nullopt for `!=` and other shapes.
struct Bound {
  sym::Expr symbol;
  sym::Range range;
};
std::optional<Bound> boundOf(sym::Expr relation);

// `d == 0` solved for a symbol of coefficient +-1 that occurs once: symbol = expr,
// expr free of it. Unbacked symbols are picked first (they become expressions of
// sizes), then the last one in canonical order (s1 := s0, as PyTorch replaces the
// newer of two symbols). nullopt if no symbol qualifies.
struct Solved {
  sym::Expr symbol;
  sym::Expr expr;
};
// TODO(issue 9): `2*s0 == 3*s1` and divisibility (`s0 % 8 == 0`) could become
// replacements by a fresh symbol (s0 := 3*t, s1 := 2*t; s0 := 8*t), as PyTorch does;
// they stay guards for now.
std::optional<Solved> solveEquality(sym::Expr d);

// `x % k == r` (k > 0 constant) as a fact about x: x = k*q + r.
struct Congruence {
  sym::Expr symbol;
  int64_t modulus = 1;
  int64_t remainder = 0;
};
std::optional<Congruence> congruenceOf(sym::Expr relation);

// The range `r` narrowed at both ends to values congruent to c.remainder.
sym::Range tighten(sym::Range r, const Congruence& c);

} // namespace kiln::shapes::detail
