"""Conformance of reductions, views, copies and creation ops against torch on CPU.

Reductions (sum mean amax amin prod argmax argmin any all var std): dims as None, int, list,
negative and empty, keepdim, dtype=, correction, empty reductions, every dtype torch allows;
torch gives every reduction a contiguous result, whatever the input's layout.
Views (view reshape permute transpose expand squeeze unsqueeze slice select narrow flatten
unflatten as_strided): sizes, every stride and the storage offset exactly as torch's, and the
result aliases its input (a write through the view shows in the input, checked with ir.run).
Copies (contiguous clone cat stack) keep torch's layouts; creation ops (full zeros ones empty
arange, *_like) torch's dtypes, devices and checks; sym_size reads a size. Inputs are contiguous,
transposed, strided, offset or broadcast, with 0-d, size-1 and empty dims; complex inputs infer
but the interpreter refuses them (KilnError unsupported). Bad arguments are KilnError
invalid_argument naming the argument, where torch raises.
"""
import itertools

import pytest
import torch

from harness import (assert_meta_matches, assert_values_match, cases, check,
                     maybe_check_compiled, reference)
from kiln import KilnError, ir

# var and std over no more items than the correction: torch's nan, and its warning
pytestmark = pytest.mark.filterwarnings("ignore:.*degrees of freedom is <= 0:UserWarning")

FLOATS = [torch.float64, torch.float32, torch.float16, torch.bfloat16]
INTS = [torch.int64, torch.int32, torch.int8, torch.uint8]
ALL = FLOATS + INTS + [torch.bool]


def rand(shape, dtype=torch.float32, seed=0):
    """Fixed random data: normal floats, small ints (non-negative for uint8), random bools."""
    shape = tuple(shape)
    g = torch.Generator().manual_seed(seed + 7 * len(shape) + sum(shape))
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype)
    low = 0 if dtype == torch.uint8 else -4
    return torch.randint(low, 5, shape, generator=g).to(dtype)


def layout(shape, kind="contig", dtype=torch.float32):
    """A tensor of `shape` laid out as `kind`: contiguous, "t" (dims reversed: a transpose),
    "step" (every other element of the last dim), "offset" (one row in: storage offset) or
    "expand" (the first dim broadcast: stride 0)."""
    shape = tuple(shape)
    if kind == "contig":
        return rand(shape, dtype)
    if kind == "t":
        return rand(shape[::-1], dtype).permute(*reversed(range(len(shape))))
    if kind == "step":
        return rand(shape[:-1] + (2 * shape[-1],), dtype)[..., ::2]
    if kind == "offset":
        return rand((shape[0] + 1,) + shape[1:], dtype)[1:]
    if kind == "expand":
        return rand((1,) + shape[1:], dtype).expand(shape)
    raise ValueError(kind)


def multi(op, params, ids=None):
    """As harness.cases, for several parametrized arguments: each param is a tuple of values."""
    return [pytest.param(*p, marks=pytest.mark.op(op), id=None if ids is None else ids[i])
            for i, p in enumerate(params)]


def ids(params):
    return [str(p).replace(" ", "") for p in params]


def raises(match, op, *args, **kwargs):
    with pytest.raises(KilnError, match=match) as info:
        ir.eval_op(op, *args, **kwargs)
    assert info.value.code == "invalid_argument", info.value


def check_exact(op, fn, *args, **kwargs):
    """check, and every stride of the result (size-1 dims too) equal to torch's."""
    expected = reference(fn, *args, **{k: v for k, v in kwargs.items()
                                       if k not in ("atol", "rtol")})
    actual = check(op, fn, *args, **kwargs)
    if expected.numel():
        assert list(actual.stride()) == list(expected.stride()), "strides of size-1 dims"
    return actual


def tol(dtype):
    """Reductions accumulate in another order than torch: a few ulps of the result's dtype."""
    return {torch.float16: dict(atol=1e-2, rtol=1e-2), torch.bfloat16: dict(atol=5e-2, rtol=2e-2),
            torch.float32: dict(atol=1e-5, rtol=1e-5)}.get(dtype, {})


# --- reductions ---------------------------------------------------------------------------

LIST_DIMS = ["sum", "mean", "amax", "amin", "var", "std"]  # dim: int list; the rest: one int
LAYOUTS = [((3, 4), "contig"), ((2, 3, 4), "t"), ((3, 4), "step"), ((3, 4), "offset"),
           ((), "contig"), ((1, 4), "contig"), ((2, 1, 3), "t"), ((4,), "contig"),
           ((3, 4), "expand")]


def torch_reduce(op):
    fn = getattr(torch, op)

    def run(x, dim=None, keepdim=False, **kw):
        if dim is None and keepdim and op in ("argmax", "argmin"):
            return fn(x, keepdim=True)
        if dim is None and keepdim:  # kiln: keepdim without dims keeps every dim as size 1
            dim = list(range(x.dim()))
        if dim is None:
            return fn(x, **kw)
        return fn(x, dim=dim, keepdim=keepdim, **kw)

    return run


def reduce_cases(op):
    out = []
    for shape, kind in LAYOUTS:
        rank = len(shape)
        dims = [None, 0, -1]
        if op in LIST_DIMS:
            dims += [[0, -1]] if rank > 1 else []
        for dim, keepdim in itertools.product(dims, [False, True]):
            if dim is None and keepdim and op == "prod":
                continue  # torch's prod takes no keepdim without a dim
            out.append((shape, kind, dim, keepdim))
    return out


REDUCTIONS = ["sum", "mean", "amax", "amin", "prod", "argmax", "argmin", "any", "all", "var",
              "std"]


@pytest.mark.parametrize("op,shape,kind,dim,keepdim", [
    pytest.param(op, *c, marks=pytest.mark.op(op), id=f"{op}-{c}".replace(" ", ""))
    for op in REDUCTIONS for c in reduce_cases(op)])
def test_reduction_dims_and_layouts(op, shape, kind, dim, keepdim):
    x = layout(shape, kind)
    kwargs = {"keepdim": keepdim} if keepdim else {}
    if dim is not None:
        kwargs["dim"] = dim
    check_exact(op, torch_reduce(op), x, **tol(x.dtype), **kwargs)


def dtype_ok(op, dtype):
    if op in ("mean", "var", "std"):
        return dtype.is_floating_point
    return dtype != torch.bool or op not in ("argmax", "argmin")  # torch: not implemented


@pytest.mark.parametrize("op,dtype,dim", [
    pytest.param(op, dt, dim, marks=pytest.mark.op(op), id=f"{op}-{dt}-{dim}")
    for op in REDUCTIONS for dt in ALL if dtype_ok(op, dt) for dim in (None, 1)])
def test_reduction_dtypes(op, dtype, dim):
    x = rand((3, 4), dtype)
    if op == "prod":
        x = rand((2, 3), dtype)  # small products
    kwargs = {} if dim is None else {"dim": dim}
    check_exact(op, torch_reduce(op), x, **tol(dtype), **kwargs)


@pytest.mark.parametrize("op,dtype", multi("sum", [("sum", d) for d in ALL], ids=ids(ALL))
                         + multi("prod", [("prod", d)
                                          for d in [torch.float64, torch.int32, torch.int64]])
                         + multi("mean", [("mean", d) for d in [torch.float64, torch.float16]]))
def test_reduction_dtype_argument(op, dtype):
    x = rand((2, 3), torch.int8 if op != "mean" else torch.float32)
    check(op, torch_reduce(op), x, dim=[1] if op != "prod" else 1, dtype=dtype, **tol(dtype))
    check(op, torch_reduce(op), x, dtype=dtype, **tol(dtype))


@pytest.mark.parametrize("op,correction,dim", [
    pytest.param(op, c, d, marks=pytest.mark.op(op), id=f"{op}-{c}-{d}")
    for op in ("var", "std") for c in (0, 1, 2) for d in ([1], [0, 1], [-2])])
def test_var_std_correction(op, correction, dim):
    x = layout((3, 4), "t", torch.float64)
    check(op, torch_reduce(op), x, dim=dim, correction=correction)
    check(op, torch_reduce(op), x, dim=dim, correction=correction, keepdim=True)


