// kiln::sym::Expr: a symbolic integer or boolean expression over the symbols of
// one SymbolTable (sizes s0, s1, ... and data-dependent values u0, u1, ...).
//
// An Expr is a cheap handle (one pointer) to an immutable node. Nodes are
// hash-consed by their SymbolTable: building an expression equal to an existing
// one returns that node, so `a == b` and hashing are pointer operations.
// Every builder returns the canonical form (see docs/sym.md):
//   - integer expressions are sums of products with integer coefficients:
//     Sum = constant + sorted (monomial, coefficient != 0) terms;
//     Product = sorted (atom, exponent >= 1) factors, degree >= 2;
//     atoms are symbols and the non-polynomial nodes FloorDiv, Mod, Min, Max.
//     A single monomial with coefficient 1 and no constant is the monomial itself.
//   - constants fold everywhere (// and % with floor semantics: the sign of a % b
//     is the sign of b); floor-div and mod rules for indexing; min/max decided
//     from ranges where they are known.
//   - relations are ==, != and <= (a < b is a + 1 <= b; > and >= swap operands),
//     normalised so that both sides have positive coefficients; decided from
//     ranges when possible. and/or fold x && !x and absorb x && (x || y).
// Builders throw kiln::Error{InvalidArgument} for a boolean where an integer is
// expected (and the reverse), for operands of different tables, for division by
// a constant zero and for int64 overflow of a folded constant; Error{TooLarge}
// when expanding a product of sums would give more than kMaxTerms terms.
//
// An Expr is valid while its SymbolTable lives.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace kiln::sym {

class SymbolTable;
namespace detail {
struct Node;
}

enum class Kind : uint8_t {
  Integer,
  Boolean,
  Symbol,
  Sum,     // constant + sum of coefficient * monomial
  Product, // product of atom ^ exponent
  FloorDiv,
  Mod,
  Min, // n-ary
  Max, // n-ary
  Eq,
  Ne,
  Lt, // accepted, never built: a < b is stored as a + 1 <= b
  Le,
  And, // n-ary
  Or,  // n-ary
  Not,
};

std::string_view kindName(Kind kind);

constexpr size_t kMaxTerms = size_t{1} << 16; // per expanded product

struct Term;
class Terms;

class Expr {
public:
  Expr() = default; // null: only to be assigned; builders refuse it
  explicit Expr(const detail::Node* node) : node_(node) {}

  bool isNull() const { return node_ == nullptr; }
  Kind kind() const;
  bool isBool() const; // boolean-valued (constant, relation or connective)
  std::optional<int64_t> asInteger() const;
  std::optional<bool> asBoolean() const;
  bool isSymbol() const { return !isNull() && kind() == Kind::Symbol; }
  const std::string& name() const; // a symbol's name; Error for other kinds

  // Children, by kind: Sum (monomial, coefficient) and constant(); Product
  // (atom, exponent); every other inner node (argument, 1). Leaves have none.
  Terms terms() const;
  int64_t constant() const; // a Sum's constant term, an Integer's value; 0 otherwise

  SymbolTable& table() const;
  uint64_t hash() const; // structural, stable across processes and runs
  const detail::Node* node() const { return node_; }

  friend bool operator==(Expr a, Expr b) { return a.node_ == b.node_; }
  friend bool operator!=(Expr a, Expr b) { return a.node_ != b.node_; }

private:
  const detail::Node* node_ = nullptr;
};

struct Term {
  Expr expr;
  int64_t coeff;
};

// The children of a node, as stored in it.
class Terms {
public:
  Terms(const Term* begin, size_t size) : begin_(begin), size_(size) {}
  const Term* begin() const { return begin_; }
  const Term* end() const { return begin_ + size_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const Term& operator[](size_t i) const { return begin_[i]; }

private:
  const Term* begin_;
  size_t size_;
};

// A deterministic total order (the canonical order of terms; by name for
// symbols, so it does not depend on creation order). 0 iff a == b.
int compare(Expr a, Expr b);

// Arithmetic. An int64_t operand becomes a constant of the other operand's table.
Expr operator+(Expr a, Expr b);
Expr operator+(Expr a, int64_t b);
Expr operator+(int64_t a, Expr b);
Expr operator-(Expr a, Expr b);
Expr operator-(Expr a, int64_t b);
Expr operator-(int64_t a, Expr b);
Expr operator-(Expr a);
Expr operator*(Expr a, Expr b);
Expr operator*(Expr a, int64_t b);
Expr operator*(int64_t a, Expr b);
Expr floorDiv(Expr a, Expr b); // floor(a / b)
Expr floorDiv(Expr a, int64_t b);
Expr mod(Expr a, Expr b); // a - b * floorDiv(a, b): the sign of b
Expr mod(Expr a, int64_t b);
Expr min(Expr a, Expr b);
Expr min(Expr a, int64_t b);
Expr min(int64_t a, Expr b);
Expr max(Expr a, Expr b);
Expr max(Expr a, int64_t b);
Expr max(int64_t a, Expr b);

// Relations over integers, and boolean connectives.
Expr eq(Expr a, Expr b);
Expr eq(Expr a, int64_t b);
Expr eq(int64_t a, Expr b);
Expr ne(Expr a, Expr b);
Expr ne(Expr a, int64_t b);
Expr ne(int64_t a, Expr b);
Expr lt(Expr a, Expr b);
Expr lt(Expr a, int64_t b);
Expr lt(int64_t a, Expr b);
Expr le(Expr a, Expr b);
Expr le(Expr a, int64_t b);
Expr le(int64_t a, Expr b);
Expr gt(Expr a, Expr b);
Expr gt(Expr a, int64_t b);
Expr gt(int64_t a, Expr b);
Expr ge(Expr a, Expr b);
Expr ge(Expr a, int64_t b);
Expr ge(int64_t a, Expr b);
Expr logicalAnd(Expr a, Expr b);
Expr logicalOr(Expr a, Expr b);
Expr logicalNot(Expr a);

} // namespace kiln::sym

template <> struct std::hash<kiln::sym::Expr> {
  size_t operator()(kiln::sym::Expr e) const { return static_cast<size_t>(e.hash()); }
};
