// Property tests with a seeded RNG: random expression trees, kept unsimplified
// as a plain reference tree, against their canonical Expr.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include <capnp/message.h>
#include <capnp/serialize.h>

#include "kiln/common/error.h"
#include "kiln/sym/eval.h"
#include "kiln/sym/print.h"
#include "kiln/sym/symbol_table.h"
#include "kiln/sym/wire.h"
#include "random_tree.h"

using namespace kiln;
using namespace kiln::sym;

namespace {

constexpr int kExpressions = 3000;
constexpr int kBindings = 12;

struct Stats {
  int checked = 0, skipped = 0;
};

bool isOverflow(const Error& e) {
  return e.message().find("overflow") != std::string::npos;
}

} // namespace

TEST(SymProperty, SimplifyingKeepsTheValue) {
  test::Universe u;
  std::mt19937_64 rng(1);
  Stats stats;
  for (int i = 0; i < kExpressions; ++i) {
    test::RawTree tree;
    const int root = i % 4 == 3 ? tree.randomBool(rng, 3) : tree.randomInt(rng, 4);
    Expr e;
    try {
      e = tree.build(root, u);
    } catch (const Error& error) { // a folded division by zero, or an overflow
      ++stats.skipped;
      continue;
    }
    for (int b = 0; b < kBindings; ++b) {
      const auto values = u.randomValues(rng);
      std::optional<int64_t> expected;
      try {
        expected = tree.eval(root, values);
      } catch (const test::Undefined&) {
        continue;
      }
      try {
        ASSERT_EQ(evaluate(e, u.binding(values)), *expected)
            << tree.text(root) << "  ->  " << e << "  at " << u.describe(values);
        ++stats.checked;
      } catch (const Error& error) {
        ASSERT_TRUE(isOverflow(error)) << error.what() << ": " << tree.text(root) << " -> " << e;
        ++stats.skipped;
      }
    }
  }
  EXPECT_GT(stats.checked, kExpressions * kBindings / 2) << "skipped " << stats.skipped;
}

TEST(SymProperty, EqualPolynomialsAreTheSameNode) {
  test::Universe u;
  std::mt19937_64 rng(2);
  const std::vector<Expr> atoms = {u.s[0],
                                   u.s[1],
                                   u.s[2],
                                   u.s[3],
                                   floorDiv(u.s[0], 3),
                                   mod(u.s[2] + 1, 4),
                                   min(u.s[1], u.s[3]),
                                   max(u.s[2], u.s[3] + 2)};
  for (int i = 0; i < 2000; ++i) {
    // A polynomial as (coefficient, factors) terms, built in two orders.
    std::vector<std::pair<int64_t, std::vector<Expr>>> terms(1 + rng() % 5);
    for (auto& [coeff, factors] : terms) {
      coeff = static_cast<int64_t>(rng() % 21) - 10;
      factors.resize(rng() % 4);
      for (Expr& f : factors) f = atoms[rng() % atoms.size()];
    }
    auto buildTerm = [&](int64_t coeff, std::vector<Expr> factors, bool shuffled) {
      if (shuffled) std::shuffle(factors.begin(), factors.end(), rng);
      Expr product = u.table.integer(shuffled ? 1 : coeff);
      for (const Expr& f : factors) product = shuffled ? f * product : product * f;
      return shuffled ? product * coeff : product;
    };
    Expr forward = u.table.integer(0);
    for (const auto& [coeff, factors] : terms) forward = forward + buildTerm(coeff, factors, false);
    // The other order: shuffled terms, summed as a random binary tree, minus
    // and plus a random extra term so that cancellation is exercised too.
    std::vector<Expr> parts;
    for (const auto& [coeff, factors] : terms) parts.push_back(buildTerm(coeff, factors, true));
    std::shuffle(parts.begin(), parts.end(), rng);
    const Expr extra = buildTerm(static_cast<int64_t>(rng() % 7) + 1, {atoms[rng() % 8]}, false);
    parts.push_back(extra);
    while (parts.size() > 1) {
      const size_t at = rng() % (parts.size() - 1);
      parts[at] = parts[at] + parts[at + 1];
      parts.erase(parts.begin() + static_cast<long>(at) + 1);
    }
    const Expr backward = parts[0] - extra;
    ASSERT_EQ(forward, backward) << forward << "  vs  " << backward;
    // And a product of two sums equals the sum of the products of their terms.
    const Expr other = atoms[rng() % 8] * 2 - atoms[rng() % 8] + 3;
    Expr expanded = u.table.integer(0);
    for (const auto& [coeff, factors] : terms)
      expanded = expanded + buildTerm(coeff, factors, true) * other;
    ASSERT_EQ(forward * other, expanded);
  }
}

