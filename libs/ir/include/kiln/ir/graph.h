// kiln::ir::Graph: an SSA graph of tensor operations over the symbols of one
// SymbolTable, FX-like. Every node defines one value, whose id is the node's
// index (an op with several results, such as split, defines one tuple value
// that getitem nodes take apart, as FX does); placeholders are the graph's
// inputs, call nodes apply a registered op to earlier values and attributes,
// and the outputs name the returned values. Nodes are in topological order: a
// node only uses values of smaller ids.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "kiln/ir/tensor_meta.h"
#include "kiln/sym/expr.h"

namespace kiln::ir {

using ValueId = uint32_t;

// What a value is: a tensor, a symbolic integer scalar (a size read off a
// tensor, an .item() result), or a tuple of tensors (the results of split,
// chunk, unbind; only getitem takes one apart).
class Value {
public:
  using Tuple = std::vector<TensorMeta>;

  Value(TensorMeta meta) : v_(std::move(meta)) {}
  Value(sym::Expr symInt) : v_(symInt) {}
  Value(Tuple tuple) : v_(std::move(tuple)) {}

  bool isTensor() const { return v_.index() == 0; }
  bool isSymInt() const { return v_.index() == 1; }
  bool isTuple() const { return v_.index() == 2; }
  // Each Error{InvalidArgument} for a value of another kind.
  const TensorMeta& tensor() const;
  sym::Expr symInt() const;
  const Tuple& tuple() const;

  friend bool operator==(const Value& a, const Value& b) { return a.v_ == b.v_; }
  friend bool operator!=(const Value& a, const Value& b) { return !(a == b); }

private:
  std::variant<TensorMeta, sym::Expr, Tuple> v_;
};

// "f32[s0, 768]", "sym(s0*2)" or "(f32[2, 3], f32[1, 3])".
std::string toString(const Value& v);

using AttrValue = std::variant<std::monostate, int64_t, double, bool, std::string,
                               std::vector<int64_t>, sym::Expr, std::vector<sym::Expr>, DType>;

// Equal values, where two NaN floats count as equal (an attribute of NaN is
// one spelling: `full(..., fill_value=nan)` must survive its own comparisons).
bool sameAttrValue(const AttrValue& a, const AttrValue& b);

struct Attr {
  std::string name;
  AttrValue value;
  friend bool operator==(const Attr& a, const Attr& b) {
    return a.name == b.name && sameAttrValue(a.value, b.value);
  }
};

std::string toString(const AttrValue& v); // "2", "1.5", "True", "[0, 1]", "f32", "None"

enum class NodeKind { Placeholder, Call };

struct Node {
  NodeKind kind = NodeKind::Call;
  std::string target; // a placeholder's name, or a call's op name
  std::vector<ValueId> inputs;
  std::vector<Attr> attrs; // in the op's schema order
  Value value;             // what the node defines

  const AttrValue* attr(std::string_view name) const; // nullptr when absent
};

class Graph {
public:
  explicit Graph(sym::SymbolTable& table) : table_(&table) {}

  sym::SymbolTable& symbols() const { return *table_; }

  // Builders. call() checks the arguments against the op's schema and infers
  // the result through the registry: Error{NotFound} for an unknown op,
  // Error{InvalidArgument} naming the op and argument for anything else wrong
  // (Error{Unsupported} for a broadcast the symbols' ranges cannot decide).
  // A placeholder's null storage offset becomes 0. Placeholders and outputs
  // are tensors or symbolic scalars, never tuples (Error{InvalidArgument}):
  // a graph's signature is flat, as Dynamo's is.
  ValueId placeholder(std::string name, Value value);
  ValueId call(std::string_view op, std::vector<ValueId> inputs, std::vector<Attr> attrs = {});
  void setOutputs(std::vector<ValueId> outputs);

  // Appends a node as given, unchecked (for readers and passes; verify() after).
  ValueId append(Node node);

  const std::vector<Node>& nodes() const { return nodes_; }
  const Node& node(ValueId id) const; // Error{InvalidArgument} when out of range
  const Value& value(ValueId id) const { return node(id).value; }
  const TensorMeta& meta(ValueId id) const { return value(id).tensor(); }
  const std::vector<ValueId>& outputs() const { return outputs_; }
  size_t size() const { return nodes_.size(); }

private:
  sym::SymbolTable* table_;
  std::vector<Node> nodes_;
  std::vector<ValueId> outputs_;
};

// The symbols a graph's values and attributes mention, by name.
std::vector<sym::Expr> mentionedSymbols(const Graph& graph);

} // namespace kiln::ir
