// Value ranges: the closed interval [lo, hi] a symbol or an expression lies in.
// Bounds are int64; kNegInf and kInf (INT64_MIN, INT64_MAX) stand for an
// unbounded end, which loses nothing since no int64 value lies beyond them.
//
// range(e) is sound: for every binding of the symbols inside their ranges for
// which evaluate(e) succeeds, the value lies in range(e). It is conservative
// where the interval arithmetic cannot do better (e.g. s0 - s0 is folded to 0
// before any range is taken, but min(s0, s1) - s0 is [-inf, 0] only because
// the range of s0 is [0, inf)).
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include "kiln/sym/expr.h"

namespace kiln::sym {

constexpr int64_t kNegInf = std::numeric_limits<int64_t>::min();
constexpr int64_t kInf = std::numeric_limits<int64_t>::max();

struct Range {
  int64_t lo = kNegInf;
  int64_t hi = kInf;

  static constexpr Range unbounded() { return {kNegInf, kInf}; }
  static constexpr Range size() { return {0, kInf}; } // the default for input sizes
  static constexpr Range point(int64_t v) { return {v, v}; }

  bool contains(int64_t v) const { return lo <= v && v <= hi; }
  bool contains(Range r) const { return lo <= r.lo && r.hi <= hi; }
  std::optional<int64_t> value() const { // the only value of a one-point range
    return lo == hi ? std::optional<int64_t>(lo) : std::nullopt;
  }
  friend bool operator==(Range a, Range b) { return a.lo == b.lo && a.hi == b.hi; }
  friend bool operator!=(Range a, Range b) { return !(a == b); }
};

std::string toString(Range r); // "[0, inf]", "[-inf, 7]", "[3, 3]"

// The range of an integer expression from its symbols' current ranges. For a
// boolean expression, [0, 1] narrowed by staticallyKnown.
Range range(Expr e);

// Whether a boolean expression is true or false for every binding inside the
// current ranges (nullopt: not known). Records nothing; adds no guard.
std::optional<bool> staticallyKnown(Expr e);

// The value of an integer expression where it is a constant, or becomes one under the
// facts that pin symbols to values (`s1 == 5`); nullopt otherwise.
std::optional<int64_t> knownValue(Expr e);

} // namespace kiln::sym