TEST(SymProperty, RangesContainEveryValue) {
  test::Universe u;
  std::mt19937_64 rng(3);
  int checked = 0;
  for (int i = 0; i < kExpressions; ++i) {
    test::RawTree tree;
    const bool boolean = i % 4 == 3;
    const int root = boolean ? tree.randomBool(rng, 3) : tree.randomInt(rng, 4);
    Expr e;
    try {
      e = tree.build(root, u);
    } catch (const Error&) {
      continue;
    }
    const Range r = range(e);
    const auto known = boolean ? staticallyKnown(e) : std::nullopt;
    for (int b = 0; b < kBindings; ++b) {
      const auto values = u.randomValues(rng);
      int64_t v;
      try {
        v = evaluate(e, u.binding(values));
      } catch (const Error&) {
        continue;
      }
      ASSERT_TRUE(r.contains(v)) << e << " = " << v << " outside " << toString(r) << " at "
                                 << u.describe(values);
      if (known) {
        ASSERT_EQ(v, *known ? 1 : 0) << e << " at " << u.describe(values);
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, kExpressions * kBindings / 2);
}

TEST(SymProperty, WireRoundTripGivesTheSameNode) {
  test::Universe u;
  std::mt19937_64 rng(4);
  for (int i = 0; i < kExpressions; ++i) {
    test::RawTree tree;
    const int root = i % 4 == 3 ? tree.randomBool(rng, 3) : tree.randomInt(rng, 4);
    Expr e;
    try {
      e = tree.build(root, u);
    } catch (const Error&) {
      continue;
    }
    capnp::MallocMessageBuilder message;
    toWire(e, message.initRoot<schema::SymExpr>());
    const auto words = capnp::messageToFlatArray(message);
    capnp::FlatArrayMessageReader reader(words);
    ASSERT_EQ(fromWire(reader.getRoot<schema::SymExpr>(), u.table), e) << e;
  }
}

TEST(SymProperty, SubstitutionAgreesWithEvaluation) {
  test::Universe u;
  std::mt19937_64 rng(5);
  for (int i = 0; i < kExpressions / 3; ++i) {
    test::RawTree tree;
    const int root = tree.randomInt(rng, 3);
    Expr e;
    try {
      e = tree.build(root, u);
    } catch (const Error&) {
      continue;
    }
    // s0 (a size) := s1 + s3 (both >= 0): inside s0's range, so e's rules still hold.
    Expr replaced;
    try {
      replaced = substitute(e, {{u.s[0], u.s[1] + u.s[3]}});
    } catch (const Error& error) { // a divisor folds to 0 there: e is undefined there too
      ASSERT_NE(error.message().find("by zero"), std::string::npos) << error.what() << ": " << e;
      continue;
    }
    for (int b = 0; b < kBindings; ++b) {
      auto values = u.randomValues(rng);
      values[0] = values[1] + values[3];
      int64_t expected;
      try {
        expected = evaluate(e, u.binding(values));
      } catch (const Error&) {
        continue;
      }
      ASSERT_EQ(evaluate(replaced, u.binding(values)), expected) << e << " -> " << replaced;
    }
  }
}

TEST(SymProperty, EqualRelationsAreTheSameNode) {
  test::Universe u;
  std::mt19937_64 rng(6);
  int checked = 0;
  for (int i = 0; i < kExpressions; ++i) {
    test::RawTree tree;
    const int x = tree.randomInt(rng, 2), y = tree.randomInt(rng, 2);
    const int p = tree.randomBool(rng, 2);
    Expr a, b, r;
    try {
      a = tree.build(x, u), b = tree.build(y, u), r = tree.build(p, u);
    } catch (const Error&) { // a folded division by zero, or an overflow
      continue;
    }
    try { // over integers a < b is a + 1 <= b, and b < a is !(a <= b)
      ASSERT_EQ(lt(a, b), le(a + 1, b)) << a << " < " << b;
      ASSERT_EQ(gt(a, b), ge(a, b + 1)) << a << " > " << b;
      ASSERT_EQ(logicalNot(le(a, b)), lt(b, a)) << a << " <= " << b;
      ASSERT_EQ(lt(2 * a, 2 * b + 1), le(a, b)) << a << ", " << b;
    } catch (const Error& error) {
      ASSERT_TRUE(isOverflow(error)) << error.what();
      continue;
    }
    // A boolean and its negation: never both, always one.
    ASSERT_EQ(logicalAnd(r, logicalNot(r)), u.table.boolean(false)) << r;
    ASSERT_EQ(logicalOr(logicalNot(r), r), u.table.boolean(true)) << r;
    ++checked;
  }
  EXPECT_GT(checked, kExpressions / 2);
}

// Divisors that share a factor with the dividend: g*(sum of monomials), with g
// a coefficient of either sign times a monomial. The result keeps the value,
// and a quotient or remainder node rebuilt from its own operands is itself.
TEST(SymProperty, SymbolicDivisorsWithCommonFactors) {
  test::Universe u;
  std::mt19937_64 rng(7);
  auto monomial = [&] {
    Expr m = u.table.integer(1);
    for (uint64_t i = rng() % 3; i > 0; --i) m = m * u.s[rng() % 4];
    return m;
  };
  auto polynomial = [&](size_t terms) {
    Expr p = u.table.integer(0);
    for (size_t i = 0; i < terms; ++i) p = p + monomial() * (static_cast<int64_t>(rng() % 7) - 3);
    return p;
  };
  int checked = 0;
  for (int i = 0; i < kExpressions; ++i) {
    const Expr g = monomial() * (static_cast<int64_t>(rng() % 7) - 3);
    const Expr r = g * polynomial(1 + rng() % 3) + polynomial(rng() % 2);
    const Expr b = g * polynomial(1 + rng() % 2);
    Expr q, m;
    try {
      q = floorDiv(r, b), m = mod(r, b);
    } catch (const Error&) { // a constant zero divisor
      continue;
    }
    for (const Expr e : {q, m}) {
      if (e.kind() != Kind::FloorDiv && e.kind() != Kind::Mod) continue;
      const Expr x = e.terms()[0].expr, y = e.terms()[1].expr;
      ASSERT_EQ(e.kind() == Kind::FloorDiv ? floorDiv(x, y) : mod(x, y), e) << e;
    }
    for (int k = 0; k < kBindings; ++k) {
      const auto values = u.randomValues(rng);
      const Binding at = u.binding(values);
      int64_t rv, bv;
      try {
        rv = evaluate(r, at), bv = evaluate(b, at);
      } catch (const Error&) {
        continue;
      }
      if (bv == 0) continue;
      int64_t quotient = rv / bv;
      if (quotient * bv != rv && ((rv < 0) != (bv < 0))) --quotient;
      ASSERT_EQ(evaluate(q, at), quotient)
          << r << " // " << b << " -> " << q << " at " << u.describe(values);
      ASSERT_EQ(evaluate(m, at), rv - quotient * bv)
          << r << " % " << b << " -> " << m << " at " << u.describe(values);
      ++checked;
    }
  }
  EXPECT_GT(checked, kExpressions * kBindings / 4);
}
