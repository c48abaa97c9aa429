"""kiln.export: a function or module traced whole, with exactly the dims the user declares
dynamic, as a program that runs without the function — from Python, or from C++
(`kiln::Program::load`, docs/export.md).

    batch = kiln.Dim("batch", min=2, max=1024)
    prog = kiln.export(model, (x,), dynamic_shapes={"x": {0: batch}})
    prog.save("model.kiln"); y = kiln.load_program("model.kiln")(x2)   # any batch in [2, 1024]

The trace goes through the tracer service (fullgraph: what it cannot trace raises
kiln.Unsupported), its guards through the shapes service's checkConstraints: a spec the
traced code does not accept raises kiln.ConstraintViolation with fixes in Dim names; a
condition no Dim spells (`s0*s1 == s2`, `s0 != s1`) becomes a runtime assert of the program.
"""
from __future__ import annotations

import builtins
import inspect

import torch

from kiln import _kiln, _trace, ir
from kiln._kiln import KilnError

__all__ = ["Dim", "ConstraintViolation", "ExportedProgram", "export", "load_program"]

_INT64_MAX = 2**63 - 1


class Dim:
    """A dynamic dimension, torch.export's spelling: `Dim("batch", min=2, max=1024)`. The same
    Dim object (or name) on two dims says they are always equal. Sizes 0 and 1 are
    specialized, so a minimum below 2 reads as 2."""

    def __init__(self, name: str, *, min: int | None = None, max: int | None = None):
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"kiln.Dim: the name must be an identifier, got {name!r}")
        lo, hi = 2 if min is None else builtins.max(min, 2), _INT64_MAX if max is None else max
        if lo > hi:
            raise ValueError(f"kiln.Dim({name!r}): empty range [{min}, {max}]")
        self.name, self.min, self.max = name, lo, hi

    def __repr__(self) -> str:
        bounds = "" if self.min == 2 else f", min={self.min}"
        bounds += "" if self.max == _INT64_MAX else f", max={self.max}"
        return f"Dim({self.name!r}{bounds})"


class ConstraintViolation(KilnError):
    """The traced code does not accept every input the dynamic_shapes spec declares:
    `violations` (dicts: kind, dims, message, fix) and the torch.export-like report as text."""

    def __init__(self, text: str, violations: list[dict]):
        super().__init__(text)
        self.code, self.message, self.service, self.detail = "invalid_argument", text, "shapes", ""
        self.violations = violations


# ---- the spec -------------------------------------------------------------------------

def _dims_of(spec, what: str) -> dict[int, Dim]:
    """One argument's entry of dynamic_shapes: {dim: Dim}, or a Dim-or-None per dim."""
    if spec is None:
        return {}
    if isinstance(spec, dict):
        items = spec.items()
    elif isinstance(spec, (tuple, list)):
        items = enumerate(spec)
    else:
        raise ValueError(f"kiln.export: dynamic_shapes[{what}] must be a dict or a tuple of Dims, got {spec!r}")
    out = {}
    for d, dim in items:
        if dim is None:
            continue
        if not isinstance(d, int) or not isinstance(dim, Dim):
            raise ValueError(f"kiln.export: dynamic_shapes[{what}]: expected dim index -> kiln.Dim, got {d!r}: {dim!r}")
        out[d] = dim
    return out


