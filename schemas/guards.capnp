# Requests and replies of the guards service. Members 0 and 1 are the verbs every
# service answers (see Common.CommonRequest); for now it has only those,
# its real verbs come with its own issue.
@0xe95885c52cff08b0;
using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("kiln::schema");
using Common = import "common.capnp";

struct GuardsRequest {
  union {
    ping @0 :Common.Ping;
    info @1 :Void;
  }
}

struct GuardsReply {
  union {
    pong @0 :Common.Ping;
    info @1 :Common.ServiceInfo;
  }
}
