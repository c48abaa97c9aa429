"""Tracing a Python function: its bytecode and the objects it reads, described
for the tracer (docs/tracer.md), and the tracer's answer read back.

`trace(fn, args, kwargs)` runs the rounds — the tracer may ask for objects it
has not been shown (`needObjects`), which are described and sent again — and
returns a `Traced` (graph, guard set, input paths, output structure) or raises
`Unsupported` with the tracer's reason and the file:line it stopped at.
"""
from __future__ import annotations

import builtins
import collections
import dis
import functools
import hashlib
import inspect
import itertools
import math
import operator
import sys
import threading
import types

import torch
import torch.utils.checkpoint

from kiln import _kiln
from kiln._kiln import KilnError
from kiln.ir import Graph, dtype_name, torch_dtype

PYTHON_VERSION = f"{sys.version_info.major}.{sys.version_info.minor}"
MAX_ROUNDS = 1024  # needObjects rounds before giving up
MAX_DEPTH = 8     # nesting of containers described whole
# Nesting of descriptions inside one (functions in closures, bound methods' selves): each
# level is about three of the message's, and the tracer reads at most 64.
MAX_NESTING = 12


class _Null:
    """The NULL of CPython's call protocol, in a graph break's rebuilt value stack."""

    def __repr__(self) -> str:
        return "NULL"


NULL = _Null()


class Unsupported(Exception):
    """The function cannot be traced: `reason`, at `filename`:`line`."""

    def __init__(self, reason: str, filename: str = "", line: int = 0):
        where = f" ({filename}:{line})" if filename else ""
        super().__init__(f"{reason}{where}")
        self.reason, self.filename, self.line = reason, filename, line


# ---- code -------------------------------------------------------------------

def _constant(c) -> dict:
    if c is None:
        return {"none": None}
    if isinstance(c, bool):
        return {"bool": c}
    if isinstance(c, int):
        return {"int": c} if -(2**63) <= c < 2**63 else {"other": repr(c)}
    if isinstance(c, float):
        return {"float": c}
    if isinstance(c, str):
        return {"str": c}
    if isinstance(c, tuple):
        return {"tuple": [_constant(x) for x in c]}
    if isinstance(c, types.CodeType):
        return {"code": describe_code(c)}
    if c is Ellipsis:
        return {"ellipsis": None}
    return {"other": repr(c)}


_JUMPS = set(dis.hasjrel) | set(dis.hasjabs)


def describe_code(code: types.CodeType) -> dict:
    instructions = list(dis.get_instructions(code))
    index = {i.offset: k for k, i in enumerate(instructions)}
    line = code.co_firstlineno
    listed = []
    for i in instructions:
        if i.positions is not None and i.positions.lineno is not None:
            line = i.positions.lineno
        target = index.get(i.argval, -1) if i.opcode in _JUMPS else -1
        name = i.argval if isinstance(i.argval, str) else i.argrepr
        listed.append({"opname": i.opname, "arg": -1 if i.arg is None else i.arg, "target": target,
                       "name": name, "line": line})
    handlers = [{"start": index[start * 2], "end": index.get(end * 2, len(listed)), "target": index[target * 2]}
                for start, end, target, _ in _exception_entries(code)]
    return {
        "handlers": handlers,
        "name": code.co_name, "qualname": getattr(code, "co_qualname", code.co_name),
        "filename": code.co_filename, "firstLine": code.co_firstlineno,
        "argCount": code.co_argcount, "posOnlyArgCount": code.co_posonlyargcount,
        "kwOnlyArgCount": code.co_kwonlyargcount, "flags": code.co_flags,
        "varnames": list(code.co_varnames), "cellvars": list(code.co_cellvars),
        "freevars": list(code.co_freevars), "names": list(code.co_names),
        "consts": [_constant(c) for c in code.co_consts], "instructions": listed,
        "pythonVersion": PYTHON_VERSION,
    }


def _exception_entries(code: types.CodeType) -> list:
    """co_exceptiontable's entries: (start, end, target, depth and lasti), in code units
    (Objects/exception_handling_notes.txt: big-endian 6-bit varints, an entry's first
    byte marked with bit 7)."""
    data, pos, entries = code.co_exceptiontable, 0, []

    def varint():
        nonlocal pos
        b = data[pos]
        pos += 1
        value = b & 63
        while b & 64:
            b = data[pos]
            pos += 1
            value = (value << 6) | (b & 63)
        return value
    while pos < len(data):
        start, length, target, depth_lasti = varint(), varint(), varint(), varint()
        entries.append((start, start + length, target, depth_lasti))
    return entries


def code_hash(code: types.CodeType) -> str:
    """A stable identity of a code object: its bytecode, constants and names."""
    h = hashlib.sha256()
    def feed(c):
        h.update(c.co_code)
        h.update(repr(c.co_names).encode())
        h.update(repr(c.co_varnames).encode())
        for k in c.co_consts:
            feed(k) if isinstance(k, types.CodeType) else h.update(repr(k).encode())
    feed(code)
    return h.hexdigest()[:32]


def function_key(fn) -> dict:
    code = fn.__code__
    return {"module": getattr(fn, "__module__", "") or "", "qualname": getattr(fn, "__qualname__", code.co_name),
            "codeHash": code_hash(code)}


# ---- objects ------------------------------------------------------------------

# Builtin types whose own names find nothing (builtins.builtin_function_or_method), by the
# names the `types` module gives them: a type guard finds them there.
_TYPE_ALIASES = {getattr(types, n): {"module": "types", "qualname": n}
                 for n in ("BuiltinFunctionType", "MethodWrapperType", "WrapperDescriptorType",
                           "MethodDescriptorType", "CodeType")}


# A metaclass that keeps these of `type` makes a class whose str(), isinstance() and == are
# type's (the tracer decides them from the class's name and MRO).
_PLAIN_CLASS_METHODS = ("__repr__", "__str__", "__instancecheck__", "__eq__", "__hash__")


def _type_ref(t: type) -> dict:
    alias = _TYPE_ALIASES.get(t)
    return dict(alias) if alias is not None else {"module": t.__module__, "qualname": t.__qualname__}


