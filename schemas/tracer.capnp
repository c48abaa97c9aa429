# Requests and replies of the tracer service. Members 0 and 1 are the verbs every
# service answers (see Common.CommonRequest); for now it has only those,
# its real verbs come with its own issue.
@0xf2ae01024c2c6aa6;
using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("kiln::schema");
using Common = import "common.capnp";

struct TracerRequest {
  union {
    ping @0 :Common.Ping;
    info @1 :Void;
  }
}

struct TracerReply {
  union {
    pong @0 :Common.Ping;
    info @1 :Common.ServiceInfo;
  }
}
