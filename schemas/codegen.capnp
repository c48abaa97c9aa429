# Requests and replies of the codegen service. Members 0 and 1 are the verbs every
# service answers (see Common.CommonRequest); for now it has only those,
# its real verbs come with its own issue.
@0xa2f63c313263c011;
using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("kiln::schema");
using Common = import "common.capnp";

struct CodegenRequest {
  union {
    ping @0 :Common.Ping;
    info @1 :Void;
  }
}

struct CodegenReply {
  union {
    pong @0 :Common.Ping;
    info @1 :Common.ServiceInfo;
  }
}
