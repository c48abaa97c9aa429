"""Runs one op through kiln's IR (inference + reference interpreter) and checks it against torch.

    check("add", torch.add, a, b, alpha=2)

compares the interpreter's result with torch's (values with per-dtype tolerances, NaNs equal;
dtype exactly) and the inferred meta with torch's output (dtype, sizes, and strides of the dims
of size > 1, where a layout is decided). Where torch has no CPU kernel for a half-precision
dtype, the reference is torch's result on float32 copies rounded to that dtype, which is what
opmath computation on a GPU gives.
"""
import collections
import os
from typing import Callable

import pytest
import torch

import kiln
from kiln import ir

# Cases also run compiled through the stack's codegen service and must match the
# interpreter: KILN_CONFORMANCE_COMPILED=once (the default: each op's first case),
# =all (every case; minutes), =off. conftest gives the stack; the tally adds a line.
COMPILED = os.environ.get("KILN_CONFORMANCE_COMPILED", "once")
if COMPILED not in ("once", "all", "off"):
    raise ValueError(f"KILN_CONFORMANCE_COMPILED={COMPILED}: expected once, all or off")
stack = None
compiled_tally: collections.Counter = collections.Counter()  # (op, "ok" | "unsupported")
# The CUDA target: every compiled case also compiles to an sm_90 cubin (NVRTC, no GPU
# needed); where torch sees a GPU it runs there too and must match the interpreter.
cuda_tally: collections.Counter = collections.Counter()  # (op, "cubin" | "ran" | "unsupported")
CUDA_RUNS = torch.cuda.is_available()
_compiled_ops: set = set()

_HALF = (torch.float16, torch.bfloat16)


def cases(op: str, params, ids=None):
    """Values for one parametrized argument, each marked with `op` for the tally:

        @pytest.mark.parametrize("shape", cases("neg", [(2, 3), (0, 3), ()]))
    """
    return [
        pytest.param(p, marks=pytest.mark.op(op), id=None if ids is None else ids[i])
        for i, p in enumerate(params)
    ]


def _upcast(arg):
    if isinstance(arg, torch.Tensor) and arg.dtype in _HALF:
        return arg.float()
    if isinstance(arg, (list, tuple)):
        return type(arg)(_upcast(a) for a in arg)
    return arg


def _half_dtype(args) -> torch.dtype | None:
    for arg in args:
        if isinstance(arg, torch.Tensor) and arg.dtype in _HALF:
            return arg.dtype
        if isinstance(arg, (list, tuple)):
            found = _half_dtype(arg)
            if found is not None:
                return found
    return None


def reference(fn: Callable, *args, **kwargs):
    """torch's result, through float32 where torch lacks the half-precision CPU kernel."""
    try:
        return fn(*args, **kwargs)
    except RuntimeError as e:
        half = _half_dtype(list(args) + list(kwargs.values()))
        if half is None or "not implemented for" not in str(e):
            raise
    result = fn(*_upcast(args), **{k: _upcast(v) for k, v in kwargs.items()})
    return result.to(half) if result.is_floating_point() else result


def assert_meta_matches(meta: dict, expected: torch.Tensor):
    """The inferred meta is torch's; a size that is a symbol (data-dependent: nonzero's count)
    is checked by the values' shape instead."""
    assert meta["dtype"] == ir.dtype_name(expected.dtype), "inferred dtype"
    assert len(meta["sizes"]) == expected.dim(), "inferred rank"
    assert [s if isinstance(s, int) else n for s, n in zip(meta["sizes"], expected.shape)] == list(expected.shape), \
        "inferred sizes"
    decided = [d for d, size in enumerate(expected.shape) if size > 1 and isinstance(meta["strides"][d], int)]
    assert [meta["strides"][d] for d in decided] == [expected.stride(d) for d in decided], (
        f"inferred strides {meta['strides']} vs torch's {list(expected.stride())}"
    )


def assert_values_match(actual: torch.Tensor, expected: torch.Tensor, atol=None, rtol=None):
    assert actual.dtype == expected.dtype
    torch.testing.assert_close(actual, expected, atol=atol, rtol=rtol, equal_nan=True,
                               check_stride=False)


