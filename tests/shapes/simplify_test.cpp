#include "kiln/shapes/simplify.h"

#include <gtest/gtest.h>

#include "kiln/common/error.h"
#include "kiln/sym/print.h"

using namespace kiln;
using namespace kiln::sym;
using kiln::shapes::Simplified;
using kiln::shapes::simplify;

namespace {

struct Simplify : ::testing::Test {
  SymbolTable table;
  Expr s0 = table.createBacked(8);
  Expr s1 = table.createBacked(8);
  Expr s2 = table.createBacked(64);

  static std::vector<std::string> texts(const std::vector<Expr>& exprs) {
    std::vector<std::string> out;
    for (Expr e : exprs) out.push_back(toString(e));
    return out;
  }
  using Texts = std::vector<std::string>;
};

} // namespace

TEST_F(Simplify, DropsAGuardAnotherImplies) { // the example
  Simplified s = simplify(table, {gt(s0, 2), gt(s0, 5)});
  EXPECT_EQ(s.checks, std::vector<Expr>{gt(s0, 5)});
  EXPECT_TRUE(s.guards.empty()); // both are bounds: merged into the range
  EXPECT_EQ(s.rangeOf(s0), (Range{6, kInf}));
  EXPECT_EQ(range(s0), Range::size()) << "the caller's table is not narrowed";
}

TEST_F(Simplify, TurnsALinearEqualityIntoAReplacement) { // the example
  Simplified s = simplify(table, {eq(s0 * 2, s1 * 2)});
  ASSERT_EQ(s.replacements.size(), 1u);
  EXPECT_EQ(s.replacements[0].symbol, s1); // the newer symbol goes
  EXPECT_EQ(s.replacements[0].expr, s0);
  EXPECT_TRUE(s.guards.empty());
  EXPECT_EQ(s.checks, std::vector<Expr>{eq(s1, s0)});
}

TEST_F(Simplify, AppliesReplacementsEverywhere) {
  Simplified s = simplify(table, {le(s1 + s2, 100), eq(s0, s1), lt(s2 * s1, 1000)});
  EXPECT_EQ(texts(s.guards), (Texts{"s0 + s2 <= 100", "s0*s2 <= 999"}));
  ASSERT_EQ(s.replacements.size(), 1u);
  EXPECT_EQ(toString(s.replacements[0].expr), "s0");
}

TEST_F(Simplify, SolvesForASymbolOfAProduct) {
  Expr s3 = table.createBacked(512);
  Simplified s = simplify(table, {eq(s3, s0 * s2)});
  ASSERT_EQ(s.replacements.size(), 1u);
  EXPECT_EQ(s.replacements[0].symbol, s3);
  EXPECT_EQ(toString(s.replacements[0].expr), "s0*s2");
}

TEST_F(Simplify, ChainsReplacements) {
  Simplified s = simplify(table, {eq(s2, s1 * 8), eq(s1, s0)});
  ASSERT_EQ(s.replacements.size(), 2u);
  EXPECT_EQ(toString(s.replacements[0].expr), "8*s0"); // updated by the later s1 := s0
  EXPECT_EQ(texts(s.checks), (Texts{"8*s0 == s2", "s0 == s1"}));
}

TEST_F(Simplify, ReplacesUnbackedSymbolsBySizes) {
  Expr u0 = table.createUnbacked();
  Simplified s = simplify(table, {eq(s0, u0)});
  ASSERT_EQ(s.replacements.size(), 1u);
  EXPECT_EQ(s.replacements[0].symbol, u0);
  EXPECT_EQ(s.replacements[0].expr, s0);
  EXPECT_EQ(s.rangeOf(u0), Range::size()) << "u0 is s0, so u0 >= 0";
}

TEST_F(Simplify, KeepsDivisibilityAndMovesTheRangeOntoMultiples) {
  Simplified s = simplify(table, {ge(s0, 2), eq(mod(s0, 8), 0), le(s0, 1000)});
  EXPECT_EQ(texts(s.guards), (Texts{"s0 % 8 == 0"}));
  EXPECT_EQ(s.rangeOf(s0), (Range{8, 1000}));
  EXPECT_EQ(texts(s.checks), (Texts{"8 <= s0", "s0 <= 1000", "s0 % 8 == 0"}));
}

TEST_F(Simplify, DropsGuardsTheOthersImplyWithZ3) {
  Simplified s = simplify(table, {eq(mod(s2, 8), 0), eq(mod(s2, 16), 0), lt(s0, s1 + s2),
                                  lt(s1 + s2, s0 + 100), le(s0, s1 + s2 + 50)});
  EXPECT_EQ(texts(s.guards), (Texts{"s2 % 16 == 0", "s0 < s1 + s2", "s1 + s2 <= s0 + 99"}));
  int z3Drops = 0;
  for (const std::string& line : s.steps) z3Drops += line.find("(z3)") != std::string::npos;
  EXPECT_EQ(z3Drops, 2);
}

TEST_F(Simplify, MovesARangeEndPastAnExcludedValue) {
  Simplified s = simplify(table, {ge(s0, 2), ne(s0, 2), ne(s1, 5)});
  EXPECT_EQ(s.rangeOf(s0), (Range{3, kInf}));
  EXPECT_EQ(texts(s.guards), (Texts{"s1 != 5"}));
}

TEST_F(Simplify, SplitsConjunctions) {
  Simplified s = simplify(table, {logicalAnd(gt(s0, 2), eq(s1, s0))});
  EXPECT_EQ(s.checks, (std::vector<Expr>{eq(s1, s0), gt(s0, 2)}));
}

TEST_F(Simplify, SaysWhenNothingSatisfiesTheGuards) {
  Expr u0 = table.createUnbacked();
  Simplified s = simplify(table, {gt(u0, 5), lt(u0, 3)});
  EXPECT_TRUE(s.unsatisfiable);
  EXPECT_EQ(texts(s.guards), (Texts{"false"}));
  Simplified t = simplify(table, {eq(mod(u0, 4), 1), ge(u0, 6), le(u0, 8)});
  EXPECT_TRUE(t.unsatisfiable) << "no value in [6, 8] is 1 mod 4";
}

TEST_F(Simplify, KeepsEverythingWhenTheZ3BudgetIsSpent) {
  Simplified s = simplify(table, {le(s0, s1 + s2), le(s0, s1 + s2 + 1)}, {200, 0});
  EXPECT_EQ(s.guards.size(), 2u);
  EXPECT_NE(s.steps.back().find("budget"), std::string::npos) << s.steps.back();
}

TEST_F(Simplify, RefusesBadGuards) {
  EXPECT_THROW(simplify(table, {s0 + 1}), Error);    // not boolean
  EXPECT_THROW(simplify(table, {Expr()}), Error);    // null
  EXPECT_THROW(simplify(table, {lt(s0, 4)}), Error); // false at the hint s0 = 8
  SymbolTable other;
  EXPECT_THROW(simplify(table, {ge(other.createBacked(2), 1)}), Error);
  try {
    simplify(table, {lt(s0, 4)});
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(e.message().find("hints"), std::string::npos) << e.message();
  }
}

TEST_F(Simplify, EmptyAndTrivialGuardSets) {
  EXPECT_TRUE(simplify(table, {}).checks.empty());
  EXPECT_TRUE(
      simplify(table, {ge(s0, 0), table.boolean(true)}).checks.empty()); // the ranges give them
}
