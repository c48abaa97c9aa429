// Value-range propagation and the statically-known test.
//
// Bounds are int64 values; INT64_MIN/INT64_MAX print as -inf/inf and stay
// infinite through + and *, and results that overflow are rounded outwards.
// Both are sound: no int64 value lies beyond those bounds, and evaluate()
// fails instead of returning a value that overflowed.
#include <algorithm>
#include <functional>
#include <vector>

#include "kiln/sym/eval.h"
#include "kiln/sym/range.h"
#include "kiln/sym/symbol_table.h"
#include "poly.h"

namespace kiln::sym {
namespace detail {
namespace {

int64_t boundNeg(int64_t x) {
  return x == kInf ? kNegInf : x == kNegInf ? kInf : -x;
}

Range rangeNeg(Range r) {
  return {boundNeg(r.hi), boundNeg(r.lo)};
}

int64_t boundPow(int64_t base, int64_t exponent) {
  return powBySquaring(base, exponent, boundMul);
}

Range rangePow(Range r, int64_t exponent) {
  const int64_t a = boundPow(r.lo, exponent), b = boundPow(r.hi, exponent);
  if (exponent % 2 == 1) return {a, b};
  if (r.lo >= 0) return {a, b};
  if (r.hi <= 0) return {b, a};
  return {0, std::max(a, b)};
}

// a // b for b >= 1. Floor division is monotone in a, and in b towards zero,
// so the extremes lie at corners; the bounds are exact int64 values here.
Range floorDivPositive(Range a, Range b) {
  const int64_t lo = a.lo == kNegInf ? kNegInf
                     : a.lo >= 0     ? floorDivide(a.lo, b.hi)
                                     : floorDivide(a.lo, b.lo);
  const int64_t hi = a.hi == kInf ? kInf
                     : a.hi >= 0  ? floorDivide(a.hi, b.lo)
                                  : floorDivide(a.hi, b.hi);
  return {lo, hi};
}

int64_t magnitude(Range r) { // max |v|, saturated
  return std::max(boundNeg(std::min<int64_t>(r.lo, 0)), std::max<int64_t>(r.hi, 0));
}

Range floorDivRange(Range a, Range b) {
  if (b.lo >= 1) return floorDivPositive(a, b);
  if (b.hi <= -1) return floorDivPositive(rangeNeg(a), rangeNeg(b)); // a//b == (-a)//(-b)
  const int64_t m = magnitude(a); // |a // b| <= |a| for any b != 0
  return {boundNeg(m), m};
}

Range modRange(Range a, Range b) {
  if (b.lo >= 1) {
    if (a.lo >= 0 && a.hi < b.lo) return a;
    if (b.lo == b.hi) { // a constant divisor: a block of one quotient shifts
      const int64_t k = b.lo, q = floorDivide(a.lo, k);
      if (a.lo != kNegInf && a.hi != kInf && q == floorDivide(a.hi, k))
        return {a.lo - q * k, a.hi - q * k};
    }
    const int64_t below = b.hi == kInf ? kInf : b.hi - 1;
    return {0, a.lo >= 0 ? std::min(a.hi, below) : below};
  }
  if (b.hi <= -1) {
    if (a.hi <= 0 && a.lo > b.hi) return a;
    const int64_t above = b.lo == kNegInf ? kNegInf : b.lo + 1;
    return {a.hi <= 0 ? std::max(a.lo, above) : above, 0};
  }
  const int64_t m = magnitude(b); // |a % b| < |b|
  const int64_t bound = m == kInf ? kInf : m - 1;
  return {boundNeg(bound), bound};
}

std::optional<bool> knownNode(const Node* n);

std::optional<bool> knownRelation(const Node* n) {
  const Node* lhs = n->terms()[0].expr.node();
  const Node* rhs = n->terms()[1].expr.node();
  try {
    return decideFactored(n->kind, combine(polyOf(rhs), polyOf(lhs), -1));
  } catch (const Error&) { // the difference overflows int64: say nothing
    return std::nullopt;
  }
}

std::optional<bool> knownNode(const Node* n) {
  switch (n->kind) {
  case Kind::Boolean: return n->value != 0;
  case Kind::Eq:
  case Kind::Ne:
  case Kind::Lt:
  case Kind::Le: return knownRelation(n);
  case Kind::Not: {
    const auto inner = knownNode(n->terms()[0].expr.node());
    return inner ? std::optional<bool>(!*inner) : std::nullopt;
  }
  case Kind::And:
  case Kind::Or: {
    const bool isAnd = n->kind == Kind::And;
    bool allDecided = true;
    for (const Term& t : Terms(n->terms(), n->size)) {
      const auto v = knownNode(t.expr.node());
      if (v && *v != isAnd) return !isAnd; // a false conjunct, a true disjunct
      if (!v) allDecided = false;
    }
    return allDecided ? std::optional<bool>(isAnd) : std::nullopt;
  }
  default: throw Error(ErrorCode::InvalidArgument, "staticallyKnown expects a boolean expression");
  }
}

} // namespace

int64_t boundAdd(int64_t a, int64_t b, bool lower) {
  const int64_t sticky = lower ? kNegInf : kInf; // this end's infinity wins
  if (a == sticky || b == sticky) return sticky;
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) return a > 0 ? kInf : kNegInf;
  return r;
}

int64_t boundMul(int64_t a, int64_t b) {
  if (a == 0 || b == 0) return 0;
  const bool negative = (a < 0) != (b < 0);
  int64_t r;
  if (a == kInf || a == kNegInf || b == kInf || b == kNegInf || __builtin_mul_overflow(a, b, &r))
    return negative ? kNegInf : kInf;
  return r;
}

Range rangeScale(Range r, int64_t c) {
  if (c >= 0) return {boundMul(r.lo, c), boundMul(r.hi, c)};
  return {boundMul(r.hi, c), boundMul(r.lo, c)};
}

Range rangeAdd(Range a, Range b) {
  return {boundAdd(a.lo, b.lo, true), boundAdd(a.hi, b.hi, false)};
}

Range rangeMul(Range a, Range b) {
  const int64_t c[4] = {boundMul(a.lo, b.lo), boundMul(a.lo, b.hi), boundMul(a.hi, b.lo),
                        boundMul(a.hi, b.hi)};
  return {*std::min_element(c, c + 4), *std::max_element(c, c + 4)};
}

Range rangeOfPoly(const Poly& p) {
  Range r = Range::point(p.constant);
  for (const Term& t : p.terms) r = rangeAdd(r, rangeScale(rangeOfNode(t.expr.node()), t.coeff));
  return r;
}

namespace {

// The range of (p - its constant) / s, for a symbol s that divides every term
// of p: each term's range with one power of s taken out. nullopt where s does
// not divide every term.
std::optional<Range> rangeWithoutFactor(const Poly& p, const Node* s) {
  if (p.terms.empty()) return std::nullopt;
  Range r = Range::point(0);
  for (const Term& t : p.terms) {
    const Node* n = t.expr.node();
    Range rest = Range::point(1);
    if (n->kind == Kind::Product) {
      bool divides = false;
      for (const Term& f : Terms(n->terms(), n->size)) {
        int64_t power = f.coeff;
        if (!divides && f.expr.node() == s) divides = true, --power;
        if (power > 0) rest = rangeMul(rest, rangePow(rangeOfNode(f.expr.node()), power));
      }
      if (!divides) return std::nullopt;
    } else if (n != s) {
      return std::nullopt;
    }
    r = rangeAdd(r, rangeScale(rest, t.coeff));
  }
  return r;
}

} // namespace

namespace {

// d with the terms k * (a // c) (c a positive constant) that `pick` names replaced by the bound
// from (a - c + 1) / c <= a // c <= a / c that makes d least (`lower`) or greatest, all scaled
// by the divisors' product (`scale`) so the bounds stay integral: a window's end
// `2*((s + 1)//2) - 1` is then provably within `s + 1`.
Poly relaxedFloorDivs(const Poly& d, bool lower, const std::function<bool(size_t)>& pick,
                      int64_t& scale) {
  auto divisor = [&](size_t i) -> std::optional<int64_t> {
    const Node* n = d.terms[i].expr.node();
    if (n->kind != Kind::FloorDiv || !pick(i)) return std::nullopt;
    auto c = n->terms()[1].expr.asInteger();
    return c && *c > 0 ? c : std::nullopt;
  };
  scale = 1;
  for (size_t i = 0; i < d.terms.size(); ++i)
    if (auto c = divisor(i); c && scale % *c != 0) scale = checkedMul(scale, *c / gcd(scale, *c));
  Poly out;
  out.constant = checkedMul(d.constant, scale);
  for (size_t i = 0; i < d.terms.size(); ++i) {
    const Term& t = d.terms[i];
    auto c = divisor(i);
    if (!c) {
      Poly term;
      term.terms.push_back({t.expr, 1});
      out = combine(out, term, checkedMul(t.coeff, scale));
      continue;
    }
    int64_t k = checkedMul(t.coeff, scale / *c); // scaled: k * c * (a // c)
    Poly a = polyOf(t.expr.node()->terms()[0].expr.node());
    if ((k > 0) == lower) a.constant = checkedAdd(a.constant, 1 - *c);
    out = combine(out, a, k);
  }
  return out;
}

// decide() of d's range, then of the range factoring a common symbol out gives.
std::optional<bool> decideByRanges(Kind relation, const Poly& d) {
  if (auto known = decide(relation, rangeOfPoly(d))) return known;
  // A sum's range forgets that its terms share a factor (s*t - s over s, t >= 2
  // spans everything; s*(t - 1) does not): the terms' common symbol's range
  // times the range of what is left, plus the constant.
  if (d.terms.empty()) return std::nullopt;
  const Node* first = d.terms.front().expr.node();
  std::vector<const Node*> factors;
  if (first->kind == Kind::Symbol) factors.push_back(first);
  if (first->kind == Kind::Product)
    for (const Term& f : Terms(first->terms(), first->size))
      if (f.expr.node()->kind == Kind::Symbol) factors.push_back(f.expr.node());
  for (const Node* s : factors)
    if (auto rest = rangeWithoutFactor(d, s)) {
      Range factored = rangeAdd(rangeMul(rangeOfNode(s), *rest), Range::point(d.constant));
      if (auto known = decide(relation, factored)) return known;
    }
  return std::nullopt;
}

} // namespace

std::optional<bool> decideFactored(Kind relation, const Poly& d) {
  if (auto known = decideByRanges(relation, d)) return known;
  if (relation != Kind::Lt && relation != Kind::Le) return std::nullopt;
  // A lower bound of d that holds the relation proves it; an upper bound that fails it, its
  // negation. Each floor division relaxed alone (its numerator may cancel another term, itself
  // a floor division), then all of them.
  std::vector<size_t> divisions;
  for (size_t i = 0; i < d.terms.size(); ++i)
    if (d.terms[i].expr.node()->kind == Kind::FloorDiv) divisions.push_back(i);
  if (divisions.empty()) return std::nullopt;
  std::vector<std::function<bool(size_t)>> picks;
  for (size_t i : divisions) picks.push_back([i](size_t k) { return k == i; });
  if (divisions.size() > 1) picks.push_back([](size_t) { return true; });
  // d's bound from a bound of scale * d, rounded inwards (d is an integer).
  auto divided = [](int64_t bound, int64_t scale, bool lower) {
    if (bound == kInf || bound == kNegInf) return bound;
    return lower ? -floorDivide(-bound, scale) : floorDivide(bound, scale);
  };
  try {
    for (const auto& pick : picks) {
      int64_t scale = 1;
      int64_t least = rangeOfPoly(relaxedFloorDivs(d, true, pick, scale)).lo;
      if (decide(relation, Range{divided(least, scale, true), kInf}) == true) return true;
      int64_t most = rangeOfPoly(relaxedFloorDivs(d, false, pick, scale)).hi;
      if (decide(relation, Range{kNegInf, divided(most, scale, false)}) == false) return false;
    }
  } catch (const Error&) { // a bound overflows int64: say nothing
  }
  return std::nullopt;
}

namespace {

// The range of an inner integer node from its children's (cached) ranges.
Range computeRange(const Node* n) {
  const Term* args = n->terms();
  switch (n->kind) {
  case Kind::Sum: {
    Range r = Range::point(n->value);
    for (const Term& t : Terms(args, n->size))
      r = rangeAdd(r, rangeScale(rangeOfNode(t.expr.node()), t.coeff));
    return r;
  }
  case Kind::Product: {
    Range r = Range::point(1);
    for (const Term& t : Terms(args, n->size))
      r = rangeMul(r, rangePow(rangeOfNode(t.expr.node()), t.coeff));
    return r;
  }
  case Kind::FloorDiv:
    return floorDivRange(rangeOfNode(args[0].expr.node()), rangeOfNode(args[1].expr.node()));
  case Kind::Mod:
    return modRange(rangeOfNode(args[0].expr.node()), rangeOfNode(args[1].expr.node()));
  case Kind::Min:
  case Kind::Max: {
    Range r = rangeOfNode(args[0].expr.node());
    const bool isMin = n->kind == Kind::Min;
    for (uint32_t i = 1; i < n->size; ++i) {
      const Range a = rangeOfNode(args[i].expr.node());
      r = isMin ? Range{std::min(r.lo, a.lo), std::min(r.hi, a.hi)}
                : Range{std::max(r.lo, a.lo), std::max(r.hi, a.hi)};
    }
    return r;
  }
  default: throw Error(ErrorCode::Internal, "computeRange of a leaf or boolean node");
  }
}

} // namespace

// Inner integer nodes cache their range, stamped with the table's range stamp:
// a stamp equal to the current one means no symbol narrowed since. Threads
// may race on one node's cache; every value any of them stores is sound for
// the symbols' current ranges (narrowing only shrinks them), so a mix of two
// stores is sound too.
Range rangeOfNode(const Node* n) {
  switch (n->kind) {
  case Kind::Integer: return Range::point(n->value);
  case Kind::Symbol: return n->symbol->range();
  default: break;
  }
  if (isBoolKind(n->kind)) {
    const auto known = knownNode(n);
    return known ? Range::point(*known ? 1 : 0) : Range{0, 1};
  }
  const uint16_t stamp = n->table->rangeStamp();
  if (const auto cached = n->cachedRange(stamp)) return *cached;
  const Range r = computeRange(n);
  n->cacheRange(stamp, r);
  return r;
}

std::optional<bool> decide(Kind relation, Range d) { // d: the range of rhs - lhs
  switch (relation) {
  case Kind::Lt:
    if (d.lo > 0) return true;
    if (d.hi <= 0) return false;
    return std::nullopt;
  case Kind::Le:
    if (d.lo >= 0) return true;
    if (d.hi < 0) return false;
    return std::nullopt;
  case Kind::Eq:
  case Kind::Ne: {
    std::optional<bool> equal;
    if (d.lo == 0 && d.hi == 0)
      equal = true;
    else if (d.lo > 0 || d.hi < 0)
      equal = false;
    if (!equal) return std::nullopt;
    return relation == Kind::Eq ? *equal : !*equal;
  }
  default: return std::nullopt;
  }
}

} // namespace detail

