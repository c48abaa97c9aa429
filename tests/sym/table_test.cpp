#include "kiln/sym/symbol_table.h"

#include <gtest/gtest.h>

#include <thread>

#include "kiln/common/error.h"
#include "kiln/sym/print.h"
#include "kiln/sym/range.h"

using namespace kiln;
using namespace kiln::sym;

TEST(SymbolTable, NumbersBackedAndUnbackedSymbols) {
  SymbolTable table;
  const Expr s0 = table.createBacked(8), s1 = table.createBacked(3, {2, 100});
  const Expr u0 = table.createUnbacked();
  EXPECT_EQ(s0.name(), "s0");
  EXPECT_EQ(s1.name(), "s1");
  EXPECT_EQ(u0.name(), "u0");
  EXPECT_EQ(table.hint(s0), 8);
  EXPECT_TRUE(table.isBacked(s1));
  EXPECT_FALSE(table.isBacked(u0));
  EXPECT_EQ(range(s0), Range::size());
  EXPECT_EQ(range(s1), (Range{2, 100}));
  EXPECT_EQ(range(u0), Range::unbounded());
  EXPECT_EQ(table.lookup("s1"), s1);
  EXPECT_FALSE(table.lookup("s9"));
  EXPECT_EQ(table.symbols(), (std::vector<Expr>{s0, s1, u0}));
}

TEST(SymbolTable, SkipsNamesTakenByDeclare) {
  SymbolTable table;
  table.declare("s0", 4, Range::size());
  EXPECT_EQ(table.createBacked(5).name(), "s1");
}

TEST(SymbolTable, RefusesBadDeclarations) {
  SymbolTable table;
  table.declare("batch", 4, Range::size());
  auto codeOf = [&](auto fn) {
    try {
      fn();
    } catch (const Error& e) {
      return e.code();
    }
    return ErrorCode::Internal;
  };
  EXPECT_EQ(codeOf([&] { table.declare("batch", 4, Range::size()); }), ErrorCode::AlreadyExists);
  EXPECT_EQ(codeOf([&] { table.declare("2x", 4, Range::size()); }), ErrorCode::InvalidArgument);
  EXPECT_EQ(codeOf([&] { table.declare("a-b", 4, Range::size()); }), ErrorCode::InvalidArgument);
  EXPECT_EQ(codeOf([&] { table.createBacked(-1); }), ErrorCode::InvalidArgument); // hint < 0
  EXPECT_EQ(codeOf([&] { table.createUnbacked({5, 4}); }), ErrorCode::InvalidArgument);
}

TEST(SymbolTable, NarrowsRangesButNeverEmptiesThemOrDropsTheHint) {
  SymbolTable table;
  const Expr s0 = table.createBacked(6);
  table.narrow(s0, {2, 64});
  table.narrow(s0, {0, 10});
  EXPECT_EQ(range(s0), (Range{2, 10}));
  EXPECT_THROW(table.narrow(s0, {20, 30}), Error);
  EXPECT_THROW(table.narrow(s0, {7, 10}), Error); // excludes the hint 6
  EXPECT_EQ(range(s0), (Range{2, 10}));
  EXPECT_THROW(table.narrow(s0 + 1, {0, 1}), Error); // not a symbol
}

TEST(SymbolTable, NarrowingLetsLaterBuildsSimplifyMore) {
  SymbolTable table;
  const Expr u0 = table.createUnbacked();
  const Expr before = mod(u0, 8);
  EXPECT_EQ(before.kind(), Kind::Mod);
  table.narrow(u0, {0, 7});
  EXPECT_EQ(mod(u0, 8), u0);
  EXPECT_EQ(before.kind(), Kind::Mod); // still valid, just less simple
  EXPECT_EQ(staticallyKnown(lt(u0, 8)), true);
}