@pytest.mark.parametrize("op,unbiased", [
    pytest.param(op, u, marks=pytest.mark.op(op), id=f"{op}-{u}")
    for op in ("var", "std") for u in (False, True)])
def test_var_std_unbiased_is_correction_1(op, unbiased):
    x = layout((3, 4), "step", torch.float32)
    fn = getattr(torch, op)
    check(op, fn, x, correction=int(unbiased), torch_kwargs=dict(unbiased=unbiased))
    check(op, fn, x, dim=[0], correction=int(unbiased), keepdim=True,
          torch_kwargs=dict(dim=[0], unbiased=unbiased, keepdim=True))


@pytest.mark.parametrize("op", cases("var", ["var"]) + cases("std", ["std"]))
def test_var_std_of_too_few_elements_is_nan(op):
    check(op, torch_reduce(op), rand((1, 3), torch.float64), dim=[0])  # n - correction = 0
    check(op, torch_reduce(op), rand((2, 3), torch.float64), dim=[0], correction=3)


@pytest.mark.parametrize("op", cases("var", ["var"]) + cases("std", ["std"]))
def test_var_std_of_complex_is_real(op):
    x = torch.randn(2, 3, dtype=torch.complex64)
    graph = ir.Graph()
    value = graph.call(op, ir.placeholder_like(graph, "x", x), dim=[1])
    assert value.meta["dtype"] == "float32"
    assert value.meta["sizes"] == list(getattr(torch, op)(x, dim=[1]).shape)
    graph.set_outputs([value])
    with pytest.raises(KilnError, match="complex"):
        ir.run(graph, x)


@pytest.mark.parametrize("op,shape,dim", [
    pytest.param(op, s, d, marks=pytest.mark.op(op), id=f"{op}-{s}-{d}")
    for op in ("sum", "prod", "any", "all", "mean", "var", "std")
    for s, d in (((0, 3), 0), ((0, 3), None), ((3, 0), 1), ((0,), None))])
def test_empty_reductions_have_identities(op, shape, dim):
    dtype = torch.bool if op in ("any", "all") else torch.float32
    kwargs = {} if dim is None else {"dim": dim}
    check(op, torch_reduce(op), rand(shape, dtype), **kwargs)


@pytest.mark.parametrize("op", cases("amax", ["amax"]) + cases("amin", ["amin"])
                         + cases("argmax", ["argmax"]) + cases("argmin", ["argmin"]))
def test_extremes_of_empty_dims_are_errors(op):
    x = rand((0, 3))
    with pytest.raises((RuntimeError, IndexError)):
        getattr(torch, op)(x, 0)
    raises("dim 0.* size 0|empty", op, x, dim=0)
    check(op, torch_reduce(op), x, dim=1)  # reducing a non-empty dim of an empty tensor is fine
    with pytest.raises((RuntimeError, IndexError)):
        getattr(torch, op)(x)
    raises("empty|size 0", op, x)


@pytest.mark.parametrize("op", cases("amax", ["amax"]) + cases("amin", ["amin"])
                         + cases("argmax", ["argmax"]) + cases("argmin", ["argmin"]))
def test_extremes_propagate_nan(op):
    x = rand((3, 4))
    x[1, 2] = float("nan")
    x[2, 0] = float("nan")
    check(op, torch_reduce(op), x, dim=1)
    check(op, torch_reduce(op), x)


@pytest.mark.parametrize("op", [pytest.param(op, marks=pytest.mark.op(op)) for op in REDUCTIONS])
def test_reduction_bad_arguments(op):
    x = rand((2, 3))
    raises(f"{op}: argument 'dim': dim 2 out of range", op, x, dim=2)
    raises("argument 'dim'.*out of range", op, x, dim=-3)
    if op in LIST_DIMS:
        raises("argument 'dim'.*twice", op, x, dim=[1, -1])
    if op in ("mean", "var", "std"):
        raises(f"{op}: argument 'self'.*floating", op, rand((2, 3), torch.int32))
    if op in ("argmax", "argmin"):
        with pytest.raises(RuntimeError, match="does not support bool input"):
            getattr(torch, op)(rand((2, 3), torch.bool))
        raises(f"{op}: argument 'self'.*bool", op, rand((2, 3), torch.bool))


def test_reduction_of_0d_rejects_a_dim_twice():
    with pytest.raises(RuntimeError, match="multiple times"):
        torch.tensor(1.0).sum([0, -1])
    raises("sum: argument 'dim'.*twice", "sum", rand(()), dim=[0, -1])


def test_reduction_bad_dtype_argument():
    raises("mean: argument 'dtype'", "mean", rand((2, 3)), dtype=torch.int64)


@pytest.mark.parametrize("op", cases("sum", ["sum"]) + cases("mean", ["mean"]))
def test_reduction_over_empty_dim_list_reduces_everything(op):
    check(op, lambda x, dim: getattr(torch, op)(x, dim=dim), layout((2, 3), "t"), dim=[])


def test_reductions_of_channels_last_inputs_are_contiguous():
    # torch allocates every reduction result contiguous, whatever the input's layout.
    x = rand((2, 3, 4, 5)).to(memory_format=torch.channels_last)
    for op in ("sum", "amax", "var"):
        check(op, torch_reduce(op), x, dim=[1], keepdim=True, **tol(x.dtype))
        check(op, torch_reduce(op), x, dim=[2, 3], **tol(x.dtype))


# --- views --------------------------------------------------------------------------------


def aten_slice(x, dim=0, start=None, end=None, step=1):
    return torch.ops.aten.slice(x, dim, start, end, step)


TORCH_VIEWS = {  # each view op as torch spells it, taking kiln's argument names
    "view": lambda x, size: x.view(size),
    "reshape": lambda x, size: x.reshape(size),
    "permute": lambda x, dims: x.permute(dims),
    "transpose": lambda x, dim0, dim1: x.transpose(dim0, dim1),
    "expand": lambda x, size: x.expand(size),
    "squeeze": lambda x, dim=None: x.squeeze() if dim is None else x.squeeze(dim),
    "unsqueeze": lambda x, dim: x.unsqueeze(dim),
    "slice": aten_slice,
    "select": lambda x, dim, index: x.select(dim, index),
    "narrow": lambda x, dim, start, length: x.narrow(dim, start, length),
    "flatten": lambda x, start_dim=0, end_dim=-1: x.flatten(start_dim, end_dim),
    "unflatten": lambda x, dim, sizes: x.unflatten(dim, sizes),
    "as_strided": lambda x, **kw: torch.as_strided(x, **kw),
    "detach": lambda x: x.detach(),
}


def twin(x):
    """A copy of x on a copy of its storage, with x's strides and storage offset."""
    if x.numel() == 0:
        return x.clone()
    span = x.storage_offset() + 1 + sum((s - 1) * st for s, st in zip(x.shape, x.stride()))
    flat = x.as_strided((span,), (1,), 0).clone()
    return flat.as_strided(x.shape, x.stride(), x.storage_offset())


def write(graph, value, dtype):
    """An in-place write into `value`: add_ 1, or logical_not_ for bool."""
    if dtype == torch.bool:
        graph.call("logical_not_", value)
    else:
        graph.call("add_", value, 1)


def torch_write(tensor):
    return tensor.logical_not_() if tensor.dtype == torch.bool else tensor.add_(1)


def check_view(op, fn, x, alias=True, **kwargs):
    """kiln's view against torch's: sizes, every stride and the storage offset exactly, values,
    and (where torch can write through it) that a write through the view shows in the input."""
    expected = fn(x, **kwargs)
    actual, meta = ir.eval_op(op, x, **kwargs)
    assert meta["dtype"] == ir.dtype_name(expected.dtype)
    assert meta["sizes"] == list(expected.shape)
    assert meta["strides"] == list(expected.stride()), "inferred strides"
    assert meta["storage_offset"] == expected.storage_offset(), "inferred storage offset"
    if expected.numel():  # (ir.run gives empty tensors fresh storage)
        assert list(actual.stride()) == list(expected.stride())
        assert actual.storage_offset() == expected.storage_offset()
    assert_values_match(actual, expected)
    maybe_check_compiled(op, actual, x, **kwargs)
    overlapping = any(st == 0 and n > 1 for n, st in zip(expected.shape, expected.stride()))
    if not alias or expected.numel() == 0 or overlapping:  # torch refuses to write through
        return
    # A write through the view must reach the input: view, add_ 1, return the input.
    graph = ir.Graph()
    p = ir.placeholder_like(graph, "x", x)
    write(graph, graph.call(op, p, **kwargs), x.dtype)
    graph.set_outputs([p])
    (written,) = ir.run(graph, x)
    reference_input = twin(x)
    torch_write(fn(reference_input, **kwargs))
    assert_values_match(written, reference_input)


