# The codegen service and what it produces. Members 0 and 1 of the request and
# reply unions are the verbs every service answers (see Common.CommonRequest).
@0xa2f63c313263c011;
using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("kiln::schema");
using Common = import "common.capnp";
using Graph = import "graph.capnp";

# A view of a plan buffer: sizes, strides and offset counted from its element 0.
struct View {
  buffer @0 :UInt32;
  meta @1 :Common.TensorMeta;
  symInt @2 :Common.SymExpr;    # as an output, when isSymInt: this value (0-d i64) instead
  isSymInt @3 :Bool;
}

struct PlanBuffer {
  name @0 :Text;
  layout @1 :Common.TensorMeta;
  input @2 :Int32;              # the graph input it is, or -1: allocated by the plan
  aliasOf @3 :Int32 = -1;       # >= 0: that buffer's memory (an in-place or out= write)
  reuses @4 :Int32 = -1;        # >= 0: an input buffer whose memory it may take if donated
}

struct PlanStep {
  union {
    kernel :group {
      index @0 :UInt32;         # into Plan.kernels
      writes @1 :List(UInt32);  # the buffers it stores into
    }
    extern :group {
      buffer @2 :UInt32;        # the result
      op @3 :Text;              # the IR op (mm, bmm, addmm, matmul, ...)
      inputs @4 :List(View);
      attributes @5 :List(Graph.Attribute);
      results @7 :List(UInt32); # further buffers it writes (a flash forward's logsumexp)
    }
    free @6 :UInt32;            # a buffer no later step reads
  }
}

# How a CUDA kernel is launched (kiln/runtime/plan.h, Launch). A kernel takes
# its parameters in this order: a pointer to element 0 of each of `buffers`,
# the int64 value of each symbol slot in `symbols`, then an `int*` status word
# (0 ok, 1 integer division by zero, 2 index out of range) the kernel may set.
# It covers `items` work items (elements, or rows), `itemsPerBlock` to a block
# of `threads` threads, with grid-stride loops: any grid size is correct.
struct Launch {
  items @0 :Common.SymExpr;
  itemsPerBlock @1 :UInt32;
  threads @2 :UInt32;
  sharedBytes @3 :UInt32;       # dynamic shared memory
  buffers @4 :List(UInt32);
  symbols @5 :List(UInt32);     # slots into Plan.kernelSymbols
  mayFail @6 :Bool;             # it can set the status word
  aligned @7 :List(AlignedAccess); # what its 16-byte path takes as aligned
  unaligned @8 :Int32 = -1;     # the kernel run instead where one is not (-1: none)
  waves @9 :UInt32;             # at most this many waves of resident blocks (0: no cap)
}

# An access a kernel's 16-byte path takes as aligned (plan.h, AlignedAccess).
struct AlignedAccess {
  buffer @0 :Int32;             # counted from this buffer's element 0; -1: from address 0
  offset @1 :Common.SymExpr;    # elements
  elementBytes @2 :UInt32;
  bytes @3 :UInt32;             # the alignment, a power of two
}

# What libs/runtime runs (kiln/runtime/plan.h).
struct Plan {
  symbols @0 :List(Graph.Symbol);   # every symbol the plan mentions
  inputs @1 :List(Graph.Value);     # the graph's placeholders, in order
  buffers @2 :List(PlanBuffer);
  kernels @3 :List(Text);           # function names in the library
  kernelSymbols @4 :List(Text);     # the kernels' symbol slots, by name
  steps @5 :List(PlanStep);
  outputs @6 :List(View);
  launches @7 :List(Launch);        # CUDA: one per kernel; empty on the CPU
}

# A compiled graph: one artifact serves every binding its plan's symbols admit.
struct Artifact {
  target @0 :Text;      # "cpu", or "cuda:sm_90" (the architecture the cubin is for)
  key @1 :Text;         # the content key it is cached under
  plan @2 :Plan;
  source @3 :Text;      # the generated code
  library @4 :Data;     # the compiled shared object (CPU) or cubin (CUDA)
  explain @5 :Text;     # the scheduled kernels, as `explain` shows them
}

struct CompileRequest {
  graph @0 :Graph.Graph;
  target @1 :Text;      # "cpu", "cuda" (sm_90) or "cuda:sm_NN", each + an optional "+deterministic"
}

struct CompileReply {
  artifact @0 :Artifact;
  cacheHit @1 :Bool;    # served from the artifact cache: no compiler ran
}

struct CodegenRequest {
  union {
    ping @0 :Common.Ping;
    info @1 :Void;
    compile @2 :CompileRequest;
  }
}

struct CodegenReply {
  union {
    pong @0 :Common.Ping;
    info @1 :Common.ServiceInfo;
    compile @2 :CompileReply;
  }
}