def _declared(signature: inspect.Signature, args: tuple, kwargs: dict, dynamic_shapes) -> list:
    """(parameter name, tensor, dim, Dim) for each declared dynamic dimension."""
    bound = signature.bind(*args, **kwargs)
    names = list(bound.arguments)
    if dynamic_shapes is None:
        by_name = {}
    elif isinstance(dynamic_shapes, dict):
        unknown = sorted(set(dynamic_shapes) - set(names))
        if unknown:
            raise ValueError(f"kiln.export: dynamic_shapes names {', '.join(unknown)}, not arguments of the call")
        by_name = dynamic_shapes
    elif isinstance(dynamic_shapes, (tuple, list)):
        if len(dynamic_shapes) != len(names):
            raise ValueError(f"kiln.export: dynamic_shapes has {len(dynamic_shapes)} entries for "
                             f"{len(names)} arguments")
        by_name = dict(zip(names, dynamic_shapes))
    else:
        raise ValueError("kiln.export: dynamic_shapes must be a dict (by argument name) or a tuple")
    out, named = [], {}
    for name, spec in by_name.items():
        dims = _dims_of(spec, repr(name))
        value = bound.arguments[name]
        if dims and not isinstance(value, torch.Tensor):
            # TODO(issue 9): Dims inside lists/dicts of tensors, and dynamic int arguments.
            raise ValueError(f"kiln.export: dynamic_shapes[{name!r}]: Dims are for tensor arguments")
        for d, dim in sorted(dims.items()):
            if not 0 <= d < value.dim():
                raise ValueError(f"kiln.export: {name} has {value.dim()} dims, no dim {d}")
            if named.setdefault(dim.name, dim) is not dim and (named[dim.name].min, named[dim.name].max) != (dim.min, dim.max):
                raise ValueError(f"kiln.export: two Dims named {dim.name!r} with different ranges")
            size = value.shape[d]
            if not dim.min <= size <= dim.max and size > 1:
                raise ValueError(f"kiln.export: {name}.size({d}) is {size}, outside {dim}'s range")
            out.append((name, value, d, dim))
    return out


# ---- export -----------------------------------------------------------------------------

