#include "kiln/shapes/decide.h"

#include <chrono>

#include <gtest/gtest.h>

#include "kiln/common/error.h"

using namespace kiln;
using namespace kiln::sym;
using kiln::shapes::Answer;
using kiln::shapes::decide;
using kiln::shapes::Decision;

namespace {

struct Decide : ::testing::Test {
  SymbolTable table;
  Expr u0 = table.createUnbacked(Range::size()); // nonzero(x).shape[0]
  Expr u1 = table.createUnbacked();
  Expr u2 = table.createUnbacked();
  Expr s0 = table.createBacked(16);
};

} // namespace

TEST_F(Decide, AnswersFromRangesFirst) {
  Decision d = decide(ge(u0, 0));
  EXPECT_EQ(d.answer, Answer::True);
  EXPECT_EQ(d.how, "ranges");
  EXPECT_EQ(decide(lt(u0, 0)).answer, Answer::False);
  d = decide(ne(u1, 2), {ge(u1, 4)}); // the fact narrows u1 to [4, inf]
  EXPECT_EQ(d.answer, Answer::True);
  EXPECT_EQ(d.how, "ranges");
  d = decide(eq(u1 * 2, s0), {eq(u1, s0 - u1)}); // a replacement u1 := ...
  EXPECT_EQ(d.answer, Answer::True);
}

TEST_F(Decide, AsksZ3WhatRangesCannotSay) {
  Decision d = decide(le(u0, u2), {le(u0, u1), le(u1, u2)});
  EXPECT_EQ(d.answer, Answer::True);
  EXPECT_EQ(d.how, "z3");
  d = decide(lt(u1, u0), {lt(u0, u1)});
  EXPECT_EQ(d.answer, Answer::False);
  EXPECT_EQ(d.how, "z3");
  d = decide(eq(mod(u1, 2), 0), {eq(mod(u1, 4), 1)});
  EXPECT_EQ(d.answer, Answer::False);
}

TEST_F(Decide, SaysUnknownWhenItDependsOnTheValues) {
  Decision d = decide(ge(u0, 5));
  EXPECT_EQ(d.answer, Answer::Unknown);
  EXPECT_EQ(d.how, "depends on the values");
}

TEST_F(Decide, SaysUnknownOnTimeout) {
  // x^3 + y^3 == z^3 has no positive solutions (Fermat, n = 3): true, but far
  // beyond what Z3 proves in a millisecond.
  auto cube = [](Expr x) { return x * x * x; };
  std::vector<Expr> facts = {ge(u0, 1), ge(u1, 1), ge(u2, 1)};
  const auto start = std::chrono::steady_clock::now();
  Decision d = decide(ne(cube(u0) + cube(u1), cube(u2)), facts, {1, 1});
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - start);
  EXPECT_EQ(d.answer, Answer::Unknown);
  EXPECT_EQ(d.how.rfind("z3: ", 0), 0u) << d.how;
  EXPECT_LT(ms.count(), 2000);
}

TEST_F(Decide, DoesNotAskZ3AboutHugePowers) {
  Expr p = u1;
  for (int k = 1; k < 65; ++k) p = p * u1;
  Decision d = decide(eq(p, u2));
  EXPECT_EQ(d.answer, Answer::Unknown);
  EXPECT_EQ(d.how, "z3: an exponent above 64");
}

TEST_F(Decide, AssumesTheQuestionsDivisorsAreNonZero) {
  EXPECT_EQ(decide(eq(floorDiv(u1 * u2, u2), u1)).answer, Answer::True); // folded by libs/sym
  EXPECT_EQ(decide(ge(mod(u0, u1 * u1 + 1), 0)).answer, Answer::True);
}

TEST_F(Decide, RefusesBadQuestionsAndContradictoryFacts) {
  EXPECT_THROW(decide(u0 + 1), Error);
  EXPECT_THROW(decide(Expr()), Error);
  EXPECT_THROW(decide(ge(u0, 1), {u1}), Error);
  try {
    decide(ge(u1, 0), {gt(u1, 5), lt(u1, 3)});
    FAIL() << "contradictory facts";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
  }
  EXPECT_THROW(decide(ge(u1, 0), {lt(u0, u1), lt(u1, u2), lt(u2, u0)}), Error); // only z3 sees it
}