TEST(SymbolTable, EqualExpressionsAreOneNode) {
  SymbolTable table;
  const Expr s0 = table.createBacked(2), s1 = table.createBacked(3);
  const Expr first = s0 * s1 + 4;
  const size_t nodes = table.nodeCount();
  const Expr second = 4 + s1 * s0;
  EXPECT_EQ(first, second);
  EXPECT_EQ(first.hash(), second.hash());
  EXPECT_EQ(table.nodeCount(), nodes);
  EXPECT_EQ(std::hash<Expr>()(first), std::hash<Expr>()(second));
}

TEST(SymbolTable, HashesAndOrderDependOnNamesNotCreationOrder) {
  SymbolTable a, b;
  const Expr a2 = a.declare("s2", std::nullopt, Range::size());
  const Expr a10 = a.declare("s10", std::nullopt, Range::size());
  const Expr b10 = b.declare("s10", std::nullopt, Range::size());
  const Expr b2 = b.declare("s2", std::nullopt, Range::size());
  EXPECT_EQ((a10 * 3 + a2).hash(), (b2 + b10 * 3).hash());
  EXPECT_EQ(toString(a10 + a2), "s2 + s10");
  EXPECT_EQ(toString(b10 + b2), "s2 + s10");
  EXPECT_LT(compare(a2, a10), 0);
}

TEST(SymbolTable, RefusesMixingTablesAndNullExpressions) {
  SymbolTable a, b;
  const Expr x = a.createBacked(2), y = b.createBacked(2);
  EXPECT_THROW(x + y, Error);
  EXPECT_THROW(lt(x, y), Error);
  EXPECT_THROW(Expr() + 1, Error);
  EXPECT_THROW(Expr().kind(), Error);
  EXPECT_EQ(toString(Expr()), "<null>");
}

TEST(SymbolTable, BuildsTheSameNodesFromSeveralThreads) {
  SymbolTable table;
  std::vector<Expr> s;
  for (int i = 0; i < 4; ++i) s.push_back(table.createBacked(i + 2));
  auto work = [&](std::vector<Expr>& out) {
    for (int i = 0; i < 5000; ++i)
      out.push_back(floorDiv(s[i % 4] * (i % 7 + 1) + s[(i + 1) % 4] * i, 4) + min(s[i % 4], 9));
  };
  std::vector<std::vector<Expr>> results(4);
  std::vector<std::thread> threads;
  for (auto& out : results) threads.emplace_back(work, std::ref(out));
  for (auto& thread : threads) thread.join();
  for (const auto& out : results) EXPECT_EQ(out, results[0]);
  const size_t nodes = table.nodeCount();
  std::vector<Expr> again;
  work(again);
  EXPECT_EQ(table.nodeCount(), nodes);
}

TEST(SymbolTable, FactsAnswerQuestionsTheRangesCannot) {
  SymbolTable t;
  Expr n = t.createBacked(12), u = t.createUnbacked(Range::size());
  Expr divides = eq(mod(n, u), 0);
  EXPECT_FALSE(staticallyKnown(divides).has_value());
  t.assume(divides);
  EXPECT_EQ(staticallyKnown(divides), std::optional<bool>(true));
  EXPECT_EQ(staticallyKnown(logicalNot(divides)), std::optional<bool>(false));
  EXPECT_EQ(t.facts(), std::vector<Expr>{divides});
  t.assume(divides); // once
  EXPECT_EQ(t.facts().size(), 1u);
}

TEST(SymbolTable, AConjunctionIsItsConjunctsAndNoRangeNarrows) {
  SymbolTable t;
  Expr u = t.createUnbacked();
  t.assume(logicalAnd(ge(u, 2), le(u, 9)));
  EXPECT_EQ(range(u), Range::unbounded()); // the facts stay as stated
  EXPECT_EQ(t.facts().size(), 2u);
  EXPECT_EQ(staticallyKnown(ge(u, 2)), std::optional<bool>(true));
  EXPECT_EQ(staticallyKnown(lt(u, 2)), std::optional<bool>(false));
  EXPECT_THROW(t.assume(t.boolean(false)), kiln::Error);
  EXPECT_THROW(t.assume(u + 1), kiln::Error);
}