def export(fn_or_module, args: tuple, kwargs: dict | None = None, *, dynamic_shapes=None,
           stack=None) -> "ExportedProgram":
    """`fn_or_module(*args, **kwargs)` traced whole, the dims of `dynamic_shapes` symbolic
    (every other dim static), as an ExportedProgram; raises kiln.Unsupported for code the
    tracer cannot follow and kiln.ConstraintViolation for a spec the code does not accept.

        prog = kiln.export(f, (x, y), dynamic_shapes={"x": {0: kiln.Dim("batch")}, "y": None})
        out = prog(x2, y)
    """
    from kiln import guards
    from kiln._compile import default_stack
    kwargs = dict(kwargs or {})
    args = tuple(args)
    stack = stack if stack is not None else default_stack()
    if isinstance(fn_or_module, torch.nn.Module):
        fn, call_args = type(fn_or_module).forward, (fn_or_module, *args)
        visible = fn_or_module.forward
    elif callable(fn_or_module):
        fn, call_args = _trace.normalize(fn_or_module, args)
        visible = fn_or_module
    else:
        raise TypeError(f"kiln.export: expected a function or an nn.Module, got {type(fn_or_module).__name__}")
    offset = len(call_args) - len(args)  # a module's or bound method's self comes first
    code = fn.__code__
    params = {n: k for k, n in enumerate(code.co_varnames[:code.co_argcount])}
    declared = _declared(inspect.signature(visible), args, kwargs, dynamic_shapes)

    def frame_source(name: str) -> str:
        return f"L[{name!r}]" if name in params or name in kwargs else name

    frame = {"forcedDynamic": sorted({f"{frame_source(n)}.size()[{d}]" for n, _, d, _ in declared})}
    with torch.no_grad():  # a program is a forward: no autograd state in it
        traced = _trace.trace(fn, call_args, kwargs, frame=frame, fullgraph=True, scope=guards.scope(),
                              stack=stack)
    if traced.side_effects:
        raise _trace.Unsupported("kiln.export: the function changes objects of the call (side effects); "
                                 "a program cannot replay them")
    if any(traced.seed_inputs):
        raise _trace.Unsupported("kiln.export: dropout in training mode (a program is a forward for "
                                 "inference: call model.eval() first)")
    if any(traced.int_inputs) or any(traced.float_inputs):
        # TODO(issue 9): SymInt and float inputs of a program
        raise _trace.Unsupported("kiln.export: a dynamic int or float argument")

    # Which symbol the trace gave each declared dim.
    decoded = _kiln.capnp_decode("GuardSet", traced.guards)
    guard_set = guards.GuardSet.from_bytes(traced.guards)
    symbol_of = {guard_set.source(s["node"]): s["symbol"] for s in decoded["symbols"]}
    read_args = {p[0]["arg"] for p in traced.inputs if "arg" in p[0]}
    read_kwargs = {p[0]["name"] for p in traced.inputs if "kwarg" in p[0]}
    dims, specialized = [], []
    for name, value, d, dim in declared:
        source = f"{name}.size({d})"
        symbol = symbol_of.get(f"{frame_source(name)}.size()[{d}]")
        if symbol is not None:
            dims.append({"source": source, "symbol": symbol, "dim": dim.name, "min": dim.min, "max": dim.max})
        elif params.get(name) in read_args or name in read_kwargs:  # read, yet no symbol
            why = ("sizes 0 and 1 are specialized" if value.shape[d] <= 1 else "the tensor is not contiguous")
            specialized.append({"kind": "static", "dims": [dim.name],
                                "message": f"{source} ({dim.name}) was specialized to {value.shape[d]}: {why}",
                                "fix": f"{dim.name} = None  # static: {source} is always {value.shape[d]}"})
    report = stack.check_constraints(traced.guards, dims)
    violations = specialized + report["violations"]
    if violations:
        text = report["text"] if not specialized else _report_text(violations)
        raise ConstraintViolation(text, violations)

    graph = _kiln.capnp_decode("Graph", traced.graph.to_bytes())
    inputs = []
    for path in traced.inputs:
        head, text = path[0], _trace.path_text(path)
        if "arg" in head and head["arg"] >= offset or "kwarg" in head:
            user_path = [dict(head, arg=head["arg"] - offset) if "arg" in head else head] + path[1:]
            inputs.append({"name": text, "source": text, "user": None, "path": user_path})
            continue
        tensor = _trace.resolve(path, fn, call_args, kwargs)
        if not tensor.is_contiguous():
            raise _trace.Unsupported(f"kiln.export: {text} is not contiguous")  # TODO(issue 9)
        data = tensor.detach().to("cpu").contiguous()
        inputs.append({"name": text, "source": text, "path": [],
                       "constant": {"dtype": ir.dtype_name(data.dtype), "sizes": list(data.shape),
                                    "data": data.view(-1).view(torch.uint8).numpy().tobytes() if data.numel() else b""}})
    if _trace._makes_objects(traced.outputs):  # rebuilt from its class, which a program does not carry
        raise _trace.Unsupported("kiln.export: the function returns an object its code made (a "
                                 "ModelOutput, a cache): return tensors, or containers of them")
    symbols = [{"name": d["symbol"], "dim": d["dim"], "source": d["source"], "min": d["min"], "max": d["max"]}
               for d in dims]
    asserts = [{"condition": a["condition"], "message": a["message"]} for a in report["asserts"]]
    message = {"magic": _kiln.PROGRAM_MAGIC, "formatVersion": _kiln.PROGRAM_FORMAT_VERSION,
               "name": getattr(visible, "__qualname__", type(fn_or_module).__qualname__),
               "graph": graph, "inputs": inputs, "symbols": symbols, "asserts": asserts,
               "outputs": traced.outputs}
    return ExportedProgram(_kiln.Program.from_bytes(_kiln.capnp_encode("Program", message)), stack)


def _report_text(violations: list[dict]) -> str:
    names = sorted({d for v in violations for d in v["dims"]})
    lines = [f"Constraints violated ({', '.join(names)})!"] + [f"  - {v['message']}" for v in violations]
    fixes = [v["fix"] for v in violations if v["fix"]]
    return "\n".join(lines + (["Suggested fixes:"] + [f"  {f}" for f in fixes] if fixes else [])) + "\n"


# ---- the program ------------------------------------------------------------------------

