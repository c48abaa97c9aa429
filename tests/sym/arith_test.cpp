// The floor-div, mod, min and max rules.
#include <gtest/gtest.h>

#include "kiln/common/error.h"
#include "kiln/sym/eval.h"
#include "kiln/sym/print.h"
#include "kiln/sym/symbol_table.h"

using namespace kiln;
using namespace kiln::sym;

namespace {

struct Arith : ::testing::Test {
  SymbolTable table;
  Expr s0 = table.createBacked(10);        // [0, inf]
  Expr s1 = table.createBacked(3, {0, 7}); // less than 8
  Expr u0 = table.createUnbacked();        // any sign
  Expr c(int64_t v) { return table.integer(v); }
};

} // namespace

TEST_F(Arith, FoldsConstantsWithFloorSemantics) {
  EXPECT_EQ(floorDiv(c(7), 2), c(3));
  EXPECT_EQ(floorDiv(c(-7), 2), c(-4));
  EXPECT_EQ(floorDiv(c(7), -2), c(-4));
  EXPECT_EQ(floorDiv(c(-7), -2), c(3));
  EXPECT_EQ(mod(c(-7), 2), c(1));
  EXPECT_EQ(mod(c(7), -2), c(-1));
  EXPECT_EQ(mod(c(-7), -2), c(-1));
  EXPECT_EQ(min(c(3), -4), c(-4));
  EXPECT_EQ(max(c(3), -4), c(3));
}

TEST_F(Arith, RefusesDivisionByAConstantZero) {
  for (const Expr x : {s0, u0, c(5)}) {
    EXPECT_THROW(floorDiv(x, 0), Error);
    EXPECT_THROW(mod(x, 0), Error);
    EXPECT_THROW(floorDiv(x, s0 - s0), Error);
  }
}

TEST_F(Arith, DividesByOneAndMinusOne) {
  EXPECT_EQ(floorDiv(u0, 1), u0);
  EXPECT_EQ(mod(u0, 1), c(0));
  EXPECT_EQ(floorDiv(u0, -1), -u0);
  EXPECT_EQ(mod(u0, -1), c(0));
}

TEST_F(Arith, DividesExactMultiples) {
  EXPECT_EQ(floorDiv(s0 * 8, 8), s0);
  EXPECT_EQ(floorDiv(u0 * -6, 3), -2 * u0);
  EXPECT_EQ(floorDiv(s0 * u0, u0), s0);
  EXPECT_EQ(floorDiv(s0 * s0 * u0 + 2 * s0, s0), s0 * u0 + 2);
  EXPECT_EQ(floorDiv(u0 + 3, u0 + 3), c(1));
  EXPECT_EQ(mod(s0 * 8, 8), c(0));
  EXPECT_EQ(mod(s0 * u0, u0), c(0));
}

TEST_F(Arith, SplitsOffMultiplesOfTheDivisor) {
  // (a*k + b) // k == a + b // k for any integer a.
  EXPECT_EQ(floorDiv(u0 * 8 + s0, 8), u0 + floorDiv(s0, 8));
  EXPECT_EQ(floorDiv(u0 * 8 + 13, 8), u0 + 1);
  EXPECT_EQ(floorDiv(u0 * 8 - 3, 8), u0 - 1);
  EXPECT_EQ(floorDiv(s0 * u0 + s0, u0), s0 + floorDiv(s0, u0));
  // (a*k + b) % k == b % k.
  EXPECT_EQ(mod(u0 * 8 + s0, 8), mod(s0, 8));
  EXPECT_EQ(mod(3 * u0 + 13, 3), c(1));
  EXPECT_EQ(mod(s0 * u0 + s0, u0), mod(s0, u0));
  EXPECT_EQ(toString(mod(9 * u0 + s0, 8)), "(s0 + u0) % 8");
}

