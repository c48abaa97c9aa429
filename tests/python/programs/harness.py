"""The program corpus: small PyTorch functions run eagerly and through kiln.

Each `p_*.py` file registers programs with `@program(inputs=...)`; `inputs` makes
fresh example arguments (a tuple, or a (args, kwargs) pair via `call(...)`). A
program either compiles and matches eager, or falls back with the tracer's
reason — which is only right where the program says `falls_back="<part of the
reason>"`. The run ends with

    programs: N compiled+correct, F fell back, W wrong

Compiled here means: traced by the tracer service and compiled by the codegen
service of the session's stack, run on the example inputs.
"""
from __future__ import annotations

import copy
import dataclasses
import inspect
import os
import pathlib
from typing import Callable

import torch

from kiln import _trace, ir

PROGRAMS: list["Program"] = []
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


def call(*args, **kwargs):
    """Example arguments with keywords: `inputs=lambda: call(x, scale=2)`."""
    return ("__call__", args, kwargs)


def program(*, inputs: Callable, falls_back: str | None = None, rtol: float = 1e-5, atol: float = 1e-5):
    def register(fn):
        module = inspect.getmodule(fn).__name__.split(".")[-1]
        PROGRAMS.append(Program(f"{module}.{fn.__name__}", fn, inputs, falls_back, rtol, atol))
        return fn
    return register


def arguments(p: Program):
    made = p.inputs()
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


def run(p: Program, stack) -> Outcome:
    args, kwargs = arguments(p)
    eager_args, eager_kwargs = _clone(args), _clone(kwargs)
    try:
        expected = p.fn(*eager_args, **eager_kwargs)
    except Exception as e:  # kiln must not compile what fails eagerly: it runs it eagerly, which raises
        raised = e
    else:
        raised = None
    try:
        traced = _trace.trace(p.fn, args, kwargs, stack=stack, record=_recorder(p))
    except _trace.Unsupported as e:
        return Outcome("fell back", str(e))
    if raised is not None:
        return Outcome("wrong", f"compiled a call that raises eagerly: {type(raised).__name__}: {raised}")
    fn, call_args = _trace.normalize(p.fn, args)
    compiled = ir.compile(traced.graph, stack)
    results = compiled(*_trace.graph_inputs(traced, fn, call_args, kwargs))
    _trace.replay(traced, results, fn, call_args, kwargs)
    got = _trace.rebuild(traced.outputs, results)
    try:
        compare(got, expected, p)
        compare(args, eager_args, p)  # inputs mutated as eager mutated them
        compare(kwargs, eager_kwargs, p)
    except AssertionError as e:
        return Outcome("wrong", str(e))
    return Outcome("compiled")


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
