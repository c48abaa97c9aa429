// kiln::shapes::simplify: a symbolic shape guard set made minimal.
//
// The guards a trace recorded (each one true at the symbols' hints: the branch
// the trace took) come back as
//   - ranges: every single-symbol bound (`s0 > 2`, `2*s0 <= 9`, `u0 == 3`) merged
//     into its symbol's range, tightened by divisibility (`s0 % 8 == 0` and
//     `s0 >= 2` give [8, inf]);
//   - replacements: an equality solved for one of its symbols (`s0 == s1`,
//     `s0*2 == s1*2`, `s2 == s0*s1`) gives symbol := expression, applied to every
//     other guard and replacement;
//   - guards: what is left, each one not implied by the ranges or by the others
//     (Z3, each query limited to `timeoutMs`); divisibility facts stay here.
// Equivalence: for every binding of the symbols, the input guards hold and each
// symbol lies in its input range iff the output guards hold, each symbol lies in
// its output range and each replaced symbol equals its expression. `checks`
// lists that conjunction as relations, less what the input ranges give: a guard
// program checking them checks the same thing as one checking the input guards.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "kiln/sym/expr.h"
#include "kiln/sym/range.h"
#include "kiln/sym/symbol_table.h"

namespace kiln::shapes {

struct Options {
  unsigned timeoutMs = 200; // per Z3 query
  unsigned budgetMs = 2000; // for all the Z3 queries of one call; then guards are kept as they are
};

struct Replacement {
  sym::Expr symbol;
  sym::Expr expr; // free of every replaced symbol
};

struct Simplified {
  std::vector<sym::Expr> guards;                        // in input order
  std::vector<Replacement> replacements;                // in the order found
  std::vector<std::pair<sym::Expr, sym::Range>> ranges; // every symbol of the table, in its order
  bool unsatisfiable = false;     // no binding satisfies the input: guards is {false}
  std::vector<std::string> steps; // what was done to which guard, one line each (explain)

  // Replacements as `symbol == expr`, the bounds of the ranges that neither the
  // table's ranges nor a replacement's expression give, then the guards.
  std::vector<sym::Expr> checks;
  // The range found for a symbol; Error{NotFound} for one not in the table.
  sym::Range rangeOf(sym::Expr symbol) const;
};

// Simplifies `guards` (boolean expressions over `table`'s symbols, true at the
// hints) under the symbols' ranges and hints. The results are expressions of
// `table`; its ranges are not narrowed. Error{InvalidArgument} for a guard that
// is not boolean, belongs to another table, or is false at the hints.
Simplified simplify(sym::SymbolTable& table, const std::vector<sym::Expr>& guards,
                    const Options& options = {});

} // namespace kiln::shapes
