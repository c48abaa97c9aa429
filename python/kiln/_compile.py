"""kiln.compile: PyTorch functions and modules compiled by a kiln stack.

    fast = kiln.compile(fn)            # or @kiln.compile, kiln.compile(module)
    y = fast(x)                        # the same result as fn(x)

Each call first checks the guards of the function's compiled entries in-process
(kiln.guards: no IPC). A miss observes the call (automatic dynamic), traces the
function through the tracer service, compiles the graph through the codegen
service, stores the entry through the guards service and runs it. Code the
tracer cannot handle runs eagerly — its reason is kept (`kiln.explain`) and the
function is not traced again for calls that match the same guards — unless
`fullgraph=True`, which raises `kiln.Unsupported`. A stack that fails (a
service crashed, timed out, or is not there) makes the call run eagerly with
one warning: kiln never raises into the user's code for its own failures.
"""
from __future__ import annotations

import atexit
import functools
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import types
import warnings
import weakref
from pathlib import Path
from typing import Any, Callable

import torch

from kiln import _resume, _trace, _train, ir
from kiln import _kiln
from kiln._kiln import KilnError
from kiln._trace import Unsupported

# torch.compile's modes kiln has: "reduce-overhead" replays a CUDA entry's launches from CUDA
# graphs (kiln._cudagraph; a training entry's forward and backward each); on the CPU it is the
# default mode.
MODES = (None, "default", "reduce-overhead")

__all__ = ["compile", "disable", "explain", "Unsupported", "CompiledFunction", "CompiledModule", "default_stack"]

_lock = threading.Lock()
_stack = None


def _launcher() -> str:
    """The `kiln` launcher binary: $KILN_BIN_DIR, the build tree beside this package, or PATH."""
    candidates = []
    if os.environ.get("KILN_BIN_DIR"):
        candidates.append(Path(os.environ["KILN_BIN_DIR"]) / "kiln")
    candidates.append(Path(__file__).resolve().parents[2] / "bin" / "kiln")
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return str(c)
    found = shutil.which("kiln")
    if found is None:
        raise KilnError("unavailable", "no running stack, and no `kiln` launcher to start one "
                        "(set KILN_BIN_DIR or KILN_RUN_DIR)")
    return found


def default_stack():
    """The stack kiln.compile uses: $KILN_RUN_DIR's or the default one when running,
    else one started for this process (stopped when it exits)."""
    global _stack
    with _lock:
        if _stack is not None:
            return _stack
        import kiln
        try:
            _stack = kiln.connect()
        except KilnError:
            run_dir = tempfile.mkdtemp(prefix="kiln-", dir="/tmp")
            binary = _launcher()
            up = subprocess.run([binary, "--run-dir", run_dir, "up"], capture_output=True, text=True, timeout=120)
            if up.returncode != 0:
                raise KilnError("unavailable", f"kiln up failed: {up.stdout}{up.stderr}")

            def down():
                subprocess.run([binary, "--run-dir", run_dir, "down"], capture_output=True, timeout=60)
                shutil.rmtree(run_dir, ignore_errors=True)
            atexit.register(down)
            _stack = kiln.connect(run_dir)
        return _stack


class _Eager:
    """An entry that runs the function eagerly, and why."""

    def __init__(self, reason: str):
        self.reason = reason

    def __repr__(self) -> str:
        return f"<eager: {self.reason}>"


class _Runner:
    """A compiled entry: the artifact, where its inputs come from and how its result is built."""

    def __init__(self, traced: _trace.Traced, compiled: ir.Compiled):
        self.read_inputs = _trace.inputs_reader(traced)
        self.compiled = compiled
        self.graph = traced.graph
        self.traced = traced
        self.detached = _detached_outputs(traced.graph)

    def __call__(self, fn, args, kwargs):
        results = self.compiled(*self.read_inputs(fn, args, kwargs))
        for k in self.detached:  # a view of an input that requires grad, made through `detach`
            results[k] = results[k].detach()
        if self.traced.side_effects:
            _trace.replay(self.traced, results, fn, args, kwargs)
        return self.traced.rebuild(results, (fn, args, kwargs))