def assert_copies(op, x, **kwargs):
    """A write into the result of `op` leaves the input as it was: the result is a copy."""
    graph = ir.Graph()
    p = ir.placeholder_like(graph, "x", x)
    v = graph.call(op, p, **kwargs)
    write(graph, v, x.dtype)
    graph.set_outputs([p])
    assert_values_match(ir.run(graph, x)[0], x)


@pytest.mark.parametrize("shape,kind,size", multi("view", [
    ((2, 3, 4), "contig", [6, 4]), ((2, 3, 4), "contig", [-1]), ((2, 3, 4), "contig", [2, -1, 2]),
    ((3, 4), "offset", [4, 3]), ((2, 3, 4), "step", [6, 1, 4]), ((2, 3, 4), "step", [2, 3, 2, 2]),
    ((2, 3, 4), "t", [2, 3, 2, 2]), ((4, 3), "t", [4, 1, 3]), ((), "contig", [1, 1]),
    ((1,), "contig", []), ((0, 3), "contig", [3, 0]), ((0, 3), "contig", [-1, 6]),
    ((2, 1, 4), "t", [2, 4]), ((2, 3, 4), "step", [2, 3, 1, 4, 1]), ((4, 3), "t", [2, 2, 3]),
    ((2, 3, 4), "expand", [2, 3, 2, 2]), ((2, 3, 4), "expand", [2, 12])]))
def test_view(shape, kind, size):
    check_view("view", TORCH_VIEWS["view"], layout(shape, kind), size=size)


@pytest.mark.parametrize("shape,kind,size", multi("reshape", [
    ((2, 3, 4), "contig", [6, 4]), ((2, 3, 4), "step", [6, 4]), ((3, 4), "offset", [-1]),
    ((3, 4), "step", [12]),
    ((2, 3, 4), "t", [4, 3, 2, 1]), ((), "contig", [1]), ((0, 3), "contig", [3, 0])]))
def test_reshape_that_views(shape, kind, size):
    check_view("reshape", TORCH_VIEWS["reshape"], layout(shape, kind), size=size)


@pytest.mark.parametrize("shape,kind,size,dtype", multi("reshape", [
    ((2, 3, 4), "t", [-1], torch.float32), ((3, 4), "t", [12], torch.int32),
    ((3, 4), "expand", [12], torch.float64), ((2, 3, 4), "expand", [24], torch.int8),
    ((2, 3, 4), "t", [6, 4], torch.bool), ((4, 3), "t", [2, 6], torch.float16)]))
def test_reshape_that_copies(shape, kind, size, dtype):
    x = layout(shape, kind, dtype)
    out = check("reshape", lambda x, size: x.reshape(size), x, size=size)
    assert list(out.stride()) == list(x.reshape(size).stride())
    assert_copies("reshape", x, size=size)


def odd(shape, strides):
    """A tensor with odd strides at its size-1 dims (as slicing leaves them)."""
    return rand((64,)).as_strided(shape, strides)


@pytest.mark.parametrize("op,x,kwargs", [
    pytest.param(op, x, kw, marks=pytest.mark.op(op), id=f"{op}-{i}")
    for i, (op, x, kw) in enumerate((
        ("view", odd((1,), (2,)), dict(size=[1, 1])),
        ("view", odd((3, 1), (1, 6)), dict(size=[3, 1, 1])),
        ("view", odd((2, 1, 3), (3, 7, 1)), dict(size=[1, 6, 1])),
        ("reshape", odd((3, 1), (1, 6)), dict(size=[1, 3, 1])),
        ("flatten", odd((2, 1, 3, 1), (3, 9, 1, 5)), dict(start_dim=1)),
        ("unflatten", odd((2, 1, 3, 3), (8, 2, 2, 16)), dict(dim=-3, sizes=[1, 1])),
        ("unflatten", odd((4, 3), (3, 1)), dict(dim=0, sizes=[1, 4, 1]))))])
def test_views_give_size_1_dims_torchs_strides(op, x, kwargs):
    check_view(op, TORCH_VIEWS[op], x, **kwargs)


@pytest.mark.parametrize("op,x", [
    pytest.param(op, x, marks=pytest.mark.op(op), id=f"{op}-{i}")
    for op in ("clone", "zeros_like", "empty_like")
    for i, x in enumerate((odd((4, 1), (1, 2)), odd((1, 4), (18, 1)), odd((2, 1, 3), (1, 5, 2))))])
def test_copies_of_dense_inputs_keep_their_strides(op, x):
    expected = getattr(torch, op)(x)
    actual, meta = ir.eval_op(op, x)
    assert meta["strides"] == list(expected.stride())
    assert list(actual.stride()) == list(expected.stride())
    if op != "empty_like":
        assert_values_match(actual, expected)


def test_view_bad_arguments():
    raises("view: argument 'self'.*reshape", "view", layout((3, 4), "t"), size=[12])
    for shape, kind, size in (((2, 3, 4), "t", [4, 3, 2, 1]), ((4, 3), "t", [3, 2, 2]),
                              ((2, 1, 4), "t", [4, 2]), ((3, 4), "t", [2, 6])):
        x = layout(shape, kind)
        with pytest.raises(RuntimeError, match="view size is not compatible"):
            x.view(size)
        raises("view: argument 'self'.*reshape", "view", x, size=size)
    raises("view: argument 'size'.*invalid", "view", rand((3, 4)), size=[5, -1])
    raises("view: argument 'size'.*only one", "view", rand((3, 4)), size=[-1, -1])
    raises("reshape: argument 'size'", "reshape", rand((3, 4)), size=[5])


@pytest.mark.parametrize("shape,kind,dims", multi("permute", [
    ((2, 3, 4), "contig", [2, 0, 1]), ((2, 3, 4), "t", [1, 2, 0]), ((2, 3, 4), "step", [-1, 0, 1]),
    ((3, 4), "offset", [1, 0]), ((), "contig", []), ((0, 3), "contig", [1, 0])]))
def test_permute(shape, kind, dims):
    check_view("permute", TORCH_VIEWS["permute"], layout(shape, kind), dims=dims)


@pytest.mark.parametrize("shape,kind,dim0,dim1", multi("transpose", [
    ((2, 3, 4), "contig", 0, 2), ((2, 3, 4), "t", -1, 1), ((3, 4), "offset", 0, 1),
    ((2, 3, 4), "step", 1, 1), ((), "contig", 0, -1), ((1, 4), "contig", 0, 1)]))
def test_transpose(shape, kind, dim0, dim1):
    check_view("transpose", TORCH_VIEWS["transpose"], layout(shape, kind),
               dim0=dim0, dim1=dim1)


@pytest.mark.parametrize("shape,kind,dtype", multi("detach", [
    ((2, 3, 4), "contig", torch.float32), ((3, 4), "t", torch.float64), ((3, 4), "offset", torch.bfloat16),
    ((2, 3, 4), "step", torch.float32), ((2, 3, 4), "expand", torch.float32), ((), "contig", torch.float32),
    ((0, 3), "contig", torch.float32), ((3, 4), "contig", torch.int64), ((3, 4), "contig", torch.bool)]))
def test_detach(shape, kind, dtype):
    check_view("detach", TORCH_VIEWS["detach"], layout(shape, kind, dtype))


def test_detach_carries_no_grad():
    graph = ir.Graph()
    x = graph.placeholder("x", "float32", [3, 4], requires_grad=True)
    d = graph.call("detach", x)
    assert x.meta["requires_grad"] and not d.meta["requires_grad"]
    assert not graph.call("mul", d, 2).meta["requires_grad"]