TEST_F(Arith, UsesRangesForTheRemainder) {
  // 0 <= s1 < 8 is known from s1's range.
  EXPECT_EQ(floorDiv(u0 * 8 + s1, 8), u0);
  EXPECT_EQ(mod(u0 * 8 + s1, 8), s1);
  EXPECT_EQ(mod(s1, 8), s1);
  EXPECT_EQ(floorDiv(s1, 8), c(0));
  EXPECT_EQ(mod(s1 + 8, 8), s1);
  EXPECT_EQ(floorDiv(s1 + 16, 8), c(2));
  EXPECT_EQ(mod(s1, s1 + s0 + 1), s1); // 0 <= s1 < s1 + s0 + 1
  EXPECT_NE(mod(s0, 8), s0);           // s0 may be 8 or more
}

TEST_F(Arith, MergesNestedDivisions) {
  EXPECT_EQ(floorDiv(floorDiv(u0, 2), 4), floorDiv(u0, 8));
  EXPECT_EQ(floorDiv(floorDiv(floorDiv(u0, 2), 3), 5), floorDiv(u0, 30));
  EXPECT_EQ(mod(mod(u0, 16), 8), mod(u0, 8));
  EXPECT_EQ(mod(mod(u0, 4), 8), mod(u0, 4)); // [0, 3] lies in [0, 8)
}

TEST_F(Arith, DividesOutCommonFactors) {
  EXPECT_EQ(floorDiv(2 * u0, 4), floorDiv(u0, 2));
  EXPECT_EQ(floorDiv(6 * u0 + 3, 9), floorDiv(2 * u0 + 1, 3));
  EXPECT_EQ(mod(2 * u0, 4), 2 * mod(u0, 2));
}

TEST_F(Arith, NormalisesNegativeDivisors) {
  EXPECT_EQ(floorDiv(u0, -3), floorDiv(-u0, 3));
  EXPECT_EQ(mod(u0, -3), -mod(-u0, 3));
  auto floorQuotient = [](int64_t a, int64_t b) { // written out from the definition
    int64_t q = a / b;
    return q * b != a && ((a < 0) != (b < 0)) ? q - 1 : q;
  };
  for (int64_t v = -7; v <= 7; ++v) {
    EXPECT_EQ(evaluate(floorDiv(u0, -3), {{u0, v}}), floorQuotient(v, -3)) << v;
    EXPECT_EQ(evaluate(mod(u0 + 1, -3), {{u0, v}}), v + 1 + 3 * floorQuotient(v + 1, -3)) << v;
  }
}

TEST_F(Arith, ReducesModCoefficientsToOneRepresentative) {
  EXPECT_EQ(mod(7 * u0, 8), mod(-u0, 8));
  EXPECT_EQ(toString(mod(7 * u0 + 9, 8)), "(-u0 + 1) % 8");
}

TEST_F(Arith, FoldsAndDecidesMinMax) {
  EXPECT_EQ(min(u0, u0), u0);
  EXPECT_EQ(max(u0, u0), u0);
  EXPECT_EQ(min(s0, s0 + 1), s0);
  EXPECT_EQ(max(s0, s0 + 1), s0 + 1);
  EXPECT_EQ(max(s0, -1), s0); // s0 >= 0
  EXPECT_EQ(min(s1, 7), s1);  // s1 <= 7
  EXPECT_EQ(min(s1, 100), s1);
  EXPECT_EQ(max(min(s0, 3), 5), c(5));
  EXPECT_EQ(min(min(s0, u0), s1), min(s0, min(s1, u0)));
  EXPECT_EQ(min(min(s0, 3), 2), min(s0, 2));
  EXPECT_EQ(toString(max(max(s0, u0), 3)), "max(3, s0, u0)");
}

TEST_F(Arith, DividesConstantMultiplesExactly) {
  EXPECT_EQ(floorDiv(4 * s0 + 8, 4), s0 + 2);
  EXPECT_EQ(toString(floorDiv(6 * u0, 4)), "(3*u0)//2"); // not u0 + u0//2 or 3*(u0//2)
  EXPECT_EQ(mod(4 * u0 + 2, 4), c(2));
  EXPECT_EQ(mod(4 * u0 - 2, 4), c(2)); // floor semantics: -2 % 4 == 2
}

