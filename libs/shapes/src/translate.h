// Moving an expression from one symbol table to another.
#pragma once

#include <functional>
#include <string>

#include "kiln/sym/expr.h"
#include "kiln/sym/symbol_table.h"

namespace kiln::shapes::detail {

// The name a symbol takes in the target table (default: its own).
using Rename = std::function<std::string(sym::Expr symbol)>;

// `e` rebuilt in `to` through the builders (so canonical under `to`'s ranges). A
// symbol becomes the symbol of `to` with its (renamed) name; a missing one is
// declared there with the source symbol's hint and range.
sym::Expr translate(sym::Expr e, sym::SymbolTable& to, const Rename& rename = {});

// A copy of every symbol of `from` (name, range, and hint if `hints`) declared in `to`.
void copySymbols(const sym::SymbolTable& from, sym::SymbolTable& to, bool hints = true);

} // namespace kiln::shapes::detail