def test_permute_transpose_bad_arguments():
    raises("permute: argument 'dims'", "permute", rand((2, 3)), dims=[0])
    raises("permute: argument 'dims'.*twice", "permute", rand((2, 3)), dims=[0, -2])
    raises("transpose: argument 'dim1'.*out of range", "transpose", rand((2, 3)), dim0=0, dim1=2)


@pytest.mark.parametrize("shape,kind,size", multi("expand", [
    ((3, 1), "contig", [3, 4]), ((1, 4), "offset", [2, 3, 4]), ((3, 1), "t", [2, -1, 5]),
    ((3, 4), "expand", [2, 3, 4]),
    ((), "contig", [2, 3]), ((2, 3), "step", [2, 3]), ((1,), "contig", [0]),
    ((2, 1, 3), "t", [2, 4, 3])]))
def test_expand(shape, kind, size):
    check_view("expand", TORCH_VIEWS["expand"], layout(shape, kind), size=size)


def test_expand_bad_arguments():
    raises("expand: argument 'size'.*cannot expand", "expand", rand((2, 3)), size=[4, 3])
    raises("expand: argument 'size'", "expand", rand((2, 3)), size=[3])
    raises("expand: argument 'size'.*leading", "expand", rand((2, 3)), size=[-1, 2, 3])
    raises("expand: argument 'size'.*negative", "expand", rand((3, 1)), size=[3, -2])


@pytest.mark.parametrize("shape,kind,dim", multi("squeeze", [
    ((2, 1, 3), "contig", None), ((2, 1, 3), "t", 1), ((2, 1, 3), "contig", -2),
    ((2, 1, 3), "contig", 0), ((1, 1), "contig", None), ((), "contig", None), ((), "contig", 0),
    ((1, 4), "offset", 0), ((0, 1), "contig", 1)]))
def test_squeeze(shape, kind, dim):
    kwargs = {} if dim is None else {"dim": dim}
    check_view("squeeze", TORCH_VIEWS["squeeze"], layout(shape, kind), **kwargs)


@pytest.mark.parametrize("shape,kind,dim", multi("unsqueeze", [
    ((2, 3), "contig", 0), ((2, 3), "t", 1), ((2, 3), "t", 2), ((2, 3), "t", -1),
    ((3, 4), "step", -3), ((), "contig", 0), ((), "contig", -1), ((3, 4), "offset", 1),
    ((0, 3), "contig", 1)]))
def test_unsqueeze(shape, kind, dim):
    check_view("unsqueeze", TORCH_VIEWS["unsqueeze"], layout(shape, kind), dim=dim)


def test_squeeze_unsqueeze_bad_arguments():
    raises("unsqueeze: argument 'dim'.*out of range", "unsqueeze", rand((2, 3)), dim=3)
    raises("squeeze: argument 'dim'.*out of range", "squeeze", rand((2, 3)), dim=2)
    with pytest.raises(IndexError):
        torch.tensor(1.0).squeeze(1)
    raises("squeeze: argument 'dim'.*out of range", "squeeze", rand(()), dim=1)


@pytest.mark.parametrize("shape,kind,args", multi("slice", [
    ((5, 4), "contig", dict(dim=0, start=1, end=4)), ((5, 4), "contig", dict(dim=1, step=2)),
    ((5, 4), "t", dict(dim=0, start=-3)), ((5, 4), "t", dict(dim=-1, start=1, end=-1, step=2)),
    ((5, 4), "step", dict(dim=1, start=-10, end=10)), ((5, 4), "offset", dict(start=2, end=100)),
    ((5, 4), "contig", dict(dim=0, start=4, end=2)), ((5, 4), "contig", dict(dim=0, start=7)),
    ((5, 4), "contig", dict(dim=0, end=-7)), ((2, 3, 4), "t", dict(dim=1, start=1, step=3)),
    ((0, 3), "contig", dict(dim=0, start=1)), ((5,), "contig", dict(start=0, end=5, step=5))]))
def test_slice(shape, kind, args):
    check_view("slice", aten_slice, layout(shape, kind), **args)


@pytest.mark.parametrize("dtype", cases("slice", ALL, ids=ids(ALL)))
def test_slice_dtypes(dtype):
    check_view("slice", aten_slice, layout((4, 3), "t", dtype), dim=1, start=1, step=2)


@pytest.mark.parametrize("op,kwargs", [
    pytest.param(op, kw, marks=pytest.mark.op(op), id=op) for op, kw in (
        ("view", dict(size=[3, 2, 2])), ("reshape", dict(size=[-1])),
        ("permute", dict(dims=[1, 0])),
        ("transpose", dict(dim0=0, dim1=1)), ("expand", dict(size=[2, 3, 4])),
        ("squeeze", dict(dim=0)), ("unsqueeze", dict(dim=1)), ("select", dict(dim=1, index=-1)),
        ("narrow", dict(dim=0, start=1, length=2)), ("flatten", {}),
        ("unflatten", dict(dim=1, sizes=[2, 2])),
        ("as_strided", dict(size=[2, 2], stride=[1, 3])))])
@pytest.mark.parametrize("dtype", ALL, ids=ids(ALL))
def test_view_dtypes(op, kwargs, dtype):
    check_view(op, TORCH_VIEWS[op], rand((3, 4), dtype), **kwargs)


@pytest.mark.parametrize("op,dtype", [
    pytest.param(op, d, marks=pytest.mark.op(op), id=f"{op}-{d}")
    for op in ("contiguous", "clone") for d in ALL])
def test_copy_dtypes(op, dtype):
    fn = torch.clone if op == "clone" else torch.Tensor.contiguous
    check_exact(op, fn, layout((3, 4), "t", dtype))


@pytest.mark.parametrize("op,kwargs", [
    pytest.param(op, kw, marks=pytest.mark.op(op), id=op) for op, kw in (
        ("sum", dict(dim=[1])), ("mean", {}), ("var", dict(dim=[0])),
        ("transpose", dict(dim0=0, dim1=1)),
        ("clone", {}), ("zeros_like", {}), ("slice", dict(dim=1, start=1)))])
def test_complex_infers_but_does_not_run(op, kwargs):
    x = torch.randn(2, 3, dtype=torch.complex64)
    graph = ir.Graph()
    value = graph.call(op, ir.placeholder_like(graph, "x", x), **kwargs)
    expected = {"sum": lambda: x.sum(**kwargs), "mean": lambda: x.mean(),
                "var": lambda: x.var(**kwargs), "transpose": lambda: x.transpose(0, 1),
                "clone": x.clone, "zeros_like": lambda: torch.zeros_like(x),
                "slice": lambda: x[:, 1:]}[op]()
    assert_meta_matches(value.meta, expected)
    graph.set_outputs([value])
    with pytest.raises(KilnError, match="complex") as info:
        ir.run(graph, x)
    assert info.value.code == "unsupported"


def test_slice_bad_arguments():
    raises("slice: argument 'step'", "slice", rand((3, 4)), dim=0, step=0)
    raises("slice: argument 'step'", "slice", rand((3, 4)), dim=0, step=-1)
    raises("slice: argument 'dim'", "slice", rand((3, 4)), dim=2)
    raises("slice: argument 'self'", "slice", rand(()), dim=0)


@pytest.mark.parametrize("shape,kind,dim,index", multi("select", [
    ((3, 4), "contig", 0, 1), ((3, 4), "t", 1, -1), ((2, 3, 4), "step", 2, 3),
    ((3, 4), "offset", 0, -3), ((1,), "contig", 0, 0), ((2, 0), "contig", 0, 1)]))
def test_select(shape, kind, dim, index):
    check_view("select", TORCH_VIEWS["select"], layout(shape, kind), dim=dim,
               index=index)


def test_select_bad_arguments():
    raises("select: argument 'index'.*out of range", "select", rand((3, 4)), dim=0, index=3)
    raises("select: argument 'index'", "select", rand((3, 4)), dim=1, index=-5)
    raises("select: argument 'self'", "select", rand(()), dim=0, index=0)


