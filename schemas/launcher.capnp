# The launcher's own verbs, reached through the broker as service "kiln.launcher".
@0x8c5327cb7729cbd3;
using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("kiln::schema");
using Common = import "common.capnp";

struct LauncherRequest {
  union {
    ping @0 :Common.Ping;
    info @1 :Void;
    status @2 :Void;
    down @3 :Void;
    swap @4 :SwapRequest;
  }
}

struct LauncherReply {
  union {
    pong @0 :Common.Ping;
    info @1 :Common.ServiceInfo;
    status @2 :StackStatus;
    down @3 :Void;
    swap @4 :SwapResult;
  }
}

struct SwapRequest {
  service @0 :Text;
  binary @1 :Text;
}

struct SwapResult {
  oldPids @0 :List(Int32);
  newPids @1 :List(Int32);
}

enum ServiceState {
  starting @0;   # processes started, not all registered yet
  running @1;
  degraded @2;   # some workers down, restarting
  failed @3;     # crash budget spent; not restarted; see failureReason
  stopped @4;
}

enum WorkerState {
  starting @0;   # process alive, not registered with the broker
  idle @1;
  busy @2;
  draining @3;
  backoff @4;    # exited; restart scheduled
  failed @5;
}

struct WorkerStatus {
  pid @0 :Int32;
  state @1 :WorkerState;
  served @2 :UInt64;
  restarts @3 :UInt32;
  uptimeMs @4 :UInt64;
  lastExit @5 :Text;     # how the previous process of this slot ended
}

struct ServiceStatus {
  name @0 :Text;
  binary @1 :Text;
  state @2 :ServiceState;
  failureReason @3 :Text;
  restarts @4 :UInt32;
  queueDepth @5 :UInt32;
  inFlight @6 :UInt32;
  served @7 :UInt64;
  errors @8 :UInt64;       # requests answered with an error by the broker (deadline, unavailable)
  p50Us @9 :UInt64;        # broker-measured dispatch-to-reply latency over the recent window
  p99Us @10 :UInt64;
  workers @11 :List(WorkerStatus);
}

struct StackStatus {
  name @0 :Text;
  runDir @1 :Text;
  launcherPid @2 :Int32;
  uptimeMs @3 :UInt64;
  version @4 :Text;
  services @5 :List(ServiceStatus);
}
