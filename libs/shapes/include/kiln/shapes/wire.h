// The shapes service's requests and replies (schemas/shapes.capnp) to and from
// libs/shapes' types: one implementation for the service and the client SDK.
// Readers throw Error{Malformed} for what does not decode and
// Error{InvalidArgument} for well-formed nonsense (an undeclared symbol).
#pragma once

#include <string>
#include <vector>

#include "kiln/schema/graph.capnp.h"
#include "kiln/schema/shapes.capnp.h"
#include "kiln/shapes/constraints.h"
#include "kiln/shapes/decide.h"
#include "kiln/shapes/simplify.h"
#include "kiln/sym/symbol_table.h"

namespace kiln::shapes {

// Symbols: name, hint (none for unbacked) and range.
void writeSymbol(sym::Expr symbol, sym::Range range, schema::Symbol::Builder out);
void writeSymbols(const sym::SymbolTable& table,
                  capnp::List<schema::Symbol>::Builder out); // sized table.symbols()
// Declares each in `table`; Error{InvalidArgument} for a name declared twice.
void readSymbols(capnp::List<schema::Symbol>::Reader in, sym::SymbolTable& table);

// An expression naming declared symbols only (Error{InvalidArgument} naming
// the first other one, with `what` saying where it was).
sym::Expr readExpr(schema::SymExpr::Reader in, sym::SymbolTable& table, const std::string& what);
std::vector<sym::Expr> readExprs(capnp::List<schema::SymExpr>::Reader in, sym::SymbolTable& table,
                                 const std::string& what);
void writeExprs(const std::vector<sym::Expr>& exprs, capnp::List<schema::SymExpr>::Builder out);

Options readOptions(schema::ShapesOptions::Reader in);
void writeOptions(const Options& options, schema::ShapesOptions::Builder out);

DimSpec readDim(schema::DimSpec::Reader in, sym::SymbolTable& table);
void writeDim(const DimSpec& dim, schema::DimSpec::Builder out);

void writeSimplified(const Simplified& s, schema::SimplifyReply::Builder out);
Simplified readSimplified(schema::SimplifyReply::Reader in, sym::SymbolTable& table);

void writeDecision(const Decision& d, schema::DecideReply::Builder out);
Decision readDecision(schema::DecideReply::Reader in);

void writeReport(const ConstraintReport& r, schema::CheckConstraintsReply::Builder out);
// The asserts' conditions are read over `table`'s symbols.
ConstraintReport readReport(schema::CheckConstraintsReply::Reader in, sym::SymbolTable& table);

} // namespace kiln::shapes
