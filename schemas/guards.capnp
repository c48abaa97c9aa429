# Guard sets, the inputs they are checked against, and the guards service's
# verbs (see docs/guards.md). Members 0 and 1 of the request and reply unions
# are the verbs every service answers (see Common.CommonRequest).
@0xe95885c52cff08b0;
using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("kiln::schema");
using Common = import "common.capnp";

# ---- Guard sets ----------------------------------------------------------

# One step of a source path. Roots (arg, kwarg, global, closure) start a path
# at the call; the others apply to the value their parent node reached.
struct GuardStep {
  union {
    arg @0 :UInt32;         # positional argument i; `name` is its parameter name
    kwarg @1 :Void;         # keyword argument `name`
    global @2 :Void;        # the function's global `name`
    closure @3 :UInt32;     # the function's closure cell i (free variable `name`)
    attr @4 :Void;          # .name
    index @5 :Int64;        # [i] of a list or tuple
    key @6 :Void;           # ['name'] of a dict
    intKey @7 :Int64;       # [i] of a dict
    size @8 :UInt32;        # a tensor's .size()[d], as an int
    stride @9 :UInt32;      # a tensor's .stride()[d], as an int
    default @11 :UInt32;    # the called function's default i (__defaults__[i])
    kwDefault @12 :Void;    # its keyword-only default `name` (__kwdefaults__[name])
    value @13 :Void;        # a 0-d CPU tensor's .item(): an int or a float
    hasAttr @14 :Void;      # hasattr(., name): a bool (guards an attribute's absence)
    module @15 :Void;       # the imported Python module `name` (sys.modules[name]): a root
    classAttr @16 :UInt32;  # of a class: `name` as the first class of __mro__[i:] whose __dict__ has it holds it
  }
  name @10 :Text;
}

struct TypeRef {
  module @0 :Text;          # "builtins", "torch", "mymodel"
  qualname @1 :Text;        # "int", "Tensor", "Block"
}

struct GuardConstant {
  union {
    none @0 :Void;
    bool @1 :Bool;
    int @2 :Int64;
    float @3 :Float64;
    str @4 :Text;
    tuple @5 :List(GuardConstant);
  }
}

# A static size/stride/offset, or `dynamic` (not checked: a symbol stands for it).
struct StaticInt {
  union {
    value @0 :Int64;
    dynamic @1 :Void;
  }
}

struct TensorCheck {
  dtype @0 :Common.DType;
  device @1 :Common.Device;
  requiresGrad @2 :Bool;
  sizes @3 :List(StaticInt);        # one per dim: the dim count is checked too
  strides @4 :List(StaticInt);
  storageOffset @5 :StaticInt;
}

struct GuardCheck {
  union {
    type @0 :TypeRef;               # type(v) is T (exactly, not a subclass)
    identity @1 :Identity;          # v is <that object> (within one process)
    equals @2 :GuardConstant;       # v == c, and of c's type (True is not 1)
    tensor @3 :TensorCheck;
    length @4 :UInt64;              # len(v) == n
    dictKeys @5 :DictKeys;
  }
  struct Identity {
    id @0 :UInt64;                  # the object's id() where it was recorded
    scope @1 :UInt64;               # the recording process's token: other processes never match
    label @2 :Text;                 # what it was, for messages
  }
  struct DictKeys {
    keys @0 :List(GuardConstant);
    ordered @1 :Bool;               # key order matters (the graph iterated the dict)
  }
}

struct GuardNode {
  parent @0 :Int32;                 # -1: a root step; else an earlier node
  step @1 :GuardStep;
  checks @2 :List(GuardCheck);
}

struct CallShape {
  positional @0 :UInt32;            # how many positional arguments
  keywords @1 :List(Text);          # which keyword arguments, sorted
}

struct AutocastState {
  device @0 :Common.DeviceType;
  enabled @1 :Bool;
  dtype @2 :Common.DType;
}

# Process-wide state the graph depends on; absent fields are not checked.
struct GlobalState {
  gradEnabled @0 :OptionalBool;
  defaultDtype @1 :OptionalDType;
  deterministic @2 :OptionalBool;
  autocast @3 :List(AutocastState); # the state of each listed device type
  struct OptionalBool { union { unset @0 :Void; value @1 :Bool; } }
  struct OptionalDType { union { unset @0 :Void; value @1 :Common.DType; } }
}

struct SymbolSource {
  symbol @0 :Text;                  # s0
  node @1 :UInt32;                  # the int-valued node it is read from
}

struct GuardSet {
  call @0 :CallShape;
  globals @1 :GlobalState;
  nodes @2 :List(GuardNode);        # parents before children
  symbols @3 :List(SymbolSource);
  shapeGuards @4 :List(Common.SymExpr); # relations over the symbols, each must hold
}

# ---- Inputs (the C++ front end's description of a call) ----------------

struct InputValue {
  union {
    none @0 :Void;
    bool @1 :Bool;
    int @2 :Int64;
    float @3 :Float64;
    str @4 :Text;
    tensor @5 :TensorInput;
    list @6 :List(InputValue);
    tuple @7 :List(InputValue);
    dict @8 :List(InputEntry);      # in the dict's order
    object @9 :Void;                # attributes in `attrs`
  }
  type @10 :TypeRef;                # left empty for the builtin kinds above
  id @11 :UInt64;
  attrs @12 :List(InputAttr);
  struct TensorInput {
    dtype @0 :Common.DType;
    device @1 :Common.Device;
    requiresGrad @2 :Bool;
    sizes @3 :List(Int64);
    strides @4 :List(Int64);
    storageOffset @5 :Int64;
    # a 0-d CPU int, bool or float tensor's value (what .item() gives)
    value :union {
      none @6 :Void;
      int @7 :Int64;
      float @8 :Float64;
    }
  }
}

