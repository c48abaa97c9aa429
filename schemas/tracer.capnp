# The tracer service: Python bytecode in (as `dis` lists it), a graph, its
# guards and the output structure out (see docs/tracer.md). Members 0 and 1 of
# the request and reply unions are the verbs every service answers (see
# Common.CommonRequest).
@0xf2ae01024c2c6aa6;
using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("kiln::schema");
using Common = import "common.capnp";
using Graph = import "graph.capnp";
using Guards = import "guards.capnp";

# One instruction as `dis.get_instructions` gives it, normalised by the SDK:
# jump targets as instruction indices, names and constants resolved.
struct Instruction {
  opname @0 :Text;              # "LOAD_FAST", "BINARY_OP", ...
  arg @1 :Int64;                # the raw oparg, -1 when none
  target @2 :Int32 = -1;        # a jump's target, as an index into the instruction list
  name @3 :Text;                # the name a name op refers to (argval), or the op's argrepr
  line @4 :Int32;
}

struct Constant {
  union {
    none @0 :Void;
    bool @1 :Bool;
    int @2 :Int64;
    float @3 :Float64;
    str @4 :Text;
    tuple @5 :List(Constant);
    code @6 :Code;
    ellipsis @7 :Void;
    other @8 :Text;             # a constant kiln does not model (bytes, big ints, ...): its repr
  }
}

struct Code {
  name @0 :Text;
  qualname @1 :Text;
  filename @2 :Text;
  firstLine @3 :Int32;
  argCount @4 :UInt32;
  posOnlyArgCount @5 :UInt32;
  kwOnlyArgCount @6 :UInt32;
  flags @7 :UInt32;             # co_flags (VARARGS 0x04, VARKEYWORDS 0x08, GENERATOR 0x20, ...)
  varnames @8 :List(Text);
  cellvars @9 :List(Text);
  freevars @10 :List(Text);
  names @11 :List(Text);
  consts @12 :List(Constant);
  instructions @13 :List(Instruction);
  pythonVersion @14 :Text;      # "3.11", "3.12": opcodes and oparg meanings differ
  handlers @15 :List(Handler);  # co_exceptiontable, as instruction indices
}

# One entry of the exception table: instructions [start, end) go to `target` when they raise.
struct Handler {
  start @0 :UInt32;
  end @1 :UInt32;
  target @2 :UInt32;
}

# What the SDK says of one Python object the trace reads. Containers of
# primitives and tensors come whole; modules, functions and objects list what
# they hold, and the tracer asks for the parts it reads (by path) when it needs them.
struct ObjectDesc {
  path @0 :List(Guards.GuardStep);  # where it was found, from the call's roots
  type @1 :Guards.TypeRef;
  id @2 :UInt64;
  union {
    none @3 :Void;
    bool @4 :Bool;
    int @5 :Int64;
    float @6 :Float64;
    str @7 :Text;
    tensor @8 :Guards.InputValue.TensorInput;
    list @9 :List(ObjectDesc);      # items, described (paths included)
    tuple @10 :List(ObjectDesc);
    dict @11 :List(DictItem);
    function @12 :FunctionDesc;
    module @13 :ModuleDesc;         # an nn.Module
    pyModule @14 :Text;             # a Python module: its name ("torch", "math", "torch.nn.functional")
    builtin @15 :Text;              # a callable kiln knows by name: "torch.relu", "builtins.len", "math.sqrt"
    typeObject @16 :Guards.TypeRef; # a class
    dtype @17 :Common.DType;
    device @18 :Common.Device;
    object @19 :List(Text);         # another object: its instance attribute names
    unsupported @20 :Text;          # what it is, for the message
    cell @21 :ObjectDesc;           # a cell (a graph break passes a frame's cells): its contents
    emptyCell @22 :Void;
    atenOp @28 :AtenOp;             # torch.ops.aten.<op> or torch.ops.aten.<op>.<overload>
  }
  mro @23 :List(Guards.TypeRef);    # a module's or object's type's __mro__ (isinstance reads it); a class's own
  plainClass @24 :Bool;             # a class whose metaclass keeps type's str(), isinstance() and ==
  instanceDict @25 :Bool;           # a class whose instances have a __dict__
  instantiable @26 :Bool;           # a class whose metaclass keeps type's __call__, with no abstract methods
  dataDescriptor @27 :Bool;         # an object whose type defines __set__ or __delete__
}

# An ATen op: it maps to the torch function or Tensor method of its name, an
# overload's arguments bound by its schema first.
struct AtenOp {
  qualifiedName @0 :Text;           # "aten::add" (a packet) or "aten::add.Tensor" (an overload)
  torchName @1 :Text;               # the torch form it maps to: "torch.add", "Tensor.view"
  overload @2 :Bool;                # one overload, bound by `arguments`; else the packet, bound as its torch form
  arguments @3 :List(AtenArgument); # the overload's schema, in order
}

