#include "kiln/sym/eval.h"

#include <gtest/gtest.h>

#include "kiln/common/error.h"
#include "kiln/sym/print.h"
#include "kiln/sym/symbol_table.h"

using namespace kiln;
using namespace kiln::sym;

namespace {

struct Eval : ::testing::Test {
  SymbolTable table;
  Expr s0 = table.createBacked(6), s1 = table.createBacked(4);
  Expr u0 = table.createUnbacked();

  std::string errorOf(Expr e, const Binding& binding) {
    try {
      evaluate(e, binding);
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::InvalidArgument);
      return error.message();
    }
    return "no error";
  }
};

} // namespace

TEST_F(Eval, EvaluatesWithFloorSemantics) {
  EXPECT_EQ(evaluate(floorDiv(u0, 3), {{u0, -7}}), -3);
  EXPECT_EQ(evaluate(mod(u0, 3), {{u0, -7}}), 2);
  EXPECT_EQ(evaluate(mod(u0, -3), {{u0, 7}}), -2);
  EXPECT_EQ(evaluate(floorDiv(s0, u0), {{s0, 7}, {u0, -2}}), -4);
  EXPECT_EQ(evaluate(mod(s0, u0), {{s0, 7}, {u0, -2}}), -1);
  EXPECT_EQ(evaluate((s0 + 1) * (s0 - 1), {{s0, 4}}), 15);
  EXPECT_EQ(evaluate(min(s0, u0) + max(s1, 9), {{s0, 3}, {s1, 2}, {u0, -5}}), 4);
}

TEST_F(Eval, GivesBooleansAsZeroOrOne) {
  const Expr both = logicalAnd(lt(s0, s1), ne(u0, 0));
  EXPECT_EQ(evaluate(both, {{s0, 1}, {s1, 2}, {u0, 3}}), 1);
  EXPECT_EQ(evaluate(both, {{s0, 1}, {s1, 2}, {u0, 0}}), 0);
  EXPECT_EQ(evaluate(logicalNot(both), {{s0, 3}, {s1, 2}, {u0, 0}}), 1);
}

TEST_F(Eval, NamesAnUnboundSymbol) {
  EXPECT_EQ(errorOf(s0 * u0, {{s0, 2}}), "symbol u0 is not bound");
}

TEST_F(Eval, RefusesOverflowAndDivisionByZero) {
  EXPECT_NE(errorOf(s0 * s1, {{s0, int64_t{1} << 40}, {s1, int64_t{1} << 40}}).find("overflow"),
            std::string::npos);
  EXPECT_NE(errorOf(s0 * s0 * s0, {{s0, int64_t{1} << 22}}).find("overflow"), std::string::npos);
  EXPECT_NE(errorOf(floorDiv(u0, s0 - 1), {{u0, INT64_MIN}, {s0, 0}}).find("overflow"),
            std::string::npos);
  EXPECT_EQ(errorOf(floorDiv(s0, s1), {{s0, 1}, {s1, 0}}), "division by zero");
  EXPECT_EQ(errorOf(mod(s0, s1), {{s0, 1}, {s1, 0}}), "modulo by zero");
}

TEST_F(Eval, UsesHintsOfBackedSymbolsOnly) {
  EXPECT_EQ(evaluateWithHints(s0 * s1 + 1), 25);
  EXPECT_EQ(evaluateWithHints(lt(s1, s0)), 1);
  try {
    evaluateWithHints(s0 + u0);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "symbol u0 is unbacked: it has no hint");
  }
}

TEST_F(Eval, SubstitutesAndRecanonicalises) {
  EXPECT_EQ(substitute(s0 * s1 + s0, {{s1, s0}}), s0 * s0 + s0);
  EXPECT_EQ(substitute(floorDiv(u0, s1), {{s1, table.integer(1)}}), u0);
  EXPECT_EQ(substitute(s0 * s1 - u0, {{s0, u0 + 1}, {s1, table.integer(2)}}), u0 + 2);
  EXPECT_EQ(substitute(lt(s0, s1), {{s0, s1 - 1}}), table.boolean(true));
  const Expr untouched = max(s0, u0) + 3;
  EXPECT_EQ(substitute(untouched, {{s1, u0}}), untouched);
  SymbolTable other;
  EXPECT_THROW(substitute(s0 + 1, {{s0, other.createBacked(2)}}), Error);
  EXPECT_THROW(substitute(s0 + 1, {{s0, lt(s1, 2)}}), Error);
}

TEST_F(Eval, ListsFreeSymbolsByName) {
  const Expr e = logicalAnd(lt(u0, floorDiv(s1, 2)), eq(s0 * s1, 12));
  EXPECT_EQ(freeSymbols(e), (std::vector<Expr>{s0, s1, u0}));
  EXPECT_TRUE(freeSymbols(table.integer(3)).empty());
}
