"""kiln.guards: guard sets, the in-process guard VM and each function's cache of compiled entries.

A guard set says what must hold of a call for a compiled entry to serve it: checks on the
call's values reached by source paths (L['x'], L['self'].layers[0].weight, G['SCALE'],
C['eps'], L['x'].size()[0]), the global state, and shape guards over symbols. A
`GuardProgram` runs one against a Python call in C++, reading the objects through the C API
(no Python-level calls on the fast path); `FunctionCache` keeps a function's entries and
checks them all in one call.

    cache = kiln.guards.FunctionCache(fn)
    entry = cache.lookup(args, kwargs)          # the entry whose guards hold, or None
"""
from __future__ import annotations

import hashlib
import os
import sys
import types
import warnings
import weakref
from typing import Any, Callable, NamedTuple

import torch  # noqa: F401  (the front end reads tensors through torch's C++ API)

from kiln._kiln import guards as _native

GuardSet = _native.GuardSet
FrameState = _native.FrameState
CallInput = _native.CallInput
Sym = _native.Sym

__all__ = [
    "CallInput",
    "Entry",
    "FrameState",
    "FunctionCache",
    "FunctionKey",
    "GuardProgram",
    "GuardSet",
    "Miss",
    "Sym",
    "arg",
    "arg_names",
    "attr",
    "cache_for",
    "default",
    "check_tensor_like",
    "closure",
    "describe_call",
    "explain",
    "function_key",
    "global_",
    "guards_for_call",
    "index",
    "int_key",
    "key",
    "kw_default",
    "kwarg",
    "scope",
    "size",
    "stride",
]


# ---- steps of source paths: GuardSet.path(arg(0, "self"), attr("layers"), index(3)) ----

def arg(i: int, name: str) -> tuple:
    """Positional argument `i`, parameter `name`: L['name']."""
    return ("arg", i, name)


def kwarg(name: str) -> tuple:
    """Keyword argument `name`: L['name']."""
    return ("kwarg", name)


def global_(name: str) -> tuple:
    """The function's global `name` (then builtins): G['name']."""
    return ("global", name)


def closure(i: int, name: str) -> tuple:
    """The content of closure cell `i` (free variable `name`): C['name']."""
    return ("closure", i, name)


def default(i: int) -> tuple:
    """The called function's __defaults__[i]: F.__defaults__[i]."""
    return ("default", i)


def kw_default(name: str) -> tuple:
    """The called function's __kwdefaults__['name']."""
    return ("kw_default", name)


def attr(name: str) -> tuple:
    """`.name`: the instance __dict__, then an nn.Module's parameters, buffers, submodules."""
    return ("attr", name)


def index(i: int) -> tuple:
    """`[i]` of a list, tuple, nn.ModuleList or nn.Sequential."""
    return ("index", i)


def key(name: str) -> tuple:
    """`['name']` of a dict or nn.ModuleDict."""
    return ("key", name)


def int_key(k: int) -> tuple:
    """`[k]` of a dict with int keys."""
    return ("int_key", k)


def size(dim: int) -> tuple:
    """`.size()[dim]` of a tensor."""
    return ("size", dim)


def stride(dim: int) -> tuple:
    """`.stride()[dim]` of a tensor."""
    return ("stride", dim)


def scope() -> int:
    """This process's scope token: identity guards recorded here hold only in this process."""
    return _native.scope()


def check_tensor_like(guards: GuardSet, node: int, t: torch.Tensor, dynamic: tuple = ()) -> None:
    """Guards that the value at `node` is a tensor like `t` (dims in `dynamic` of any size).

        check_tensor_like(s, s.path(arg(0, "x")), x, dynamic=(0,))
    """
    sizes = [None if d in dynamic else n for d, n in enumerate(t.shape)]
    strides = [None if any(k in dynamic for k in range(d + 1, t.dim())) else n
               for d, n in enumerate(t.stride())]
    guards.check_tensor(node, t.dtype, sizes, strides, device=str(t.device),
                        requires_grad=t.requires_grad, storage_offset=t.storage_offset())


def describe_call(fn: Callable | None, args: tuple, kwargs: dict | None = None) -> CallInput:
    """The call as the C++ front end reads it (the slow path): args, kwargs, the globals the
    code names, closure cells, global state."""
    return _native.describe_call(fn, tuple(args), kwargs)