struct AtenArgument {
  name @0 :Text;
  type @1 :Text;                    # as the schema prints it: "Tensor", "Optional[List[int]]", "number", "ScalarType"
  kwargOnly @2 :Bool;
  hasDefault @3 :Bool;
  default @4 :Constant;             # when it has one (a list default comes as a tuple)
}

struct DictItem {
  key @0 :ObjectDesc;
  value @1 :ObjectDesc;
}

struct FunctionDesc {
  code @0 :Code;
  defaults @1 :List(ObjectDesc);
  kwDefaults @2 :List(NamedObject);
  closure @3 :List(ObjectDesc);     # cell contents, in co_freevars order
  module @4 :Text;                  # the module whose globals it reads (not __module__, which wraps copies)
  bound @5 :ObjectDesc;             # a bound method's self (its `none` member when unbound)
  isBound @6 :Bool;
}

struct NamedObject {
  name @0 :Text;
  value @1 :ObjectDesc;
}

struct ModuleDesc {
  kind @0 :Text;                    # "torch.nn.Linear" for built-ins kiln lowers itself, else ""
  training @1 :Bool;
  parameters @2 :List(NamedObject); # tensors (None for an absent bias)
  buffers @3 :List(NamedObject);
  modules @4 :List(Text);           # submodule names, in order (ask for their paths)
  attributes @5 :List(NamedObject); # instance attributes of primitive kinds
  forward @6 :FunctionDesc;         # a user module's forward (unbound; `self` is the module)
  hooks @7 :Bool;                   # calling it runs hooks (its own or global ones) beside forward
  ownCall @8 :Bool;                 # its class overrides Module.__call__: calling it runs that
}

struct TraceRequest {
  function @0 :Guards.FunctionKey;
  code @1 :Code;
  callee @2 :ObjectDesc;            # the function itself (its defaults and closure), at the root
  args @3 :List(ObjectDesc);        # positional arguments (paths [arg i])
  kwargs @4 :List(NamedObject);
  objects @5 :List(ObjectDesc);     # what earlier rounds asked for, by path
  frame @6 :Guards.FrameState;      # which dims and ints are dynamic
  state @7 :Guards.GlobalState;     # grad mode, default dtype, ...
  fullgraph @8 :Bool;
  scope @9 :UInt64;                 # the calling process's token (identity guards hold within it)
  objectMessages @10 :List(Data);   # more of `objects`, each an ObjectDesc message of its own (the
                                    # SDK encodes each once, however many rounds resend it)
  keepState @11 :Bool;              # keep the trace between rounds: a `needObjects` answer then
                                    # names the `session` that goes on where it stopped
  session @12 :UInt64;              # go on with this kept trace: only `objectMessages` (the
                                    # descriptions it asked for) is read
}

struct TraceResult {
  graph @0 :Graph.Graph;
  guards @1 :Guards.GuardSet;
  outputs @2 :OutputSpec;           # how to rebuild the returned value from graph outputs
  sideEffects @3 :List(SideEffect);
  inputs @4 :List(InputBinding);    # where each graph input comes from
  requiresGrad @5 :Bool;            # an op ran under grad mode on an input that requires grad:
                                    # autograd would record this call
  graphBreak @6 :GraphBreak;        # set (`isSet`) when the trace stopped at a graph break: the
                                    # graph is the code before it, `outputs` is None
}

# Where a trace stopped short of what it cannot trace: the instructions [start, instruction]
# run eagerly (a call with its KW_NAMES/PRECALL), over the frame's state just before `start`,
# rebuilt from the graph's outputs; then the rest of the code resumes (docs/tracer.md).
struct GraphBreak {
  isSet @0 :Bool;
  start @1 :UInt32;                 # the first instruction run eagerly
  instruction @2 :UInt32;           # the refused instruction (the last run eagerly)
  stack @3 :List(OutputSpec);       # the value stack, bottom first
  locals @4 :List(NamedSpec);       # the bound locals the rest of the code may read
  reason @5 :Text;                  # why the tracer refused the instruction
  filename @6 :Text;
  line @7 :Int32;
  cells @8 :List(CellSpec);         # the frame's cells (co_cellvars), in order
}

struct CellSpec {
  name @0 :Text;
  isSet @1 :Bool;                   # else an empty cell
  value @2 :OutputSpec;             # its contents; with `isCell`, the cell itself (the call's)
  isCell @3 :Bool;
}

struct NamedSpec {
  name @0 :Text;
  value @1 :OutputSpec;
}