@pytest.mark.parametrize("shape,kind,dim,start,length", multi("narrow", [
    ((5, 4), "contig", 0, 1, 3), ((5, 4), "t", 1, -3, 2), ((5, 4), "step", -1, 0, 4),
    ((5, 4), "offset", 0, 2, 0), ((2, 3, 4), "t", 1, 1, 2), ((3, 0), "contig", 1, 0, 0),
    ((3, 4), "contig", 1, 4, 0), ((3, 4), "contig", 1, -4, 1)]))
def test_narrow(shape, kind, dim, start, length):
    check_view("narrow", TORCH_VIEWS["narrow"], layout(shape, kind), dim=dim, start=start,
               length=length)


def test_narrow_bad_arguments():
    raises("narrow: argument 'length'", "narrow", rand((5, 4)), dim=0, start=3, length=3)
    raises("narrow: argument 'length'", "narrow", rand((5, 4)), dim=0, start=0, length=-1)
    for shape, start in (((3, 0), -1), ((3, 4), -5), ((3, 4), 5)):  # start in [-size, size]
        with pytest.raises(IndexError, match="start out of range"):
            torch.narrow(rand(shape), 1, start, 0)
        raises("narrow: argument 'start'.*out of range", "narrow", rand(shape), dim=1, start=start, length=0)


@pytest.mark.parametrize("shape,kind,start,end", multi("flatten", [
    ((2, 3, 4), "contig", 0, -1), ((2, 3, 4), "contig", 1, 2), ((2, 3, 4), "step", 0, 1),
    ((3, 4), "offset", 0, 1), ((), "contig", 0, -1), ((2, 3, 4), "t", 1, 1),
    ((2, 1, 4), "t", 0, 1), ((0, 3), "contig", 0, 1)]))
def test_flatten_that_views(shape, kind, start, end):
    check_view("flatten", TORCH_VIEWS["flatten"], layout(shape, kind), start_dim=start,
               end_dim=end)


@pytest.mark.parametrize("shape,kind,start,end", multi("flatten", [
    ((2, 3, 4), "t", 0, -1), ((2, 3, 4), "step", 1, 2), ((3, 4), "t", 0, 1)]))
def test_flatten_that_copies(shape, kind, start, end):
    x = layout(shape, kind)
    out = check("flatten", torch.flatten, x, start_dim=start, end_dim=end)
    assert list(out.stride()) == list(torch.flatten(x, start, end).stride())


def test_flatten_bad_arguments():
    raises("flatten: argument 'start_dim'.*after", "flatten", rand((2, 3, 4)), start_dim=2,
           end_dim=1)
    raises("flatten: argument 'end_dim'.*out of range", "flatten", rand((2, 3)), end_dim=2)
    with pytest.raises(IndexError):
        torch.tensor(1.0).flatten(0, 1)
    raises("flatten: argument 'end_dim'.*out of range", "flatten", rand(()), end_dim=1)


@pytest.mark.parametrize("shape,kind,dim,sizes", multi("unflatten", [
    ((6, 4), "contig", 0, [2, 3]), ((4, 6), "t", 1, [3, -1]), ((4, 6), "step", -1, [2, 1, 3]),
    ((6, 4), "offset", 0, [6]), ((0, 4), "contig", 0, [0, 5]), ((2, 6), "t", 0, [1, 2])]))
def test_unflatten(shape, kind, dim, sizes):
    check_view("unflatten", TORCH_VIEWS["unflatten"], layout(shape, kind),
               dim=dim, sizes=sizes)


def test_unflatten_bad_arguments():
    raises("unflatten: argument 'sizes'", "unflatten", rand((6, 4)), dim=0, sizes=[4, 2])
    raises("unflatten: argument 'sizes'", "unflatten", rand((6, 4)), dim=0, sizes=[-1, -1])
    raises("unflatten: argument 'self'", "unflatten", rand(()), dim=0, sizes=[1])


@pytest.mark.parametrize("shape,kind,size,stride,offset", multi("as_strided", [
    ((3, 4), "contig", [2, 2], [1, 2], None), ((3, 4), "contig", [2, 3], [4, 1], 5),
    ((3, 4), "t", [3, 4], [1, 3], None), ((3, 4), "offset", [2, 2], [4, 1], None),
    ((3, 4), "offset", [2, 2], [4, 1], 1), ((3, 4), "step", [3], [8], 1),
    ((3, 4), "contig", [], [], 11), ((3, 4), "contig", [0, 2], [1, 1], None),
    ((3, 4), "contig", [2, 2], [0, 1], None)]))
def test_as_strided(shape, kind, size, stride, offset):
    kwargs = {"size": size, "stride": stride}
    if offset is not None:
        kwargs["storage_offset"] = offset
    x = layout(shape, kind)
    check_view("as_strided", TORCH_VIEWS["as_strided"], x, **kwargs)


def test_as_strided_past_the_storage_is_an_error():
    x = rand((2, 3))
    with pytest.raises(RuntimeError, match="out of bounds"):
        torch.as_strided(x, (4, 2), (2, 1))
    with pytest.raises(KilnError, match="as_strided: the view reaches element 7") as info:
        ir.eval_op("as_strided", x, size=[4, 2], stride=[2, 1])
    assert info.value.code == "invalid_argument"


def test_as_strided_bad_arguments():
    raises("as_strided: argument 'stride'", "as_strided", rand((3, 4)), size=[2, 2], stride=[1])
    raises("as_strided: argument 'stride'.*negative", "as_strided", rand((3, 4)), size=[2],
           stride=[-1])
    raises("as_strided: argument 'size'.*negative", "as_strided", rand((3, 4)), size=[-2],
           stride=[1])


def sym_graph():
    graph = ir.Graph()
    s0 = graph.symbol("s0", hint=5, min=2)
    return graph, s0, graph.placeholder("x", "float32", [s0, 3])


@pytest.mark.parametrize("dim,expected", multi("sym_size", [(0, 5), (-2, 5), (1, 3), (-1, 3)]))
def test_sym_size(dim, expected):
    graph, s0, x = sym_graph()
    n = graph.call("sym_size", x, dim=dim)
    assert n.meta["sym"] == (s0 if expected == 5 else 3)
    graph.set_outputs([n])
    (out,) = ir.run(graph, rand((5, 3)))
    assert out.dtype == torch.int64 and out.shape == () and out.item() == rand((5, 3)).size(dim)
    maybe_check_compiled("sym_size", out, rand((5, 3)), dim=dim)


@pytest.mark.parametrize("op", cases("sym_size", ["sym_size"]))
def test_sym_size_feeds_narrow_and_bad_dims(op):
    graph, s0, x = sym_graph()
    n = graph.call("sym_size", x, dim=0)
    y = graph.call("narrow", x, dim=0, start=0, length=n)
    assert y.meta["sizes"] == [s0, 3]
    with pytest.raises(KilnError, match="sym_size: argument 'dim'.*out of range") as info:
        graph.call("sym_size", x, dim=2)
    assert info.value.code == "invalid_argument"
    scalar = graph.placeholder("y", "float32", [])
    with pytest.raises(KilnError, match="sym_size: argument 'self'"):
        graph.call("sym_size", scalar, dim=0)


SYMBOLIC = [
    ("transpose", dict(dim0=0, dim1=1), lambda x: x.transpose(0, 1)),
    ("slice", dict(dim=0, start=1, end=-1), lambda x: x[1:-1]),
    ("slice", dict(dim=0, start=-3, step=2), lambda x: x[-3::2]),
    ("select", dict(dim=0, index=-1), lambda x: x[-1]),
    ("narrow", dict(dim=0, start=1, length=2), lambda x: x.narrow(0, 1, 2)),
    ("unsqueeze", dict(dim=1), lambda x: x.unsqueeze(1)),
    ("flatten", {}, torch.flatten),
    ("reshape", dict(size=[-1]), lambda x: x.reshape(-1)),
    ("view", dict(size=[-1, 2, 2]), lambda x: x.view(-1, 2, 2)),
    ("permute", dict(dims=[1, 0]), lambda x: x.permute(1, 0)),
    ("expand", dict(size=[2, -1, -1]), lambda x: x.expand(2, -1, -1)),
    ("sum", dict(dim=[0], keepdim=True), lambda x: x.sum(0, keepdim=True)),
    ("amax", dict(dim=[1]), lambda x: x.amax(1)),
    ("var", dict(dim=[0]), lambda x: x.var(0)),
    ("argmin", dict(dim=0, keepdim=True), lambda x: x.argmin(0, keepdim=True)),
    ("clone", {}, torch.clone), ("contiguous", {}, torch.Tensor.contiguous),
    ("zeros_like", {}, torch.zeros_like), ("full_like", dict(fill_value=2.0),
                                           lambda x: torch.full_like(x, 2.0)),
]


