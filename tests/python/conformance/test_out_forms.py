"""The out= forms (`op_out`): kiln writes what torch writes into `out`, and refuses what it refuses.

Each case runs torch's `fn(*args, **kwargs, out=o)` and kiln's `op_out` on the same arguments
and an `out` of the same dtype and layout, and compares what ends up in `out` and out's meta.
"""
import pytest
import torch

from harness import assert_meta_matches, assert_values_match, cases, maybe_check_compiled
import kiln
from kiln import ir

torch.manual_seed(0)
X = torch.randn(3, 4)
Y = torch.randn(3, 4)
POS = torch.rand(3, 4) + 0.5
ROW = torch.randn(4)
I = torch.randint(-5, 6, (3, 4))
J = torch.randint(1, 6, (3, 4))
B = X > 0
M = torch.randn(4, 5)
BATCH = torch.randn(2, 3, 4)
BATCH2 = torch.randn(2, 4, 5)
OUT_ATEN = {
    "gelu": torch.ops.aten.gelu.out,
    "silu": torch.ops.aten.silu.out,
    "softmax": lambda x, dim, out: torch.ops.aten.softmax.int_out(x, dim, out=out),
    "log_softmax": lambda x, dim, out: torch.ops.aten.log_softmax.int_out(x, dim, out=out),
}

# (functional op, args, kwargs, out dtype: None for the result's own)
UNARY = ["abs", "ceil", "cos", "erf", "exp", "exp2", "expm1", "floor", "log", "log1p", "neg",
         "reciprocal", "round", "rsqrt", "sigmoid", "sign", "sin", "sqrt", "tan", "tanh", "trunc",
         "logical_not", "gelu", "silu"]
CASES = [(op, (POS,), {}, None) for op in UNARY]
CASES += [
    ("exp", (X,), {}, torch.float64),
    ("logical_not", (I,), {}, torch.float32),
    ("add", (X, ROW), {"alpha": 2}, None),
    ("add", (I, J), {}, torch.float32),
    ("sub", (X, Y), {"alpha": 0.5}, None),
    ("mul", (I, 3), {}, None),
    ("div", (X, POS), {}, None),
    ("div", (I, J), {"rounding_mode": "floor"}, None),
    ("pow", (POS, 2.5), {}, None),
    ("fmod", (X, 0.7), {}, None),
    ("remainder", (I, J), {}, None),
    ("maximum", (X, Y), {}, None),
    ("minimum", (I, J), {}, torch.float64),
    ("eq", (I, J), {}, None),
    ("ne", (X, Y), {}, torch.float32),
    ("lt", (X, 0.0), {}, None),
    ("le", (X, Y), {}, None),
    ("gt", (I, 0), {}, None),
    ("ge", (X, ROW), {}, None),
    ("logical_and", (B, I), {}, None),
    ("logical_or", (B, X), {}, None),
    ("bitwise_and", (I, J), {}, None),
    ("bitwise_or", (I, 6), {}, None),
    ("bitwise_xor", (B, B.logical_not()), {}, None),
    ("where", (B, X, Y), {}, None),
    ("clamp", (X,), {"min": -0.5, "max": 0.5}, None),
    ("clamp", (X,), {"max": 0.1}, None),
    ("sum", (X,), {"dim": [1]}, None),
    ("sum", (I,), {"dim": [0], "keepdim": True}, torch.float32),
    ("mean", (X,), {"dim": [0, 1]}, None),
    ("prod", (X,), {"dim": 1}, None),
    ("amax", (X,), {"dim": [0]}, None),
    ("amin", (I,), {"dim": [1], "keepdim": True}, None),
    ("argmax", (X,), {"dim": 1}, None),
    ("argmin", (X,), {"dim": 0, "keepdim": True}, None),
    ("any", (X > 1,), {"dim": 1}, None),
    ("all", (B,), {"dim": 0}, torch.uint8),
    ("mm", (X, M), {}, None),
    ("bmm", (BATCH, BATCH2), {}, None),
    ("addmm", (ROW[:1].expand(3), X, M[:, :3]), {"beta": 0.5, "alpha": 2.0}, None),
    ("matmul", (BATCH, M), {}, None),
    ("softmax", (X,), {"dim": 1}, None),
    ("log_softmax", (X,), {"dim": 0}, None),
    ("cat", ([X, Y],), {"dim": 1}, None),
    ("stack", ([X, Y],), {"dim": 0}, torch.float64),
]
IDS = [f"{c[0]}-{i}" for i, c in enumerate(CASES)]


