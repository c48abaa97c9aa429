// Expressions on the wire: schemas/common.capnp's SymExpr.
//
// A Sum is written as add(terms..., constant) with each term as the monomial or
// mul(coefficient, factors...); a Product repeats a factor once per unit of its
// exponent (up to kMaxWireExponent); relations are eq/ne/lt/le. Reading accepts
// any tree of the schema's ops (gt/ge included) and re-canonicalises it through
// the builders, so a round trip gives back the same node.
#pragma once

#include "kiln/schema/common.capnp.h"
#include "kiln/sym/expr.h"

namespace kiln::sym {

constexpr int kMaxWireDepth = 256;       // deeper SymExpr trees are Malformed
constexpr int64_t kMaxWireExponent = 64; // larger exponents are TooLarge to write

void toWire(Expr e, schema::SymExpr::Builder out);

// Symbols are resolved by name in `table`; a name the table does not know is
// declared there as a symbol without hint and with an unbounded range (the wire
// form carries neither). Error{Malformed} for an unknown op or union member,
// wrong arity, a boolean where an integer is expected (or the reverse), a
// symbol name that is not an identifier, division by a constant zero, nesting
// deeper than kMaxWireDepth, or a Cap'n Proto decoding failure.
Expr fromWire(schema::SymExpr::Reader in, SymbolTable& table);

} // namespace kiln::sym