class _Broken:
    """An entry whose trace stopped at a graph break: the graph of the code before it
    (`runner`; None when that code computes no tensor), then the rest (kiln._resume)."""

    def __init__(self, runner, traced: _trace.Traced, continuation: _resume.Continuation):
        self.runner = runner
        self.traced = traced
        self.continuation = continuation
        brk = traced.graph_break
        self.description = (f"{brk['filename']}:{brk['line']} at {continuation.instruction.opname}: "
                            f"{brk['reason']}")

    def __call__(self, fn, args, kwargs):
        if self.runner is not None:
            values = self.runner(fn, args, kwargs)
        else:
            if self.traced.side_effects:
                _trace.replay(self.traced, [], fn, args, kwargs)
            values = self.traced.rebuild([], (fn, args, kwargs))
        return self.continuation(values)


class CompiledFunction:
    """`fn` compiled by kiln; call it as `fn`. See kiln.compile."""

    def __init__(self, fn: Callable, *, dynamic: bool | None = None, fullgraph: bool = False,
                 mode: str | None = None, options: dict | None = None, stack=None):
        if mode not in MODES:
            raise ValueError(f"kiln.compile: mode {mode!r} is not one of {', '.join(map(repr, MODES))}")
        self._options = _checked_options(options)
        functools.update_wrapper(self, fn)
        self._fn = fn
        self._dynamic = dynamic
        self._fullgraph = fullgraph
        self._mode = mode or "default"
        self._stack = stack
        self._cache = None
        self._warned = False
        self._failed: str | None = None  # kiln's own failure on a call: every call runs eagerly
        self._unstable_warned = False
        self.fallback_reasons: list[str] = []
        self.graph_breaks: list[str] = []  # each distinct break of this frame, "file:line at OP: why"
        self._continuations: dict = {}  # glue and resume functions of this frame's breaks (kiln._resume)
        self._resume_of: CompiledFunction | None = None  # the frame this one resumes after a break
        # The code whose first frame a fallback runs (not offered to kiln again).
        self._code = getattr(getattr(fn, "__func__", fn), "__code__", None)

    def __get__(self, obj, objtype=None):
        return self if obj is None else types.MethodType(self, obj)

    @property
    def cache(self):
        """The kiln.guards.FunctionCache of this function (made on the first call)."""
        return self._cache

    def __call__(self, *args, **kwargs):
        if getattr(_disabled, "depth", 0):
            return self._fn(*args, **kwargs)
        if _kiln.offering() is not None:  # called from code kiln runs eagerly: kiln's machinery is never offered
            return _kiln.call_offering(None, None, self._run, (args, kwargs), None)
        return self._run(args, kwargs)

    def _run(self, args, kwargs):
        entry = self._entry(args, kwargs)
        if entry is None:
            return self._run_eager(args, kwargs)
        return entry.value(self._fn, args, kwargs)

    def _entry(self, args, kwargs):
        """The cache entry that runs this call compiled (traced and compiled on a miss), or None
        where the call runs eagerly."""
        if self._failed is not None:
            return None
        try:
            cache = self._cache if self._cache is not None else self._make_cache()
            entry = cache.lookup(args, kwargs)
            if entry is None:
                entry = self._miss(cache, args, kwargs)
            elif entry.value is None:  # an entry of the guards service (another process's): load it here
                entry.value = self._load(cache, args, kwargs)
        except KilnError as e:
            self._warn(e)
            return None
        except Unsupported:
            raise  # fullgraph=True
        except Exception as e:  # kiln's own failure: never the user's; the function runs eagerly from now on
            self._failed = f"kiln failed ({type(e).__name__}: {e})"
            if self._failed not in self.fallback_reasons:
                self.fallback_reasons.append(self._failed)
            warnings.warn(f"kiln: {getattr(self._fn, '__qualname__', self._fn)} runs eagerly: {self._failed}",
                          RuntimeWarning, stacklevel=3)
            return None
        if entry is None or isinstance(entry.value, _Eager):
            return None
        return entry

    def _run_eager(self, args, kwargs):
        """The function run as it is, each frame it calls offered to kiln (the frame hook)."""
        return _kiln.call_offering(self._offer, self._code, self._fn, args, kwargs)

    def _run_as(self, fn, args, kwargs):
        """`fn`, Python code that calls this function, run eagerly with this function's frames
        (and all others it calls) offered to kiln."""
        if getattr(_disabled, "depth", 0):
            return fn(*args, **kwargs)
        return _kiln.call_offering(self._offer, None, fn, args, kwargs, self._code)

    def _offer(self, fn, args, kwargs):
        """The frame hook's callback while this function runs Python eagerly, for a frame of
        `fn` about to run (kiln._kiln.call_offering): `(result,)` where kiln ran the call
        compiled; None to run it as it is; False for code never compiled (torch's, kiln's,
        the standard library's); ... for code kiln.disable marks, with all it calls."""
        if getattr(fn, "_kiln_disabled", False):
            return ...
        if getattr(_disabled, "depth", 0):
            return None
        if fn is self._fn:
            callee = self
        elif fn in _callees:  # decided on the code's first call
            callee = self._callee(fn)
        elif not _user_code(fn) or not _holds_tensor((args, kwargs)):
            return False  # the first call of a code decides: nothing for kiln there
        else:
            callee = self._callee(fn)
        entry = callee._entry(args, kwargs)
        if entry is not None and _has_graph(entry.value):
            return (entry.value(callee._fn, args, kwargs),)
        # A frame kiln runs as it is still costs a guard check at each call, a break before any
        # graph the break's cost: code with no graph for any call so far is not offered again.
        entries = callee.cache.entries if callee.cache is not None else []
        return None if callee is self or any(_has_graph(e.value) for e in entries) else False

    def _make_cache(self):
        from kiln import guards
        stack = self._stack if self._stack is not None else default_stack()
        self._stack = stack
        self._cache = guards.FunctionCache(self._fn, stack)
        return self._cache

    def _miss(self, cache, args, kwargs):
        from kiln import guards
        miss = cache.miss(args, kwargs)
        if miss.eager:
            return None
        if miss.entry is not None and miss.entry.value is not None:
            return miss.entry
        frame = miss.frame if miss.frame is not None else cache.frame
        if self._dynamic is False:
            frame = guards.FrameState()
        try:
            traced = _trace.trace(self._fn, args, kwargs, frame=_frame_dict(frame), fullgraph=self._fullgraph,
                                  scope=guards.scope(), stack=self._stack)
        except Unsupported as e:
            if self._fullgraph:
                raise
            return self._eager(cache, args, kwargs, frame, str(e))
        runner = self._runner(traced, args, kwargs)
        guard_set = guards.GuardSet.from_bytes(self._simplified(traced.guards))
        if isinstance(runner, _Eager):
            if runner.reason not in self.fallback_reasons:
                self.fallback_reasons.append(runner.reason)
            return self._checked(cache, cache.insert(guard_set, runner), args, kwargs)
        if miss.entry is not None:  # found elsewhere (the guards service): now runnable here too
            miss.entry.value = runner
            return miss.entry
        entry = cache.insert(guard_set, runner, artifacts=_artifacts(runner), graphs=[traced.graph.structural_hash()])
        return self._checked(cache, entry, args, kwargs)

    def _checked(self, cache, entry, args, kwargs):
        """`entry`, just traced from this call, whose guards should hold on it. Where one does
        not (a value that changes as it is read, an object whose type the guards cannot find
        again), each such call misses and is traced or looked up in the guards service again:
        said once per function, with the failing guard."""
        if self._unstable_warned:
            return entry
        missed = cache.why_missed(args, kwargs)
        if missed is not None:
            self._unstable_warned = True
            why = next((reason for i, reason in missed if i == entry.id), "; ".join(r for _, r in missed))
            warnings.warn(f"kiln: {getattr(self._fn, '__qualname__', self._fn)}: the guards of the entry just "
                          f"compiled fail on the call that compiled it ({why}); each such call misses the "
                          "cache and compiles again", RuntimeWarning, stacklevel=4)
        return entry

    def _simplified(self, guard_bytes: bytes) -> bytes:
        """The traced guard set with its shape guards simplified by the shapes service (fewer,
        equivalent); as traced if the service cannot answer."""
        try:
            return self._stack.simplify_guards(guard_bytes)
        except KilnError:
            return guard_bytes

    def _runner(self, traced, args, kwargs):
        """What runs a traced call: its graph compiled, or, when autograd would record the call
        (the tracer saw grad mode and inputs or parameters that require grad), the training
        runner (kiln._train), or an _Eager entry saying why kiln cannot train it. A trace
        that stopped at a graph break runs that graph, then the rest of the frame."""
        if traced.graph_break is None:
            return self._graph_runner(traced, args, kwargs)
        brk = traced.graph_break
        if not traced.graph.outputs and brk["reason"].startswith("a function that computes no tensor"):
            return _Eager(brk["reason"])  # nothing to compile: as it is, it costs what eager costs
        fn, _ = _trace.normalize(self._fn, args)
        try:
            continuation = _resume.Continuation(fn, traced.graph_break, self._compile_resume, self._continuations,
                                                self._offer)
        except Unsupported as e:
            if self._fullgraph:
                raise
            return _Eager(str(e))
        runner = self._graph_runner(traced, args, kwargs) if traced.graph.outputs else None
        if isinstance(runner, _Eager):
            return runner
        broken = _Broken(runner, traced, continuation)
        if broken.description not in self.graph_breaks:
            self.graph_breaks.append(broken.description)
            _log_break(self._fn, broken.description)
        return broken

    def _compile_resume(self, fn):
        """A resume function of this frame (kiln._resume), compiled with this frame's settings."""
        resumed = CompiledFunction(fn, dynamic=self._dynamic, fullgraph=self._fullgraph, mode=self._mode,
                                   options=self._options, stack=self._stack)
        resumed._resume_of = self
        return resumed

    def _callee(self, fn: types.FunctionType) -> "CompiledFunction":
        """`fn`, a user's function this frame's eager part calls, compiled as a frame of its own
        with this frame's settings: one cache per function and settings, shared by every
        frame that calls it."""
        settings = (self._dynamic, self._mode, tuple(sorted(self._options.items())), id(self._stack))
        per_function = _callees.setdefault(fn, {})
        if settings not in per_function:
            per_function[settings] = CompiledFunction(fn, dynamic=self._dynamic, mode=self._mode,
                                                      options=self._options, stack=self._stack)
        compiled = per_function[settings]
        self._continuations.setdefault(("callee", compiled.__qualname__, id(compiled)), compiled)
        return compiled

    def _graph_runner(self, traced, args, kwargs):
        target = ir.target_for(traced.graph)
        if self._options["emulate_precision_casts"]:
            target += "+emulate-precision-casts"
        if target.startswith("cuda"):
            host = _host_input(traced)
            if host is not None:  # only 0-d CPU tensors (scalars) mix with CUDA ones, as in torch's ops
                return _Eager(f"{host} is a CPU tensor with dims beside CUDA tensors: a compiled graph "
                              "runs on one device")
        if not traced.requires_grad:
            if self._mode == "reduce-overhead" and target.startswith("cuda"):
                return _Runner(traced, self._graphed(traced.graph, target))
            return _Runner(traced, ir.compile(traced.graph, self._stack, target))
        fn, call_args = _trace.normalize(self._fn, args)
        inputs = _trace.graph_inputs(traced, fn, call_args, kwargs)
        try:
            return _train.compile_training(traced, self._stack, inputs, target,
                                           memory_budget=self._options["memory_budget"], mode=self._mode)
        except _train.NotTrainable as e:
            return _Eager(str(e))

    def _graphed(self, graph, target):
        """reduce-overhead: the graph made pure, compiled, its launches replayed from CUDA graphs."""
        from kiln import _cudagraph, autograd
        try:
            pure, user_outputs, mutated = autograd.functionalize(graph)
        except KilnError as e:  # a write it cannot make pure: no CUDA graph, as in default mode
            return _cudagraph.CudaGraphed(ir.compile(graph, self._stack, target), [], len(graph.outputs),
                                          uncaptured=f"not captured: {e.message}")
        return _cudagraph.CudaGraphed(ir.compile(pure, self._stack, target), mutated, user_outputs)

    def _load(self, cache, args, kwargs):
        """What runs a stored entry in this process: traced again under the function's frame
        state (the trace that made it), its graph compiled (a codegen cache hit)."""
        from kiln import guards
        try:
            traced = _trace.trace(self._fn, args, kwargs, frame=_frame_dict(cache.frame), fullgraph=self._fullgraph,
                                  scope=guards.scope(), stack=self._stack)
        except Unsupported as e:
            if self._fullgraph:
                raise
            return _Eager(str(e))
        return self._runner(traced, args, kwargs)

    def _eager(self, cache, args, kwargs, frame, reason: str):
        from kiln import guards
        if reason not in self.fallback_reasons:
            self.fallback_reasons.append(reason)
        fn, call_args = _trace.normalize(self._fn, args)
        guard_set = guards.guards_for_call(call_args, kwargs, cache.arg_names, frame)
        return cache.insert(guard_set, _Eager(reason))

    def _warn(self, error: KilnError):
        if not self._warned:
            self._warned = True
            warnings.warn(f"kiln: {getattr(self._fn, '__qualname__', self._fn)} runs eagerly: the stack failed "
                          f"({error})", RuntimeWarning, stacklevel=3)


