#include "kiln/sym/range.h"

#include <gtest/gtest.h>

#include "kiln/common/error.h"
#include "kiln/sym/symbol_table.h"

using namespace kiln;
using namespace kiln::sym;

namespace {

struct Ranges : ::testing::Test {
  SymbolTable table;
  Expr a = table.createBacked(3, {1, 5});
  Expr b = table.createUnbacked({-3, 2});
  Expr n = table.createBacked(64, {0, 100});
  Expr u = table.createUnbacked();
};

} // namespace

TEST_F(Ranges, PrintsUnboundedEnds) {
  EXPECT_EQ(toString(Range::unbounded()), "[-inf, inf]");
  EXPECT_EQ(toString(Range::size()), "[0, inf]");
  EXPECT_EQ(toString(Range::point(-2)), "[-2, -2]");
}

TEST_F(Ranges, PropagatesThroughPolynomials) {
  EXPECT_EQ(range(table.integer(7)), Range::point(7));
  EXPECT_EQ(range(2 * a + 3), (Range{5, 13}));
  EXPECT_EQ(range(a - b), (Range{-1, 8}));
  EXPECT_EQ(range(a * b), (Range{-15, 10}));
  EXPECT_EQ(range(b * b), (Range{0, 9}));       // an even power is not negative
  EXPECT_EQ(range(b * b * b), (Range{-27, 8})); // an odd one is monotone
  EXPECT_EQ(range(u + 5), Range::unbounded());
  EXPECT_EQ(range(u * u), (Range{0, kInf}));
  EXPECT_EQ(range(n * 3 - 1), (Range{-1, 299}));
}

TEST_F(Ranges, PropagatesThroughDivisionsAndMinMax) {
  EXPECT_EQ(range(floorDiv(n, 4)), (Range{0, 25}));
  EXPECT_EQ(range(floorDiv(n + b, 8)), (Range{-1, 12}));
  EXPECT_EQ(range(floorDiv(n, a)), (Range{0, 100}));
  EXPECT_EQ(range(floorDiv(b - 10, a)), (Range{-13, -2}));
  EXPECT_EQ(range(floorDiv(n, b)), (Range{-100, 100})); // a divisor of either sign
  EXPECT_EQ(range(mod(u, 8)), (Range{0, 7}));
  EXPECT_EQ(range(mod(u, -8)), (Range{-7, 0}));
  EXPECT_EQ(range(mod(u, a)), (Range{0, 4}));
  EXPECT_EQ(range(mod(u, b)), (Range{-2, 2}));
  EXPECT_EQ(range(min(a, b)), (Range{-3, 2}));
  EXPECT_EQ(range(max(n, u)), (Range{0, kInf}));
}

TEST_F(Ranges, BooleansLieInZeroOne) {
  EXPECT_EQ(range(lt(u, n)), (Range{0, 1}));
  EXPECT_EQ(range(table.boolean(true)), Range::point(1));
}

TEST_F(Ranges, KnowsRelationsStatically) {
  EXPECT_EQ(staticallyKnown(gt(n + 1, 0)), true); // n >= 0
  EXPECT_EQ(staticallyKnown(lt(a * b, -20)), false);
  const Expr small = lt(u, 10), positive = lt(0, u);
  EXPECT_EQ(staticallyKnown(small), std::nullopt);
  EXPECT_EQ(staticallyKnown(table.boolean(false)), false);
  table.narrow(u, {0, 5}); // built before: decided only now
  EXPECT_EQ(staticallyKnown(small), true);
  EXPECT_EQ(staticallyKnown(positive), std::nullopt);
  EXPECT_EQ(staticallyKnown(logicalNot(logicalOr(lt(n, u), eq(b, 1)))), std::nullopt);
  table.narrow(u, {1, 5});
  EXPECT_EQ(staticallyKnown(positive), true);
  EXPECT_EQ(range(small), Range::point(1));
}

