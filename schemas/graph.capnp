# The graph IR on the wire (libs/ir): symbols, values, placeholders, call nodes
# and one output. Values are numbered in definition order: placeholders first,
# then each node's result, so a node may only name values with a smaller id.
@0xef46bece88649dc9;
using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("kiln::schema");

using Common = import "common.capnp";

# A symbol of the graph's SymbolTable. Bounds are int64; an unbounded end sets
# its flag and leaves the bound unused.
struct Symbol {
  name @0 :Text;
  hint :union {
    none @1 :Void;     # unbacked (data-dependent)
    value @2 :Int64;   # backed: the concrete size seen when tracing
  }
  lo @3 :Int64;
  hi @4 :Int64;
  loUnbounded @5 :Bool;
  hiUnbounded @6 :Bool;
}

# What a value is: a tensor, a symbolic integer scalar, or a tuple of tensors
# (the results of split, chunk, unbind; taken apart by getitem nodes).
struct Value {
  union {
    tensor @0 :Common.TensorMeta;
    symInt @1 :Common.SymExpr;
    tuple @2 :List(Common.TensorMeta);
  }
}

struct IntList { values @0 :List(Int64); }
struct SymExprList { values @0 :List(Common.SymExpr); }

struct Attribute {
  name @0 :Text;
  union {
    none @1 :Void;
    int @2 :Int64;
    float @3 :Float64;
    bool @4 :Bool;
    string @5 :Text;
    intList @6 :IntList;
    symExpr @7 :Common.SymExpr;
    symExprList @8 :SymExprList;
    dtype @9 :Common.DType;
  }
}

struct Placeholder {
  name @0 :Text;
  value @1 :UInt32;    # the value id it defines
}

struct Node {
  op @0 :Text;
  inputs @1 :List(UInt32);      # value ids; each defined before this node
  attributes @2 :List(Attribute);
  value @3 :UInt32;             # the value id of its result
}

struct Graph {
  symbols @0 :List(Symbol);
  values @1 :List(Value);        # indexed by value id
  placeholders @2 :List(Placeholder);
  nodes @3 :List(Node);          # in topological order
  outputs @4 :List(UInt32);
  # Conditions over the graph's symbols taken as true (SymbolTable::assume): the
  # trace's runtime asserts and the size equalities its guards ensure. Read
  # before the nodes, whose inference may need them.
  facts @5 :List(Common.SymExpr);
}
