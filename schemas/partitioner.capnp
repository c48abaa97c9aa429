# Requests and replies of the partitioner service (docs/services.md, docs/autograd.md).
# Members 0 and 1 are the verbs every service answers (see Common.CommonRequest).
@0xbb12ae4fb7fa7626;
using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("kiln::schema");
using Common = import "common.capnp";
using Graph = import "graph.capnp";

struct PartitionOptions {
  memoryBudget @0 :Float64 = 0.25;   # 0: recompute all it can .. 1: recompute nothing
}

# A traced forward graph (it may mutate its inputs) and which placeholders require grad.
struct PartitionRequest {
  graph @0 :Graph.Graph;
  requiresGrad @1 :List(Bool);      # one flag per placeholder
  options @2 :PartitionOptions;
}

# The graph functionalized, differentiated and partitioned (libs/autograd, train.h).
# forward: the inputs -> the graph's outputs (`userOutputs`), then the new value of
#   each mutated input (`mutatedInputs`: its placeholder index), then `saved` values;
# backward: the saved values, then one tangent per entry of `tangentOf` -> one grad
#   per entry of `gradOf`.
struct PartitionReply {
  forward @0 :Graph.Graph;
  backward @1 :Graph.Graph;
  userOutputs @2 :UInt32;
  mutatedInputs @3 :List(UInt32);
  saved @4 :UInt32;
  tangentOf @5 :List(UInt32);       # the forward output (index) each tangent is the grad of
  gradOf @6 :List(UInt32);          # the input (placeholder index) each grad is of
  recomputed @7 :UInt32;            # forward nodes the backward recomputes
}

struct PartitionerRequest {
  union {
    ping @0 :Common.Ping;
    info @1 :Void;
    partition @2 :PartitionRequest;
  }
}

struct PartitionerReply {
  union {
    pong @0 :Common.Ping;
    info @1 :Common.ServiceInfo;
    partition @2 :PartitionReply;
  }
}