def arg_names(fn: Callable) -> list[str]:
    """The names of `fn`'s positional parameters (a bound method's without `self`)."""
    bound = isinstance(fn, types.MethodType)
    code = getattr(fn, "__code__", None) or fn.__func__.__code__
    names = list(code.co_varnames[: code.co_argcount])
    return names[1:] if bound else names


def guards_for_call(args: tuple, kwargs: dict | None, arg_names: list[str] | None,
                    frame_state: FrameState) -> GuardSet:
    """Guards that every input of the call is as it is now, except what `frame_state` made
    dynamic (a symbol with shape guards): what a trace of this call would rely on at least.

        s = guards_for_call((x,), {}, ["x"], FrameState())
    """
    return _native.guards_for_call(tuple(args), kwargs, arg_names, frame_state)


class GuardProgram:
    """A guard set compiled for the guard VM, checked against Python calls in this process.

        program = GuardProgram(guard_set)           # or its bytes
        program.check(fn, (x,), {})                 # -> bool, no Python-level calls
        program.explain(fn, (y,), {})               # -> "L['x'].size()[0] == 8 failed: got 16"
    """

    __slots__ = ("_native", "check")

    def __init__(self, guards: GuardSet | bytes):
        self._native = _native.GuardProgram(guards)
        # check(fn, args, kwargs=None) -> bool: a METH_FASTCALL function, no pybind11 dispatch.
        self.check = self._native.checker()

    def explain(self, fn: Callable | None, args: tuple, kwargs: dict | None = None) -> str | None:
        """None when the guards hold, else the first that failed, with its source path."""
        return self._native.explain(fn, tuple(args), kwargs)

    def explain_described(self, call: CallInput) -> str | None:
        """The same through the C++ front end, against a described call."""
        return self._native.explain_input(call)

    @property
    def text(self) -> str:
        return self._native.text


class FunctionKey(NamedTuple):
    """A function's identity, the same in every process running the same code."""

    module: str
    qualname: str
    code_hash: str

    def text(self) -> str:
        return f"{self.module}.{self.qualname}@{self.code_hash[:8]}"


def _code_hash(code: types.CodeType) -> str:
    h = hashlib.blake2b(digest_size=16)

    def const(k: Any) -> None:
        if isinstance(k, types.CodeType):
            feed(k)
        elif isinstance(k, frozenset):
            h.update(repr(sorted(repr(x) for x in k)).encode())
        elif isinstance(k, tuple):
            for x in k:
                const(x)
        else:
            h.update(f"{type(k).__name__}:{k!r};".encode())

    def feed(c: types.CodeType) -> None:
        h.update(c.co_code)
        h.update(repr((c.co_names, c.co_varnames, c.co_freevars, c.co_cellvars, c.co_argcount,
                       c.co_posonlyargcount, c.co_kwonlyargcount, c.co_flags)).encode())
        for k in c.co_consts:
            const(k)

    feed(code)
    return h.hexdigest()


def function_key(fn: Callable) -> FunctionKey:
    """Module, qualname and a hash of the code (bytecode, consts, names, ...)."""
    f = getattr(fn, "__func__", fn)
    return FunctionKey(getattr(f, "__module__", None) or "", f.__qualname__, _code_hash(f.__code__))


class Entry:
    """One compiled entry of a function: its guards and what to run when they hold."""

    __slots__ = ("id", "guards", "value", "artifacts", "graphs", "outputs")

    def __init__(self, id: int, guards: GuardSet, value: Any = None, artifacts=(), graphs=(),
                 outputs: str = ""):
        self.id = id
        self.guards = guards
        self.value = value
        self.artifacts = list(artifacts)
        self.graphs = list(graphs)
        self.outputs = outputs

    def __repr__(self) -> str:
        return f"<kiln.guards.Entry {self.id}>"


class Miss(NamedTuple):
    """What to do after a lookup missed: run `entry` (found elsewhere, e.g. by the guards
    service), or compile with `frame` (the frame state to trace with), or run eagerly."""

    reasons: list  # (entry id, why its guards failed), in entry order
    frame: FrameState | None
    entry: Entry | None = None
    eager: bool = False


def _log_enabled(what: str) -> bool:
    return what in os.environ.get("KILN_LOG", "").replace(" ", "").split(",")


