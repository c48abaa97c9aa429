// Internal: integer expressions as polynomials (constant + coefficient *
// monomial terms), checked int64 arithmetic and interval bounds.
#pragma once

#include <boost/container/small_vector.hpp>

#include "node.h"

namespace kiln::sym::detail {

using TermVec = boost::container::small_vector<Term, 8>;

struct Poly {
  int64_t constant = 0;
  TermVec terms; // sorted by compareMonomials, coefficients != 0
};

// Checked int64 arithmetic: Error{InvalidArgument} on overflow or division by 0.
int64_t checkedAdd(int64_t a, int64_t b);
int64_t checkedMul(int64_t a, int64_t b);
int64_t checkedNeg(int64_t a);
int64_t floorDivide(int64_t a, int64_t b); // Python's a // b
int64_t floorMod(int64_t a, int64_t b);    // Python's a % b
int64_t checkedPow(int64_t base, int64_t exponent);

// base^exponent (exponent >= 0) by squaring, multiplying with `mul`
// (checkedMul, or boundMul for range bounds).
template <class Mul> int64_t powBySquaring(int64_t base, int64_t exponent, Mul mul) {
  int64_t result = 1;
  while (exponent > 0) {
    if (exponent & 1) result = mul(result, base);
    exponent >>= 1;
    if (exponent) base = mul(base, base);
  }
  return result;
}
int64_t gcd(int64_t a, int64_t b); // of absolute values; gcd(0, b) = |b|

// An integer node as a polynomial: Integer -> constant; Sum -> its terms;
// any other integer node -> one term (node, 1).
Poly polyOf(const Node* n);
// Sorts, combines equal monomials and drops zero coefficients.
void normalize(TermVec& terms);
// The canonical node of an already normalised polynomial.
Expr build(Table& table, int64_t constant, const TermVec& terms);
inline Expr build(Table& table, const Poly& p) {
  return build(table, p.constant, p.terms);
}
// a + scale * b, normalised (both inputs normalised).
Poly combine(const Poly& a, const Poly& b, int64_t scale);
// The product of two monomials (atoms or Products), canonical.
const Node* multiplyMonomials(Table& table, const Node* a, const Node* b);

// Interval arithmetic on extended bounds (kNegInf/kInf are infinite), rounding
// outwards on overflow.
int64_t boundAdd(int64_t a, int64_t b, bool lower);
int64_t boundMul(int64_t a, int64_t b);
Range rangeScale(Range r, int64_t c);
Range rangeAdd(Range a, Range b);
Range rangeMul(Range a, Range b);
Range rangeOfNode(const Node* n);
Range rangeOfPoly(const Poly& p);
// Whether `relation` (Eq/Ne/Lt/Le) holds given the range of rhs - lhs.
std::optional<bool> decide(Kind relation, Range difference);
// decide() of the range of d = rhs - lhs, and where that cannot tell, of the
// range that factoring a symbol out of every term of d gives.
std::optional<bool> decideFactored(Kind relation, const Poly& d);

// The symbolic Sum/Product/... builders on nodes, shared by arith and logic.
Expr add(Table& table, const Node* a, const Node* b, int64_t scale); // a + scale*b
Expr multiply(Table& table, const Node* a, const Node* b);

} // namespace kiln::sym::detail