std::string toString(Range r) {
  auto bound = [](int64_t v) {
    return v == kNegInf ? std::string("-inf") : v == kInf ? std::string("inf") : std::to_string(v);
  };
  return "[" + bound(r.lo) + ", " + bound(r.hi) + "]";
}

Range range(Expr e) {
  detail::tableOf(e);
  return detail::rangeOfNode(e.node());
}

namespace {

// Facts that pin a symbol to a value (`s1 == 5`: a guard a trace took where a static size met
// a symbolic one), as a substitution.
Substitution pinnedSymbols(SymbolTable& table) {
  Substitution pinned;
  for (Expr fact : table.facts()) {
    const detail::Node* n = fact.node();
    if (n->kind != Kind::Eq) continue;
    Expr a = n->terms()[0].expr, b = n->terms()[1].expr;
    if (a.node()->kind == Kind::Symbol && b.asInteger()) pinned[a] = b;
    if (b.node()->kind == Kind::Symbol && a.asInteger()) pinned[b] = a;
  }
  return pinned;
}

} // namespace

std::optional<int64_t> knownValue(Expr e) {
  if (auto v = e.asInteger()) return v;
  Substitution pinned = pinnedSymbols(e.table());
  if (pinned.empty()) return std::nullopt;
  return substitute(e, pinned).asInteger();
}

std::optional<bool> staticallyKnown(Expr e) {
  if (auto known = detail::knownNode(detail::requireBool(e, "staticallyKnown"))) return known;
  SymbolTable& table = e.table();
  if (table.isFact(e)) return true;
  if (table.isFact(logicalNot(e))) return false;
  // The question asked of the pinned symbols' values, as the graphs made from the trace (a
  // backward's views) must answer it too.
  Substitution pinned = pinnedSymbols(table);
  if (pinned.empty()) return std::nullopt;
  Expr substituted = substitute(e, pinned);
  if (substituted == e) return std::nullopt;
  if (auto b = substituted.asBoolean()) return b;
  return detail::knownNode(substituted.node());
}

} // namespace kiln::sym
