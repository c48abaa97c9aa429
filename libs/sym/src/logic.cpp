// Boolean builders: relations over integers (normalised so that both sides
// have positive coefficients, decided from ranges where possible) and the
// connectives and/or/not.
#include <algorithm>

#include "kiln/sym/expr.h"
#include "poly.h"

namespace kiln::sym {
namespace detail {
namespace {

// Over integers d > 0 is d - 1 >= 0, so every strict relation becomes a Le:
// `s0 < 5` and `s0 <= 4` are one node (the printer shows `<` again where the
// left side carries a constant, see print.cpp).
// a REL b, for REL in Eq/Ne/Lt/Le: as d = b - a compared with 0.
Expr relation(Table& t, Kind kind, const Node* a, const Node* b) {
  Poly d = combine(polyOf(b), polyOf(a), -1);
  if (kind == Kind::Lt) {
    d.constant = checkedAdd(d.constant, -1);
    kind = Kind::Le;
  }
  if (const auto known = decideFactored(kind, d)) return t.boolean(*known);
  int64_t g = 0;
  for (const Term& term : d.terms) g = gcd(g, term.coeff);
  const bool equality = kind == Kind::Eq || kind == Kind::Ne;
  if (equality && d.constant % g != 0) return t.boolean(kind == Kind::Ne); // g*x == c has no root
  if (g > 1) { // g*x + c >= 0 <=> x >= ceil(-c/g) <=> x + floor(c/g) >= 0
    d.constant = floorDivide(d.constant, g);
    for (Term& term : d.terms) term.coeff /= g;
  }
  if (equality && d.terms[0].coeff < 0) { // d == 0 and -d == 0 are one relation
    d.constant = checkedNeg(d.constant);
    for (Term& term : d.terms) term.coeff = checkedNeg(term.coeff);
  }
  Poly plus, minus; // d == plus - minus, both with positive coefficients
  if (d.constant > 0)
    plus.constant = d.constant;
  else
    minus.constant = checkedNeg(d.constant);
  for (const Term& term : d.terms) {
    if (term.coeff > 0)
      plus.terms.push_back(term);
    else
      minus.terms.push_back({term.expr, checkedNeg(term.coeff)});
  }
  // d >= 0  <=>  minus <= plus; equalities read "plus == minus".
  const Expr lhs = build(t, equality ? plus : minus), rhs = build(t, equality ? minus : plus);
  const Term args[2] = {{lhs, 1}, {rhs, 1}};
  return Expr(t.intern(kind, 0, args, 2));
}

// The arguments n gives a `kind` connective (its own if it is one), without the
// neutral constant; false if n holds the absorbing constant.
bool collect(const Node* n, Kind kind, TermVec& out) {
  const bool absorbing = kind == Kind::Or; // false absorbs an And, true an Or
  const Term single{Expr(n), 1};
  const Term* first = n->kind == kind ? n->terms() : &single;
  const uint32_t count = n->kind == kind ? n->size : 1;
  for (uint32_t i = 0; i < count; ++i) {
    const Node* arg = first[i].expr.node();
    if (arg->kind != Kind::Boolean)
      out.push_back({Expr(arg), 1});
    else if ((arg->value != 0) == absorbing)
      return false;
  }
  return true;
}

bool lessNode(const Term& x, const Term& y) {
  return compareNodes(x.expr.node(), y.expr.node()) < 0;
}

// Whether the connective c has x among its (sorted) arguments.
bool hasArgument(const Node* c, const Node* x) {
  return std::binary_search(c->terms(), c->end(), Term{Expr(x), 1}, lessNode);
}

// The non-constant terms of one side of a relation, as stored.
Terms sideTerms(const Node* side, Term& single) {
  if (side->kind == Kind::Integer) return Terms(nullptr, 0);
  if (side->kind == Kind::Sum) return Terms(side->terms(), side->size);
  single = {Expr(side), 1};
  return Terms(&single, 1);
}

bool sameTerms(Terms a, Terms b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](const Term& x, const Term& y) {
           return x.expr == y.expr && x.coeff == y.coeff;
         });
}

int64_t sideConstant(const Node* side) {
  return side->kind == Kind::Integer || side->kind == Kind::Sum ? side->value : 0;
}

// Le(a1, b1) and Le(a2, b2) say d1 = b1 - a1 >= 0 and d2 >= 0; over integers
// one is the other's negation iff d2 == -d1 - 1. The sides of a stored
// relation share no monomial, so that is: a2 and b1 have the same terms, b2
// and a1 too, and the constants of d1 and d2 add up to -1.
bool oppositeLe(const Node* x, const Node* y) {
  const Node *a1 = x->terms()[0].expr.node(), *b1 = x->terms()[1].expr.node();
  const Node *a2 = y->terms()[0].expr.node(), *b2 = y->terms()[1].expr.node();
  Term s1, s2, s3, s4;
  if (!sameTerms(sideTerms(a2, s1), sideTerms(b1, s2)) ||
      !sameTerms(sideTerms(b2, s3), sideTerms(a1, s4)))
    return false;
  int64_t d1, d2, sum;
  return !__builtin_sub_overflow(sideConstant(b1), sideConstant(a1), &d1) &&
         !__builtin_sub_overflow(sideConstant(b2), sideConstant(a2), &d2) &&
         !__builtin_add_overflow(d1, d2, &sum) && sum == -1;
}

// Whether y is the negation of x. Both are canonical, so a negated relation is
// the opposite relation (Eq/Ne over the same sides, or a Le of -d - 1) and any
// other negation is a Not node.
bool complementary(const Node* x, const Node* y) {
  if (x->kind == Kind::Not) return x->terms()[0].expr.node() == y;
  if (y->kind == Kind::Not) return y->terms()[0].expr.node() == x;
  const bool equalities =
      (x->kind == Kind::Eq && y->kind == Kind::Ne) || (x->kind == Kind::Ne && y->kind == Kind::Eq);
  if (equalities)
    return x->terms()[0].expr == y->terms()[0].expr && x->terms()[1].expr == y->terms()[1].expr;
  return x->kind == Kind::Le && y->kind == Kind::Le && oppositeLe(x, y);
}

// Both operands are canonical already, so only an argument of one against an
// argument of the other can cancel or absorb: x && !x is false (x || !x true),
// and x && (x || y) is x (x || (x && y) too). Marks absorbed arguments with
// coefficient 0; false when the whole connective is decided.
bool crossSimplify(Kind kind, TermVec& left, TermVec& right) {
  const Kind dual = kind == Kind::And ? Kind::Or : Kind::And;
  for (Term& x : left) {
    for (Term& y : right) {
      if (y.coeff == 0) continue;
      const Node *xn = x.expr.node(), *yn = y.expr.node();
      if (complementary(xn, yn)) return false;
      if (yn->kind == dual && hasArgument(yn, xn))
        y.coeff = 0;
      else if (xn->kind == dual && hasArgument(xn, yn)) {
        x.coeff = 0;
        break;
      }
    }
  }
  return true;
}

Expr connective(Table& t, Kind kind, const Node* a, const Node* b) {
  const bool absorbing = kind == Kind::Or;
  TermVec left, right;
  if (complementary(a, b) || !collect(a, kind, left) || !collect(b, kind, right) ||
      !crossSimplify(kind, left, right)) // (a || b) && !(a || b) before a and b flatten
    return t.boolean(absorbing);
  TermVec args;
  for (const TermVec* side : {&left, &right})
    for (const Term& x : *side)
      if (x.coeff != 0) args.push_back(x);
  std::sort(args.begin(), args.end(), lessNode);
  args.erase(std::unique(args.begin(), args.end(),
                         [](const Term& x, const Term& y) { return x.expr == y.expr; }),
             args.end());
  if (args.empty()) return t.boolean(!absorbing);
  if (args.size() == 1) return args[0].expr;
  return Expr(t.intern(kind, 0, args.data(), static_cast<uint32_t>(args.size())));
}

Expr negation(Table& t, const Node* a) {
  const Node* x = a->size > 0 ? a->terms()[0].expr.node() : nullptr;
  const Node* y = a->size > 1 ? a->terms()[1].expr.node() : nullptr;
  switch (a->kind) {
  case Kind::Boolean: return t.boolean(a->value == 0);
  case Kind::Not: return Expr(x);
  case Kind::Lt: return relation(t, Kind::Le, y, x); // !(x < y) <=> y <= x
  case Kind::Le: return relation(t, Kind::Lt, y, x);
  case Kind::Eq: return relation(t, Kind::Ne, x, y);
  case Kind::Ne: return relation(t, Kind::Eq, x, y);
  default: {
    const Term arg{Expr(a), 1};
    return Expr(t.intern(Kind::Not, 0, &arg, 1));
  }
  }
}

} // namespace
} // namespace detail

