"""The program corpus: small PyTorch functions run eagerly and through kiln.

Each `p_*.py` file registers programs with `@program(inputs=...)`; `inputs` makes
fresh example arguments (a tuple, or a (args, kwargs) pair via `call(...)`). A
program either compiles and matches eager, or falls back with the tracer's
reason — which is only right where the program says `falls_back="<part of the
reason>"`. A program compiled around graph breaks (kiln._resume) says
`breaks="<part of a break's reason>"`; one that breaks without saying so fails.
The run ends with

    programs: N compiled+correct, F fell back, W wrong, B graph breaks

Compiled here means `kiln.compile` through the session's stack (see `run` for
the calls each program gets: repeat, float64, other sizes). A program's
`inputs` may take a size `n`; such programs are also called at other sizes and
must recompile once (the dim turns dynamic), then not again. A program that still
recompiles for each new value of an input kiln keeps static says
`recompiles="<part of the failed guard>"`: its values must match eager, and the
marker fails once the recompiles stop (so the list only shrinks).
"""
from __future__ import annotations

import collections
import copy
import dataclasses
import functools
import inspect
import os
import pathlib
from typing import Callable

import torch

from kiln import _trace, ir

PROGRAMS: list["Program"] = []
OUTCOMES: "collections.Counter" = collections.Counter()  # the run's tally (conftest prints it)
UNEXPECTED: list[str] = []
# Where to keep each program's final TraceRequest (the GPU machine's Python 3.12
# requests become tests/python/programs/fixtures312, replayed on 3.11 in CI).
CAPTURE = os.environ.get("KILN_CAPTURE_REQUESTS")


@dataclasses.dataclass
class Program:
    name: str
    fn: Callable
    inputs: Callable
    falls_back: str | None
    rtol: float
    atol: float
    breaks: str | None = None
    recompiles: str | None = None  # a known recompile per value (TODO(issue 45): item 8, dynamic ints and strides)


def inference(module: torch.nn.Module) -> torch.nn.Module:
    """A module of the corpus's inference programs: parameters that need no grad (under
    grad mode, parameters that require it make a training entry: see module_that_requires_grad)."""
    return module.requires_grad_(False)


def call(*args, **kwargs):
    """Example arguments with keywords: `inputs=lambda: call(x, scale=2)`."""
    return ("__call__", args, kwargs)


def program(*, inputs: Callable, falls_back: str | None = None, breaks: str | None = None, rtol: float = 1e-5,
            atol: float = 1e-5, recompiles: str | None = None):
    def register(fn):
        module = inspect.getmodule(fn).__name__.split(".")[-1]
        PROGRAMS.append(Program(f"{module}.{fn.__name__}", fn, inputs, falls_back, rtol, atol, breaks, recompiles))
        return fn
    return register


def arguments(p: Program, n: int | None = None):
    made = p.inputs() if n is None else p.inputs(n=n)
    if isinstance(made, tuple) and len(made) == 3 and made[0] == "__call__":
        return made[1], made[2]
    return (made if isinstance(made, tuple) else (made,)), {}


def _clone(value):
    """A copy for the eager run: tensors, containers and objects (which programs may mutate)."""
    return copy.deepcopy(value)


@dataclasses.dataclass
class Outcome:
    kind: str        # "compiled", "fell back", "wrong"
    detail: str = ""
    recompiled: str = ""  # a recompile the program's `recompiles` marker names, and why
    breaks: list = dataclasses.field(default_factory=list)  # the graph breaks it compiled around


def frames(fast) -> list:
    from kiln._compile import frames as compiled_frames
    return compiled_frames(fast)


def graph_breaks(fast) -> list:
    return [b for f in frames(fast) for b in f.graph_breaks]


def fallbacks(fast) -> list:
    return [r for f in frames(fast) for r in f.fallback_reasons]


def tree_entries(fast) -> int:
    return sum(len(f.cache.entries) for f in frames(fast) if f.cache is not None)


def _eager(p: Program, args, kwargs):
    """The eager result on copies of the arguments: (result, exception raised, the copies after)."""
    eager_args, eager_kwargs = _clone(args), _clone(kwargs)
    try:
        return p.fn(*eager_args, **eager_kwargs), None, eager_args, eager_kwargs
    except Exception as e:  # kiln must not compile what fails eagerly: it runs it eagerly, which raises
        return None, e, eager_args, eager_kwargs


def _check_call(p: Program, fast, args, kwargs) -> str | None:
    """Calls the compiled function once; None when it did what eager does, else why not."""
    torch.manual_seed(0)  # programs that draw random numbers (and fall back) draw the same
    expected, raised, eager_args, eager_kwargs = _eager(p, args, kwargs)
    torch.manual_seed(0)
    try:
        got = fast(*args, **kwargs)
    except Exception as e:
        if raised is not None and type(e) is type(raised):
            return None  # ran eagerly, as it must, and raised what eager raises
        return f"raised {type(e).__name__}: {e}"
    if raised is not None:
        return f"returned where eager raises {type(raised).__name__}: {raised}"
    try:
        compare(got, expected, p)
        compare(args, eager_args, p)  # inputs mutated as eager mutated them
        compare(kwargs, eager_kwargs, p)
    except AssertionError as e:
        return str(e)
    return None


def _to_float64(value):
    return torch.utils._pytree.tree_map(
        lambda t: t.double() if isinstance(t, torch.Tensor) and t.dtype == torch.float32 else t, value)


def _has_float32(value) -> bool:
    leaves = torch.utils._pytree.tree_flatten(value)[0]
    return any(isinstance(t, torch.Tensor) and t.dtype == torch.float32 for t in leaves)


