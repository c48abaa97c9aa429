# An exported program (kiln.export; docs/export.md): what a `.kiln` file holds,
# as one flat Cap'n Proto message of `Program`. Python writes it; the C++
# client SDK (kiln::Program::load) and Python (kiln.load_program) read it, check
# a call's inputs against the spec and the runtime asserts, compile the graph
# through the stack and run it.
@0x85fcab5158c9bbca;
using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("kiln::schema");
using Common = import "common.capnp";
using Graph = import "graph.capnp";
using Tracer = import "tracer.capnp";
using Guards = import "guards.capnp";

const programMagic :UInt64 = 0x676f72706e6c696b;  # "kilnprog" in little-endian bytes
const programFormatVersion :UInt32 = 1;

# A tensor's values, dense and row-major (contiguous strides).
struct TensorData {
  dtype @0 :Common.DType;
  sizes @1 :List(Int64);
  data @2 :Data;
}

# One placeholder of the graph: a tensor the caller passes, or one the program
# carries (a module's parameters and buffers, a tensor a global holds).
struct ProgramInput {
  name @0 :Text;                   # "x", "self.fc1.weight"
  source @1 :Text;                 # where export read it: L['x'], L['self'].fc1.weight
  union {
    user @2 :Void;                 # the caller's: user inputs in placeholder order
    constant @3 :TensorData;       # stored here
  }
  path @4 :List(Guards.GuardStep); # a user input's place in the exported callable's
                                   # arguments (Python calls resolve it; C++ ignores it)
}

# A symbol of the graph, as the user declared it: one per dynamic dimension.
struct ProgramSymbol {
  name @0 :Text;                   # s0
  dim @1 :Text;                    # the user's Dim name ("batch")
  source @2 :Text;                 # x.size(0)
  min @3 :Int64;
  max @4 :Int64;                   # INT64_MAX: unbounded
}

# A condition the program checks before it runs (docs/shapes.md, runtime asserts).
struct ProgramAssert {
  condition @0 :Common.SymExpr;    # a boolean over the symbols' names
  message @1 :Text;                # the condition in the user's terms
}

struct Program {
  magic @0 :UInt64;                # programMagic
  formatVersion @1 :UInt32;        # programFormatVersion
  name @2 :Text;                   # the exported function's qualified name
  graph @3 :Graph.Graph;
  inputs @4 :List(ProgramInput);   # one per graph placeholder, in order
  symbols @5 :List(ProgramSymbol);
  asserts @6 :List(ProgramAssert);
  outputs @7 :Tracer.OutputSpec;   # the returned value's structure over the graph's outputs
  producer @8 :Text;               # "kiln <version>"
}
