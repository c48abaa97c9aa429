# Requests and replies of the shapes service (docs/services.md): symbolic-shape
# reasoning over libs/sym expressions (libs/shapes). Members 0 and 1 are the verbs
# every service answers (see Common.CommonRequest).
#
# Each request declares its symbols (name, hint, range: Graph.Symbol); every
# expression is a Common.SymExpr over those names only (a name the request does
# not declare is Error{invalidArgument}). Nothing is kept between requests.
@0x95886e1d650844ec;
using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("kiln::schema");
using Common = import "common.capnp";
using Graph = import "graph.capnp";

struct ShapesOptions {
  timeoutMs @0 :UInt32 = 200;     # per Z3 query
  budgetMs @1 :UInt32 = 2000;     # all the Z3 queries of one request
}

# simplify: guards (booleans, each true at the hints) -> the same condition as
# ranges + replacements + the guards no others imply.
struct SimplifyRequest {
  symbols @0 :List(Graph.Symbol);
  guards @1 :List(Common.SymExpr);
  options @2 :ShapesOptions;
}

struct Replacement {
  symbol @0 :Text;
  expr @1 :Common.SymExpr;        # free of every replaced symbol
}

struct SimplifyReply {
  guards @0 :List(Common.SymExpr);          # what is left, in input order
  replacements @1 :List(Replacement);       # symbol := expr, in the order found
  ranges @2 :List(Graph.Symbol);            # every declared symbol with its range
  checks @3 :List(Common.SymExpr);          # the whole result as relations (kiln/shapes/simplify.h)
  unsatisfiable @4 :Bool;                   # no binding satisfies the guards
  steps @5 :List(Text);                     # what was done, one line each
}

# decide: does `question` hold for every binding satisfying `facts`?
struct DecideRequest {
  symbols @0 :List(Graph.Symbol);
  question @1 :Common.SymExpr;
  facts @2 :List(Common.SymExpr);
  options @3 :ShapesOptions;
}

enum Answer {
  unknown @0;       # depends on the values, or not found in time
  alwaysTrue @1;
  alwaysFalse @2;
}

struct DecideReply {
  answer @0 :Answer;
  how @1 :Text;     # "ranges", "z3", "z3: timeout", "depends on the values"
}

# checkConstraints: the guards of a trace against the user's dynamic_shapes.
struct DimSpec {
  source @0 :Text;                # "x.size(0)"
  symbol @1 :Text;                # the trace's symbol for it
  dim @2 :Text;                   # the user's Dim name; one name = one Dim
  min @3 :Int64 = 0;              # below 2 reads as 2 (0 and 1 are specialized)
  max @4 :Int64 = 9223372036854775807;  # INT64_MAX: unbounded
  derived @5 :Common.SymExpr;     # what the user derived this Dim from (when hasDerived)
  hasDerived @6 :Bool;
}

struct CheckConstraintsRequest {
  symbols @0 :List(Graph.Symbol);
  dims @1 :List(DimSpec);
  guards @2 :List(Common.SymExpr);
  options @3 :ShapesOptions;
}

enum ViolationKind {
  equal @0;       # two Dims the guards make equal
  static @1;      # a Dim the guards pin to a constant
  range @2;       # fewer valid values than declared
  derived @3;     # a Dim the guards make a function of others
  divisible @4;   # a Dim the guards require a multiple of k
  other @5;       # no input at all is accepted
}

struct Violation {
  kind @0 :ViolationKind;
  dims @1 :List(Text);
  message @2 :Text;
  fix @3 :Text;                   # a suggested line of the spec, or empty
}

# A condition no Dim spelling expresses (`batch*seq == n`, `batch != seq`): the
# exported program checks it when it runs instead of refusing the spec.
struct RuntimeAssert {
  condition @0 :Common.SymExpr;   # over the request's symbols
  dims @1 :List(Text);
  message @2 :Text;               # the condition in Dim names
}

struct CheckConstraintsReply {
  violations @0 :List(Violation); # empty: every declared input is accepted
  text @1 :Text;                  # the report as torch.export words it; empty when ok
  asserts @2 :List(RuntimeAssert);
}

struct ShapesRequest {
  union {
    ping @0 :Common.Ping;
    info @1 :Void;
    simplify @2 :SimplifyRequest;
    decide @3 :DecideRequest;
    checkConstraints @4 :CheckConstraintsRequest;
  }
}

struct ShapesReply {
  union {
    pong @0 :Common.Ping;
    info @1 :Common.ServiceInfo;
    simplify @2 :SimplifyReply;
    decide @3 :DecideReply;
    checkConstraints @4 :CheckConstraintsReply;
  }
}