class ExportedProgram:
    """An exported program: `graph`, `input_spec`, `symbols`, `runtime_asserts`, `save(path)`;
    calling it checks the inputs against the spec and the runtime asserts (KilnError
    "invalid_argument" naming what failed), compiles the graph through the stack once per
    target and returns what the function returned (tuples, lists, dicts of its outputs)."""

    def __init__(self, program: _kiln.Program, stack=None):
        self._program = program
        self._stack = stack
        self._inputs = program.inputs
        self._compiled = {}
        self._stored = None

    @staticmethod
    def load(path: str, stack=None) -> "ExportedProgram":
        """A `.kiln` file (kiln.load_program)."""
        return ExportedProgram(_kiln.Program.load(str(path)), stack)

    def save(self, path: str) -> None:
        """Writes the `.kiln` file (atomically), for kiln.load_program or kiln::Program::load."""
        self._program.save(str(path))

    def to_bytes(self) -> bytes:
        return self._program.to_bytes()

    @property
    def graph(self) -> ir.Graph:
        return self._program.graph

    @property
    def input_spec(self) -> list[dict]:
        """The tensors a call passes, in order: name, dtype, device, sizes (ints and symbol names)."""
        return [{k: i[k] for k in ("name", "dtype", "device", "sizes")} for i in self._inputs if not i["stored"]]

    @property
    def stored_inputs(self) -> list[dict]:
        """The tensors the program carries (a module's parameters and buffers)."""
        return [{k: i[k] for k in ("name", "dtype", "device", "sizes")} for i in self._inputs if i["stored"]]

    @property
    def symbols(self) -> list[dict]:
        """Each symbol: name, dim (the Dim's name), source, min, max (None: unbounded)."""
        return [dict(s, max=None if s["max"] == _INT64_MAX else s["max"]) for s in self._program.symbols]

    @property
    def runtime_asserts(self) -> list[tuple[str, str]]:
        """(condition, message) of each condition checked before a run."""
        return list(self._program.asserts)

    def __str__(self) -> str:
        return str(self._program)

    def __repr__(self) -> str:
        return f"<kiln.ExportedProgram {self._program.name}: {len(self.input_spec)} inputs, " \
               f"{len(self.symbols)} symbols, {len(self.runtime_asserts)} runtime asserts>"

    def check(self, *args, **kwargs) -> dict:
        """The symbols' values for a call, or KilnError(invalid_argument) saying what it breaks."""
        return self._program.check([(ir.dtype_name(t.dtype), str(t.device), list(t.shape))
                                    for t in self._user_tensors(args, kwargs)])

    def __call__(self, *args, **kwargs):
        tensors = self._user_tensors(args, kwargs)
        self._program.check([(ir.dtype_name(t.dtype), str(t.device), list(t.shape)) for t in tensors])
        compiled = self._compile()
        stored = self._stored_tensors()
        users = iter(t.contiguous() for t in tensors)  # the program's layout: contiguous
        results = compiled(*[stored[k] if i["stored"] else next(users) for k, i in enumerate(self._inputs)])
        spec = self._program.output_spec
        return _trace.rebuild(spec, results) if spec is not None else tuple(results)

    def _user_tensors(self, args, kwargs) -> list[torch.Tensor]:
        out = []
        for i in self._inputs:
            if i["stored"]:
                continue
            try:
                value = _trace.resolve(i["path"], None, args, kwargs)
            except (IndexError, KeyError, AttributeError, TypeError) as e:
                raise KilnError(f"{self._program.name}: no input {i['name']} in the call ({type(e).__name__}: {e})")
            if not isinstance(value, torch.Tensor):
                raise KilnError(f"{self._program.name}: input {i['name']} must be a tensor, got {type(value).__name__}")
            out.append(value)
        return out

    def _compile(self) -> ir.Compiled:
        graph = self._program.graph
        target = ir.target_for(graph)
        if target not in self._compiled:
            if self._stack is None:
                from kiln._compile import default_stack
                self._stack = default_stack()
            self._compiled[target] = ir.compile(graph, self._stack, target)
        return self._compiled[target]

    def _stored_tensors(self) -> dict[int, torch.Tensor]:
        if self._stored is None:
            self._stored = {}
            for k, i in enumerate(self._inputs):
                if i["stored"]:
                    dtype, sizes, data = self._program.stored(k)
                    flat = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)
                    device = i["device"] if i["device"] != "cuda" else "cuda"
                    self._stored[k] = flat.view(ir.torch_dtype(dtype)).reshape(sizes).to(device)
        return self._stored


def load_program(path: str, stack=None) -> ExportedProgram:
    """Reads a `.kiln` file written by ExportedProgram.save (or kiln::Program::save).

        prog = kiln.load_program("model.kiln"); y = prog(x)
    """
    return ExportedProgram.load(path, stack)
