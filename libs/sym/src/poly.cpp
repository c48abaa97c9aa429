// The canonical polynomial form: the deterministic order of nodes and
// monomials, checked arithmetic, and sums and products of polynomials.
#include <algorithm>
#include <string>

#include "poly.h"

namespace kiln::sym::detail {
namespace {

[[noreturn]] void overflow(const char* op) {
  throw Error(ErrorCode::InvalidArgument, std::string("int64 overflow in ") + op);
}

int cmp(int64_t a, int64_t b) {
  return a < b ? -1 : a > b ? 1 : 0;
}

int64_t degree(const Node* monomial) {
  return monomial->kind == Kind::Product ? monomial->value : 1;
}

// A monomial's factors: a Product's own, or the atom to the first power.
struct Factors {
  const Term* begin;
  uint32_t size;
  Term single;
  explicit Factors(const Node* m) : begin(m->terms()), size(m->size), single{Expr(m), 1} {
    if (m->kind != Kind::Product) {
      begin = &single;
      size = 1;
    }
  }
  Factors(const Factors&) = delete;
};

} // namespace

int compareMonomials(const Node* a, const Node* b) {
  if (a == b) return 0;
  const int64_t da = degree(a), db = degree(b);
  if (da != db) return da > db ? -1 : 1;
  const Factors fa(a), fb(b);
  for (uint32_t i = 0; i < fa.size && i < fb.size; ++i) {
    if (int c = compareNodes(fa.begin[i].expr.node(), fb.begin[i].expr.node())) return c;
    if (int c = cmp(fb.begin[i].coeff, fa.begin[i].coeff)) return c; // higher power first
  }
  return cmp(fa.size, fb.size);
}

int compareNodes(const Node* a, const Node* b) {
  if (a == b) return 0;
  if (a->kind != b->kind) return a->kind < b->kind ? -1 : 1;
  switch (a->kind) {
  case Kind::Integer:
  case Kind::Boolean: return cmp(a->value, b->value);
  case Kind::Symbol: {
    const SymbolInfo &sa = *a->symbol, &sb = *b->symbol;
    if (int c = sa.prefix.compare(sb.prefix)) return c < 0 ? -1 : 1;
    if (sa.number != sb.number) return sa.number < sb.number ? -1 : 1;
    const int c = sa.name.compare(sb.name);
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  case Kind::Product: return compareMonomials(a, b);
  default: break;
  }
  const bool sum = a->kind == Kind::Sum;
  const Term *ta = a->terms(), *tb = b->terms();
  for (uint32_t i = 0; i < a->size && i < b->size; ++i) {
    const Node *x = ta[i].expr.node(), *y = tb[i].expr.node();
    if (int c = sum ? compareMonomials(x, y) : compareNodes(x, y)) return c;
    if (int c = cmp(tb[i].coeff, ta[i].coeff)) return c; // larger coefficient first
  }
  if (a->size != b->size) return a->size < b->size ? -1 : 1;
  return cmp(a->value, b->value);
}

int64_t checkedAdd(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) overflow("addition");
  return r;
}

int64_t checkedMul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) overflow("multiplication");
  return r;
}

int64_t checkedNeg(int64_t a) {
  if (a == kNegInf) overflow("negation");
  return -a;
}