@pytest.mark.parametrize("op,kwargs,fn", [
    pytest.param(op, kw, fn, marks=pytest.mark.op(op), id=f"{op}-{i}")
    for i, (op, kw, fn) in enumerate(SYMBOLIC)])
@pytest.mark.parametrize("transposed", [False, True], ids=["contig", "t"])
def test_symbolic_sizes_evaluate_to_torchs_layout(op, kwargs, fn, transposed):
    # x: [s0, 4] with s0 in [3, inf], contiguous or the transpose of a [4, s0] tensor.
    graph = ir.Graph()
    s0 = graph.symbol("s0", hint=6, min=3)
    strides = [1, s0] if transposed else [4, 1]
    p = graph.placeholder("x", "float32", [s0, 4], strides)
    if op == "view" and transposed:
        kwargs, fn = dict(size=[4, -1]), lambda x: x.t().reshape(4, -1)  # a view of x.t()
        p = graph.call("transpose", p, dim0=0, dim1=1)
    value = graph.call(op, p, **kwargs)
    graph.set_outputs([value])
    for n in (3, 6):
        x = rand((4, n)).t() if transposed else rand((n, 4))
        expected = fn(x)
        (actual,) = ir.run(graph, x)
        assert list(actual.shape) == list(expected.shape)
        assert list(actual.stride()) == list(expected.stride())
        if op not in ("clone", "contiguous", "zeros_like", "full_like", "sum", "amax", "var",
                      "argmin"):
            assert actual.storage_offset() == expected.storage_offset()
        assert_values_match(actual, expected, **tol(torch.float32))


# --- copies -------------------------------------------------------------------------------


@pytest.mark.parametrize("shape,kind,dtype", multi("clone", [
    ((2, 3, 4), "contig", torch.float32), ((2, 3, 4), "t", torch.float64),
    ((3, 4), "step", torch.int32),
    ((3, 4), "offset", torch.bool), ((), "contig", torch.float16), ((0, 3), "t", torch.bfloat16),
    ((2, 1, 3), "t", torch.int8), ((3, 4), "t", torch.uint8), ((2, 3, 4), "step", torch.int64),
    ((3, 4), "expand", torch.float32), ((2, 3, 4), "expand", torch.int32)]))
def test_clone_preserves_layout(shape, kind, dtype):
    x = layout(shape, kind, dtype)
    out = check_exact("clone", torch.clone, x)
    assert out.storage_offset() == 0
    assert_copies("clone", x)


@pytest.mark.parametrize("op", cases("clone", ["clone"]) + cases("contiguous", ["contiguous"]))
def test_copies_of_channels_last_and_permuted_inputs(op):
    x = rand((2, 3, 4, 5)).to(memory_format=torch.channels_last)
    fn = torch.clone if op == "clone" else torch.Tensor.contiguous
    check_exact(op, fn, x)
    y = rand((2, 3, 4, 6))[..., ::2].permute(0, 2, 3, 1)
    out = check_exact(op, fn, y)
    assert list(out.stride()) == list(fn(y).stride())


@pytest.mark.parametrize("shape,kind,dtype", multi("contiguous", [
    ((2, 3, 4), "contig", torch.float32), ((2, 3, 4), "t", torch.float64),
    ((3, 4), "step", torch.int32),
    ((3, 4), "offset", torch.bool), ((), "contig", torch.float16), ((0, 3), "t", torch.bfloat16),
    ((2, 1, 3), "t", torch.int8), ((3, 4), "t", torch.uint8), ((3, 4), "expand", torch.float32)]))
def test_contiguous(shape, kind, dtype):
    x = layout(shape, kind, dtype)
    out = check_exact("contiguous", torch.Tensor.contiguous, x)
    assert list(out.stride()) == list(x.contiguous().stride())
    if x.is_contiguous():  # the input itself
        check_view("contiguous", torch.Tensor.contiguous, x)


def test_contiguous_of_non_contiguous_input_copies():
    assert_copies("contiguous", layout((3, 4), "t"))


CAT_CASES = [
    ([((2, 3), "contig"), ((4, 3), "contig")], 0), ([((2, 3), "t"), ((2, 5), "step")], 1),
    ([((3, 2), "offset"), ((3, 2), "t")], -1), ([((2, 3), "contig"), ((0, 3), "contig")], 0),
    ([((2, 3, 4), "t"), ((2, 1, 4), "contig"), ((2, 2, 4), "step")], 1),
    ([((0, 3), "contig"), ((0, 3), "contig")], 0), ([((4,), "contig")], 0),
]


@pytest.mark.parametrize("inputs,dim", multi("cat", CAT_CASES))
def test_cat(inputs, dim):
    tensors = [layout(s, k) for s, k in inputs]
    check_exact("cat", torch.cat, tensors, dim=dim)


@pytest.mark.parametrize("dtypes", cases("cat", [
    (torch.float32, torch.float64), (torch.int32, torch.float16), (torch.bool, torch.int8),
    (torch.uint8, torch.int8), (torch.float16, torch.bfloat16), (torch.bool, torch.bool),
    (torch.int64, torch.int32, torch.uint8)], ids=ids([1, 2, 3, 4, 5, 6, 7])))
def test_cat_promotes_dtypes(dtypes):
    check_exact("cat", torch.cat, [rand((2, 3), d) for d in dtypes], dim=1)


@pytest.mark.parametrize("dtype", cases("cat", [torch.float32, torch.float64], ids=["f32", "f64"]))
def test_cat_skips_legacy_empty_1d_inputs(dtype):
    check("cat", torch.cat, [rand((2, 3)), torch.empty(0, dtype=dtype)], dim=1)
    check("cat", torch.cat, [torch.empty(0, dtype=dtype), rand((2, 3)), torch.empty(0)], dim=0)
    check("cat", torch.cat, [torch.empty(0, dtype=dtype), torch.empty(0)])


@pytest.mark.parametrize("op", cases("cat", ["cat"]))
def test_cat_of_channels_last_inputs_is_channels_last(op):
    a = rand((2, 3, 4, 5)).to(memory_format=torch.channels_last)
    check_exact("cat", torch.cat, [a, a], dim=1)
    check_exact("cat", torch.cat, [a, a.contiguous()], dim=1)


@pytest.mark.parametrize("inputs,dim", multi("stack", [
    ([((2, 3), "contig"), ((2, 3), "t")], 0), ([((2, 3), "step"), ((2, 3), "offset")], 1),
    ([((2, 3), "t"), ((2, 3), "t")], -1), ([((), "contig"), ((), "contig")], 0),
    ([((0, 3), "contig")], 1), ([((3,), "contig")] * 3, -2)]))
def test_stack(inputs, dim):
    check_exact("stack", torch.stack, [layout(s, k) for s, k in inputs], dim=dim)


@pytest.mark.parametrize("dim", cases("stack", [0, 1, 2, 3, 4, -1]))
def test_stack_of_channels_last_inputs(dim):
    # torch's stack is cat along dim viewed split (at the last dim: cat of unsqueezed inputs)
    a = rand((2, 3, 4, 5)).to(memory_format=torch.channels_last)
    check_exact("stack", torch.stack, [a, a], dim=dim)
    check_exact("stack", torch.stack, [a, a.contiguous()], dim=dim)
    b = rand((3, 1, 2)).permute(1, 2, 0)  # 3-d, channels-last once unsqueezed at the end
    if dim < 4:
        check_exact("stack", torch.stack, [b, b], dim=min(dim, 3))


