// Test helper: random expression trees kept as a plain, unsimplified reference
// (with its own tiny evaluator), and the symbols they range over.
#pragma once

#include <array>
#include <random>
#include <string>
#include <vector>

#include "kiln/sym/eval.h"
#include "kiln/sym/symbol_table.h"

namespace kiln::sym::test {

// Four symbols with different kinds of range: a size, a bounded size, an
// unbounded unbacked value and a small unbacked one.
struct Universe {
  SymbolTable table;
  std::array<Expr, 4> s = {table.createBacked(5), table.createBacked(4, {2, 10}),
                           table.createUnbacked(), table.createUnbacked({0, 6})};
  // Values drawn inside the ranges (unbounded ends cut to +-20).
  static constexpr int64_t kLo[4] = {0, 2, -20, 0};
  static constexpr int64_t kHi[4] = {20, 10, 20, 6};

  std::array<int64_t, 4> randomValues(std::mt19937_64& rng) const {
    std::array<int64_t, 4> v;
    for (int i = 0; i < 4; ++i)
      v[i] = kLo[i] + static_cast<int64_t>(rng() % static_cast<uint64_t>(kHi[i] - kLo[i] + 1));
    return v;
  }
  Binding binding(const std::array<int64_t, 4>& v) const {
    return {{s[0], v[0]}, {s[1], v[1]}, {s[2], v[2]}, {s[3], v[3]}};
  }
  std::string describe(const std::array<int64_t, 4>& v) const {
    std::string out;
    for (int i = 0; i < 4; ++i) out += s[i].name() + "=" + std::to_string(v[i]) + " ";
    return out;
  }
};

struct Undefined {}; // the reference evaluation divided by zero or overflowed

class RawTree {
public:
  enum Op {
    Const,
    Sym,
    Add,
    Sub,
    Mul,
    Neg,
    FloorDiv,
    Mod,
    Min,
    Max, // integer
    BoolConst,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    And,
    Or,
    Not, // boolean
  };
  struct Node {
    Op op;
    int64_t value; // Const, BoolConst; the symbol's index for Sym
    int a, b;
  };

  int randomInt(std::mt19937_64& rng, int depth) {
    if (depth == 0 || rng() % 5 == 0) {
      if (rng() % 2) return add({Const, static_cast<int64_t>(rng() % 21) - 10, -1, -1});
      return add({Sym, static_cast<int64_t>(rng() % 4), -1, -1});
    }
    static constexpr Op kOps[] = {Add,      Add,      Sub, Mul, Mul, Neg,
                                  FloorDiv, FloorDiv, Mod, Mod, Min, Max};
    const Op op = kOps[rng() % (sizeof kOps / sizeof kOps[0])];
    int a = randomInt(rng, depth - 1);
    if (op == Neg) return add({Neg, 0, a, -1});
    const bool division = op == FloorDiv || op == Mod;
    int b;
    if (division && rng() % 3 != 0) { // mostly by a constant, rarely 0
      int64_t k = static_cast<int64_t>(rng() % 21) - 10;
      if (k == 0 && rng() % 4 != 0) k = 1 + static_cast<int64_t>(rng() % 8);
      b = add({Const, k, -1, -1});
    } else if (division && rng() % 2 == 0) {
      b = randomMonomial(rng); // c*m, and often a dividend with a multiple of it
      if (rng() % 2) a = add({Add, 0, add({Mul, 0, randomInt(rng, 1), b}), a});
    } else
      b = randomInt(rng, depth - 1);
    return add({op, 0, a, b});
  }

  // k * s_i (* s_j), k in [-4, 4] without 0: a divisor of either sign.
  int randomMonomial(std::mt19937_64& rng) {
    int64_t k = static_cast<int64_t>(rng() % 8) - 4;
    if (k >= 0) ++k;
    int m = add({Sym, static_cast<int64_t>(rng() % 4), -1, -1});
    if (rng() % 2) m = add({Mul, 0, m, add({Sym, static_cast<int64_t>(rng() % 4), -1, -1})});
    return add({Mul, 0, add({Const, k, -1, -1}), m});
  }