# The functions compiled functions' eager parts called, compiled as frames of their own: per
# function, per settings.
_callees: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_SKIPPED = {"torch", "kiln"}


def _user_code(fn: types.FunctionType) -> bool:
    """Whether kiln compiles `fn` where an eager part calls it: not torch's, kiln's or the
    standard library's, nor marked by kiln.disable; nor a nested function (a lambda, a
    closure), a new object at each call of the code that makes it (a cache of its own each time).
    TODO(issue 44): one cache per code object, nested functions included (guards on their cells)."""
    top = (getattr(fn, "__module__", None) or "").split(".")[0]
    if top in _SKIPPED or top in sys.stdlib_module_names or "<locals>" in fn.__qualname__:
        return False
    return not getattr(fn, "_kiln_disabled", False) and not (fn.__code__.co_flags & 0x2A0)  # no generators


def _has_graph(value) -> bool:
    """Whether a cache entry's runner runs a compiled graph (not eagerly, not a break before any)."""
    return not isinstance(value, _Eager) and not (isinstance(value, _Broken) and value.runner is None)


def _holds_tensor(value, depth: int = 3) -> bool:
    """Whether a call's arguments hold a tensor or a module: in containers and objects'
    attributes, `depth` levels down, a few dozen items each (a frame without one has
    nothing for kiln to compile)."""
    if isinstance(value, (torch.Tensor, torch.nn.Module)):
        return True
    if depth == 0 or isinstance(value, (str, bytes, int, float, bool, type(None), type, types.FunctionType)):
        return False
    if isinstance(value, dict):
        items = value.values()
    elif isinstance(value, (list, tuple, set, frozenset)):
        items = value
    else:
        items = getattr(value, "__dict__", None)
        if not isinstance(items, dict):
            return False
        items = items.values()
    return any(_holds_tensor(v, depth - 1) for v, _ in zip(items, range(32)))