@pytest.mark.parametrize("dtypes", cases("stack", [
    (torch.float32, torch.float64), (torch.int32, torch.bool), (torch.bfloat16, torch.bfloat16)],
    ids=["f", "i", "bf"]))
def test_stack_promotes_dtypes(dtypes):
    check("stack", torch.stack, [rand((2, 3), d) for d in dtypes], dim=1)


@pytest.mark.parametrize("op", cases("cat", ["cat"]) + cases("stack", ["stack"]))
def test_cat_stack_of_tensors_on_two_devices_is_an_error(op):
    graph = ir.Graph()
    a = graph.placeholder("a", "float32", [2, 3])
    b = graph.placeholder("b", "float32", [2, 3], device="cuda:0")
    with pytest.raises(KilnError, match=f"{op}: argument 'tensors'.*device") as info:
        graph.call(op, [a, b])
    assert info.value.code == "invalid_argument"
    assert graph.call(op, [b, b]).meta["device"] == "cuda:0"


def test_cat_stack_bad_arguments():
    raises("cat: argument 'tensors'.*differs at dim 1", "cat", [rand((2, 3)), rand((2, 4))], dim=0)
    raises("cat: argument 'tensors'.*dims", "cat", [rand((2, 3)), rand((2, 3, 1))])
    raises("cat: argument 'tensors'.*zero-dim", "cat", [rand(()), rand(())])
    raises("cat: argument 'dim'.*out of range", "cat", [rand((2, 3))], dim=2)
    raises("stack: argument 'tensors'", "stack", [rand((2, 3)), rand((3, 2))])
    raises("stack: argument 'dim'.*out of range", "stack", [rand((2, 3))], dim=3)


# --- creation -----------------------------------------------------------------------------


@pytest.mark.parametrize("size,fill,dtype", multi("full", [
    ([2, 3], 1.5, None), ([2, 3], 7, None), ([2], True, None), ([], -2.25, None), ([0, 3], 1, None),
    ([2, 3], 3, torch.float16), ([2, 3], 2.5, torch.int32), ([3], 1, torch.bool),
    ([2, 2], -1, torch.int8), ([4], 200, torch.uint8), ([1, 2], 0.1, torch.float64),
    ([2], 1.1, torch.bfloat16)]))
def test_full(size, fill, dtype):
    kwargs = {} if dtype is None else {"dtype": dtype}
    check_exact("full", lambda size, fill_value, **kw: torch.full(size, fill_value, **kw), size,
                fill,
          **kwargs)


@pytest.mark.parametrize("op,size,dtype", [
    pytest.param(op, s, d, marks=pytest.mark.op(op), id=f"{op}-{s}-{d}")
    for op in ("zeros", "ones") for s, d in (([2, 3], None), ([], None), ([0, 2], None))]
    + [pytest.param(op, [2, 1], d, marks=pytest.mark.op(op), id=f"{op}-{d}")
       for op in ("zeros", "ones") for d in ALL])
def test_zeros_ones(op, size, dtype):
    kwargs = {} if dtype is None else {"dtype": dtype}
    check_exact(op, lambda size, **kw: getattr(torch, op)(size, **kw), size, **kwargs)


@pytest.mark.parametrize("size,dtype", multi("empty", [
    ([2, 3], None), ([], None), ([0, 4], torch.int32), ([3, 1, 2], torch.bfloat16),
    ([2], torch.bool)]))
def test_empty_meta(size, dtype):  # values are undefined: meta only
    kwargs = {} if dtype is None else {"dtype": dtype}
    actual, meta = ir.eval_op("empty", size, **kwargs)
    maybe_check_compiled("empty", actual, size, **kwargs)  # both give zeros
    expected = torch.empty(size, **kwargs)
    assert_meta_matches(meta, expected)
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    assert list(actual.stride()) == list(expected.stride())


LIKE_INPUTS = [((2, 3), "contig", torch.float32), ((2, 3, 4), "t", torch.int32),
               ((3, 4), "step", torch.float16), ((3, 4), "offset", torch.bool),
               ((), "contig", torch.float64), ((0, 3), "t", torch.int8),
               ((2, 1, 3), "t", torch.bfloat16), ((2, 3, 4), "step", torch.uint8),
               ((3, 4), "expand", torch.float32)]


@pytest.mark.parametrize("op,shape,kind,dtype,to", [
    pytest.param(op, *c, to, marks=pytest.mark.op(op), id=f"{op}-{c}-{to}".replace(" ", ""))
    for op in ("zeros_like", "ones_like", "empty_like", "full_like") for c in LIKE_INPUTS
    for to in (None, torch.float64 if c[2] != torch.float64 else torch.int64)])
def test_like(op, shape, kind, dtype, to):
    x = layout(shape, kind, dtype)
    kwargs = {} if to is None else {"dtype": to}
    args = (3,) if op == "full_like" else ()
    expected = getattr(torch, op)(x, *args, **kwargs)
    actual, meta = ir.eval_op(op, x, *args, **kwargs)
    maybe_check_compiled(op, actual, x, *args, **kwargs)
    assert_meta_matches(meta, expected)
    assert list(actual.stride()) == list(expected.stride())
    if op != "empty_like":
        assert_values_match(actual, expected)


@pytest.mark.parametrize("fill", cases("full_like", [torch.tensor(2.5), torch.tensor(-3)],
                                       ids=["f32", "i64"]))
def test_full_like_takes_a_0d_tensor_fill(fill):
    check("full_like", torch.full_like, layout((2, 3), "t"), fill)
    check("full_like", torch.full_like, rand((2, 3), torch.int32), fill)


@pytest.mark.parametrize("fill", cases("full_like", [2.5, True, -3]))
def test_full_like_keeps_self_dtype(fill):
    for dtype in (torch.int32, torch.float16, torch.bool):
        check("full_like", torch.full_like, rand((2, 3), dtype), fill)


@pytest.mark.parametrize("args,kwargs", multi("arange", [
    ((5,), {}), ((3, 0), {}), ((3, 0.5), {}), ((10, 1, 3), {}), ((0, 10, -3), {}),
    ((3.0,), {}), ((2.5, 0, 0.5), {}), ((1, 1), {}), ((-1, 2, -1), {}),
    ((7,), {"dtype": torch.float64}),
    ((5, 1), {"dtype": torch.int32}), ((2.5, -1, 0.25), {"dtype": torch.float16}),
    ((4,), {"dtype": torch.bfloat16}), ((6, 0, 2), {"dtype": torch.uint8}),
    ((3,), {"dtype": torch.int8}), ((1, 0, 0.1), {}), ((True,), {}),
    ((2.25,), {"dtype": torch.int64}), ((2.25,), {"dtype": torch.int32}),
    ((0.5, -1.5), {"dtype": torch.int64}), ((0.5, -1.5), {"dtype": torch.int8}),
    ((5.5, 0.5, 2), {"dtype": torch.int64}), ((0.5, 0.2), {"dtype": torch.int64})],
    ids=[str(i) for i in range(23)]))
def test_arange(args, kwargs):
    # kiln's arange(end, start, step) against torch.arange(start, end, step)
    names = ["end", "start", "step"]
    kiln_kwargs = dict(zip(names, args), **kwargs)
    torch_args = (args[0],) if len(args) == 1 else (args[1], args[0]) + args[2:]
    if args == (True,):  # a bool end is an integer in torch
        torch_args = (1,)
    expected = torch.arange(*torch_args, **kwargs)
    actual, meta = ir.eval_op("arange", **kiln_kwargs)
    maybe_check_compiled("arange", actual, **kiln_kwargs)
    assert_meta_matches(meta, expected)
    assert_values_match(actual, expected)


@pytest.mark.parametrize("op", [pytest.param(op, marks=pytest.mark.op(op)) for op in
                                ("full", "zeros", "ones", "empty", "arange")])
def test_creation_with_symbolic_sizes(op):
    graph, s0, x = sym_graph()
    n = graph.call("sym_size", x, dim=0)
    if op == "arange":
        value = graph.call("arange", n, start=1)
        expected = torch.arange(1, 5)
    else:
        args = [[s0, 2]] + ([2.5] if op == "full" else [])
        value = graph.call(op, *args)
        expected = getattr(torch, op)((5, 2), *args[1:])
    assert value.meta["sizes"][0] == (s0 - 1 if op == "arange" else s0)
    graph.set_outputs([value])
    (out,) = ir.run(graph, rand((5, 3)))
    assert out.shape == expected.shape and out.dtype == expected.dtype
    if op != "empty":
        assert_values_match(out, expected)


