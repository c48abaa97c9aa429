// The op registry: one entry per op, with its schema (the arguments it takes)
// and the inference of its result over symbolic sizes (shape, strides, dtype)
// with PyTorch's broadcasting and type-promotion rules.
//
// Arguments map onto a node as follows: Tensor, SymInt and Tuple arguments are
// inputs (value ids) in schema order, a TensorList takes all remaining inputs;
// a Scalar argument is either the next input (a tensor or a symbolic scalar) or, when the node has
// an attribute of its name, that attribute (int, float, bool or SymExpr); every other argument is
// an attribute named as in the schema. An optional Tensor argument is absent when the inputs run
// out. The argument a mutation op writes, when it is the schema's last (an out= form's `out`), is
// the last input: a TensorList or an absent optional argument before it cannot take it.
// An optional Tensor or Scalar argument left out before one given as an input
// is spelled as an attribute of its name with no value (None): `clamp(x, t,
// min=None)` clamps from above. Attributes equal to their default, and None
// attributes nothing needs, are dropped, so one call has one spelling.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/common/error.h"
#include "kiln/ir/graph.h"

namespace kiln::sym {
class SymbolTable;
}

namespace kiln::ir {

// Error{Unsupported} of an inference the symbols' ranges and the table's facts
// cannot decide, where `condition` is what must hold for the call to be valid.
// A tracer may check it at run time instead, as torch._check does for unbacked
// symbols: an _assert_scalar node before the call makes it a fact, and the
// call is then inferred again.
class Undecided : public Error {
public:
  Undecided(std::string message, sym::Expr condition)
      : Error(ErrorCode::Unsupported, std::move(message)), condition_(condition) {}
  sym::Expr condition() const { return condition_; }

private:
  sym::Expr condition_;
};

enum class ArgKind {
  Tensor,
  TensorList, // every remaining input (at least one)
  Tuple,      // a tuple input (getitem's)
  Scalar,     // a tensor or symbolic scalar input, or a number attribute
  SymInt,     // a symbolic scalar input
  Int,        // int attribute
  IntList,    // int list attribute (an int is taken as a one-element list)
  SymIntList, // sizes: int list or SymExpr list attribute
  Float,
  Bool,
  DType,
  String,
  Symbol,    // SymExpr attribute: a fresh unbacked symbol the node binds (ops_data.cpp)
  Condition, // SymExpr attribute: a boolean expression
};

std::string_view argKindName(ArgKind kind);

struct ArgSpec {
  std::string name;
  ArgKind kind;
  bool optional = false;       // may be absent (None)
  AttrValue defaultValue = {}; // monostate: no default
  bool keywordOnly = false;    // in torch's Python signature, after the `*` (alpha, dtype=)
};

class OpCall;
// Gives the result's Value: a tensor, a symbolic scalar or a tuple of tensors.
using InferFn = Value (*)(const OpCall& call);
// Emits core ops computing `node` into `graph`, where `inputs` are its inputs,
// and returns the value standing for its result (see passes.h: decompose).
using DecomposeFn = ValueId (*)(Graph& graph, const Node& node, const std::vector<ValueId>& inputs);
// Rewrites a valid call's attributes into their one spelling (dims non-negative, dim sets sorted),
// so that calls meaning the same hash and compare equal.
using CanonicalFn = void (*)(const OpCall& call, const Value& result, std::vector<Attr>& attrs);

struct OpInfo {
  std::string name;
  std::vector<ArgSpec> args;
  InferFn infer;
  DecomposeFn decompose = nullptr; // set for composite ops
  // The argument it writes, by schema index, for a mutation op: 0 (`self`) for
  // an in-place form ("add_"), the trailing `out` for an out= form ("add_out").
  // Its result is that tensor, with that tensor's meta. Such nodes have an
  // effect: DCE keeps them and CSE neither merges them nor reuses a call from
  // before them, until functionalization rewrites them as `functional` and a
  // copy. The written argument is the schema's first or last, so that it is the
  // node's first or last input.
  std::optional<size_t> mutates = std::nullopt;
  // For a mutation op, the pure op whose result it writes ("add" for add_ and
  // add_out); it takes the same arguments, less an out= form's `out`.
  std::string functional = {};
  CanonicalFn canonical = nullptr;
  // The node does something besides giving its value (a runtime assert): DCE
  // keeps it.
  bool effect = false;
};

// An out= form "<op>_out": `functional`'s schema plus a trailing Tensor `out`
// that it writes (bound to the node's last input).
bool isOutForm(const OpInfo& op);

const OpInfo* findOp(std::string_view name); // nullptr when unknown
// Whether the op always gives a view of its input (its value aliases the
// input's storage with the inferred layout): view, permute, transpose, ...,
// detach (all of it, without grad).
// reshape, flatten and contiguous only sometimes do, so are not among them.
bool isViewOp(std::string_view op);
const OpInfo& getOp(std::string_view name);  // Error{NotFound} when unknown
std::vector<std::string> opNames();          // sorted

// Checks the arguments against the op's schema, puts the attributes in schema
// order without those equal to their default, and infers the result.
// Error{NotFound} for an unknown op; Error{InvalidArgument} saying which op and
// argument is wrong: a missing or surplus input or attribute, a wrong kind, a
// wrong dtype, sizes that do not broadcast, a dim out of range.
Value inferCall(std::string_view op, const std::vector<const Value*>& inputs,
                std::vector<Attr>& attrs, sym::SymbolTable& table);

// The arguments of one call, bound to the schema, as inference sees them.
class OpCall {
public:
  OpCall(const OpInfo& op, const std::vector<const Value*>& inputs, const std::vector<Attr>& attrs,
         sym::SymbolTable& table);