def assert_round_trips(graph: ir.Graph):
    """The graph survives the Cap'n Proto round trip: the same structural hash and text."""
    back = ir.Graph.from_bytes(graph.to_bytes())
    assert back.structural_hash() == graph.structural_hash()
    assert str(back) == str(graph)


def check(op: str, fn: Callable, *args, atol=None, rtol=None, torch_kwargs=None, **kwargs):
    """kiln's `op` on args/kwargs against `fn` (torch) on the same arguments (or torch_kwargs).

    Returns kiln's result for further checks."""
    expected = reference(fn, *args, **(kwargs if torch_kwargs is None else torch_kwargs))
    assert_round_trips(ir.op_graph(op, *args, **kwargs)[0])
    actual, meta = ir.eval_op(op, *args, **kwargs)
    assert_meta_matches(meta, expected)
    assert_values_match(actual, expected, atol, rtol)
    maybe_check_compiled(op, actual, *args, **kwargs)
    return actual


def maybe_check_compiled(op: str, interpreted, *args, **kwargs):
    """check_compiled, as often as KILN_CONFORMANCE_COMPILED asks."""
    if COMPILED == "all" or (COMPILED == "once" and op not in _compiled_ops):
        _compiled_ops.add(op)
        check_compiled(op, interpreted, *args, **kwargs)


def check_compiled(op: str, interpreted: torch.Tensor, *args, **kwargs):
    """The op compiled through the stack gives the interpreter's result (an op codegen cannot
    lower yet is tallied as unsupported, not failed)."""
    graph, tensors = ir.op_graph(op, *args, **kwargs)
    try:
        compiled = ir.compile(graph, stack)
    except kiln.KilnError as e:
        if e.code != "unsupported":
            raise
        compiled_tally[(op, "unsupported")] += 1
        return
    results = compiled(*[twin(t) for t in tensors])  # in-place and out= forms write them
    expected = interpreted if isinstance(interpreted, list) else [interpreted]
    if isinstance(interpreted, list):  # a tuple's pieces: getitem ran compiled too
        compiled_tally[("getitem", "ok")] += 1
    assert len(results) == len(expected)
    for result, want in zip(results, expected):
        assert_values_match(result, want, **compiled_tolerance(result.dtype))
    compiled_tally[(op, "ok")] += 1
    check_cuda(op, graph, tensors, expected)


def check_cuda(op: str, graph, tensors, expected):
    """The op compiles for the CUDA target; on a GPU it runs there and matches the interpreter."""
    try:
        if not CUDA_RUNS:
            stack.compile(graph, "cuda")  # the cubin: NVRTC's checks without a GPU
            cuda_tally[(op, "cubin")] += 1
            return
        compiled = ir.compile(graph, stack, target="cuda")
    except kiln.KilnError as e:
        if e.code != "unsupported":
            raise
        cuda_tally[(op, "unsupported")] += 1
        return
    cuda_tally[(op, "cubin")] += 1
    results = compiled(*[twin(t, device="cuda") for t in tensors])
    assert len(results) == len(expected)
    for result, want in zip(results, expected):
        assert_values_match(result.cpu(), want, **compiled_tolerance(result.dtype))
    cuda_tally[(op, "ran")] += 1


def twin(t: torch.Tensor, device: str = "cpu") -> torch.Tensor:
    """A copy of `t` on `device` with its very layout (strides and storage offset) over copied
    storage."""
    span = t.storage_offset() + (1 + sum((n - 1) * st for n, st in zip(t.shape, t.stride()))
                                 if t.numel() else 0)
    base = t.as_strided((span,), (1,), 0).clone().to(device)
    return base.as_strided(t.shape, t.stride(), t.storage_offset())


def compiled_tolerance(dtype: torch.dtype) -> dict:
    # The interpreter computes in double and rounds each op's result; compiled code
    # computes f32 (and f16/bf16, as opmath) in float and accumulates reductions in
    # float: f32 sums differ in the 5th digit, half results by a few units in the
    # last place. Integers and bools are exact.
    if dtype == torch.float32:
        return {"rtol": 1e-4, "atol": 1e-5}
    if dtype in (torch.float16, torch.bfloat16):
        eps = torch.finfo(dtype).eps
        return {"rtol": 4 * eps, "atol": 4 * eps}
    return {}
