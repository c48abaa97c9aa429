# Types every service shares: errors, ids, tensor descriptions, symbolic sizes.
@0xa216362eb2a6b5e5;
using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("kiln::schema");

# One error type for the whole project (kiln::Error in C++). Every reply header
# carries either `ok` or one of these.
enum ErrorCode {
  internal @0;          # a broken invariant of our own code
  invalidArgument @1;   # the request is well-formed but its content is wrong
  malformed @2;         # the bytes are not a valid message of the expected schema
  tooLarge @3;          # over a size, traversal or nesting limit
  unknownService @4;    # no service of that name is configured
  unavailable @5;       # the service could not serve it (crashed past the retry budget, failed, draining)
  deadlineExceeded @6;  # the request's deadline passed before a reply
  notFound @7;
  alreadyExists @8;
  unsupported @9;
  resourceExhausted @10;
  io @11;
  cancelled @12;
}

struct Error {
  code @0 :ErrorCode;
  message @1 :Text;
  service @2 :Text;    # which process raised it
  detail @3 :Text;     # free-form context (source text, stack, offending field)
}

# Verbs every service answers.
struct Ping {
  payload @0 :Data;    # echoed back unchanged
}

struct ServiceInfo {
  service @0 :Text;
  version @1 :Text;
  pid @2 :Int32;
  uptimeMs @3 :UInt64;
  buildId @4 :Text;
}

enum DType {
  float32 @0; float64 @1; float16 @2; bfloat16 @3;
  int8 @4; int16 @5; int32 @6; int64 @7; uint8 @8; bool @9;
  complex64 @10; complex128 @11;
}

enum DeviceType { cpu @0; cuda @1; }

struct Device {
  type @0 :DeviceType;
  index @1 :Int16;     # -1 for "current"
}

# Symbolic integer / boolean expression tree. Leaves are integer or boolean
# constants and named symbols (s0, u3); inner nodes are operators over args.
struct SymExpr {
  union {
    integer @0 :Int64;
    boolean @1 :Bool;
    symbol @2 :Text;
    op @3 :SymOp;
  }
}

enum SymOpKind {
  add @0; mul @1; floorDiv @2; mod @3; min @4; max @5;
  eq @6; ne @7; lt @8; le @9; gt @10; ge @11;
  and @12; or @13; not @14;
}

struct SymOp {
  kind @0 :SymOpKind;
  args @1 :List(SymExpr);
}

struct TensorMeta {
  dtype @0 :DType;
  device @1 :Device;
  sizes @2 :List(SymExpr);
  strides @3 :List(SymExpr);
  storageOffset @4 :SymExpr;
  requiresGrad @5 :Bool;
}

# Every service's Request and Reply unions begin with these two members at
# ordinals 0 and 1, so these structs are valid (older-version) messages of
# every service: a client can ping any service without knowing its schema.
struct CommonRequest {
  union {
    ping @0 :Ping;
    info @1 :Void;
  }
}

struct CommonReply {
  union {
    pong @0 :Ping;
    info @1 :ServiceInfo;
  }
}