class FunctionCache:
    """A function's compiled entries, checked in order in one call into C++ (no IPC).

    Without a stack, entries and the frame state live in this process; with one, the guards
    service is asked on a miss (it may hold an entry another process compiled), keeps the
    frame state (automatic dynamic) and stores what `insert` adds.

        cache = FunctionCache(fn)
        entry = cache.lookup(args, kwargs)
        if entry is None:
            miss = cache.miss(args, kwargs)
            if miss.eager: ...                        # over the cache limit
            guards = guards_for_call(args, kwargs, cache.arg_names, miss.frame)
            entry = cache.insert(guards, compiled)
    """

    __slots__ = ("key", "arg_names", "limit", "stack", "job", "frame", "lookup", "recompiles", "_fn",
                 "_native", "_entries", "_next_id", "_warned", "_last_reasons", "__weakref__")

    def __init__(self, fn: Callable, stack: Any = None, limit: int = 8, job: tuple | None = None):
        """`job`: (job id, rank, world size) of a job whose ranks must make the same dynamic
        decisions: with a stack, each recompile waits until every rank reported its call."""
        fn = getattr(fn, "__func__", fn)  # a method's function: `self` is its first argument
        self._fn = weakref.ref(fn)  # held weakly: kiln.explain's registry is keyed by it
        self.key = function_key(fn)
        self.arg_names = arg_names(fn)
        self.limit = limit
        self.stack = stack
        self.job = job
        self.frame = FrameState()
        self.recompiles = 0
        self._native = _native.FunctionCacheNative(fn)
        # lookup(args, kwargs=None) -> Entry | None: a METH_FASTCALL function.
        self.lookup = self._native.lookup_function()
        self._entries: list[Entry] = []
        self._next_id = 1
        self._warned = False
        self._last_reasons: list = []
        got = self._service("guards_entries", tuple(self.key))
        if got is not None:
            entries, frame, limit = got
            self.frame = frame
            self.limit = min(self.limit, limit) if limit else self.limit  # the stricter of the two
            for e in entries:
                self._add(Entry(e["id"], e["guards"], None, e["artifacts"], e["graphs"], e["outputs"]))
        _caches[fn] = self

    def _service(self, verb: str, *args):
        """The guards service's answer to `verb`, or None without a stack. A stack object
        without the guards verbs leaves the entries in this process (one warning); errors of
        the service itself (KilnError) are the caller's, as every stack error."""
        if self.stack is None:
            return None
        call = getattr(self.stack, verb, None)
        if call is None:
            warnings.warn(f"kiln: {type(self.stack).__name__} has no guards service; the entries of "
                          f"{self.key.module}.{self.key.qualname} stay in this process", RuntimeWarning,
                          stacklevel=3)
            self.stack = None
            return None
        return call(*args)

    @property
    def fn(self) -> Callable | None:
        return self._fn()

    @property
    def entries(self) -> list[Entry]:
        return list(self._entries)

    def why_missed(self, args: tuple, kwargs: dict | None = None) -> list | None:
        """None where an entry's guards hold on this call, else (entry id, reason) for each
        entry, as `lookup` found them (nothing is recorded or compiled)."""
        if self.lookup(args, kwargs) is not None:
            return None
        return list(self._native.last_reasons)

    @property
    def last_reasons(self) -> list:
        """(entry id, reason) for each entry, from the last lookup that missed."""
        return self._last_reasons

    def _add(self, entry: Entry) -> Entry:
        self._native.add(entry.id, entry.guards, entry)
        self._entries.append(entry)
        self._next_id = max(self._next_id, entry.id + 1)
        return entry

    def miss(self, args: tuple, kwargs: dict | None = None) -> Miss:
        """After `lookup` missed (or found an entry whose `value` this process has not made
        yet, as those the guards service handed over): records why (logged under
        KILN_LOG=recompiles), and says whether to compile (with which frame state), run an
        entry found elsewhere (`entry`: set its `value` to make it run here from then on), or
        run eagerly (the cache limit is reached: one warning per function)."""
        reasons = list(self._native.last_reasons) if self._entries else []
        self._last_reasons = reasons
        found = self._service("guards_lookup", tuple(self.key), self.fn, tuple(args), kwargs)
        if found is not None:
            if found["hit"] is not None:  # the same Entry as here when this process has it
                e = found["hit"]
                here = next((x for x in self._entries if x.id == e["id"]), None)
                return Miss(reasons, None, here or self._add(
                    Entry(e["id"], e["guards"], None, e["artifacts"], e["graphs"], e["outputs"])))
            if found["run_eagerly"]:
                return self._eager(reasons)
        if len(self._entries) >= self.limit:
            return self._eager(reasons)
        job = None if self.job is None else (*self.job, self.recompiles + (1 if reasons else 0))
        frame = self._service("guards_observe", tuple(self.key), tuple(args), kwargs, self.arg_names, job)
        if frame is not None:
            self.frame = frame
        else:
            self.frame.observe(tuple(args), kwargs, self.arg_names)
        if reasons:
            self.recompiles += 1
            if _log_enabled("recompiles"):
                lines = [f"kiln: recompiling {self.key.module}.{self.key.qualname} "
                         f"(entries {len(self._entries)}, limit {self.limit}):"]
                lines += [f"    entry {i}: {why}" for i, why in reasons]
                sys.stderr.write("\n".join(lines) + "\n")
        return Miss(reasons, self.frame)

    def _eager(self, reasons: list) -> Miss:
        if not self._warned:
            self._warned = True
            last = f" (last miss: {reasons[-1][1]})" if reasons else ""
            warnings.warn(f"kiln: {self.key.module}.{self.key.qualname} reached its cache limit of "
                          f"{self.limit} entries; its calls that match none run eagerly{last}",
                          RuntimeWarning, stacklevel=3)
        return Miss(reasons, None, eager=True)

    def insert(self, guards: GuardSet, value: Any = None, artifacts=(), graphs=(),
               outputs: str = "") -> Entry:
        """Adds an entry (after those there are); with a stack, the guards service stores it."""
        entry_id = self._next_id
        reply = self._service("guards_insert", tuple(self.key), guards, [str(a) for a in artifacts],
                              [str(g) for g in graphs], outputs)
        if reply is not None:
            entry_id = reply["id"]
            if reply["run_eagerly"]:  # over the service's limit: kept here, not stored there
                self.limit = len(self._entries) + 1
            for known in self._entries:  # the service had it already (another process stored it)
                if known.id == entry_id:
                    known.value = value
                    return known
        return self._add(Entry(entry_id, guards, value, artifacts, graphs, outputs))

    def mark(self, dim: str, dynamic: bool = True) -> None:
        """mark_dynamic / mark_static of "L['x'].size()[0]" (or "L['n']") for later compiles."""
        frame = self._service("guards_mark", tuple(self.key), dim, dynamic)
        if frame is not None:
            self.frame = frame
        else:
            self.frame.mark(dim, dynamic)

    def explain(self, args: tuple | None = None, kwargs: dict | None = None) -> str:
        """Each entry's guards, the frame state and why the last miss (or this call) missed."""
        lines = [f"function {self.key.text()}: {len(self._entries)} entries (limit {self.limit}), "
                 f"{self.recompiles} recompiles"]
        for at, e in enumerate(self._entries):
            lines.append(f"entry {e.id}:")
            lines += ["    " + line for line in self._native.text(at).splitlines()]
        frame = self.frame.text().strip()
        if frame:
            lines.append("frame state:")
            lines += ["    " + line for line in frame.splitlines()]
        reasons = self._last_reasons
        title = "last miss"
        if args is not None:
            reasons = [(i, why or "holds") for i, why in self._native.explain(tuple(args), kwargs)]
            title = "this call"
        if reasons:
            lines.append(f"{title}:")
            lines += [f"    entry {i}: {why}" for i, why in reasons]
        return "\n".join(lines)


_caches: "weakref.WeakKeyDictionary[Callable, FunctionCache]" = weakref.WeakKeyDictionary()


def cache_for(fn: Callable) -> FunctionCache | None:
    """The FunctionCache made for `fn`, if any."""
    return _caches.get(getattr(fn, "__func__", fn))


def explain(fn: Callable, *args, **kwargs) -> str:
    """What the FunctionCache of `fn` keeps: its entries' guards, its frame state and the
    reasons of its last recompile; with arguments, why each entry does or does not hold for
    that call. (kiln.explain shows this too, with graphs and kernels for kiln.compile's.)

        print(kiln.guards.explain(fn))
    """
    cache = cache_for(getattr(fn, "__wrapped__", fn))
    if cache is None:
        return f"{getattr(fn, '__qualname__', fn)!s}: nothing compiled"
    return cache.explain(args, kwargs) if args or kwargs else cache.explain()
