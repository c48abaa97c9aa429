# The envelope layer between clients, the broker and workers (Majordomo-style).
# A message is two ZeroMQ frames: a header (one of the structs below) and an
# opaque body (the service's own request or reply), which the broker never parses.
@0xb110ed6be4d664ce;
using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("kiln::schema");
using Common = import "common.capnp";

# client -> broker, header frame
struct Envelope {
  service @0 :Text;
  requestId @1 :UInt64;     # chosen by the client, echoed in the reply
  timeoutMs @2 :UInt32;     # relative deadline: the broker makes it absolute on arrival
  attempt @3 :UInt8;        # client-side retries of the same idempotent request
}

# broker -> client, header frame; the body frame follows only with `ok`
struct ReplyHeader {
  requestId @0 :UInt64;
  union {
    ok @1 :Void;
    error @2 :Common.Error;
  }
}

# worker -> broker, header frame
struct WorkerMessage {
  union {
    ready @0 :Ready;          # register; sent on connect
    heartbeat @1 :Void;
    reply @2 :WorkerReply;    # body frame follows with `ok`
    disconnect @3 :Text;      # leaving on purpose (drain finished, shutdown); the reason
  }
}

struct Ready {
  service @0 :Text;
  pid @1 :Int32;
  version @2 :Text;
  buildId @3 :Text;
}

struct WorkerReply {
  dispatchId @0 :UInt64;      # the broker's id of this dispatch (not the client's id)
  union {
    ok @1 :Void;
    error @2 :Common.Error;
  }
}

# broker -> worker, header frame
struct BrokerMessage {
  union {
    request @0 :Dispatch;     # body frame follows
    heartbeat @1 :Void;
    drain @2 :Void;           # finish what you hold, then disconnect and exit
    reregister @3 :Void;      # the broker does not know you: send `ready` again
  }
}

struct Dispatch {
  dispatchId @0 :UInt64;
  service @1 :Text;
  timeoutMs @2 :UInt32;       # what is left of the client's deadline
  attempt @3 :UInt8;          # 1 on the first dispatch, +1 per requeue after a worker died
}
