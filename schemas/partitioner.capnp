# Requests and replies of the partitioner service. Members 0 and 1 are the verbs every
# service answers (see Common.CommonRequest); for now it has only those,
# its real verbs come with its own issue.
@0xbb12ae4fb7fa7626;
using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("kiln::schema");
using Common = import "common.capnp";

struct PartitionerRequest {
  union {
    ping @0 :Common.Ping;
    info @1 :Void;
  }
}

struct PartitionerReply {
  union {
    pong @0 :Common.Ping;
    info @1 :Common.ServiceInfo;
  }
}
