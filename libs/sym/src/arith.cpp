// Integer builders: + - * over polynomials, and the floor-div, mod, min and max
// rules (see docs/sym.md for the list).
#include <algorithm>

#include "kiln/sym/expr.h"
#include "poly.h"

namespace kiln::sym {
namespace detail {
namespace {

Expr scale(Table& t, const Node* a, int64_t c) {
  if (c == 0) return t.integer(0);
  if (c == 1) return Expr(a);
  Poly p = polyOf(a);
  p.constant = checkedMul(p.constant, c);
  for (Term& term : p.terms) term.coeff = checkedMul(term.coeff, c);
  return build(t, p);
}

Expr addConstant(Table& t, const Node* a, int64_t c) {
  Poly p = polyOf(a);
  p.constant = checkedAdd(p.constant, c);
  return build(t, p);
}

Expr plus(Table& t, const Poly& q, Expr rest) {
  return add(t, build(t, q).node(), rest.node(), 1);
}

// The quotient of monomial m by monomial d, when d divides m: nullopt if it
// does not; nullptr for a quotient of 1.
std::optional<const Node*> divideMonomial(Table& t, const Node* m, const Node* d) {
  if (m == d) return nullptr;
  if (m->kind != Kind::Product) return std::nullopt;
  const Term single{Expr(d), 1};
  const Term* df = d->kind == Kind::Product ? d->terms() : &single;
  const uint32_t dn = d->kind == Kind::Product ? d->size : 1;
  TermVec out;
  int64_t degree = 0;
  uint32_t j = 0;
  for (const Term& f : Terms(m->terms(), m->size)) {
    int64_t e = f.coeff;
    if (j < dn && df[j].expr == f.expr) e -= df[j++].coeff;
    if (e < 0) return std::nullopt;
    if (e > 0) out.push_back({f.expr, e});
    degree += e;
  }
  if (j < dn) return std::nullopt; // a factor of d is missing from m
  if (out.empty()) return nullptr;
  if (out.size() == 1 && out[0].coeff == 1) return out[0].expr.node();
  return t.intern(Kind::Product, degree, out.data(), static_cast<uint32_t>(out.size()));
}

// Moves the terms of p that c*d divides (the monomial d divides the term's
// monomial and c its coefficient) into the quotient q: p == c*d*q + r.
void splitDivisible(Table& t, const Poly& p, int64_t c, const Node* d, Poly& q, Poly& r) {
  r.constant = p.constant;
  for (const Term& term : p.terms) {
    const auto quotient =
        term.coeff % c == 0 ? divideMonomial(t, term.expr.node(), d) : std::nullopt;
    if (!quotient)
      r.terms.push_back(term);
    else if (!*quotient)
      q.constant = checkedAdd(q.constant, term.coeff / c);
    else
      q.terms.push_back({Expr(*quotient), term.coeff / c});
  }
  normalize(q.terms);
}

int64_t gcdOf(const Poly& p, int64_t k) {
  int64_t g = gcd(k, p.constant);
  for (const Term& term : p.terms) g = gcd(g, term.coeff);
  return g;
}

void divideBy(Poly& p, int64_t g) {
  p.constant /= g;
  for (Term& term : p.terms) term.coeff /= g;
}

bool isConstantDivisor(const Node* n, int64_t& c) {
  if (n->kind != Kind::Integer || n->value <= 0) return false;
  c = n->value;
  return true;
}

// The only atom of p when p is exactly that atom (coefficient 1, no constant).
const Node* loneAtom(const Poly& p, Kind kind) {
  if (p.constant != 0 || p.terms.size() != 1 || p.terms[0].coeff != 1) return nullptr;
  const Node* n = p.terms[0].expr.node();
  return n->kind == kind ? n : nullptr;
}

Expr floorDivPositive(Table& t, const Node* a, int64_t k);

// r // k for 0 <= r.constant < k and no coefficient of r divisible by k.
Expr floorDivRemainder(Table& t, Poly r, int64_t k) {
  if (r.terms.empty()) return t.integer(0);
  if (const int64_t g = gcdOf(r, k); g > 1) { // (g*x) // (g*k) == x // k
    divideBy(r, g);
    k /= g;
  }
  const Range range = rangeOfPoly(r);
  if (const int64_t q = floorDivide(range.lo, k); q == floorDivide(range.hi, k))
    return t.integer(q);
  if (const Node* inner = loneAtom(r, Kind::FloorDiv)) { // (x // c) // k == x // (c*k)
    int64_t c, ck;
    if (isConstantDivisor(inner->terms()[1].expr.node(), c) && !__builtin_mul_overflow(c, k, &ck))
      return floorDivPositive(t, inner->terms()[0].expr.node(), ck);
  }
  const Term args[2] = {{build(t, r), 1}, {t.integer(k), 1}};
  return Expr(t.intern(Kind::FloorDiv, 0, args, 2));
}

Expr floorDivPositive(Table& t, const Node* a, int64_t k) {
  if (k == 1) return Expr(a);
  const Range range = rangeOfNode(a);
  if (const int64_t q = floorDivide(range.lo, k); q == floorDivide(range.hi, k))
    return t.integer(q);
  const Poly p = polyOf(a); // (k*q + r) // k == q + r // k, with 0 <= r.constant < k
  Poly q, r;
  q.constant = floorDivide(p.constant, k);
  r.constant = floorMod(p.constant, k);
  for (const Term& term : p.terms) {
    if (term.coeff % k == 0)
      q.terms.push_back({term.expr, term.coeff / k});
    else
      r.terms.push_back(term);
  }
  return plus(t, q, floorDivRemainder(t, std::move(r), k));
}

// Whether 0 <= r < b for every binding: then r // b == 0 and r % b == r.
bool knownRemainder(const Poly& r, const Poly& b) {
  try {
    return rangeOfPoly(r).lo >= 0 && rangeOfPoly(combine(b, r, -1)).lo >= 1;
  } catch (const Error&) { // b - r overflows: say nothing
    return false;
  }
}

// The factors of monomial m that every term of p has too, each to the lowest
// exponent among them; nullptr when there are none.
const Node* commonFactor(Table& t, const Node* m, const Poly& p) {
  const Term single{Expr(m), 1};
  TermVec common;
  if (m->kind == Kind::Product)
    common.assign(m->terms(), m->end());
  else
    common.push_back(single);
  for (const Term& term : p.terms) {
    const Node* n = term.expr.node();
    const Term own{Expr(n), 1};
    const Term* first = n->kind == Kind::Product ? n->terms() : &own;
    const Term* last = n->kind == Kind::Product ? n->end() : &own + 1;
    for (Term& f : common) {
      const Term* hit = std::find_if(first, last, [&](const Term& g) { return g.expr == f.expr; });
      f.coeff = hit == last ? 0 : std::min(f.coeff, hit->coeff);
    }
    common.erase(
        std::remove_if(common.begin(), common.end(), [](const Term& f) { return f.coeff == 0; }),
        common.end());
    if (common.empty()) return nullptr;
  }
  if (common.size() == 1 && common[0].coeff == 1) return common[0].expr.node();
  int64_t degree = 0;
  for (const Term& f : common) degree += f.coeff;
  return t.intern(Kind::Product, degree, common.data(), static_cast<uint32_t>(common.size()));
}

// p divided by the monomial d, which divides every term (see commonFactor).
void divideByMonomial(Table& t, Poly& p, const Node* d) {
  TermVec terms;
  for (const Term& term : p.terms) {
    if (const Node* quotient = *divideMonomial(t, term.expr.node(), d))
      terms.push_back({Expr(quotient), term.coeff});
    else
      p.constant = checkedAdd(p.constant, term.coeff); // the term was d itself
  }
  normalize(terms);
  p.terms = std::move(terms);
}

// A dividend r and divisor b with their common factor g = k*m (a positive
// integer times a monomial) divided out. Over the reals r/b == (r/g)/(b/g), so
// r // b == (r/g) // (b/g) and r % b == g * ((r/g) % (b/g)) for any g != 0,
// which holds wherever b != 0.
struct Reduced {
  Poly r, b;
  int64_t k = 1;
  const Node* m = nullptr;
};

Reduced cancelCommonFactor(Table& t, Poly r, Poly b) {
  Reduced out;
  out.k = gcd(gcdOf(r, 0), gcdOf(b, 0));
  if (out.k > 1) {
    divideBy(r, out.k);
    divideBy(b, out.k);
  }
  if (r.constant == 0 && b.constant == 0 && !r.terms.empty()) {
    out.m = commonFactor(t, b.terms[0].expr.node(), b);
    if (out.m) out.m = commonFactor(t, out.m, r);
    if (out.m) {
      divideByMonomial(t, r, out.m);
      divideByMonomial(t, b, out.m);
    }
  }
  out.r = std::move(r);
  out.b = std::move(b);
  return out;
}

// The divisor's only monomial when it is c*m: nullptr for a sum of several.
const Node* monomialOf(const Poly& b) {
  return b.constant == 0 && b.terms.size() == 1 ? b.terms[0].expr.node() : nullptr;
}

Expr floorDivNodes(Table& t, const Node* a, const Node* b);
Expr modNodes(Table& t, const Node* a, const Node* b);

// r // b for a symbolic b (leading coefficient > 0) that divides no term of r.
Expr floorDivSymbolic(Table& t, const Poly& r, const Poly& b) {
  if (r.terms.empty() && r.constant == 0) return t.integer(0);
  const Reduced red = cancelCommonFactor(t, r, b);
  if (red.b.terms.empty()) return floorDivNodes(t, build(t, red.r).node(), build(t, red.b).node());
  if (knownRemainder(red.r, red.b)) return t.integer(0);
  const Term args[2] = {{build(t, red.r), 1}, {build(t, red.b), 1}};
  return Expr(t.intern(Kind::FloorDiv, 0, args, 2));
}

// r % b as floorDivSymbolic, times the common factor it cancelled.
Expr modSymbolic(Table& t, const Poly& r, const Poly& b) {
  if (r.terms.empty() && r.constant == 0) return t.integer(0);
  const Reduced red = cancelCommonFactor(t, r, b);
  Expr rest;
  if (red.b.terms.empty())
    rest = modNodes(t, build(t, red.r).node(), build(t, red.b).node());
  else if (knownRemainder(red.r, red.b))
    rest = build(t, red.r);
  else {
    const Term args[2] = {{build(t, red.r), 1}, {build(t, red.b), 1}};
    rest = Expr(t.intern(Kind::Mod, 0, args, 2));
  }
  if (red.m) rest = multiply(t, red.m, rest.node());
  return scale(t, rest.node(), red.k);
}

Expr floorDivNodes(Table& t, const Node* a, const Node* b) {
  if (b->kind == Kind::Integer) {
    const int64_t k = b->value;
    if (k == 0) throw Error(ErrorCode::InvalidArgument, "division by zero");
    if (a->kind == Kind::Integer) return t.integer(floorDivide(a->value, k));
    if (k < 0)
      return floorDivPositive(t, scale(t, a, -1).node(), checkedNeg(k)); // a//k == (-a)//(-k)
    return floorDivPositive(t, a, k);
  }
  // A symbolic divisor: wherever the quotient is defined, b != 0.
  if (a == b) return t.integer(1);
  const Poly pb = polyOf(b);
  if (pb.terms[0].coeff < 0) // a // b == (-a) // (-b): one sign for the divisor
    return floorDivNodes(t, scale(t, a, -1).node(), scale(t, b, -1).node());
  Poly q, r;
  if (const Node* m = monomialOf(pb))
    splitDivisible(t, polyOf(a), pb.terms[0].coeff, m, q, r); // (q*b + r) // b == q + r // b
  else
    r = polyOf(a);
  return plus(t, q, floorDivSymbolic(t, r, pb));
}

Expr modPositive(Table& t, const Node* a, int64_t k);

// r % k for a polynomial r reduced mod k (see modPositive).
Expr modReduced(Table& t, Poly r, int64_t k) {
  if (r.terms.empty()) return t.integer(r.constant);
  if (const int64_t g = gcdOf(r, k); g > 1) { // (g*x) % (g*k) == g * (x % k)
    divideBy(r, g);
    return scale(t, modReduced(t, std::move(r), k / g).node(), g);
  }
  const Range range = rangeOfPoly(r);
  const int64_t q = floorDivide(range.lo, k);
  if (range.lo != kNegInf && range.hi != kInf && q == floorDivide(range.hi, k))
    return addConstant(t, build(t, r).node(), checkedMul(-q, k));
  if (const Node* inner = loneAtom(r, Kind::Mod)) { // (x % (m*k)) % k == x % k
    int64_t c;
    if (isConstantDivisor(inner->terms()[1].expr.node(), c) && c % k == 0)
      return modPositive(t, inner->terms()[0].expr.node(), k);
  }
  const Term args[2] = {{build(t, r), 1}, {t.integer(k), 1}};
  return Expr(t.intern(Kind::Mod, 0, args, 2));
}

Expr modPositive(Table& t, const Node* a, int64_t k) {
  if (k == 1) return t.integer(0);
  const Range range = rangeOfNode(a);
  const int64_t q = floorDivide(range.lo, k);
  if (range.lo != kNegInf && range.hi != kInf && q == floorDivide(range.hi, k))
    return addConstant(t, a, checkedMul(-q, k)); // a lies in [q*k, q*k + k)
  // (k*x + r) % k == r % k: the constant reduced into [0, k), every coefficient
  // into (-k/2, k/2] (one representative per class, the smallest in magnitude).
  const Poly p = polyOf(a);
  Poly r;
  r.constant = floorMod(p.constant, k);
  for (const Term& term : p.terms) {
    int64_t c = floorMod(term.coeff, k);
    if (c > k / 2) c -= k;
    if (c != 0) r.terms.push_back({term.expr, c});
  }
  return modReduced(t, std::move(r), k);
}

Expr modNodes(Table& t, const Node* a, const Node* b) {
  if (b->kind == Kind::Integer) {
    const int64_t k = b->value;
    if (k == 0) throw Error(ErrorCode::InvalidArgument, "modulo by zero");
    if (a->kind == Kind::Integer) return t.integer(floorMod(a->value, k));
    if (k < 0) // a % k == -((-a) % (-k))
      return scale(t, modPositive(t, scale(t, a, -1).node(), checkedNeg(k)).node(), -1);
    return modPositive(t, a, k);
  }
  if (a == b) return t.integer(0);
  const Poly pb = polyOf(b);
  if (pb.terms[0].coeff < 0) // a % b == -((-a) % (-b))
    return scale(t, modNodes(t, scale(t, a, -1).node(), scale(t, b, -1).node()).node(), -1);
  Poly q, r;
  if (const Node* m = monomialOf(pb))
    splitDivisible(t, polyOf(a), pb.terms[0].coeff, m, q, r); // (q*b + r) % b == r % b
  else
    r = polyOf(a);
  return modSymbolic(t, r, pb);
}

// Whether x <= y for every binding in the ranges.
bool knownLessEqual(const Node* x, const Node* y) {
  try {
    return rangeOfPoly(combine(polyOf(y), polyOf(x), -1)).lo >= 0;
  } catch (const Error&) {
    return false;
  }
}

Expr minMax(Table& t, Kind kind, const Node* a, const Node* b) {
  const bool isMin = kind == Kind::Min;
  TermVec args;
  std::optional<int64_t> constant;
  for (const Node* n : {a, b}) {
    const Term single{Expr(n), 1};
    const Term* first = n->kind == kind ? n->terms() : &single;
    const uint32_t count = n->kind == kind ? n->size : 1;
    for (uint32_t i = 0; i < count; ++i) {
      const Node* arg = first[i].expr.node();
      if (arg->kind == Kind::Integer)
        constant = !constant ? arg->value
                   : isMin   ? std::min(*constant, arg->value)
                             : std::max(*constant, arg->value);
      else
        args.push_back({Expr(arg), 1});
    }
  }
  if (constant) args.push_back({t.integer(*constant), 1});
  std::sort(args.begin(), args.end(), [](const Term& x, const Term& y) {
    return compareNodes(x.expr.node(), y.expr.node()) < 0;
  });
  args.erase(std::unique(args.begin(), args.end(),
                         [](const Term& x, const Term& y) { return x.expr == y.expr; }),
             args.end());
  // Drop every argument that another one decides: for min, x when y <= x is known.
  TermVec kept;
  for (const Term& x : args) {
    auto decides = [&](const Node* winner, const Node* loser) {
      return isMin ? knownLessEqual(winner, loser) : knownLessEqual(loser, winner);
    };
    if (std::any_of(kept.begin(), kept.end(),
                    [&](const Term& y) { return decides(y.expr.node(), x.expr.node()); }))
      continue;
    kept.erase(std::remove_if(kept.begin(), kept.end(),
                              [&](const Term& y) { return decides(x.expr.node(), y.expr.node()); }),
               kept.end());
    kept.push_back(x);
  }
  if (kept.size() == 1) return kept[0].expr;
  return Expr(t.intern(kind, 0, kept.data(), static_cast<uint32_t>(kept.size())));
}

} // namespace
} // namespace detail

using namespace detail;

Expr operator+(Expr a, Expr b) {
  Table& t = commonTable(a, b);
  return add(t, requireInt(a, "+"), requireInt(b, "+"), 1);
}
Expr operator+(Expr a, int64_t b) {
  return addConstant(tableOf(a), requireInt(a, "+"), b);
}
Expr operator+(int64_t a, Expr b) {
  return b + a;
}

Expr operator-(Expr a, Expr b) {
  Table& t = commonTable(a, b);
  return add(t, requireInt(a, "-"), requireInt(b, "-"), -1);
}
Expr operator-(Expr a, int64_t b) {
  return addConstant(tableOf(a), requireInt(a, "-"), checkedNeg(b));
}
Expr operator-(int64_t a, Expr b) {
  return addConstant(tableOf(b), scale(tableOf(b), requireInt(b, "-"), -1).node(), a);
}
Expr operator-(Expr a) {
  return scale(tableOf(a), requireInt(a, "-"), -1);
}

Expr operator*(Expr a, Expr b) {
  Table& t = commonTable(a, b);
  return multiply(t, requireInt(a, "*"), requireInt(b, "*"));
}
Expr operator*(Expr a, int64_t b) {
  return scale(tableOf(a), requireInt(a, "*"), b);
}
Expr operator*(int64_t a, Expr b) {
  return b * a;
}

Expr floorDiv(Expr a, Expr b) {
  Table& t = commonTable(a, b);
  return floorDivNodes(t, requireInt(a, "//"), requireInt(b, "//"));
}
Expr floorDiv(Expr a, int64_t b) {
  return floorDiv(a, tableOf(a).integer(b));
}

Expr mod(Expr a, Expr b) {
  Table& t = commonTable(a, b);
  return modNodes(t, requireInt(a, "%"), requireInt(b, "%"));
}
Expr mod(Expr a, int64_t b) {
  return mod(a, tableOf(a).integer(b));
}

Expr min(Expr a, Expr b) {
  Table& t = commonTable(a, b);
  return minMax(t, Kind::Min, requireInt(a, "min"), requireInt(b, "min"));
}
Expr min(Expr a, int64_t b) {
  return min(a, tableOf(a).integer(b));
}

Expr max(Expr a, Expr b) {
  Table& t = commonTable(a, b);
  return minMax(t, Kind::Max, requireInt(a, "max"), requireInt(b, "max"));
}
Expr max(Expr a, int64_t b) {
  return max(a, tableOf(a).integer(b));
}

} // namespace kiln::sym