def _detached_outputs(graph) -> list:
    """The outputs whose chain of first inputs passes through `detach`: an artifact hands out
    a view of an input as a view of that input (autograd's, where the input requires grad);
    these must not be."""
    out = []
    for k, value in enumerate(graph.outputs):
        node = graph.node(value.id)
        while node["kind"] == "call" and node["target"] != "detach" and node["inputs"]:
            node = graph.node(node["inputs"][0])
        if node["kind"] == "call" and node["target"] == "detach":
            out.append(k)
    return out


def _artifacts(runner) -> list:
    """The codegen artifacts an entry runs."""
    if isinstance(runner, _Broken):
        return [] if runner.runner is None else _artifacts(runner.runner)
    if isinstance(runner, _train.TrainingRunner):
        return [runner.forward.key, runner.backward.key]
    return [runner.compiled.key]


_logged_breaks: set = set()


def _log_break(fn, description: str) -> None:
    """KILN_LOG=graph_breaks: each distinct graph break, once per process."""
    from kiln import guards
    key = (getattr(fn, "__qualname__", str(fn)), description)
    if guards._log_enabled("graph_breaks") and key not in _logged_breaks:
        _logged_breaks.add(key)
        print(f"kiln: graph break in {key[0]}: {description}", file=sys.stderr)


