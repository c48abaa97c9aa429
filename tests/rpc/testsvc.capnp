# A service with controllable behaviour for the RPC tests, served by kiln-test-worker.
@0x9c6dc32ddf9bf50f;
using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("kiln::testsvc");

# `crash` must carry this token, so that garbage decoded as a request never kills a worker.
const crashToken :UInt64 = 0x6b696c6e2d6b696c;

struct Request {
  union {
    echo @0 :Data;       # answered with the same bytes
    sleep @1 :UInt32;    # sleeps this many ms, then answers
    crash @2 :UInt64;    # SIGKILLs its own process (with crashToken)
    whoami @3 :Void;     # answers only the pid
    nest @4 :Nest;       # answers the length of the chain, walking it (nesting limits)
    fail @5 :Text;       # throws Error{invalidArgument} with this message
  }
}

struct Nest {
  child @0 :Nest;
}

struct Reply {
  pid @0 :Int32;         # the worker process that answered
  union {
    echo @1 :Data;
    slept @2 :UInt32;
    whoami @3 :Void;
    depth @4 :UInt32;
  }
}