// A sum's range forgets a factor its terms share; relations still see it: with
// s, t >= 2, s*t - s is s*(t - 1) >= 2 (a view's strides of symbolic sizes).
TEST_F(Ranges, RelationsSeeASymbolEveryTermShares) {
  Expr s = table.createBacked(3, {2, kInf}), t = table.createBacked(5, {2, kInf});
  EXPECT_EQ(range(s * t - s), (Range{kNegInf, kInf}));
  EXPECT_EQ(staticallyKnown(ne(s * t, s)), true);
  EXPECT_EQ(staticallyKnown(eq(s * t, s)), false);
  EXPECT_EQ(staticallyKnown(lt(s, s * t)), true);
  EXPECT_EQ(staticallyKnown(le(s * t * 16, s * 16)), false);
  EXPECT_EQ(staticallyKnown(ge(s * t * 4, s * 4 + 1)), true);   // s*(4t - 4) - 1 >= 7
  EXPECT_EQ(staticallyKnown(eq(s * n, s)), std::nullopt);       // n may be 1
  Expr z = table.createBacked(3, {0, kInf});                    // not positive: no factoring
  EXPECT_EQ(staticallyKnown(ne(z * t, z)), std::nullopt);
}

TEST_F(Ranges, CombinesKnowledgeThroughConnectives) {
  const Expr unknown = eq(u, 3);
  const Expr known = lt(u, u + 1); // folds to true when built
  EXPECT_EQ(known, table.boolean(true));
  const Expr lateTrue = lt(b, 5 + u), lateFalse = lt(10 + u, b);
  EXPECT_EQ(staticallyKnown(logicalAnd(unknown, lateTrue)), std::nullopt);
  table.narrow(u, {0, 0});
  EXPECT_EQ(staticallyKnown(logicalAnd(lateTrue, lateFalse)), false);
  EXPECT_EQ(staticallyKnown(logicalOr(lateTrue, lateFalse)), true);
}

TEST_F(Ranges, StaticallyKnownWantsABoolean) {
  EXPECT_THROW(staticallyKnown(a + 1), Error);
}

TEST_F(Ranges, WalksSharedSubexpressionsOnce) {
  // Each level uses the one below twice: 2^48 paths, 96 nodes.
  Expr x = n;
  for (int i = 0; i < 48; ++i) x = floorDiv(x, a) + floorDiv(x, a + 1);
  EXPECT_EQ(range(x).lo, 0);
  EXPECT_EQ(range(floorDiv(x, a)).lo, 0);
}

TEST_F(Ranges, FollowsNarrowingAfterACachedRange) {
  const Expr e = 2 * n + floorDiv(n, a);
  EXPECT_EQ(range(e), (Range{0, 300}));
  table.narrow(a, {2, 5}); // n // a was [0, 100]
  EXPECT_EQ(range(e), (Range{0, 250}));
  EXPECT_EQ(range(floorDiv(n, a)), (Range{0, 50}));
}

TEST_F(Ranges, ForgetsCachedRangesWhenTheStampWraps) {
  // The cache's stamp has 16 bits: after 65535 narrowings it comes round again.
  const Expr e = 2 * n + floorDiv(n, a);
  EXPECT_EQ(range(e), (Range{0, 300}));
  table.narrow(a, {2, 5});
  for (int i = 1; i < 65535; ++i) table.narrow(a, {2, 5}); // changes nothing but the stamp
  EXPECT_EQ(range(e), (Range{0, 250}));
}

TEST_F(Ranges, BoundsFloorDivisionsByTheirNumerators) {
  // c * (x // c) lies in (x - c, x]: a strided window's last index stays within its input.
  Expr s = table.createBacked(16, {2, kInf});
  Expr half = floorDiv(s + 1, 2);
  EXPECT_EQ(staticallyKnown(le(2 * half, s + 7)), std::optional<bool>(true));
  EXPECT_EQ(staticallyKnown(gt(2 * half, s - 2)), std::optional<bool>(true));
  EXPECT_EQ(staticallyKnown(le(2 * half, s - 5)), std::optional<bool>(false));
  Expr nested = floorDiv(half + 1, 2);
  EXPECT_EQ(staticallyKnown(le(2 * floorDiv(nested + 1, 2), nested + 3)), std::optional<bool>(true));
  EXPECT_EQ(staticallyKnown(le(3 * floorDiv(s, 2), s)), std::nullopt); // 3 (s // 2) may exceed s
  EXPECT_EQ(staticallyKnown(le(floorDiv(s, 3) + floorDiv(s, 2), s)), std::optional<bool>(true));
}