def test_arange_bad_arguments():
    with pytest.raises(RuntimeError, match="not implemented for 'Bool'"):
        torch.arange(3, dtype=torch.bool)
    raises("arange: argument 'dtype'.*bool", "arange", end=3, dtype=torch.bool)
    for kwargs, torch_args in ((dict(end=-1.5), (-1.5,)),
                               (dict(end=0, start=5, step=2.25), (5, 0, 2.25)),
                               (dict(end=0.5, start=5), (5, 0.5))):
        with pytest.raises(RuntimeError, match="inconsistent with step sign"):
            torch.arange(*torch_args)
        raises("arange: argument 'end'.*sign", "arange", **kwargs)
    with pytest.raises(RuntimeError, match="inconsistent with step sign"):
        torch.arange(0.9, -0.9, dtype=torch.int32)  # the bounds' signs as given, not as truncated
    raises("arange: argument 'end'.*sign", "arange", end=-0.9, start=0.9, dtype=torch.int32)
    # A step that an integral dtype truncates to 0: torch 2.11 gives int32 a run of one value
    # (and dies of SIGFPE for int64: never called here); kiln refuses it.
    assert torch.arange(0, 3, 0.5, dtype=torch.int32).tolist() == [0] * 6
    for dtype in (torch.int32, torch.int64):
        raises("arange: argument 'step'.*non-zero", "arange", end=3, step=0.5, dtype=dtype)
    raises("arange: argument 'step'", "arange", end=5, step=0)
    raises("arange: argument 'end'.*sign", "arange", end=0, start=5)
    raises("arange: argument 'step'", "arange", end=float("inf"))


@pytest.mark.parametrize("op,fill,dtype", [
    pytest.param(op, f, d, marks=pytest.mark.op(op), id=f"{op}-{f}-{d}")
    for op in ("full", "full_like") for f, d in (
        (1e10, torch.float16), (70000.0, torch.float16), (3.5e38, torch.bfloat16),
        (1e39, torch.float32), (300, torch.int8), (-128.7, torch.int8), (-256, torch.uint8),
        (256, torch.uint8), (2**31, torch.int32), (float("nan"), torch.int32))])
def test_fill_values_that_overflow_are_errors(op, fill, dtype):
    args = ([2],) if op == "full" else (rand((2,)),)
    with pytest.raises(RuntimeError, match="without overflow"):
        getattr(torch, op)(*args, fill, dtype=dtype)
    raises(f"{op}: argument 'fill_value'.*overflow", op, *args, fill, dtype=dtype)


@pytest.mark.parametrize("fill,dtype", multi("full", [
    (65504.0, torch.float16), (float("inf"), torch.float16), (-1, torch.uint8), (-255, torch.uint8),
    (5, torch.bool), (1e10, torch.bool), (float("nan"), torch.float32)],
    ids=[str(i) for i in range(7)]))
def test_fill_values_that_fit(fill, dtype):
    check("full", lambda size, fill_value, **kw: torch.full(size, fill_value, **kw), [2], fill,
          dtype=dtype)


@pytest.mark.parametrize("op", cases("sum", ["sum"]) + cases("prod", ["prod"]))
def test_reduction_to_bool_of_floats(op):
    x = torch.tensor([[-0.5, 0.25, 2.0], [0.0, 1.5, -0.1]])
    check(op, torch_reduce(op), x, dtype=torch.bool)
    check(op, torch_reduce(op), x, dim=[1] if op == "sum" else 1, dtype=torch.bool)


def test_creation_bad_arguments():
    raises("zeros: argument 'size'.*negative", "zeros", [2, -1])
    raises("full: argument 'size'.*negative", "full", [-3], 1.0)


@pytest.mark.parametrize("op,args", [
    pytest.param(op, a, marks=pytest.mark.op(op), id=op) for op, a in (
        ("full", ([2], 1.0)), ("zeros", ([2],)), ("ones", ([2],)), ("empty", ([2],)),
        ("arange", (4,)))])
def test_creation_device(op, args):
    for device in ("cuda", "cuda:1"):
        graph = ir.Graph()
        value = graph.call(op, *args, device=device)
        assert value.meta["device"] == device
    graph = ir.Graph()
    assert graph.call(op, *args, device="cpu").meta["device"] == "cpu"
    with pytest.raises(KilnError, match=f"{op}: argument 'device'"):
        graph.call(op, *args, device="tpu")


@pytest.mark.parametrize("op,args", [
    pytest.param(op, a, marks=pytest.mark.op(op), id=op) for op, a in (
        ("full", ([2], 1.0)), ("zeros", ([2],)), ("ones", ([2],)), ("empty", ([2],)),
        ("arange", (4.0,)), ("zeros_like", (rand((2, 3)),)), ("ones_like", (rand((2, 3)),)),
        ("empty_like", (rand((2, 3)),)), ("full_like", (rand((2, 3)), 1.0)))])
def test_creation_requires_grad(op, args):
    torch_args = (args[0] if len(args) == 1 else args[1],) if op == "arange" else args
    expected = getattr(torch, op)(*torch_args, requires_grad=True)
    _, meta = ir.eval_op(op, *args, requires_grad=True)
    assert meta["requires_grad"] and expected.requires_grad
    assert not ir.eval_op(op, *args)[1]["requires_grad"]
    with pytest.raises(RuntimeError, match="floating point and complex"):
        getattr(torch, op)(*torch_args, dtype=torch.int64, requires_grad=True)
    raises(f"{op}: argument 'requires_grad'.*floating", op, *args, dtype=torch.int64,
           requires_grad=True)


@pytest.mark.parametrize("op", [pytest.param(op, marks=pytest.mark.op(op)) for op in
                                ("zeros_like", "ones_like", "empty_like", "full_like")])
def test_like_device(op):
    graph = ir.Graph()
    x = graph.placeholder("x", "float32", [2, 3], device="cuda:0")
    args = (x, 1.0) if op == "full_like" else (x,)
    assert graph.call(op, *args).meta["device"] == "cuda:0"
    assert graph.call(op, *args, device="cpu").meta["device"] == "cpu"


# --- canonical dims -----------------------------------------------------------------------


@pytest.mark.parametrize("op,a,b", [
    ("sum", dict(dim=[-1]), dict(dim=[1])), ("sum", dict(dim=[1, 0]), dict(dim=[0, -1])),
    ("amax", dict(dim=-1, keepdim=True), dict(dim=[1], keepdim=True)),
    ("argmax", dict(dim=-1), dict(dim=1)), ("var", dict(dim=[-2]), dict(dim=[0])),
    ("transpose", dict(dim0=-1, dim1=0), dict(dim0=1, dim1=-2)),
    ("unsqueeze", dict(dim=-1), dict(dim=2)),
    ("select", dict(dim=-1, index=0), dict(dim=1, index=0)),
    ("permute", dict(dims=[-1, 0]), dict(dims=[1, 0])), ("squeeze", dict(dim=-2), dict(dim=[0])),
    ("flatten", dict(start_dim=-2), dict(start_dim=0, end_dim=1)),
    ("slice", dict(dim=-1, start=1), dict(dim=1, start=1)),
    ("softmax", dict(dim=-1), dict(dim=1))])
def test_dims_written_two_ways_are_one_call(op, a, b):
    graph = ir.Graph()
    x = graph.placeholder("x", "float32", [1, 3])
    graph.set_outputs([graph.call(op, x, **a), graph.call(op, x, **b)])
    assert len(graph.cse()) == 2, str(graph)  # the placeholder and one call
    one, two = ir.Graph(), ir.Graph()
    for g, kw in ((one, a), (two, b)):
        g.set_outputs([g.call(op, g.placeholder("x", "float32", [1, 3]), **kw)])
    assert one.structural_hash() == two.structural_hash()
    assert str(one) == str(two)
