# Requests and replies of the shapes service. Members 0 and 1 are the verbs every
# service answers (see Common.CommonRequest); for now it has only those,
# its real verbs come with its own issue.
@0x95886e1d650844ec;
using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("kiln::schema");
using Common = import "common.capnp";

struct ShapesRequest {
  union {
    ping @0 :Common.Ping;
    info @1 :Void;
  }
}

struct ShapesReply {
  union {
    pong @0 :Common.Ping;
    info @1 :Common.ServiceInfo;
  }
}
