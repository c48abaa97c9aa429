// Relations and boolean connectives.
#include <gtest/gtest.h>

#include "kiln/common/error.h"
#include "kiln/sym/print.h"
#include "kiln/sym/symbol_table.h"

using namespace kiln;
using namespace kiln::sym;

namespace {

struct Logic : ::testing::Test {
  SymbolTable table;
  Expr s0 = table.createBacked(4), s1 = table.createBacked(6);
  Expr u0 = table.createUnbacked();
  Expr yes = table.boolean(true), no = table.boolean(false);
};

} // namespace

TEST_F(Logic, SwapsGreaterThan) {
  EXPECT_EQ(gt(s0, s1), lt(s1, s0));
  EXPECT_EQ(ge(s0, u0), le(u0, s0));
  EXPECT_EQ(toString(gt(s0, s1)), "s1 < s0");
}

TEST_F(Logic, NormalisesRelations) {
  EXPECT_EQ(lt(s0 + 3, s1 + 5), lt(s0, s1 + 2));
  EXPECT_EQ(toString(lt(s0 + 3, s1 + 5)), "s0 <= s1 + 1"); // strict relations are stored as <=
  EXPECT_EQ(toString(le(u0 - s0, -4)), "u0 + 4 <= s0");
  EXPECT_EQ(eq(s1, s0), eq(s0, s1));
  EXPECT_EQ(eq(s0 - s1, 0), eq(s0, s1));
  EXPECT_EQ(ne(2 * s0, 2 * s1), ne(s0, s1));
  EXPECT_EQ(lt(2 * u0, 4), lt(u0, 2));
  EXPECT_EQ(toString(eq(u0, 4)), "u0 == 4");
}

TEST_F(Logic, FoldsConstantsAndDecidesFromRanges) {
  EXPECT_EQ(lt(table.integer(3), 4), yes);
  EXPECT_EQ(eq(s0 * s1, s1 * s0), yes);
  EXPECT_EQ(gt(s0 + 1, 0), yes); // s0 >= 0
  EXPECT_EQ(lt(s0, 0), no);
  EXPECT_EQ(ge(s0 * s0, 0), yes);
  EXPECT_EQ(eq(2 * u0, 3), no); // no integer root
  EXPECT_EQ(ne(2 * u0, 3), yes);
  EXPECT_EQ(lt(u0, 0).kind(), Kind::Le); // u0 + 1 <= 0
}

TEST_F(Logic, NegatesRelations) {
  EXPECT_EQ(logicalNot(lt(s0, s1)), le(s1, s0));
  EXPECT_EQ(logicalNot(le(s0, s1)), lt(s1, s0));
  EXPECT_EQ(logicalNot(eq(s0, u0)), ne(s0, u0));
  EXPECT_EQ(logicalNot(ne(s0, u0)), eq(s0, u0));
  EXPECT_EQ(logicalNot(yes), no);
  const Expr both = logicalAnd(lt(s0, s1), eq(u0, 3));
  EXPECT_EQ(logicalNot(logicalNot(both)), both);
  EXPECT_EQ(toString(logicalNot(both)), "!(u0 == 3 && s0 < s1)");
}

TEST_F(Logic, FlattensSortsAndFoldsConnectives) {
  const Expr a = lt(s0, s1), b = eq(u0, 3), c = ne(s0, 2);
  EXPECT_EQ(logicalAnd(a, yes), a);
  EXPECT_EQ(logicalAnd(a, no), no);
  EXPECT_EQ(logicalOr(a, yes), yes);
  EXPECT_EQ(logicalOr(a, no), a);
  EXPECT_EQ(logicalAnd(a, a), a);
  EXPECT_EQ(logicalAnd(a, b), logicalAnd(b, a));
  EXPECT_EQ(logicalAnd(logicalAnd(a, b), c), logicalAnd(a, logicalAnd(c, b)));
  EXPECT_EQ(logicalAnd(a, b).terms().size(), 2u);
  EXPECT_EQ(logicalAnd(logicalAnd(a, b), c).terms().size(), 3u);
  EXPECT_EQ(toString(logicalOr(logicalAnd(a, b), c)), "s0 != 2 || (u0 == 3 && s0 < s1)");
}

TEST_F(Logic, RefusesMixedTypes) {
  EXPECT_THROW(logicalAnd(s0, lt(s0, s1)), Error);
  EXPECT_THROW(logicalNot(s0), Error);
  EXPECT_THROW(lt(lt(s0, s1), s0), Error);
  EXPECT_THROW(eq(yes, no), Error);
}

TEST_F(Logic, StoresStrictRelationsAsLessEqual) {
  // Over integers a < b is a + 1 <= b: equal relations are one node.
  EXPECT_EQ(lt(s0, 5), le(s0, 4));
  EXPECT_EQ(lt(s0, s1), le(s0 + 1, s1));
  EXPECT_EQ(gt(u0, -1), ge(u0, 0));
  EXPECT_EQ(toString(lt(s0, 5)), "s0 <= 4");
  EXPECT_EQ(toString(lt(s0, s1)), "s0 < s1"); // a left constant of 1 is shown strict
  EXPECT_EQ(toString(le(s0 + 1, s1)), "s0 < s1");
  EXPECT_EQ(toString(ge(u0, 1)), "0 < u0");
  EXPECT_EQ(toString(le(u0 + 2, s1)), "u0 + 2 <= s1");
  // Common factors cancel with floor rounding: 2*x < 3 <=> x <= 1.
  EXPECT_EQ(lt(2 * u0, 3), le(u0, 1));
  EXPECT_EQ(lt(3 * u0, 7), le(u0, 2));
  EXPECT_EQ(ge(2 * u0, 3), le(2, u0));
  EXPECT_EQ(le(2 * u0, -3), le(u0, -2));
  EXPECT_EQ(toString(lt(2 * u0 + 2 * s0, 3)), "s0 + u0 <= 1");
}

TEST_F(Logic, FoldsComplementaryArguments) {
  const Expr a = lt(s0, s1), b = eq(u0, 3), c = ne(s0, 2);
  const Expr either = logicalOr(a, b);
  for (const Expr x : {a, b, c, either, logicalAnd(a, b)}) {
    EXPECT_EQ(logicalAnd(x, logicalNot(x)), no) << x;
    EXPECT_EQ(logicalOr(logicalNot(x), x), yes) << x;
  }
  EXPECT_EQ(logicalAnd(lt(s0, s1), ge(s0, s1)), no);
  EXPECT_EQ(logicalOr(le(u0, 3), lt(3, u0)), yes);
  EXPECT_EQ(logicalAnd(logicalAnd(a, b), logicalNot(a)), no);
  EXPECT_EQ(logicalOr(logicalOr(a, b), ne(u0, 3)), yes);
  EXPECT_NE(logicalAnd(le(u0, 3), lt(4, u0)), no); // u0 == 4 satisfies both
}

TEST_F(Logic, AbsorbsConnectivesThatContainAnArgument) {
  const Expr a = lt(s0, s1), b = eq(u0, 3), c = ne(s0, 2);
  EXPECT_EQ(logicalAnd(a, logicalOr(a, b)), a);
  EXPECT_EQ(logicalOr(logicalAnd(b, a), a), a);
  EXPECT_EQ(logicalAnd(logicalAnd(a, c), logicalOr(b, a)), logicalAnd(a, c));
  EXPECT_EQ(logicalOr(logicalOr(a, b), logicalAnd(c, b)), logicalOr(a, b));
  EXPECT_EQ(logicalAnd(logicalOr(a, b), logicalOr(a, c)).terms().size(), 2u); // not absorbed
}
