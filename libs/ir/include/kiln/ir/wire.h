// Graphs on the wire: schemas/graph.capnp. The round trip keeps the structural
// hash; symbols travel with their hints and ranges.
#pragma once

#include <string>
#include <string_view>

#include "kiln/ir/graph.h"
#include "kiln/schema/graph.capnp.h"

namespace kiln::ir {

constexpr uint64_t kMaxWireWords = uint64_t{64} << 20; // traversal limit: 512 MiB

void toWire(const Graph& graph, schema::Graph::Builder out);

// A graph over `table`: its symbols are looked up by name there and declared
// when missing (an existing symbol keeps its hint and is narrowed to the range
// sent). The graph is verified. Error{Malformed} for anything that is not a
// valid graph: a bad id, an unknown op or enum value, wrong arguments, metas
// that inference disagrees with, a bad SymExpr, a Cap'n Proto decoding error.
Graph fromWire(schema::Graph::Reader in, sym::SymbolTable& table);

// The same as a flat message in bytes.
std::string toBytes(const Graph& graph);
Graph fromBytes(std::string_view bytes, sym::SymbolTable& table);

// The pieces, for other schemas that carry metas, values, attributes and
// symbols (codegen's plans). Readers throw Error{Malformed}; readSymbol
// declares the symbol in `table`, or narrows it when it exists.
void writeMeta(const TensorMeta& meta, schema::TensorMeta::Builder out);
TensorMeta readMeta(schema::TensorMeta::Reader in, sym::SymbolTable& table);
void writeValue(const Value& value, schema::Value::Builder out);
Value readValue(schema::Value::Reader in, sym::SymbolTable& table);
void writeAttr(const Attr& attr, schema::Attribute::Builder out);
Attr readAttr(schema::Attribute::Reader in, sym::SymbolTable& table);
void writeSymbol(sym::Expr symbol, schema::Symbol::Builder out);
void readSymbol(schema::Symbol::Reader in, sym::SymbolTable& table);

} // namespace kiln::ir