def _host_input(traced) -> str | None:
    """The path of a graph input that is a CPU tensor of one or more dims, if any."""
    for k, i in enumerate(traced.placeholders):
        meta = traced.graph.value(i).meta
        if isinstance(meta, dict) and meta.get("device", "cpu") == "cpu" and meta.get("sizes"):
            return _trace.path_text(traced.inputs[k])
    return None


# kiln.compile's options= (torch.compile's spelling: a dict of settings) and their defaults.
OPTIONS = {
    # Training: the partitioner's trade of recompute for memory, 0 (recompute all it can)
    # to 1 (save everything the backward reads).
    "memory_budget": 0.25,
    # Round each float16/bfloat16 op's result as eager does, also between ops fused into one
    # kernel (Inductor's emulate_precision_casts): results bit-equal to eager's where the ops
    # are; off, a fused chain keeps its intermediates in float32 (faster, closer to exact).
    "emulate_precision_casts": False,
}


def _checked_options(options: dict | None) -> dict:
    options = dict(options or {})
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ValueError(f"kiln.compile: unknown option(s) {', '.join(unknown)}; known: {', '.join(OPTIONS)}")
    budget = options.get("memory_budget", OPTIONS["memory_budget"])
    if not isinstance(budget, (int, float)) or not 0.0 <= budget <= 1.0:
        raise ValueError(f"kiln.compile: memory_budget must be a number in [0, 1], got {budget!r}")
    emulate = options.get("emulate_precision_casts", False)
    if not isinstance(emulate, bool):
        raise ValueError(f"kiln.compile: emulate_precision_casts must be True or False, got {emulate!r}")
    return {**OPTIONS, **options}