struct InputEntry {
  key @0 :InputValue;
  value @1 :InputValue;
}

struct InputAttr {
  name @0 :Text;
  value @1 :InputValue;
}

struct CallInput {
  args @0 :List(InputValue);
  kwargs @1 :List(InputAttr);
  globals @2 :List(InputAttr);      # those the guards may read
  closure @3 :List(InputValue);     # cell contents, by index
  state @4 :GlobalState;            # every field set
  scope @5 :UInt64;                 # the calling process's identity token
  defaults @6 :List(InputValue);    # the function's __defaults__
  kwDefaults @7 :List(InputAttr);   # its __kwdefaults__
}

# ---- Compiled entries and frame state ------------------------------------

# A function's stable identity: the same in every process running the same code.
struct FunctionKey {
  module @0 :Text;
  qualname @1 :Text;
  codeHash @2 :Text;                # of the bytecode, consts and names
}

struct CompiledEntry {
  guards @0 :GuardSet;
  artifacts @1 :List(Text);         # codegen cache keys, in the order the SDK runs them
  graphs @2 :List(Text);            # structural hashes of the graphs
  outputs @3 :Data;                 # the output structure, as the tracer wrote it
  id @4 :UInt64;                    # unique within the function
}

# What automatic dynamic has learnt of one input: its sizes (or int or float value) as
# first seen, each later turned dynamic when another call differed there.
struct FrameInput {
  source @0 :Text;                  # L['x']
  sizes @1 :List(StaticInt);        # a tensor's dims; empty for an int
  value @2 :StaticInt;              # an int input's value
  isTensor @3 :Bool;
  isFloat @4 :Bool;                 # a float input: its value below
  number @5 :Float64;
  numberDynamic @6 :Bool;           # the float differed between calls
}

struct FrameState {
  inputs @0 :List(FrameInput);
  forcedDynamic @1 :List(Text);     # "L['x'].size()[0]" marked by mark_dynamic
  forcedStatic @2 :List(Text);      # by mark_static
}

# One observation of a call's inputs (sizes and ints by source).
struct Observation {
  inputs @0 :List(FrameInput);      # all static: what this call had
}

struct Miss {
  entry @0 :UInt64;
  reason @1 :Text;                  # L['x'].size()[0] == 8 failed: got 16
}

# ---- Verbs ---------------------------------------------------------------

struct LookupRequest {
  function @0 :FunctionKey;
  call @1 :CallInput;
}

struct LookupReply {
  union {
    hit @0 :CompiledEntry;
    miss @1 :MissReply;
  }
  struct MissReply {
    reasons @0 :List(Miss);         # one per entry, in entry order
    runEagerly @1 :Bool;            # the cache limit is reached: do not compile again
    frame @2 :FrameState;
  }
}

struct InsertRequest {
  function @0 :FunctionKey;
  entry @1 :CompiledEntry;          # its id is assigned by the service
}

struct InsertReply {
  id @0 :UInt64;
  runEagerly @1 :Bool;              # over the cache limit: not stored
}

struct EntriesReply {
  entries @0 :List(CompiledEntry);
  frame @1 :FrameState;
  limit @2 :UInt32;
}

# A miss seen by a client: update the function's frame state with what it saw.
struct ObserveRequest {
  function @0 :FunctionKey;
  observation @1 :Observation;
  job @2 :JobMember;                # optional: shared decisions of a job's ranks
}

struct JobMember {
  job @0 :Text;                     # empty: no job
  rank @1 :UInt32;
  worldSize @2 :UInt32;
  round @3 :UInt64;                 # which recompile of this function (0, 1, ...)
}

struct ObserveReply {
  union {
    frame @0 :FrameState;           # decided: trace with this
    pending @1 :UInt32;             # ranks still to report; ask again
  }
  missing @2 :List(UInt32);         # with `pending`: which ranks, ascending
}

struct MarkRequest {
  function @0 :FunctionKey;
  dim @1 :Text;                     # "L['x'].size()[0]"
  dynamic @2 :Bool;                 # true: mark_dynamic, false: mark_static
}

# ---- On disk -------------------------------------------------------------

# The guards service's file for one function (docs/guards.md, "Persistence"):
# everything it knows of it, written whole under a temporary name and renamed.
struct StoredFunction {
  function @0 :FunctionKey;
  entries @1 :List(CompiledEntry);  # in entry order, ids assigned
  frame @2 :FrameState;             # automatic dynamic and the marks
  nextId @3 :UInt64;                # the id the next insert gets
  rounds @4 :List(StoredRound);     # the job rounds still remembered, oldest first
}

# One round of a job's ranks deciding a function's frame state together.
struct StoredRound {
  job @0 :Text;
  round @1 :UInt64;
  worldSize @2 :UInt32;
  base @3 :FrameState;              # the function's frame state when the round began
  reports @4 :List(RankReport);     # by rank, ascending
  decided @5 :Bool;
  frame @6 :FrameState;             # with `decided`: the answer of every rank
}

struct RankReport {
  rank @0 :UInt32;
  observation @1 :Observation;
}

struct GuardsRequest {
  union {
    ping @0 :Common.Ping;
    info @1 :Void;
    lookup @2 :LookupRequest;
    insert @3 :InsertRequest;
    entries @4 :FunctionKey;
    observe @5 :ObserveRequest;
    mark @6 :MarkRequest;
  }
}

struct GuardsReply {
  union {
    pong @0 :Common.Ping;
    info @1 :Common.ServiceInfo;
    lookup @2 :LookupReply;
    insert @3 :InsertReply;
    entries @4 :EntriesReply;
    observe @5 :ObserveReply;
    mark @6 :FrameState;
  }
}