def torch_kwargs(op, kwargs):
    # torch's prod/argmax/argmin/any/all take one int dim
    kwargs = dict(kwargs)
    if isinstance(kwargs.get("dim"), list) and op in ("prod", "argmax", "argmin", "any", "all"):
        (kwargs["dim"],) = kwargs["dim"]
    return kwargs


def torch_result(op, args, kwargs):
    if op in ("gelu", "silu"):
        return getattr(torch.nn.functional, op)(*args)
    return getattr(torch, op)(*args, **torch_kwargs(op, kwargs))


def torch_out(op, args, kwargs, out):
    if op in OUT_ATEN:
        OUT_ATEN[op](*args, **kwargs, out=out)
    else:
        getattr(torch, op)(*args, **torch_kwargs(op, kwargs), out=out)


def kiln_out(op, args, kwargs, out):
    """kiln's op_out on the arguments and `out`: the value in out and out's inferred meta."""
    g = ir.Graph()
    tensors = []

    def lift(a):
        if isinstance(a, torch.Tensor):
            tensors.append(a)
            return ir.placeholder_like(g, f"a{len(tensors)}", a)
        if isinstance(a, list):
            return [lift(t) for t in a]
        return a

    lifted = [lift(a) for a in args]
    value = g.call(f"{op}_out", *lifted, **kwargs, out=lift(out))
    g.set_outputs([value])
    (written,) = ir.run(g, *tensors)
    maybe_check_compiled(f"{op}_out", written, *args, **kwargs, out=out)
    return written, value.meta


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.op(f"{c[0]}_out"), id=i)
                                  for c, i in zip(CASES, IDS)])
def test_out_form_writes_what_torch_writes(case):
    op, args, kwargs, out_dtype = case
    result = torch_result(op, args, kwargs)  # its sizes, and the dtype of an out that keeps it
    out = torch.full_like(result, 7, dtype=out_dtype or result.dtype)
    expected = out.clone()
    torch_out(op, args, kwargs, expected)
    written, meta = kiln_out(op, args, kwargs, out)
    assert_meta_matches(meta, expected)
    assert_values_match(written, expected)


@pytest.mark.parametrize("case", cases("add_out", ["size", "dtype"]))
def test_out_form_refuses_what_torch_refuses(case):
    if case == "size":  # torch would resize; kiln refuses, naming out
        out = torch.empty(2, 2)
    else:  # a float result cannot be written into an int tensor
        out = torch.empty(3, 4, dtype=torch.int64)
        with pytest.raises(RuntimeError):
            torch.add(X, Y, out=out)
    with pytest.raises(kiln.KilnError) as err:
        kiln_out("add", (X, Y), {}, out)
    assert err.value.code == "invalid_argument" and "'out'" in str(err.value)


@pytest.mark.parametrize("case", cases("mm_out", ["strided"]))
def test_out_keeps_its_own_layout(case):
    out = torch.empty(5, 3).t()  # column-major
    expected = out.clone()
    torch.mm(X, M, out=expected)
    written, meta = kiln_out("mm", (X, M), {}, out)
    assert meta["strides"] == [1, 3]
    assert written.stride() == (1, 3)
    assert_values_match(written, expected)


@pytest.mark.parametrize("case", cases("sum_out", ["wider"]))
def test_sums_into_a_wider_out_accumulate_in_its_dtype(case):
    # torch: sum/mean/prod accumulate in a wider out's dtype (exp and other
    # pointwise ops compute in their own dtype, then cast).
    x = torch.randn(1000)
    out = torch.empty((), dtype=torch.float64)
    expected = out.clone()
    torch.sum(x, 0, out=expected)
    written, _ = kiln_out("sum", (x,), {"dim": [0]}, out)
    assert torch.equal(written, expected)