def _device(d: torch.device) -> dict:
    return {"type": d.type, "index": -1 if d.index is None else d.index}


def _tensor(t: torch.Tensor) -> dict:
    out = {"dtype": dtype_name(t.dtype), "device": _device(t.device), "requiresGrad": t.requires_grad,
           "sizes": list(t.shape), "strides": list(t.stride()), "storageOffset": t.storage_offset()}
    if t.dim() == 0 and t.device.type == "cpu":  # .item() of it is backed by this value
        if t.dtype.is_floating_point:
            out["value"] = {"float": t.item()}
        elif not t.dtype.is_complex and t.dtype != torch.bool:
            out["value"] = {"int": t.item()}
    return out


# Built-in modules kiln lowers itself (the rest are inlined through their forward).
_BUILTIN_MODULES = {getattr(torch.nn, n) for n in (
    "Linear", "LayerNorm", "Embedding", "Dropout", "ReLU", "GELU", "SiLU", "Tanh", "Sigmoid",
    "Softmax", "Sequential", "Identity", "RMSNorm", "MultiheadAttention")}

_KNOWN_MODULES = {"torch": torch, "torch.nn.functional": torch.nn.functional, "torch.linalg": torch.linalg,
                  "math": math, "builtins": builtins,
                  "torch.utils.checkpoint": torch.utils.checkpoint, "itertools": itertools}