def _frame_dict(frame) -> dict:
    """A kiln.guards.FrameState as the tracer request's FrameState."""
    if frame is None:
        return {}
    from kiln import _kiln
    return _kiln.capnp_decode("FrameState", frame.to_bytes())


class CompiledModule(torch.nn.Module):
    """An nn.Module whose forward runs through kiln; its parameters, buffers,
    state_dict (under `_orig_mod.`) and train/eval are the original module's."""

    def __init__(self, module: torch.nn.Module, **options):
        super().__init__()
        self._orig_mod = module
        self._compiled_forward = CompiledFunction(type(module).forward, **options)

    def forward(self, *args, **kwargs):
        if _trace.has_hooks(self._orig_mod) or _trace.own_call(self._orig_mod):
            # its hooks (or its class's own __call__) run eagerly around its forward, compiled
            return self._compiled_forward._run_as(self._orig_mod, args, kwargs)
        return self._compiled_forward(self._orig_mod, *args, **kwargs)

    @property
    def graph_breaks(self) -> list:
        """The graph breaks of the module's forward (CompiledFunction.graph_breaks)."""
        return self._compiled_forward.graph_breaks

    @property
    def fallback_reasons(self) -> list:
        return self._compiled_forward.fallback_reasons

    def __getattr__(self, name: str):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._orig_mod, name)


def compile(fn_or_module=None, *, dynamic: bool | None = None, fullgraph: bool = False, mode: str | None = None,
            options: dict | None = None, stack=None):
    """Compiles a function or an nn.Module with kiln (see this module's doc).

    dynamic: None (automatic: a dim that changes becomes symbolic), False (always static).
    fullgraph: raise kiln.Unsupported instead of running eagerly what cannot be traced.
    mode: None/"default", or "reduce-overhead": a CUDA entry's kernels replayed from a CUDA
        graph per input layout (inputs copied into the graph's memory; outputs are copies).
    options: {"memory_budget": 0..1} (training: 0 recomputes all it can in the backward,
        1 saves everything it reads; default 0.25), {"emulate_precision_casts": True}
        (float16/bfloat16 results rounded between fused ops as eager rounds them).
    stack: a kiln.Stack (default: the running stack, or one started for this process).
    """
    settings = dict(dynamic=dynamic, fullgraph=fullgraph, mode=mode, options=options, stack=stack)
    if fn_or_module is None:
        return lambda f: compile(f, **settings)
    if isinstance(fn_or_module, torch.nn.Module):
        return CompiledModule(fn_or_module, **settings)
    if not callable(fn_or_module):
        raise TypeError(f"kiln.compile: expected a function or an nn.Module, got {type(fn_or_module).__name__}")
    return CompiledFunction(fn_or_module, **settings)


_disabled = threading.local()  # kiln.disable() regions open on this thread


class _Disable:
    """`with kiln.disable():`: compiled functions called in the block run eagerly."""

    def __enter__(self):
        _disabled.depth = getattr(_disabled, "depth", 0) + 1
        return self

    def __exit__(self, *exc):
        _disabled.depth -= 1
        return False