# The returned value's structure: leaves are graph outputs or constants.
struct OutputSpec {
  union {
    graphOutput @0 :UInt32;         # the i-th graph output
    constant @1 :Constant;
    tuple @2 :List(OutputSpec);
    list @3 :List(OutputSpec);
    dict @4 :List(OutputItem);
    symInt @5 :UInt32;              # a graph output holding an int (0-d i64): returned as a Python int
    number @6 :UInt32;              # a graph output holding a float (0-d f64): returned as a Python float
    path @7 :List(Guards.GuardStep);  # the object of the call at this path, itself
    null @8 :Void;                  # the NULL of the call protocol (a value stack's slot)
    iterator @9 :List(OutputSpec);  # an iterator over these items (what a loop has left)
    builtin @10 :Text;              # a callable kiln knows by name ("torch.relu", "builtins.print")
    method @11 :BoundMethod;        # getattr(self, name)
    dtype @12 :Common.DType;
    device @13 :Common.Device;
    slice @14 :List(OutputSpec);    # slice(start, stop, step)
    size @15 :List(OutputSpec);     # a torch.Size
    exitOf @16 :Manager;            # the __exit__ of a torch.no_grad()/enable_grad()/autocast
                                    # the frame entered: entered again, its __exit__ passed
    function @17 :MadeFunction;     # a function the traced code made (MAKE_FUNCTION)
    sameAs @18 :UInt32;             # the object an earlier part of a break's state rebuilt
                                    # (its index in stack, locals, cells order): one object
    returnType @19 :ReturnType;     # a torch.return_types named tuple (max's (values, indices))
    object @20 :MadeObject;         # an instance the traced code made
    madeRef @21 :UInt32;            # the MadeObject of this id, rebuilt earlier in the same value
  }
}

# An instance of a class the traced code made, rebuilt without running the class's code: made
# by the layout's __new__, its items set through its base's __setitem__, its __dict__ filled.
struct MadeObject {
  cls @0 :List(Guards.GuardStep);   # its class, found by path
  layout @1 :Text;                  # "object" (object.__new__), "dict" or "OrderedDict" (their __new__)
  attributes @2 :List(NamedSpec);   # its __dict__
  items @3 :List(OutputItem);       # a dict layout's items
  id @4 :UInt32;                    # what a later madeRef names it by
}

# A function made by the frame's code: its code object (a constant of the frame's code, found
# by qualname and first line), defaults and closure cells.
struct MadeFunction {
  qualname @0 :Text;
  firstLine @1 :Int32;
  defaults @2 :List(OutputSpec);
  kwDefaults @3 :List(NamedSpec);
  closure @4 :List(ClosureCell);
}

struct ClosureCell {
  union {
    frameCell @0 :Text;             # the frame's cell of this name (GraphBreak.cells)
    freeCell @1 :UInt32;            # the frame's function's closure cell at this index
    contents @2 :OutputSpec;        # a cell of its own holding this
    empty @3 :Void;                 # an empty cell of its own
  }
}

# A grad-mode or autocast context manager, as torch.no_grad()/enable_grad()/autocast(...) make it.
struct Manager {
  union {
    gradEnabled @0 :Bool;           # torch.enable_grad() (true) or torch.no_grad() (false)
    autocast :group {               # torch.autocast(deviceType, dtype, enabled)
      deviceType @1 :Text;
      dtype @2 :Common.DType;
      enabled @3 :Bool;
    }
  }
}

struct ReturnType {
  name @0 :Text;                    # torch.return_types.<name>
  items @1 :List(OutputSpec);
}

struct BoundMethod {
  self @0 :OutputSpec;
  name @1 :Text;
}

struct OutputItem {
  key @0 :Constant;
  value @1 :OutputSpec;
}

# A graph input: the tensor (or int) found at `path` in the call.
struct InputBinding {
  path @0 :List(Guards.GuardStep);
  isInt @1 :Bool;                   # a dynamic int argument, passed as a 0-d tensor
  isFloat @2 :Bool;                 # a dynamic float argument, passed as a 0-d f64 CPU tensor
  isSeed @3 :Bool;                  # no path: a 0-d i64 seed the SDK draws from torch's generator
                                    # of the input's device at each call (dropout's random streams)
}

struct SideEffect {
  union {
    setAttr :group {                # path.name = value
      path @0 :List(Guards.GuardStep);
      name @1 :Text;
      value @2 :OutputSpec;
    }
    listAppend :group {             # path.append(value)
      listPath @3 :List(Guards.GuardStep);
      item @4 :OutputSpec;
    }
  }
}

struct Unsupported {
  reason @0 :Text;                  # what was not supported
  filename @1 :Text;
  line @2 :Int32;
}

struct TraceReply {
  union {
    traced @0 :TraceResult;
    needObjects @1 :List(List(Guards.GuardStep)); # describe these paths and ask again
    unsupported @2 :Unsupported;
    sessionLost @3 :Text;           # the kept trace is gone (expired, or another worker answered):
                                    # send the whole request again
  }
  session @4 :UInt64;               # with `needObjects` of a kept trace: the session to go on with
}

struct TracerRequest {
  union {
    ping @0 :Common.Ping;
    info @1 :Void;
    trace @2 :TraceRequest;
  }
}

struct TracerReply {
  union {
    pong @0 :Common.Ping;
    info @1 :Common.ServiceInfo;
    trace @2 :TraceReply;
  }
}