@functools.lru_cache(maxsize=None)
def _answered_when_tracing() -> dict:
    """Callables whose answer under kiln the tracer knows (is_compiling() is True, as under
    torch.compile; no TorchScript tracing runs), by the names the tracer answers them by."""
    named = {"torch.compiler.is_compiling": torch.compiler.is_compiling,
             "torch.compiler.is_dynamo_compiling": getattr(torch.compiler, "is_dynamo_compiling", None),
             "torch.compiler.is_exporting": getattr(torch.compiler, "is_exporting", None),
             "torch.jit.is_tracing": torch.jit.is_tracing,
             "torch.jit.is_scripting": torch.jit.is_scripting,
             "torch._C._get_tracing_state": torch._C._get_tracing_state,
             "torch.is_grad_enabled": torch.is_grad_enabled,
             "torch.get_default_dtype": torch.get_default_dtype,
             "inspect.signature": inspect.signature,
             "functools.reduce": functools.reduce,
             **{f"operator.{n}": getattr(operator, n)
                for n in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul")}}
    return {fn: name for name, fn in named.items() if fn is not None}


@functools.lru_cache(maxsize=None)
def _builtin_methods() -> dict:
    """The methods of object, dict and OrderedDict (their own, as their __dict__ holds them),
    which the tracer runs for instances the traced code makes, by name
    ("builtins.dict.__setitem__")."""
    kinds = (types.WrapperDescriptorType, types.MethodDescriptorType, types.BuiltinMethodType,
             types.ClassMethodDescriptorType)
    return {raw: f"{cls.__module__}.{cls.__qualname__}.{name}"
            for cls in (object, dict, collections.OrderedDict)
            for name, raw in vars(cls).items() if isinstance(raw, kinds)}


@functools.lru_cache(maxsize=None)
def _named_callables() -> dict:
    """Every callable kiln names beside module members, by its name."""
    named = {name: fn for fn, name in _answered_when_tracing().items()}
    named.update({name: raw for raw, name in _builtin_methods().items()})
    return named


def _builtin_name(obj):
    """The qualified name of a callable kiln knows, or None."""
    try:
        known = _answered_when_tracing().get(obj) or _builtin_methods().get(obj)
    except TypeError:  # unhashable
        known = None
    if known is not None:
        return known
    name = getattr(obj, "__name__", None)
    if isinstance(obj, types.FunctionType) and isinstance(name, str) and name.startswith("_") \
            and obj.__module__ == "torch.nn.functional":
        # A private helper of F (torch 2.x's _canonical_mask, _none_or_dtype, which the
        # modules' forwards call) is plain Python: the tracer inlines it.
        return None
    for prefix, module in _KNOWN_MODULES.items():
        member = name
        if prefix == "torch.linalg" and isinstance(name, str) and name.startswith("linalg_"):
            member = name[len("linalg_"):]  # torch.linalg.vector_norm is named linalg_vector_norm
        if isinstance(member, str) and getattr(module, member, None) is obj:
            if prefix == "torch.utils.checkpoint" and getattr(obj, "__module__", None) != prefix:
                continue  # a name it imports (collections.defaultdict), not one of its own
            return f"{prefix}.{member}"
    if obj is torch.Tensor:
        return "torch.Tensor"
    return None


def _primitive_attr(v) -> bool:
    if isinstance(v, (bool, int, float, str, type(None))):
        return True
    return isinstance(v, tuple) and all(isinstance(x, (bool, int, float, str, type(None))) for x in v)


def describe(obj, path: list, depth: int = 0, extra: list | None = None) -> dict:
    """`obj` at `path`; a module's submodules (whole tree) go to `extra`, described at once
    since a trace of a module reads most of them (one round instead of one per submodule).
    What cannot be described (nested past MAX_NESTING: a function whose closure holds
    itself; an object whose attributes raise when read) is described as unsupported, with
    the reason: the tracer refuses it where it reads it."""
    d = {"path": path, "type": _type_ref(type(obj)), "id": id(obj)}
    if depth > MAX_NESTING:
        d["unsupported"] = f"nested more than {MAX_NESTING} deep"
        return d
    try:
        return _described(obj, path, depth, extra, d)
    except Exception as e:  # reading arbitrary objects runs their code
        return {**{k: d[k] for k in ("path", "type", "id")},
                "unsupported": f"kiln could not describe it ({type(e).__name__}: {e})"}


def _described(obj, path: list, depth: int, extra: list | None, d: dict) -> dict:
    if obj is None:
        d["none"] = None
    elif isinstance(obj, bool):
        d["bool"] = obj
    elif isinstance(obj, int) and type(obj) is int:
        if -(2**63) <= obj < 2**63:
            d["int"] = obj
        else:
            d["unsupported"] = "an int beyond 64 bits"
    elif isinstance(obj, float) and type(obj) is float:
        d["float"] = obj
    elif isinstance(obj, str) and type(obj) is str:
        d["str"] = obj
    elif isinstance(obj, torch.Tensor):
        d["tensor"] = _tensor(obj)
    elif isinstance(obj, torch.dtype):
        try:
            d["dtype"] = dtype_name(obj)
        except TypeError:
            d["unsupported"] = f"the dtype {obj}"
    elif isinstance(obj, torch.device):
        d["device"] = _device(obj)
    elif isinstance(obj, types.ModuleType):
        if type(obj) is types.ModuleType or _findable(type(obj)):
            d["pyModule"] = obj.__name__
        else:  # a module object of a class its guard could not find (torch._VF's)
            d["unsupported"] = f"the module {obj.__name__}, a {type(obj).__qualname__} kiln cannot find by name"
    elif obj is sys.modules:
        d["unsupported"] = "sys.modules (kiln reads imported modules by name)"
    elif isinstance(obj, (torch._ops.OpOverloadPacket, torch._ops.OpOverload)):
        _aten_op(obj, d)
    elif isinstance(obj, functools.partial):
        # Its func, args and keywords are read through their paths when it is called. Its
        # __dict__ is not read: reading it makes one, and a partial with a __dict__ is no
        # longer flattened into a partial made of it.
        if type(obj) is functools.partial:
            d["object"] = []
            d["mro"] = [_type_ref(t) for t in type(obj).__mro__]
        else:
            d["unsupported"] = f"a {type(obj).__qualname__}, a subclass of functools.partial"
    elif (name := _builtin_name(obj)) is not None:
        d["builtin"] = name
    elif isinstance(obj, (list, tuple)) and type(obj) in (list, tuple, torch.Size) and depth < MAX_DEPTH:
        items = [describe(x, path + [{"index": k}], depth + 1) for k, x in enumerate(obj)]
        d["list" if isinstance(obj, list) else "tuple"] = items
    elif type(obj) is dict and depth < MAX_DEPTH and all(isinstance(k, (str, int)) for k in obj):
        d["dict"] = [{"key": describe(k, path, depth + 1),
                      "value": describe(v, path + [{"key": None, "name": k} if isinstance(k, str) else {"intKey": k}],
                                        depth + 1)}
                     for k, v in obj.items()]
    elif isinstance(obj, types.FunctionType):
        d["function"] = _function(obj, path, depth=depth)
    elif isinstance(obj, types.MethodType) and isinstance(obj.__func__, types.FunctionType):
        # A bound method is a new object at each attribute read: its function is what stays
        # (the tracer guards `path.__func__` by this id).
        d["id"] = id(obj.__func__)
        f = _function(obj.__func__, path + [{"attr": None, "name": "__func__"}], depth=depth + 1)
        f["isBound"] = True
        f["bound"] = describe(obj.__self__, path + [{"attr": None, "name": "__self__"}], depth + 1)
        d["function"] = f
    elif isinstance(obj, torch.nn.Module):
        d["module"] = _module(obj, path)
        d["mro"] = [_type_ref(t) for t in type(obj).__mro__]
        if extra is not None and len(path) < 64:  # each child a description of its own (depth 0)
            for name, child in obj._modules.items():
                if child is not None:
                    extra.append(describe(child, path + [{"attr": None, "name": name}], 0, extra))
    elif isinstance(obj, type):
        d["typeObject"] = _type_ref(obj)
        d["mro"] = [_type_ref(t) for t in obj.__mro__]
        meta = type(obj)
        d["plainClass"] = all(getattr(meta, n) is getattr(type, n) for n in _PLAIN_CLASS_METHODS)
        d["instanceDict"] = obj.__dictoffset__ != 0
        d["instantiable"] = meta.__call__ is type.__call__ and not getattr(obj, "__abstractmethods__", None)
    elif isinstance(obj, types.CellType):
        try:
            contents = obj.cell_contents
        except ValueError:
            d["emptyCell"] = None
        else:
            d["cell"] = describe(contents, path + [{"attr": None, "name": "cell_contents"}], depth + 1)
    elif not _findable(type(obj)):
        # Its type guard could not find the type again (builtins' list_iterator, mappingproxy):
        # every call would miss. Refused where the trace reads it instead.
        d["unsupported"] = f"a {type(obj).__qualname__}, whose type kiln cannot find by name"
    else:
        d["object"] = sorted(getattr(obj, "__dict__", {}).keys())
        d["mro"] = [_type_ref(t) for t in type(obj).__mro__]
        d["dataDescriptor"] = hasattr(type(obj), "__set__") or hasattr(type(obj), "__delete__")
    return d


def _aten_op(op, d: dict) -> None:
    """torch.ops.aten.<op>[.<overload>]: the torch function or Tensor method of its name it maps
    to, and an overload's schema (ops of other namespaces, out= overloads and ops without a
    torch form of their name are refused where read)."""
    overload = isinstance(op, torch._ops.OpOverload)
    qualified = op._name if overload else op._qualified_op_name
    namespace, _, name = qualified.partition("::")
    base = name.split(".")[0]
    if namespace != "aten":
        d["unsupported"] = f"the op torch.ops.{namespace}.{name} (kiln maps the aten namespace)"
        return
    if callable(getattr(torch, base, None)) and not base.startswith("_"):
        torch_name = f"torch.{base}"
    elif callable(getattr(torch.Tensor, base, None)) and not base.startswith("_"):
        torch_name = f"Tensor.{base}"
    else:
        d["unsupported"] = f"torch.ops.aten.{name}, which has no torch function or Tensor method of its name"
        return
    arguments = []
    if overload:
        for k, a in enumerate(op._schema.arguments):
            if k > 0 and a.alias_info is not None and a.alias_info.is_write:
                d["unsupported"] = f"torch.ops.aten.{name}, which writes its argument '{a.name}'"
                return
            argument = {"name": a.name, "type": str(a.real_type), "kwargOnly": a.kwarg_only,
                        "hasDefault": a.has_default_value()}
            if a.has_default_value():
                default = a.default_value
                argument["default"] = _constant(tuple(default) if isinstance(default, list) else default)
            arguments.append(argument)
    d["atenOp"] = {"qualifiedName": qualified, "torchName": torch_name, "overload": overload, "arguments": arguments}


@functools.lru_cache(maxsize=None)
def _findable(t: type) -> bool:
    """Whether `t` is found again by its module and qualified name (as type guards look it up)."""
    if t in _TYPE_ALIASES:
        return True
    found = sys.modules.get(t.__module__)
    for part in t.__qualname__.split("."):
        found = getattr(found, part, None)
    return found is t


def _function(fn: types.FunctionType, path: list, root: bool = False, depth: int = 0) -> dict:
    defaults = fn.__defaults__ or ()
    kwdefaults = fn.__kwdefaults__ or {}
    cells = fn.__closure__ or ()
    if root:
        default_path = lambda k: [{"default": k}]
        kwdefault_path = lambda n: [{"kwDefault": None, "name": n}]
        cell_path = lambda k: [{"closure": k, "name": fn.__code__.co_freevars[k]}]
    else:
        default_path = lambda k: path + [{"attr": None, "name": "__defaults__"}, {"index": k}]
        kwdefault_path = lambda n: path + [{"attr": None, "name": "__kwdefaults__"}, {"key": None, "name": n}]
        cell_path = lambda k: path + [{"attr": None, "name": "__closure__"}, {"index": k},
                                      {"attr": None, "name": "cell_contents"}]
    closure = []
    for k, cell in enumerate(cells):
        try:
            closure.append(describe(cell.cell_contents, cell_path(k), depth + 1))
        except ValueError:  # an empty cell
            closure.append({"path": cell_path(k), "unsupported": "an empty cell"})
    return {
        "code": describe_code(fn.__code__),
        "defaults": [describe(v, default_path(k), depth + 1) for k, v in enumerate(defaults)],
        "kwDefaults": [{"name": n, "value": describe(v, kwdefault_path(n), depth + 1)}
                       for n, v in kwdefaults.items()],
        "closure": closure,
        "module": _globals_name(fn),
    }


def _globals_name(fn: types.FunctionType) -> str:
    """The module whose globals `fn` reads, by name: not `__module__`, which functools.wraps
    copies from the wrapped function (a decorator's wrapper reads its own module's names).
    Globals that are no module's are named by their identity (each their own)."""
    g = fn.__globals__
    name = g.get("__name__", "")
    module = sys.modules.get(name) if isinstance(name, str) else None
    return name if module is not None and getattr(module, "__dict__", None) is g else f"<globals at {id(g):#x}>"


def own_call(m: torch.nn.Module) -> bool:
    """Whether calling `m` runs its class's own __call__ rather than Module's (forward)."""
    return type(m).__call__ is not torch.nn.Module.__call__


def _module(m: torch.nn.Module, path: list) -> dict:
    builtin_kind = type(m) in _BUILTIN_MODULES
    attr = lambda n: path + [{"attr": None, "name": n}]
    desc = {
        "kind": f"torch.nn.{type(m).__name__}" if builtin_kind else "",
        "training": m.training,
        "hooks": has_hooks(m),
        "ownCall": own_call(m),
        "parameters": [{"name": n, "value": describe(p, attr(n))} for n, p in m._parameters.items()],
        "buffers": [{"name": n, "value": describe(b, attr(n))} for n, b in m._buffers.items()],
        "modules": list(m._modules.keys()),
        "attributes": [{"name": n, "value": describe(v, attr(n))} for n, v in vars(m).items()
                       if not n.startswith("_") and _primitive_attr(v)],
    }
    if not builtin_kind:
        forward = type(m).forward
        if isinstance(forward, types.FunctionType):
            desc["forward"] = _function(forward, path + [{"attr": None, "name": "forward"},
                                                          {"attr": None, "name": "__func__"}])
    return desc


def has_hooks(module: torch.nn.Module) -> bool:
    """Whether calling the module runs hooks beside its forward (its own or global ones)."""
    from torch.nn.modules import module as m
    own = (module._forward_hooks, module._forward_pre_hooks, module._backward_hooks,
           getattr(module, "_backward_pre_hooks", {}))
    shared = (m._global_forward_hooks, m._global_forward_pre_hooks, m._global_backward_hooks,
              getattr(m, "_global_backward_pre_hooks", {}))
    return any(own) or any(shared)


# ---- paths --------------------------------------------------------------------

_MISSING = object()


def resolve(path: list, fn, args, kwargs):
    """The object at `path` from this call's roots (what the guard VM reads)."""
    obj = _MISSING
    for step in path:
        (kind, value), = [(k, v) for k, v in step.items() if k != "name"]
        name = step.get("name")
        if kind == "arg":
            obj = args[value]
        elif kind == "kwarg":
            obj = kwargs[name]
        elif kind == "global":
            g = fn.__globals__
            obj = g[name] if name in g else getattr(builtins, name)
        elif kind == "closure":
            obj = fn.__closure__[value].cell_contents
        elif kind == "default":
            obj = fn.__defaults__[value]
        elif kind == "kwDefault":
            obj = fn.__kwdefaults__[name]
        elif kind == "attr":
            if isinstance(obj, torch.nn.Module) and name not in vars(obj):
                for table in ("_parameters", "_buffers", "_modules"):
                    if name in vars(obj).get(table, {}):
                        obj = vars(obj)[table][name]
                        break
                else:
                    obj = getattr(obj, name)
            else:
                obj = getattr(obj, name)
        elif kind == "module":
            obj = sys.modules[name]
        elif kind == "classAttr":
            obj = class_attribute(obj, value, name)
        elif kind == "hasAttr":
            obj = hasattr(obj, name)
        elif kind in ("index", "intKey"):
            obj = obj[value]
        elif kind == "key":
            if isinstance(obj, dict) and name not in obj and obj.get("__builtins__") is not None:
                obj = getattr(builtins, name)  # a module's globals: Python looks in builtins next
            else:
                obj = obj[name]
        else:
            raise ValueError(f"cannot resolve step {step}")
    return obj


# ---- the rounds -----------------------------------------------------------------

class Traced:
    """What the tracer made of one call: `graph` (kiln.ir.Graph), `guards` (GuardSet
    bytes), `inputs` (the path of each graph input), `outputs` (the returned
    value's structure) and the raw reply."""

    def __init__(self, reply: dict):
        traced = reply["traced"]
        self.graph = Graph.from_bytes(_kiln.capnp_encode("Graph", traced["graph"]))
        self.guards = _kiln.capnp_encode("GuardSet", traced["guards"])
        self.inputs = [i["path"] for i in traced["inputs"]]
        self.int_inputs = [i["isInt"] for i in traced["inputs"]]  # dynamic ints: passed as 0-d int64
        self.float_inputs = [i["isFloat"] for i in traced["inputs"]]  # dynamic floats: 0-d f64
        # dropout's seeds: drawn afresh at each call (no path)
        self.seed_inputs = [i["isSeed"] for i in traced["inputs"]]
        # the graph's placeholder node ids, in input order
        self.placeholders = [k for k in range(len(self.graph)) if self.graph.node(k)["kind"] == "placeholder"]
        self.outputs = traced["outputs"]
        # A graph break: the graph is the code before it; its outputs rebuild the frame's
        # value stack, live locals and cells' contents there, in that order (kiln._resume
        # runs the rest).
        self.graph_break = traced["graphBreak"] if traced["graphBreak"]["isSet"] else None
        if self.graph_break is not None:
            self.outputs = {"tuple": self.graph_break["stack"] + [v["value"] for v in self.graph_break["locals"]] +
                            [c["value"] for c in self.graph_break["cells"]]}
            state = rebuilder(self.outputs)
            same = [(k, spec["sameAs"]) for k, spec in enumerate(self.outputs["tuple"]) if "sameAs" in spec]

            def rebuild_state(results, call):  # one object where the state holds one twice
                values = list(state(results, call))
                for k, first in same:
                    values[k] = values[first]
                return tuple(values)
            self.rebuild = rebuild_state if same else state
        if self.graph_break is None:
            self.rebuild = rebuilder(self.outputs)  # (results, call) -> the value
        self.side_effects = traced["sideEffects"]
        self.requires_grad = traced["requiresGrad"]  # autograd would record the call


def global_state() -> dict:
    return {
        "gradEnabled": {"value": torch.is_grad_enabled()},
        "defaultDtype": {"value": dtype_name(torch.get_default_dtype())},
        "deterministic": {"value": torch.are_deterministic_algorithms_enabled()},
        "autocast": [_autocast("cpu"), _autocast("cuda")],
    }


def _autocast(device: str) -> dict:
    """Autocast's state for a device type."""
    enabled, dtype = torch.is_autocast_enabled(device), torch.get_autocast_dtype(device)
    return {"device": device, "enabled": enabled, "dtype": dtype_name(dtype)}


def _global_names(code: types.CodeType) -> set:
    names = {i.argval for i in dis.get_instructions(code) if i.opname == "LOAD_GLOBAL"}
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            names |= _global_names(c)
    return names


def normalize(fn, args: tuple):
    """The function and arguments the tracer sees: a bound method's self is its first argument."""
    if isinstance(fn, types.MethodType):
        return fn.__func__, (fn.__self__, *args)
    return fn, tuple(args)


def trace(fn, args: tuple, kwargs: dict, frame: dict | None = None, fullgraph: bool = False,
          scope: int = 0, stack=None, record=None) -> Traced:
    """Traces `fn(*args, **kwargs)`: through `stack`'s tracer service when given, else
    in-process. `record(request_bytes)` sees the request that got the final answer.
    Raises Unsupported for what cannot be traced, KilnError where the stack fails, and
    nothing else: any other exception on the way is kiln's own failure, refused with its
    reason (the call then runs eagerly, where an error of the user's own code is theirs)."""
    try:
        return _trace(fn, args, kwargs, frame, fullgraph, scope, stack, record)
    except (Unsupported, KilnError):
        raise
    except Exception as e:
        raise Unsupported(f"kiln failed to trace the call ({type(e).__name__}: {e})") from e


def _trace(fn, args: tuple, kwargs: dict, frame: dict | None, fullgraph: bool, scope: int, stack,
           record) -> Traced:
    fn, args = normalize(fn, args)
    code = fn.__code__
    names = code.co_varnames
    objects: list = []
    # The globals the code (and the code it defines) loads, described up front: one round
    # instead of one per name.
    for name in sorted(_global_names(code)):
        if name in fn.__globals__ or hasattr(builtins, name):
            objects.append(describe(fn.__globals__[name] if name in fn.__globals__ else getattr(builtins, name),
                                    [{"global": None, "name": name}], 0, objects))
    request = {
        "function": function_key(fn),
        "code": describe_code(code),
        "callee": {"path": [], "function": _function(fn, [], root=True)},
        "args": [describe(a, [{"arg": k, "name": names[k] if k < code.co_argcount else f"arg{k}"}], 0, objects)
                 for k, a in enumerate(args)],
        "kwargs": [{"name": n, "value": describe(v, [{"kwarg": None, "name": n}], 0, objects)}
                   for n, v in kwargs.items()],
        "objects": [],
        "objectMessages": [],  # `objects`, each encoded once (a request is resent each round)
        "frame": frame or {},
        "state": global_state(),
        "fullgraph": fullgraph,
        "scope": scope,
    }
    seen = set()
    # The tracer keeps the trace between rounds (a session): each round sends only the
    # descriptions asked for. A session lost (another worker, expiry) starts over whole.
    session, sent = 0, 0
    messages = request["objectMessages"]
    for _ in range(MAX_ROUNDS):
        messages.extend(_kiln.capnp_encode("ObjectDesc", d) for d in objects[len(messages):])
        if session:
            encoded = _kiln.capnp_encode("TraceRequest", {"session": session, "objectMessages": messages[sent:]})
        else:
            request["keepState"] = True
            encoded = _kiln.capnp_encode("TraceRequest", request)
        sent = len(messages)
        reply = _kiln.capnp_decode("TraceReply", stack.trace(encoded) if stack is not None else _kiln.trace(encoded))
        session = reply.get("session", 0)
        if "sessionLost" in reply:
            continue
        if record is not None and "needObjects" not in reply:
            request["keepState"] = False  # the request whole, as one round answers it
            record(_kiln.capnp_encode("TraceRequest", request))
        if "traced" in reply:
            return Traced(reply)
        if "unsupported" in reply:
            u = reply["unsupported"]
            raise Unsupported(u["reason"], u["filename"], u["line"])
        for path in reply["needObjects"]:
            key = repr(path)
            if key in seen:
                raise Unsupported(f"the tracer asked twice for {path}")
            seen.add(key)
            try:
                objects.append(describe(resolve(path, fn, args, kwargs), path, 0, objects))
            except (KeyError, IndexError, AttributeError, TypeError, ValueError) as e:
                # The tracer decides what a missing object means where it read it.
                objects.append({"path": path, "unsupported": f"missing ({type(e).__name__}: {e})"})
            if len(path) > 2 and path[-2] == {"attr": None, "name": "__globals__"}:
                _describe_globals(path[:-2], fn, args, kwargs, objects, seen)
    raise Unsupported(f"more than {MAX_ROUNDS} rounds of object descriptions")


def _describe_globals(at: list, fn, args, kwargs, objects: list, seen: set) -> None:
    """The globals the code of the function at `at` loads, described ahead: the tracer asks for
    an inlined function's globals one round each otherwise. Best effort: what does not resolve
    is left for the tracer to ask for."""
    try:
        inlined = resolve(at, fn, args, kwargs)
        names = sorted(_global_names(inlined.__code__))
        known = inlined.__globals__
    except Exception:
        return
    for name in names:
        path = at + [{"attr": None, "name": "__globals__"}, {"key": None, "name": name}]
        if repr(path) not in seen and (name in known or hasattr(builtins, name)):
            seen.add(repr(path))
            objects.append(describe(known[name] if name in known else getattr(builtins, name), path, 0, objects))


# ---- running what was traced --------------------------------------------------------

def path_text(path: list) -> str:
    """A graph input's path as the user reads it: x, xs[0], self.fc1.weight."""
    if not path:
        return "<dropout seed>"  # the one kind of input without a path
    text = ""
    for step in path:
        name = step.get("name", "")
        if "arg" in step or "kwarg" in step or "global" in step or "closure" in step:
            text = name
        elif "module" in step:
            text = f"sys.modules[{name!r}]"
        elif "classAttr" in step:
            text += f".__mro__[{step['classAttr']}:].{name}"
        elif "attr" in step:
            text += f".{name}"
        elif "key" in step:
            text += f"[{name!r}]"
        else:
            text += f"[{step.get('index', step.get('intKey'))}]"
    return text


def graph_inputs(traced: Traced, fn, args, kwargs) -> list:
    """The tensors the graph takes, read from the call by their paths."""
    return inputs_reader(traced)(fn, args, kwargs)


def inputs_reader(traced: Traced):
    """A function (fn, args, kwargs) -> what the graph takes, per input: the tensor at its
    path, or a dynamic int (float) there as a 0-d int64 (f64) CPU tensor. The paths' common
    prefixes are walked once per call (a model's parameters share self, self.h, self.h[0],
    ...: GPT-2's 150 paths take ~200 steps, not ~640)."""
    program = []  # (source slot, step, destination slot), in order
    roots = []  # (slot, the root's function)
    finals = []  # per input: (its slot, or a getter walking its path alone; its dtype if converted)
    slot_of = {}  # a path prefix, as text -> its slot
    for k, (path, is_int, is_float) in enumerate(zip(traced.inputs, traced.int_inputs, traced.float_inputs)):
        if traced.seed_inputs[k]:
            finals.append((None, _seed_drawer(traced.graph.value(traced.placeholders[k]).meta["device"]), None))
            continue
        dtype = torch.int64 if is_int else torch.float64 if is_float else None
        steps = [_step(step) for step in path[1:]]
        if any(step is None for step in steps):  # a root step past the first: as resolve
            finals.append((None, _accessor(path), dtype))
            continue
        key = repr(sorted(path[0].items()))
        if key not in slot_of:
            slot_of[key] = len(slot_of)
            roots.append((slot_of[key], _accessor(path[:1])))
        for step, fn in zip(path[1:], steps):
            parent, key = slot_of[key], key + "/" + repr(sorted(step.items()))
            if key not in slot_of:
                slot_of[key] = len(slot_of)
                program.append((parent, fn, slot_of[key], step))
        finals.append((slot_of[key], None, dtype))
    size = len(slot_of)
    walks = []  # [the walk specialized to the first call's objects], once made

    def walk(slots):
        for source, step, destination, _ in program:
            slots[destination] = step(slots[source])

    def read(fn, args, kwargs):
        slots = [None] * size
        for slot, root in roots:
            slots[slot] = root(fn, args, kwargs)
        if walks:
            try:
                walks[0](slots)
            except (KeyError, AttributeError, IndexError, TypeError):  # not laid out as then
                walk(slots)
        else:
            walk(slots)
            walks.append(_specialized_walk(program, slots))
        values = []
        for slot, get, dtype in finals:
            value = slots[slot] if get is None else get(fn, args, kwargs)
            if dtype is not None:
                # .item() of a 0-d input, backed: the input as it is
                value = value.to(dtype) if isinstance(value, torch.Tensor) else torch.tensor(value, dtype=dtype)
            values.append(value)
        return values
    return read


def _specialized_walk(program, slots):
    """The path program as straight-line code for objects laid out as `slots` (a walked
    call's): a module's attribute read from the table the first call found it in (after
    its instance dict, as Module.__getattr__ looks), a ModuleList's item from its
    _modules, other steps as they are. A read costs ~1/4 of the generic walk's (GPT-2's
    ~250 steps come before a training step's first launch); a call laid out otherwise
    raises KeyError/AttributeError and takes the generic walk."""
    lines, names, defined = ["def walk(slots):"], {"MISSING": _MISSING}, set()
    for k, (source, step_fn, destination, step) in enumerate(program):
        parent, value = slots[source], slots[destination]
        src, dst = f"s{source}", f"s{destination}"
        if source not in defined:  # a root's slot
            lines.append(f"    {src} = slots[{source}]")
            defined.add(source)
        defined.add(destination)
        name = step.get("name")
        table = None
        if "attr" in step and isinstance(parent, torch.nn.Module) and name not in vars(parent):
            table = next((t for t in ("_parameters", "_buffers", "_modules")
                          if vars(parent).get(t, {}).get(name, _MISSING) is value), None)
        if table is not None:
            lines.append(f"    d = {src}.__dict__")
            lines.append(f"    {dst} = d.get({name!r}, MISSING)")
            lines.append(f"    if {dst} is MISSING: {dst} = d[{table!r}][{name!r}]")
        elif ("index" in step and type(parent) is torch.nn.ModuleList and step["index"] >= 0
              and vars(parent)["_modules"].get(str(step["index"]), _MISSING) is value):
            lines.append(f"    {dst} = {src}.__dict__['_modules'][{str(step['index'])!r}]")
        else:
            names[f"step{k}"] = step_fn
            lines.append(f"    {dst} = step{k}({src})")
        lines.append(f"    slots[{destination}] = {dst}")
    if len(lines) == 1:
        lines.append("    pass")
    exec("\n".join(lines), names)  # noqa: S102 - code made here, of these steps alone
    return names["walk"]


def _seed_drawer(device: str):
    """A function (fn, args, kwargs) -> a fresh 0-d int64 seed on `device`, drawn from torch's
    generator of that device: each call gets new dropout masks, and torch.manual_seed makes a
    run repeat (Inductor draws its seeds the same way)."""
    def draw(fn, args, kwargs):
        return torch.randint(0, 2 ** 62, (), dtype=torch.int64, device=device)
    return draw


def _accessor(path: list):
    """A function (fn, args, kwargs) -> the object at `path`, as resolve finds it, with
    each step decided once (a call reads every parameter of a model through one)."""
    first = path[0]
    if "arg" in first:
        i = first["arg"]
        root = lambda fn, args, kwargs: args[i]  # noqa: E731
    elif "kwarg" in first:
        name = first["name"]
        root = lambda fn, args, kwargs: kwargs[name]  # noqa: E731
    elif "global" in first:
        name = first["name"]

        def root(fn, args, kwargs):
            g = fn.__globals__
            return g[name] if name in g else getattr(builtins, name)
    else:
        root = lambda fn, args, kwargs: resolve([first], fn, args, kwargs)  # noqa: E731
    steps = [_step(step) for step in path[1:]]
    if any(step is None for step in steps):  # a root step past the first: never traced so
        return lambda fn, args, kwargs: resolve(path, fn, args, kwargs)
    if not steps:
        return root

    def get(fn, args, kwargs):
        obj = root(fn, args, kwargs)
        for step in steps:
            obj = step(obj)
        return obj
    return get


def class_attribute(cls: type, start: int, name: str):
    """`name` as the first class of cls.__mro__[start:] whose own __dict__ has it holds it: a
    function, staticmethod, classmethod, property or value, unbound (the tracer binds it)."""
    for klass in cls.__mro__[start:]:
        own = vars(klass)
        if name in own:
            return own[name]
    raise AttributeError(f"type object {cls.__qualname__!r} has no attribute {name!r}")


def _step(step: dict):
    """One step of a path past its root as a function of the object before it (resolve's
    rules), or None for a root step."""
    (kind, value), = [(k, v) for k, v in step.items() if k != "name"]
    name = step.get("name")
    if kind == "attr":
        def attr(obj):
            if isinstance(obj, torch.nn.Module):
                own = vars(obj)
                if name not in own:
                    for table in ("_parameters", "_buffers", "_modules"):
                        if name in own.get(table, {}):
                            return own[table][name]
            return getattr(obj, name)
        return attr
    if kind in ("index", "intKey"):
        return lambda obj: obj[value]
    if kind == "key":
        return lambda obj: resolve([{"arg": 0}, step], None, (obj,), {})
    if kind == "classAttr":
        return lambda obj: class_attribute(obj, value, name)
    return None


def rebuild(spec: dict, results: list, call: tuple | None = None):
    """The returned Python value from the graph's outputs, as the output spec says;
    `call` (fn, args, kwargs) finds the call's own objects a graph break's state holds."""
    return rebuilder(spec)(results, call)


_made = threading.local()  # the objects one rebuild made so far, by MadeObject id


def rebuilder(spec: dict):
    """`rebuild` of this spec made once: a function (results, call) -> the value, each part's
    kind decided and each path's steps resolved ahead (an entry rebuilds at every call)."""
    part = _rebuilder(spec)
    if not _makes_objects(spec):
        return part

    def with_objects(results, call):  # one object for each MadeObject id, within this value
        outer = getattr(_made, "objects", None)
        _made.objects = {}
        try:
            return part(results, call)
        finally:
            _made.objects = outer
    return with_objects


def _makes_objects(spec) -> bool:
    if isinstance(spec, dict):
        return "object" in spec or any(_makes_objects(v) for v in spec.values())
    return isinstance(spec, list) and any(_makes_objects(v) for v in spec)


_NEW = {"object": object.__new__, "dict": dict.__new__, "OrderedDict": dict.__new__}


def _made_object(o: dict):
    """The rebuilder of an instance the traced code made (MadeObject)."""
    get_cls = _accessor(o["cls"])
    new, setitem = _NEW[o["layout"]], collections.OrderedDict.__setitem__ if o["layout"] == "OrderedDict" \
        else dict.__setitem__
    attributes = [(a["name"], _rebuilder(a["value"])) for a in o["attributes"]]
    items = [(_from_constant(i["key"]), _rebuilder(i["value"])) for i in o["items"]]
    ident = o["id"]

    def made(results, call):  # its parts in the tracer's order: a later part may name an earlier one
        obj = new(get_cls(*call))
        _made.objects[ident] = obj
        own = {name: value(results, call) for name, value in attributes}
        for key, value in items:
            setitem(obj, key, value(results, call))
        object.__getattribute__(obj, "__dict__").update(own)
        return obj
    return made


def _rebuilder(spec: dict):
    many = lambda specs: [_rebuilder(s) for s in specs]  # noqa: E731
    if "graphOutput" in spec:
        k = spec["graphOutput"]
        return lambda results, call: results[k]
    if "constant" in spec:
        value = _from_constant(spec["constant"])
        return lambda results, call: value
    if "tuple" in spec or "list" in spec or "size" in spec:
        parts = many(spec.get("tuple", spec.get("list", spec.get("size"))))
        make = tuple if "tuple" in spec else list if "list" in spec else torch.Size
        return lambda results, call: make([p(results, call) for p in parts])
    if "dict" in spec:
        items = [(_from_constant(i["key"]), _rebuilder(i["value"])) for i in spec["dict"]]
        return lambda results, call: {k: v(results, call) for k, v in items}
    if "symInt" in spec:
        k = spec["symInt"]
        return lambda results, call: int(results[k])
    if "number" in spec:
        k = spec["number"]
        return lambda results, call: float(results[k])
    if "path" in spec:
        get = _accessor(spec["path"])
        return lambda results, call: get(*call)
    if "null" in spec:
        return lambda results, call: NULL
    if "iterator" in spec:
        parts = many(spec["iterator"])
        return lambda results, call: iter([p(results, call) for p in parts])
    if "builtin" in spec:
        value = _known_callable(spec["builtin"])
        return lambda results, call: value
    if "method" in spec:
        owner, name = _rebuilder(spec["method"]["self"]), spec["method"]["name"]
        return lambda results, call: getattr(owner(results, call), name)
    if "dtype" in spec:
        value = torch_dtype(spec["dtype"])
        return lambda results, call: value
    if "device" in spec:
        d = spec["device"]
        value = torch.device(d["type"]) if d["index"] < 0 else torch.device(d["type"], d["index"])
        return lambda results, call: value
    if "function" in spec:
        f = spec["function"]
        defaults = many(f["defaults"])
        kwdefaults = [(k["name"], _rebuilder(k["value"])) for k in f["kwDefaults"]]
        contents = [_rebuilder(c["contents"]) if "contents" in c else None for c in f["closure"]]
        return lambda results, call: MadeFunction(
            f, [d(results, call) for d in defaults], {n: v(results, call) for n, v in kwdefaults},
            [c(results, call) if c is not None else None for c in contents])
    if "exitOf" in spec:
        manager = spec["exitOf"]
        return lambda results, call: _entered(manager).__exit__
    if "returnType" in spec:
        make = getattr(torch.return_types, spec["returnType"]["name"])
        parts = many(spec["returnType"]["items"])
        return lambda results, call: make([p(results, call) for p in parts])
    if "sameAs" in spec:  # filled in by the break's state (Traced)
        return lambda results, call: None
    if "slice" in spec:
        parts = many(spec["slice"])
        return lambda results, call: slice(*(p(results, call) for p in parts))
    if "object" in spec:
        return _made_object(spec["object"])
    if "madeRef" in spec:
        ident = spec["madeRef"]
        return lambda results, call: _made.objects[ident]
    raise ValueError(f"unknown output spec {spec}")


class MadeFunction:
    """A function the traced code made, rebuilt once the frame's cells exist
    (kiln._resume): its spec, defaults, keyword defaults and its own cells' contents."""

    def __init__(self, spec: dict, defaults: list, kwdefaults: dict, contents: list):
        self.spec, self.defaults, self.kwdefaults, self.contents = spec, defaults, kwdefaults, contents


def _entered(manager: dict):
    """A grad-mode or autocast context manager the traced frame entered, entered here: the
    code after a graph break inside its block runs under it and calls its __exit__."""
    if "gradEnabled" in manager:
        made = torch.enable_grad() if manager["gradEnabled"] else torch.no_grad()
    else:
        a = manager["autocast"]
        made = torch.autocast(a["deviceType"], dtype=torch_dtype(a["dtype"]), enabled=a["enabled"])
    made.__enter__()
    return made


def _known_callable(name: str):
    """A callable the tracer knows by qualified name (_builtin_name's names)."""
    if name == "torch.Tensor":
        return torch.Tensor
    if name in _named_callables():
        return _named_callables()[name]
    if name.startswith("torch.Tensor."):
        return getattr(torch.Tensor, name[len("torch.Tensor."):])
    if name.startswith("torch.ops.aten."):
        return functools.reduce(getattr, name.split(".")[3:], torch.ops.aten)
    for prefix in sorted(_KNOWN_MODULES, key=len, reverse=True):
        if name.startswith(prefix + "."):
            return getattr(_KNOWN_MODULES[prefix], name[len(prefix) + 1:])
    raise ValueError(f"no callable named {name}")


def _from_constant(c: dict):
    (kind, value), = c.items()
    if kind == "tuple":
        return tuple(_from_constant(x) for x in value)
    if kind in ("none", "ellipsis"):
        return None if kind == "none" else Ellipsis
    return value


def replay(traced: Traced, results: list, fn, args, kwargs) -> None:
    """The side effects the trace recorded (attribute sets, appends to lists of the call),
    done on the real objects after the graph ran."""
    for effect in traced.side_effects:
        if "setAttr" in effect:
            e = effect["setAttr"]
            setattr(resolve(e["path"], fn, args, kwargs), e["name"], rebuild(e["value"], results, (fn, args, kwargs)))
        else:
            e = effect["listAppend"]
            resolve(e["listPath"], fn, args, kwargs).append(rebuild(e["item"], results, (fn, args, kwargs)))