  int randomBool(std::mt19937_64& rng, int depth) {
    if (depth == 0 || rng() % 4 == 0) {
      if (rng() % 8 == 0) return add({BoolConst, static_cast<int64_t>(rng() % 2), -1, -1});
      static constexpr Op kRelations[] = {Eq, Ne, Lt, Le, Gt, Ge};
      const Op op = kRelations[rng() % 6];
      const int a = randomInt(rng, 2);
      return add({op, 0, a, randomInt(rng, 2)});
    }
    static constexpr Op kOps[] = {And, Or, Not};
    const Op op = kOps[rng() % 3];
    const int a = randomBool(rng, depth - 1);
    if (op == Not) return add({Not, 0, a, -1});
    switch (rng() % 6) { // sometimes x op !x, or x op (x op' y), for the folding rules
    case 0: return add({op, 0, a, add({Not, 0, a, -1})});
    case 1: return add({op, 0, add({op == And ? Or : And, 0, randomBool(rng, depth - 1), a}), a});
    default: return add({op, 0, a, randomBool(rng, depth - 1)});
    }
  }

  int64_t eval(int i, const std::array<int64_t, 4>& v) const {
    const Node& n = nodes_[static_cast<size_t>(i)];
    auto x = [&] { return eval(n.a, v); };
    auto y = [&] { return eval(n.b, v); };
    int64_t r;
    switch (n.op) {
    case Const:
    case BoolConst: return n.value;
    case Sym: return v[static_cast<size_t>(n.value)];
    case Add:
      if (__builtin_add_overflow(x(), y(), &r)) throw Undefined{};
      return r;
    case Sub:
      if (__builtin_sub_overflow(x(), y(), &r)) throw Undefined{};
      return r;
    case Mul:
      if (__builtin_mul_overflow(x(), y(), &r)) throw Undefined{};
      return r;
    case Neg:
      if (__builtin_sub_overflow(int64_t{0}, x(), &r)) throw Undefined{};
      return r;
    case FloorDiv:
    case Mod: { // floor semantics, written out from the definition
      const int64_t p = x(), q = y();
      if (q == 0 || (p == INT64_MIN && q == -1)) throw Undefined{};
      int64_t quotient = p / q;
      if (quotient * q != p && ((p < 0) != (q < 0))) --quotient;
      return n.op == FloorDiv ? quotient : p - quotient * q;
    }
    case Min: return std::min(x(), y());
    case Max: return std::max(x(), y());
    case Eq: return x() == y();
    case Ne: return x() != y();
    case Lt: return x() < y();
    case Le: return x() <= y();
    case Gt: return x() > y();
    case Ge: return x() >= y();
    case And: { // strict, like the canonical evaluation
      const int64_t p = x(), q = y();
      return p && q;
    }
    case Or: {
      const int64_t p = x(), q = y();
      return p || q;
    }
    case Not: return !x();
    }
    throw Undefined{};
  }

  // Through the builders, which simplify as they go.
  Expr build(int i, Universe& u) const {
    const Node& n = nodes_[static_cast<size_t>(i)];
    auto x = [&] { return build(n.a, u); };
    auto y = [&] { return build(n.b, u); };
    switch (n.op) {
    case Const: return u.table.integer(n.value);
    case BoolConst: return u.table.boolean(n.value != 0);
    case Sym: return u.s[static_cast<size_t>(n.value)];
    case Add: return x() + y();
    case Sub: return x() - y();
    case Mul: return x() * y();
    case Neg: return -x();
    case FloorDiv: return floorDiv(x(), y());
    case Mod: return mod(x(), y());
    case Min: return min(x(), y());
    case Max: return max(x(), y());
    case Eq: return eq(x(), y());
    case Ne: return ne(x(), y());
    case Lt: return lt(x(), y());
    case Le: return le(x(), y());
    case Gt: return gt(x(), y());
    case Ge: return ge(x(), y());
    case And: return logicalAnd(x(), y());
    case Or: return logicalOr(x(), y());
    case Not: return logicalNot(x());
    }
    return Expr();
  }

  std::string text(int i) const {
    const Node& n = nodes_[static_cast<size_t>(i)];
    static const char* kNames[] = {"", "",   "+",  "-", "*",  "-", "//", "%",   "min", "max",
                                   "", "==", "!=", "<", "<=", ">", ">=", "and", "or",  "not"};
    switch (n.op) {
    case Const: return std::to_string(n.value);
    case BoolConst: return n.value ? "true" : "false";
    case Sym: return "s[" + std::to_string(n.value) + "]";
    case Neg:
    case Not: return std::string(kNames[n.op]) + "(" + text(n.a) + ")";
    case Min:
    case Max: return std::string(kNames[n.op]) + "(" + text(n.a) + ", " + text(n.b) + ")";
    default: return "(" + text(n.a) + " " + kNames[n.op] + " " + text(n.b) + ")";
    }
  }

private:
  int add(Node n) {
    nodes_.push_back(n);
    return static_cast<int>(nodes_.size()) - 1;
  }
  std::vector<Node> nodes_;
};

} // namespace kiln::sym::test
