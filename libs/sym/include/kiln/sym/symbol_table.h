// kiln::sym::SymbolTable: the symbols of one compilation (their names, hints and
// ranges) and the intern table of every expression node built over them.
//
// Symbols are
//   - backed: sized from an input ("s0", "s1", ...): they carry a hint, the
//     concrete size seen when tracing, and may decide control flow (at the cost
//     of a guard, which is the caller's business);
//   - unbacked: data-dependent (.item(), nonzero: "u0", "u1", ...): no hint,
//     only a range.
// A symbol's range can only be narrowed, so every simplification made earlier
// under a wider range stays valid. Nodes refer to a symbol by its identity
// (its name), never by its hint. 0/1 specialisation and duck sizing are the
// caller's business: create a symbol with range [2, inf] where that applies.
//
// Thread safety: a table may be used from several threads at once. Node
// creation and symbol creation take the table's mutex (briefly: one hash-table
// probe); ranges are atomics, so a reader sees either the old or the narrowed
// bounds, both sound. Nodes live until the table is destroyed.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/sym/expr.h"
#include "kiln/sym/range.h"

namespace kiln::sym {

namespace detail {
class Table;
}

class SymbolTable {
public:
  SymbolTable();
  ~SymbolTable();
  SymbolTable(const SymbolTable&) = delete; // nodes point at their table
  SymbolTable& operator=(const SymbolTable&) = delete;

  Expr integer(int64_t value);
  Expr boolean(bool value);

  // A new backed symbol s<n> with this hint; Error{InvalidArgument} when the
  // range does not contain the hint.
  Expr createBacked(int64_t hint, Range range = Range::size());
  // A new unbacked symbol u<n>: no hint.
  Expr createUnbacked(Range range = Range::unbounded());
  // A symbol with a chosen name (an identifier: [A-Za-z_][A-Za-z0-9_]*);
  // Error{AlreadyExists} if the name is taken, Error{InvalidArgument} if it is
  // not an identifier or the hint lies outside the range.
  Expr declare(std::string_view name, std::optional<int64_t> hint, Range range);

  std::optional<Expr> lookup(std::string_view name) const;
  std::vector<Expr> symbols() const; // in creation order

  // Of a symbol of this table (Error{InvalidArgument} otherwise).
  std::optional<int64_t> hint(Expr symbol) const;
  bool isBacked(Expr symbol) const { return hint(symbol).has_value(); }
  // Intersects the symbol's range with `range`. Error{InvalidArgument} when
  // the result would be empty or exclude the symbol's hint.
  void narrow(Expr symbol, Range range);

  // Facts: boolean expressions taken as true from now on because something
  // checks them at run time (a deferred runtime assert on unbacked symbols,
  // as torch does). staticallyKnown() answers a question that is a fact (true) or
  // the negation of one (false); a conjunction is its conjuncts. A fact never
  // narrows a range: expressions built later would fold the very condition
  // the runtime must check (kiln::shapes::decide reasons with facts' bounds).
  // Like ranges, facts only accumulate. Error{InvalidArgument} for a
  // non-boolean or a constant-false fact.
  void assume(Expr fact);
  std::vector<Expr> facts() const; // in the order assumed
  bool isFact(Expr condition) const;

  size_t nodeCount() const; // interned nodes, for tests and benchmarks

  detail::Table& impl() const { return *impl_; } // for libs/sym's own sources

private:
  std::unique_ptr<detail::Table> impl_;
};

} // namespace kiln::sym