def disable(fn=None):
    """Code kiln never compiles: `@kiln.disable` marks a function (where kiln runs Python
    eagerly, it and all it calls run as they are), `with kiln.disable():` runs every
    compiled function called in the block eagerly."""
    if fn is None:
        return _Disable()
    if not callable(fn):
        raise TypeError(f"kiln.disable: expected a function, got {type(fn).__name__}")
    target = getattr(fn, "__func__", fn)
    try:
        target._kiln_disabled = True
    except (AttributeError, TypeError):
        raise TypeError(f"kiln.disable: cannot mark {fn!r}") from None
    return fn


def explain(fn, *args, **kwargs) -> str:
    """What kiln did with a compiled function or module: each entry's guards, graph and
    kernels (or why it runs eagerly), the frame state and the last recompile's reasons;
    with arguments, also why each entry does or does not hold for that call.

        print(kiln.explain(fast))
    """
    compiled = fn._compiled_forward if isinstance(fn, CompiledModule) else fn
    if not isinstance(compiled, CompiledFunction):
        from kiln import guards
        if guards.cache_for(getattr(fn, "__wrapped__", fn)) is not None:  # a FunctionCache of its own
            return guards.explain(fn, *args, **kwargs)
        return f"{getattr(fn, '__qualname__', fn)!s}: not compiled by kiln"
    if compiled.cache is None:
        return f"{getattr(compiled, '__qualname__', compiled)!s}: not called yet"
    if isinstance(fn, CompiledModule) and (args or kwargs):
        args = (fn._orig_mod, *args)
    lines = _explain_frame(compiled, args, kwargs)
    for made in frames(compiled)[1:]:
        what = "resumed after a graph break" if made._resume_of is not None else "called where kiln ran Python"
        lines.append(f"{what}: {made.__qualname__}")
        lines += ["    " + line for line in _explain_frame(made, (), {})]
    graphs, breaks = _tally(compiled)
    lines.append(f"graphs: {graphs}, breaks: {breaks}")
    return "\n".join(lines)


def _explain_frame(compiled: CompiledFunction, args, kwargs) -> list:
    cache = compiled.cache
    if cache is None:
        return ["not called yet"]
    lines = cache.explain(args, kwargs).splitlines() if args or kwargs else cache.explain().splitlines()
    for entry in cache.entries:
        value = entry.value
        if isinstance(value, _Eager):
            lines.append(f"entry {entry.id} runs eagerly: {value.reason}")
        elif isinstance(value, _train.TrainingRunner):
            lines.append(f"entry {entry.id} trains (forward and backward artifacts):")
            lines += ["    " + line for line in value.explain.splitlines()]
        elif isinstance(value, _Runner):
            if getattr(value.compiled, "reasons", None):
                lines.append(f"entry {entry.id} runs without a CUDA graph for some inputs: " +
                             "; ".join(value.compiled.reasons))
            lines.append(f"entry {entry.id} graph:")
            lines += ["    " + line for line in str(value.graph).splitlines()]
            lines.append(f"entry {entry.id} kernels:")
            lines += ["    " + line for line in value.compiled.explain.splitlines()]
        elif isinstance(value, _Broken):
            lines.append(f"entry {entry.id} graph break at {value.description}")
            if value.runner is not None:
                lines.append(f"entry {entry.id} graph before the break:")
                lines += ["    " + line for line in str(value.traced.graph).splitlines()]
    if compiled.fallback_reasons:
        lines.append("fell back to eager: " + "; ".join(compiled.fallback_reasons))
    return lines


def frames(compiled: CompiledFunction) -> list:
    """A compiled function and the frames kiln compiled around its graph breaks (resumed
    after them) and where it ran Python eagerly (called there), all levels, each once."""
    out, seen = [], set()

    def visit(frame):
        if id(frame) in seen:
            return
        seen.add(id(frame))
        out.append(frame)
        for made in list(frame._continuations.values()):
            if isinstance(made, CompiledFunction):
                visit(made)

    visit(compiled)
    return out


def _tally(compiled: CompiledFunction) -> tuple[int, int]:
    """The graphs the frames of a compiled function (kiln._compile.frames) compiled, and their
    distinct graph breaks."""
    graphs = breaks = 0
    for frame in frames(compiled):
        if frame.cache is not None:
            graphs += sum(1 for e in frame.cache.entries if isinstance(e.value, (_Runner, _train.TrainingRunner)) or
                          (isinstance(e.value, _Broken) and e.value.runner is not None))
        breaks += len(frame.graph_breaks)
    return graphs, breaks