int64_t floorDivide(int64_t a, int64_t b) {
  if (b == 0) throw Error(ErrorCode::InvalidArgument, "division by zero");
  if (b == -1) return checkedNeg(a);
  const int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

int64_t floorMod(int64_t a, int64_t b) {
  if (b == 0) throw Error(ErrorCode::InvalidArgument, "modulo by zero");
  if (b == -1) return 0;
  const int64_t r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

int64_t checkedPow(int64_t base, int64_t exponent) {
  return powBySquaring(base, exponent, checkedMul);
}

int64_t gcd(int64_t a, int64_t b) {
  uint64_t x = a < 0 ? 0 - static_cast<uint64_t>(a) : static_cast<uint64_t>(a);
  uint64_t y = b < 0 ? 0 - static_cast<uint64_t>(b) : static_cast<uint64_t>(b);
  while (y) {
    const uint64_t t = x % y;
    x = y;
    y = t;
  }
  return x > static_cast<uint64_t>(kInf) ? kInf : static_cast<int64_t>(x); // gcd(INT64_MIN, 0)
}

Poly polyOf(const Node* n) {
  Poly p;
  if (n->kind == Kind::Integer)
    p.constant = n->value;
  else if (n->kind == Kind::Sum) {
    p.constant = n->value;
    p.terms.assign(n->terms(), n->end());
  } else
    p.terms.push_back({Expr(n), 1});
  return p;
}

void normalize(TermVec& terms) {
  std::sort(terms.begin(), terms.end(), [](const Term& a, const Term& b) {
    return compareMonomials(a.expr.node(), b.expr.node()) < 0;
  });
  size_t out = 0;
  for (size_t i = 0; i < terms.size();) {
    Term t = terms[i++];
    while (i < terms.size() && terms[i].expr == t.expr)
      t.coeff = checkedAdd(t.coeff, terms[i++].coeff);
    if (t.coeff != 0) terms[out++] = t;
  }
  terms.resize(out);
}

Expr build(Table& table, int64_t constant, const TermVec& terms) {
  if (terms.empty()) return table.integer(constant);
  if (constant == 0 && terms.size() == 1 && terms[0].coeff == 1) return terms[0].expr;
  return Expr(table.intern(Kind::Sum, constant, terms.data(), static_cast<uint32_t>(terms.size())));
}

Poly combine(const Poly& a, const Poly& b, int64_t scale) {
  Poly r;
  r.constant = checkedAdd(a.constant, checkedMul(scale, b.constant));
  if (scale == 0) {
    r.terms = a.terms;
    return r;
  }
  size_t i = 0, j = 0;
  while (i < a.terms.size() || j < b.terms.size()) {
    int c = i == a.terms.size() ? 1
            : j == b.terms.size()
                ? -1
                : compareMonomials(a.terms[i].expr.node(), b.terms[j].expr.node());
    if (c < 0)
      r.terms.push_back(a.terms[i++]);
    else if (c > 0) {
      r.terms.push_back({b.terms[j].expr, checkedMul(scale, b.terms[j].coeff)});
      ++j;
    } else {
      const int64_t coeff = checkedAdd(a.terms[i].coeff, checkedMul(scale, b.terms[j].coeff));
      if (coeff != 0) r.terms.push_back({a.terms[i].expr, coeff});
      ++i, ++j;
    }
  }
  return r;
}

const Node* multiplyMonomials(Table& table, const Node* a, const Node* b) {
  const Factors fa(a), fb(b);
  TermVec out;
  int64_t degree = 0;
  uint32_t i = 0, j = 0;
  while (i < fa.size || j < fb.size) {
    int c = i == fa.size   ? 1
            : j == fb.size ? -1
                           : compareNodes(fa.begin[i].expr.node(), fb.begin[j].expr.node());
    if (c < 0)
      out.push_back(fa.begin[i++]);
    else if (c > 0)
      out.push_back(fb.begin[j++]);
    else {
      out.push_back({fa.begin[i].expr, checkedAdd(fa.begin[i].coeff, fb.begin[j].coeff)});
      ++i, ++j;
    }
    degree = checkedAdd(degree, out.back().coeff);
  }
  return table.intern(Kind::Product, degree, out.data(), static_cast<uint32_t>(out.size()));
}

namespace {

// The divisor of a FloorDiv or Mod node when it is a positive constant, else 0.
int64_t constantDivisor(const Node* n) {
  const Node* d = n->terms()[1].expr.node();
  return d->kind == Kind::Integer && d->value > 0 ? d->value : 0;
}

// k*c*(x // c) + k*(x % c) == k*x: index arithmetic that splits a flat index
// into [..., c] and joins the pieces again (a view of a reshaped view) becomes
// the index itself, so it stays affine (and costs no division).
void mergeDivisionsWithRemainders(Poly& p) {
  for (bool merged = true; merged;) {
    merged = false;
    for (size_t i = 0; i < p.terms.size() && !merged; ++i) {
      const Node* quotient = p.terms[i].expr.node();
      int64_t c = quotient->kind == Kind::FloorDiv ? constantDivisor(quotient) : 0;
      if (c == 0) continue;
      for (size_t j = 0; j < p.terms.size() && !merged; ++j) {
        const Node* remainder = p.terms[j].expr.node();
        int64_t k = p.terms[j].coeff, kc = 0;
        if (remainder->kind != Kind::Mod || constantDivisor(remainder) != c ||
            remainder->terms()[0].expr != quotient->terms()[0].expr ||
            __builtin_mul_overflow(k, c, &kc) || p.terms[i].coeff != kc)
          continue;
        Poly rest;
        rest.constant = p.constant;
        for (size_t l = 0; l < p.terms.size(); ++l)
          if (l != i && l != j) rest.terms.push_back(p.terms[l]);
        p = combine(rest, polyOf(quotient->terms()[0].expr.node()), k);
        merged = true;
      }
    }
  }
}

} // namespace

Expr add(Table& table, const Node* a, const Node* b, int64_t scale) {
  Poly sum = combine(polyOf(a), polyOf(b), scale);
  mergeDivisionsWithRemainders(sum);
  return build(table, sum);
}

Expr multiply(Table& table, const Node* a, const Node* b) {
  const Poly pa = polyOf(a), pb = polyOf(b);
  if (pa.terms.empty() || pb.terms.empty()) {
    const Poly& other = pa.terms.empty() ? pb : pa;
    const int64_t c = pa.terms.empty() ? pa.constant : pb.constant;
    if (c == 0) return table.integer(0);
    Poly r;
    r.constant = checkedMul(other.constant, c);
    for (const Term& t : other.terms) r.terms.push_back({t.expr, checkedMul(t.coeff, c)});
    return build(table, r);
  }
  if (pa.terms.size() * pb.terms.size() > kMaxTerms)
    throw Error(ErrorCode::TooLarge, "expanding a product of sums of " +
                                         std::to_string(pa.terms.size()) + " and " +
                                         std::to_string(pb.terms.size()) + " terms");
  TermVec out;
  for (const Term& ta : pa.terms)
    for (const Term& tb : pb.terms)
      out.push_back({Expr(multiplyMonomials(table, ta.expr.node(), tb.expr.node())),
                     checkedMul(ta.coeff, tb.coeff)});
  if (pa.constant != 0)
    for (const Term& tb : pb.terms) out.push_back({tb.expr, checkedMul(pa.constant, tb.coeff)});
  if (pb.constant != 0)
    for (const Term& ta : pa.terms) out.push_back({ta.expr, checkedMul(pb.constant, ta.coeff)});
  normalize(out);
  return build(table, checkedMul(pa.constant, pb.constant), out);
}

} // namespace kiln::sym::detail

int kiln::sym::compare(Expr a, Expr b) {
  detail::commonTable(a, b);
  return detail::compareNodes(a.node(), b.node());
}
