// simplify's guarantee, checked by enumeration: on every binding of a small
// domain the input guards (within the input ranges) hold exactly when the output
// does (guards, ranges, replacements) and exactly when its `checks` do. Random
// guard sets, each guard true at the hints as a trace records them.
#include <random>

#include <gtest/gtest.h>

#include "kiln/common/error.h"
#include "kiln/shapes/simplify.h"
#include "kiln/sym/eval.h"
#include "kiln/sym/print.h"

using namespace kiln;
using namespace kiln::sym;

namespace {

constexpr int64_t kLo = 0, kHi = 13; // the enumerated domain of every symbol

// True where every expression is defined and true (a guard program's reading).
bool allHold(const std::vector<Expr>& exprs, const Binding& b) {
  for (Expr e : exprs) {
    try {
      if (evaluate(e, b) == 0) return false;
    } catch (const Error&) {
      return false;
    }
  }
  return true;
}

bool withinRanges(const std::vector<Expr>& symbols, const Binding& b) {
  for (Expr s : symbols)
    if (!range(s).contains(b.at(s))) return false;
  return true;
}

Expr randomGuard(std::mt19937_64& rng, const std::vector<Expr>& s) {
  auto pick = [&] { return s[rng() % s.size()]; };
  auto k = [&](int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo + 1));
  };
  Expr a = pick(), b = pick();
  switch (rng() % 13) {
  case 0: return le(a, k(0, 12));
  case 1: return ge(a, k(0, 12));
  case 2: return lt(a, b + k(-2, 3));
  case 3: return eq(a, b);
  case 4: return eq(a * 2, b * 2);
  case 5: return eq(a, b + k(-3, 3));
  case 6: return eq(mod(a, k(2, 4)), 0);
  case 7: return le(a * b, k(4, 80));
  case 8: return ne(a, k(0, 12));
  case 9: return le(a + b, k(2, 20));
  case 10: return le(floorDiv(a, 2), b);
  case 11: return logicalOr(lt(a, k(2, 8)), eq(b, k(2, 8)));
  default: return eq(a, b * k(1, 3) - k(0, 2));
  }
}

} // namespace

TEST(SimplifyEquivalence, RandomGuardSetsByEnumeration) {
  std::mt19937_64 rng(20240609);
  int simplified = 0;
  for (int round = 0; round < 100; ++round) {
    SymbolTable table;
    std::vector<Expr> symbols = {
        table.createBacked(static_cast<int64_t>(2 + rng() % 10)),
        table.createBacked(static_cast<int64_t>(2 + rng() % 10), {2, kInf}),
        table.createBacked(static_cast<int64_t>(2 + rng() % 10), {0, 12})};
    if (round % 3 == 0) symbols.push_back(table.createUnbacked({0, 9}));
    Binding hints;
    for (Expr s : symbols) hints[s] = table.hint(s).value_or(4);
    std::vector<Expr> guards;
    const size_t want = 2 + rng() % 6;
    for (int tries = 0; guards.size() < want && tries < 200; ++tries) {
      Expr g = randomGuard(rng, symbols);
      if (g.asBoolean() || !allHold({g}, hints)) continue; // as traced: true at the hints
      guards.push_back(g);
    }
    shapes::Simplified s = shapes::simplify(table, guards);
    if (s.checks.size() < guards.size()) ++simplified;

    std::string input;
    for (Expr g : guards) input += toString(g) + "; ";
    std::vector<Expr> output = s.guards;
    for (const shapes::Replacement& r : s.replacements) output.push_back(eq(r.symbol, r.expr));
    Binding b;
    std::vector<int64_t> v(symbols.size(), kLo);
    for (;;) {
      for (size_t i = 0; i < symbols.size(); ++i) b[symbols[i]] = v[i];
      const bool in = withinRanges(symbols, b) && allHold(guards, b);
      bool out = allHold(output, b);
      for (const auto& [sym, r] : s.ranges) out = out && r.contains(b.at(sym));
      const bool checks = withinRanges(symbols, b) && allHold(s.checks, b);
      std::string at;
      for (size_t i = 0; i < symbols.size(); ++i)
        at += symbols[i].name() + "=" + std::to_string(v[i]) + " ";
      ASSERT_EQ(in, out) << "input: " << input << "\nat " << at;
      ASSERT_EQ(in, checks) << "input: " << input << "\nat " << at;
      size_t i = 0;
      while (i < v.size() && v[i] == kHi) v[i++] = kLo;
      if (i == v.size()) break;
      ++v[i];
    }
  }
  EXPECT_GT(simplified, 30) << "most random sets have something to simplify";
}
