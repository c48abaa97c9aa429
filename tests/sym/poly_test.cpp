#include <gtest/gtest.h>

#include "kiln/common/error.h"
#include "kiln/sym/print.h"
#include "kiln/sym/symbol_table.h"

using namespace kiln;
using namespace kiln::sym;

namespace {

struct Poly : ::testing::Test {
  SymbolTable table;
  Expr s0 = table.createBacked(4), s1 = table.createBacked(6), s2 = table.createBacked(8);
};

} // namespace

TEST_F(Poly, CancelsCommutedProducts) {
  EXPECT_EQ((s0 * s1 - s1 * s0).asInteger(), 0);
  EXPECT_EQ(s0 - s0, table.integer(0));
}

TEST_F(Poly, FoldsConstants) {
  EXPECT_EQ(2 * (s0 + 1) - 2, 2 * s0);
  EXPECT_EQ(toString(2 * (s0 + 1) - 2), "2*s0");
  EXPECT_EQ((table.integer(6) * 7 - 2).asInteger(), 40);
  EXPECT_EQ(0 * s0, table.integer(0));
  EXPECT_EQ(1 * s0 + 0, s0);
}

TEST_F(Poly, ExpandsProductsOfSums) {
  EXPECT_EQ((s0 + 1) * (s0 - 1), s0 * s0 - 1);
  EXPECT_EQ(toString((s0 + 1) * (s0 - 1)), "s0^2 - 1");
  EXPECT_EQ(toString((s0 + s1) * (s0 + s1)), "s0^2 + 2*s0*s1 + s1^2");
  EXPECT_EQ((s0 + s1) * (s0 - s1), s0 * s0 - s1 * s1);
}

TEST_F(Poly, OrdersTermsByDegreeThenByName) {
  EXPECT_EQ(toString(s2 + 4 + s1 * s0 + s0 + s1 * s1 * s0), "s0*s1^2 + s0*s1 + s0 + s2 + 4");
}

TEST_F(Poly, ExposesTermsConstantsAndExponents) {
  const Expr sum = 3 * s1 * s0 - s2 + 5;
  ASSERT_EQ(sum.kind(), Kind::Sum);
  EXPECT_EQ(sum.constant(), 5);
  ASSERT_EQ(sum.terms().size(), 2u);
  EXPECT_EQ(sum.terms()[0].expr, s0 * s1);
  EXPECT_EQ(sum.terms()[0].coeff, 3);
  EXPECT_EQ(sum.terms()[1].expr, s2);
  EXPECT_EQ(sum.terms()[1].coeff, -1);
  const Expr product = s1 * s0 * s0;
  ASSERT_EQ(product.kind(), Kind::Product);
  EXPECT_EQ(product.terms()[0].expr, s0);
  EXPECT_EQ(product.terms()[0].coeff, 2);
  EXPECT_EQ(product.terms()[1].expr, s1);
  EXPECT_EQ(product.terms()[1].coeff, 1);
  EXPECT_EQ(s0.kind(), Kind::Symbol);
  EXPECT_TRUE(s0.terms().empty());
}

TEST_F(Poly, RefusesOverflowAndBooleans) {
  const auto maxValue = std::numeric_limits<int64_t>::max();
  EXPECT_THROW(table.integer(maxValue) + 1, Error);
  EXPECT_THROW((s0 + maxValue) * 2, Error);
  EXPECT_THROW(-table.integer(std::numeric_limits<int64_t>::min()), Error);
  EXPECT_THROW(s0 + lt(s0, s1), Error);
  EXPECT_THROW(table.boolean(true) * 2, Error);
}

TEST_F(Poly, RefusesExpansionsOverTheTermLimit) {
  std::vector<Expr> symbols;
  Expr a = table.integer(0), b = table.integer(0);
  for (int i = 0; i < 300; ++i) {
    const Expr u = table.createUnbacked();
    a = a + u;
    b = b + 2 * u * u;
  }
  try {
    a* b;
    FAIL() << "expanded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::TooLarge);
  }
}