def run(p: Program, stack) -> Outcome:
    """Compiles the program with kiln.compile and checks, each against eager: the first call;
    a repeat call on the same values (no new entry); a float64 call where inputs were float32 (exactly one new
    entry); and for programs whose inputs take a size `n`, calls at other sizes (one new entry
    for the first, when the size turns dynamic, none after)."""
    import kiln

    fast = kiln.compile(p.fn, stack=stack)
    args, kwargs = arguments(p)
    repeat = _clone((args, kwargs))  # the repeat call's: the same values (a value from .item() that
    # crosses a break is a guarded constant until it changes once)
    if (why := _check_call(p, fast, args, kwargs)) is not None:
        return Outcome("wrong", why)
    if CAPTURE:  # after a call, as kiln.compile's trace saw it (caches the code fills on its first call filled)
        _capture(p)
    if fast.fallback_reasons:
        return Outcome("fell back", fast.fallback_reasons[0])
    entries, all_entries = len(fast.cache.entries), tree_entries(fast)
    args, kwargs = repeat
    recompiled = ""

    def known(reasons) -> bool:  # a recompile the `recompiles` marker names (values checked all the same)
        nonlocal recompiled
        if p.recompiles is not None and p.recompiles in str(reasons):
            recompiled = str(reasons)
            return True
        return False
    if (why := _check_call(p, fast, args, kwargs)) is not None:
        return Outcome("wrong", f"repeat call: {why}")
    if (len(fast.cache.entries) != entries or tree_entries(fast) != all_entries) and not known(fast.cache.last_reasons):
        return Outcome("wrong", f"a repeat call compiled again: {fast.cache.last_reasons}")
    entries = len(fast.cache.entries)
    if _has_float32((args, kwargs)):
        args, kwargs = _to_float64(arguments(p))
        if _eager(p, args, kwargs)[1] is None:  # programs that mix in float32 weights raise: skip those
            if (why := _check_call(p, fast, args, kwargs)) is not None:
                return Outcome("wrong", f"float64 call: {why}")
            if len(fast.cache.entries) != entries + 1 and not fast.fallback_reasons:
                return Outcome("wrong", f"a dtype change made {len(fast.cache.entries) - entries} new entries")
            entries = len(fast.cache.entries)
    if "n" in inspect.signature(p.inputs).parameters:
        for k, n in enumerate((7, 11, 23)):
            args, kwargs = arguments(p, n)
            if (why := _check_call(p, fast, args, kwargs)) is not None:
                return Outcome("wrong", f"size {n}: {why}")
            expected_entries = entries + 1
            if len(fast.cache.entries) != expected_entries and not known(fast.cache.last_reasons):
                return Outcome("wrong", f"size {n}: {len(fast.cache.entries) - entries} new entries, expected 1 "
                                        f"(automatic dynamic): {fast.cache.last_reasons}")
    return Outcome("compiled", breaks=graph_breaks(fast), recompiled=recompiled)


def _capture(p: Program):
    """The program's final TraceRequest, for the 3.12 fixtures (the tracer in-process)."""
    args, kwargs = arguments(p)
    try:
        _trace.trace(p.fn, args, kwargs, record=_recorder(p))
    except _trace.Unsupported:
        pass


def _recorder(p: Program):
    if not CAPTURE:
        return None
    def record(request: bytes):
        pathlib.Path(CAPTURE).mkdir(parents=True, exist_ok=True)
        (pathlib.Path(CAPTURE) / f"{p.name}.bin").write_bytes(request)
    return record


def compare(got, expected, p: Program):
    if isinstance(expected, torch.Tensor):
        assert isinstance(got, torch.Tensor), f"expected a tensor, got {type(got).__name__}"
        torch.testing.assert_close(got, expected, rtol=p.rtol, atol=p.atol)
    elif isinstance(expected, (tuple, list)):
        assert type(got) is type(expected) and len(got) == len(expected), f"expected {expected!r}, got {got!r}"
        for g, e in zip(got, expected):
            compare(g, e, p)
    elif isinstance(expected, dict):
        assert isinstance(got, dict) and list(got) == list(expected), f"expected keys {list(expected)}, got {got!r}"
        for k in expected:
            compare(got[k], expected[k], p)
    elif isinstance(expected, functools.partial):  # equal as their parts (a copy is another object)
        assert isinstance(got, functools.partial), f"expected a partial, got {got!r}"
        compare((got.func, got.args, got.keywords), (expected.func, expected.args, expected.keywords), p)
    elif isinstance(expected, torch.nn.Module):
        compare(dict(got.state_dict()), dict(expected.state_dict()), p)
        compare({k: v for k, v in vars(got).items() if not k.startswith("_")},
                {k: v for k, v in vars(expected).items() if not k.startswith("_")}, p)
    elif hasattr(expected, "__dict__") and not isinstance(expected, type) and not callable(expected):
        assert type(got) is type(expected), f"expected a {type(expected).__name__}, got {got!r}"
        compare(vars(got), vars(expected), p)
    else:
        assert got == expected and type(got) is type(expected), f"expected {expected!r}, got {got!r}"


def load_all():
    """Imports every p_*.py once (each registers its programs)."""
    import importlib
    for path in sorted(pathlib.Path(__file__).parent.glob("p_*.py")):
        importlib.import_module(path.stem)


def record(name: str, outcome: Outcome, p: Program):
    OUTCOMES[outcome.kind] += 1
    OUTCOMES["breaks"] += len(outcome.breaks)
    if outcome.kind == "wrong" or (outcome.kind == "fell back" and p.falls_back is None):
        UNEXPECTED.append(f"  {outcome.kind}: {name}: {outcome.detail}")
    if outcome.breaks and p.breaks is None:
        UNEXPECTED.append(f"  graph break: {name}: {outcome.breaks[0]}")
