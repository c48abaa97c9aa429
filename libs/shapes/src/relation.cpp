#include "relation.h"

#include <algorithm>

#include "kiln/common/error.h"
#include "kiln/sym/eval.h"
#include "kiln/sym/symbol_table.h"

namespace kiln::shapes::detail {

namespace {

int64_t floorDiv(__int128 a, __int128 b) { // b > 0
  __int128 q = a / b;
  if (q * b > a) --q;
  return q > sym::kInf ? sym::kInf : q < sym::kNegInf ? sym::kNegInf : static_cast<int64_t>(q);
}

int64_t ceilDiv(__int128 a, __int128 b) { // b > 0
  __int128 q = a / b;
  if (q * b < a) ++q;
  return q > sym::kInf ? sym::kInf : q < sym::kNegInf ? sym::kNegInf : static_cast<int64_t>(q);
}

bool mentions(sym::Expr e, sym::Expr symbol) {
  for (sym::Expr s : sym::freeSymbols(e))
    if (s == symbol) return true;
  return false;
}

} // namespace

std::optional<Relation> relationOf(sym::Expr e) {
  const sym::Kind kind = e.kind();
  if (kind != sym::Kind::Eq && kind != sym::Kind::Ne && kind != sym::Kind::Le &&
      kind != sym::Kind::Lt)
    return std::nullopt;
  try {
    sym::Expr d = e.terms()[0].expr - e.terms()[1].expr;
    if (kind == sym::Kind::Lt) return Relation{sym::Kind::Le, d + 1};
    return Relation{kind, d};
  } catch (const Error&) { // the difference overflows int64: not a fact we read
    return std::nullopt;
  }
}

std::optional<Affine> affine(sym::Expr d) {
  if (d.kind() == sym::Kind::Symbol) return Affine{d, 1, 0};
  if (d.kind() != sym::Kind::Sum || d.terms().size() != 1) return std::nullopt;
  const sym::Term& t = d.terms()[0];
  if (t.expr.kind() != sym::Kind::Symbol) return std::nullopt;
  return Affine{t.expr, t.coeff, d.constant()};
}

std::optional<Bound> boundOf(sym::Expr relation) {
  auto r = relationOf(relation);
  if (!r || r->kind == sym::Kind::Ne) return std::nullopt;
  auto a = affine(r->difference);
  if (!a) return std::nullopt;
  // c*x + k OP 0, i.e. c*x OP -k.
  const __int128 c = a->coeff, minusK = -static_cast<__int128>(a->constant);
  if (r->kind == sym::Kind::Eq) {
    if (minusK % c != 0) return Bound{a->symbol, {1, 0}}; // no integer solution
    const int64_t v = floorDiv(c > 0 ? minusK : -minusK, c > 0 ? c : -c);
    return Bound{a->symbol, sym::Range::point(v)};
  }
  if (c > 0) return Bound{a->symbol, {sym::kNegInf, floorDiv(minusK, c)}}; // x <= -k/c
  return Bound{a->symbol, {ceilDiv(-minusK, -c), sym::kInf}};              // x >= k/|c|
}

std::optional<Solved> solveEquality(sym::Expr d) {
  if (d.kind() == sym::Kind::Symbol) return Solved{d, d.table().integer(0)};
  if (d.kind() != sym::Kind::Sum) return std::nullopt;
  std::optional<Solved> best;
  auto better = [&](sym::Expr candidate) {
    if (!best) return true;
    const bool unbacked = !d.table().isBacked(candidate),
               bestUnbacked = !d.table().isBacked(best->symbol);
    if (unbacked != bestUnbacked) return unbacked;
    return sym::compare(candidate, best->symbol) > 0;
  };
  for (const sym::Term& t : d.terms()) {
    if (t.expr.kind() != sym::Kind::Symbol || (t.coeff != 1 && t.coeff != -1)) continue;
    sym::Expr rest = d - t.expr * t.coeff;
    if (mentions(rest, t.expr) || !better(t.expr)) continue;
    best = Solved{t.expr, t.coeff == 1 ? -rest : rest}; // x + rest == 0 or -x + rest == 0
  }
  return best;
}

std::optional<Congruence> congruenceOf(sym::Expr relation) {
  auto r = relationOf(relation);
  if (!r || r->kind != sym::Kind::Eq) return std::nullopt;
  // d = (x % k) + c, or x % k alone: x % k == -c.
  sym::Expr d = r->difference;
  sym::Expr m = d;
  int64_t c = 0;
  if (d.kind() == sym::Kind::Sum) {
    if (d.terms().size() != 1 || d.terms()[0].coeff != 1) return std::nullopt;
    m = d.terms()[0].expr;
    c = d.constant();
  }
  if (m.kind() != sym::Kind::Mod || m.terms()[0].expr.kind() != sym::Kind::Symbol)
    return std::nullopt;
  auto k = m.terms()[1].expr.asInteger();
  if (!k || *k <= 0 || -c < 0 || -c >= *k) return std::nullopt;
  return Congruence{m.terms()[0].expr, *k, -c};
}

sym::Range tighten(sym::Range r, const Congruence& c) {
  auto up = [&](int64_t v) -> int64_t { // the least value >= v congruent to the remainder
    const __int128 q = ceilDiv(static_cast<__int128>(v) - c.remainder, c.modulus);
    const __int128 out = q * c.modulus + c.remainder;
    return out > sym::kInf ? sym::kInf : static_cast<int64_t>(out);
  };
  auto down = [&](int64_t v) -> int64_t {
    const __int128 q = floorDiv(static_cast<__int128>(v) - c.remainder, c.modulus);
    const __int128 out = q * c.modulus + c.remainder;
    return out < sym::kNegInf ? sym::kNegInf : static_cast<int64_t>(out);
  };
  if (r.lo != sym::kNegInf) r.lo = up(r.lo);
  if (r.hi != sym::kInf) r.hi = down(r.hi);
  return r;
}

} // namespace kiln::shapes::detail