using namespace detail;

namespace {

Expr relate(Kind kind, Expr a, Expr b, const char* op) {
  Table& t = commonTable(a, b);
  return relation(t, kind, requireInt(a, op), requireInt(b, op));
}

} // namespace

Expr eq(Expr a, Expr b) {
  return relate(Kind::Eq, a, b, "==");
}
Expr eq(Expr a, int64_t b) {
  return eq(a, tableOf(a).integer(b));
}
Expr ne(Expr a, Expr b) {
  return relate(Kind::Ne, a, b, "!=");
}
Expr ne(Expr a, int64_t b) {
  return ne(a, tableOf(a).integer(b));
}
Expr lt(Expr a, Expr b) {
  return relate(Kind::Lt, a, b, "<");
}
Expr lt(Expr a, int64_t b) {
  return lt(a, tableOf(a).integer(b));
}
Expr le(Expr a, Expr b) {
  return relate(Kind::Le, a, b, "<=");
}
Expr le(Expr a, int64_t b) {
  return le(a, tableOf(a).integer(b));
}
Expr gt(Expr a, Expr b) {
  return relate(Kind::Lt, b, a, ">");
}
Expr gt(Expr a, int64_t b) {
  return gt(a, tableOf(a).integer(b));
}
Expr ge(Expr a, Expr b) {
  return relate(Kind::Le, b, a, ">=");
}
Expr ge(Expr a, int64_t b) {
  return ge(a, tableOf(a).integer(b));
}

Expr eq(int64_t a, Expr b) {
  return eq(tableOf(b).integer(a), b);
}
Expr ne(int64_t a, Expr b) {
  return ne(tableOf(b).integer(a), b);
}
Expr lt(int64_t a, Expr b) {
  return lt(tableOf(b).integer(a), b);
}
Expr le(int64_t a, Expr b) {
  return le(tableOf(b).integer(a), b);
}
Expr gt(int64_t a, Expr b) {
  return gt(tableOf(b).integer(a), b);
}
Expr ge(int64_t a, Expr b) {
  return ge(tableOf(b).integer(a), b);
}

Expr logicalAnd(Expr a, Expr b) {
  Table& t = commonTable(a, b);
  return connective(t, Kind::And, requireBool(a, "and"), requireBool(b, "and"));
}

Expr logicalOr(Expr a, Expr b) {
  Table& t = commonTable(a, b);
  return connective(t, Kind::Or, requireBool(a, "or"), requireBool(b, "or"));
}

Expr logicalNot(Expr a) {
  return negation(tableOf(a), requireBool(a, "not"));
}

} // namespace kiln::sym