  const OpInfo& op() const { return *op_; }
  // The same arguments bound to another op of the same schema.
  OpCall rebind(const OpInfo& op) const { return OpCall(op, *inputs_, *attrs_, *table_); }
  sym::SymbolTable& table() const { return *table_; }
  const std::vector<const Value*>& inputs() const { return *inputs_; }
  const std::vector<Attr>& attrs() const { return *attrs_; }

  bool takes(std::string_view arg) const; // the schema has this argument
  bool has(std::string_view arg) const;   // present (not None)
  const TensorMeta& tensor(std::string_view arg) const;
  std::vector<const TensorMeta*> tensors(std::string_view arg) const; // a TensorList
  const Value::Tuple& tuple(std::string_view arg) const;
  const Value* input(std::string_view arg) const;    // a Scalar/Tensor/SymInt bound to an input
  const AttrValue& attr(std::string_view arg) const; // the attribute or its default
  int64_t intArg(std::string_view arg) const;
  std::vector<int64_t> intList(std::string_view arg) const;
  Shape symIntList(std::string_view arg) const;
  // A Scalar argument that must be an integer: a symbolic scalar input, or an
  // int or SymExpr attribute.
  sym::Expr symInt(std::string_view arg) const;
  double floatArg(std::string_view arg) const;
  bool boolArg(std::string_view arg) const;
  DType dtype(std::string_view arg) const;
  std::string string(std::string_view arg) const;

  // Error{InvalidArgument}: "<op>: argument '<arg>': <message>".
  [[noreturn]] void fail(std::string_view arg, const std::string& message) const;

private:
  struct Bound {
    const Value* input = nullptr; // a TensorList's first
    std::vector<const Value*> list;
    const AttrValue* attr = nullptr;
  };
  const Bound& bound(std::string_view arg) const;

  const OpInfo* op_;
  const std::vector<const Value*>* inputs_;
  const std::vector<Attr>* attrs_;
  sym::SymbolTable* table_;
  std::vector<Bound> bound_; // per schema argument
};

} // namespace kiln::ir