TEST_F(Arith, DividesByMonomialsWithACoefficient) {
  // (c*m*q + r) // (c*m) == q + r // (c*m), for any sign of m.
  EXPECT_EQ(toString(floorDiv(4 * s0 * u0, 2 * u0)), "2*s0");
  EXPECT_EQ(toString(floorDiv(4 * s0 * u0 + 2 * u0 + s0, 2 * u0)), "2*s0 + s0//(2*u0) + 1");
  EXPECT_EQ(mod(4 * s0 * u0 + 2 * u0 + s0, 2 * u0), mod(s0, 2 * u0));
  EXPECT_EQ(mod(6 * s0 * u0, 3 * u0), c(0));
  // A coefficient that does not divide stays in the remainder: 3 = 2*1 + 1 is
  // not split off, as with constant divisors.
  EXPECT_EQ(toString(floorDiv(3 * s0 * u0, 2 * u0)), "(3*s0)//2");
}

TEST_F(Arith, CancelsCommonFactorsOfSymbolicDivisors) {
  // r // b == (r/g) // (b/g) and r % b == g * ((r/g) % (b/g)) for g != 0.
  EXPECT_EQ(toString(floorDiv(6 * s0 * u0, 4 * u0)), "(3*s0)//2");
  EXPECT_EQ(toString(mod(6 * s0 * u0, 4 * u0)), "2*u0*(s0 % 2)");
  EXPECT_EQ(toString(floorDiv(s0 * u0 + s0, s0 * s1)), "(u0 + 1)//s1");
  EXPECT_EQ(toString(floorDiv(2 * u0 + 4, 2 * s0 + 2)), "(u0 + 2)//(s0 + 1)");
  EXPECT_EQ(toString(mod(2 * u0 + 4, 2 * s0 + 2)), "2*((u0 + 2) % (s0 + 1))");
  EXPECT_EQ(mod(s0 * s1, 2 * s0 * s1), s0 * s1); // x % (2*x) == x * (1 % 2) == x
}

TEST_F(Arith, NormalisesTheSignOfSymbolicDivisors) {
  EXPECT_EQ(floorDiv(u0, -2 * s0), floorDiv(-u0, 2 * s0));
  EXPECT_EQ(mod(u0, -s0), -mod(-u0, s0));
  EXPECT_EQ(toString(floorDiv(u0 + 1, 3 - s0)), "(-u0 - 1)//(s0 - 3)");
  const Expr u1 = table.createUnbacked();
  auto floorQuotient = [](int64_t a, int64_t b) { // written out from the definition
    int64_t q = a / b;
    return q * b != a && ((a < 0) != (b < 0)) ? q - 1 : q;
  };
  for (int64_t a = -9; a <= 9; ++a)
    for (int64_t b = -4; b <= 4; ++b) {
      if (b == 0) continue;
      const Binding at{{u0, a}, {u1, b}};
      EXPECT_EQ(evaluate(floorDiv(u0, -2 * u1), at), floorQuotient(a, -2 * b)) << a << " " << b;
      EXPECT_EQ(evaluate(mod(u0, -u1), at), a + b * floorQuotient(a, -b)) << a << " " << b;
      EXPECT_EQ(evaluate(mod(6 * u0 * u1, 4 * u1), at),
                6 * a * b - 4 * b * floorQuotient(6 * a * b, 4 * b));
    }
}

TEST_F(Arith, AQuotientAndItsRemainderJoinAgain) {
  // k*c*(x // c) + k*(x % c) == k*x: a flat row index split into [8, 1024] and
  // joined over rows 50264 apart (GPT-2's logits viewed as [8192, 50257]).
  EXPECT_EQ(51470336 * floorDiv(s0, 1024) + 50264 * mod(s0, 1024), 50264 * s0);
  EXPECT_EQ(4 * floorDiv(u0 + s1, 4) + mod(u0 + s1, 4) + 7, u0 + s1 + 7);
  EXPECT_EQ(mod(u0, 4) + floorDiv(u0, 4) * 4 - u0, c(0)); // either order
  // Other multiples, divisors or operands stay as they are.
  EXPECT_EQ(toString(3 * floorDiv(s0, 4) + mod(s0, 4)), "3*(s0//4) + s0 % 4");
  EXPECT_NE(4 * floorDiv(s0, 4) + mod(s0, 8), s0);
  EXPECT_NE(4 * floorDiv(s0, 4) + mod(u0, 4), s0);
}
