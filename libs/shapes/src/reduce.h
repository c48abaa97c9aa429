// The cheap part of simplify, shared with decide: ranges, replacements and
// divisibility to a fixpoint, in a private copy of the symbol table.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kiln/shapes/simplify.h"
#include "kiln/sym/symbol_table.h"

namespace kiln::shapes::detail {

struct Reduced {
  std::unique_ptr<sym::SymbolTable> table; // the caller's symbols, ranges narrowed
  std::vector<sym::Expr> guards;           // what is left (in `table`), input order
  std::vector<Replacement> replacements;   // in `table`
  bool unsatisfiable = false;
  std::vector<std::string> steps;

  sym::Expr substituted(sym::Expr e) const; // e (of `table`) with the replacements applied
  // The facts the replaced symbols' ranges add: lo <= expr <= hi where range(expr)
  // does not show it already.
  std::vector<sym::Expr> replacedRanges() const;
};

// Reads `guards` (boolean expressions of `table`) into a copy of `table` (with
// its hints if `hints`: a guard then may not exclude one).
Reduced reduce(const sym::SymbolTable& table, const std::vector<sym::Expr>& guards,
               bool hints = true);

// Error{InvalidArgument} unless `e` is a boolean expression of `table`.
void requireBoolean(const sym::SymbolTable& table, sym::Expr e, const std::string& what);

} // namespace kiln::shapes::detail
