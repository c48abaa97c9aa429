"""Conformance of the matmul and nn ops: mm bmm addmm matmul linear, softmax log_softmax,
layer_norm rms_norm, embedding index_select gather scatter_add, cross_entropy, dropout and
scaled_dot_product_attention, against torch on CPU (rms_norm and scaled_dot_product_attention
also against their composition in torch ops, computed in float32 for half inputs; dropout by its
properties, as its random stream cannot match torch's)."""
import math

import pytest
import torch
import torch.nn.functional as F

from harness import (assert_meta_matches, assert_values_match, cases, check, check_compiled,
                     maybe_check_compiled, reference)
from kiln import KilnError, ir

FLOATS = [torch.float64, torch.float32, torch.float16, torch.bfloat16]
INTS = [torch.int64, torch.int32, torch.int8, torch.uint8]
ALL = FLOATS + INTS + [torch.bool]
# Tolerances for sums of a few dozen products: kiln accumulates in double and rounds once,
# torch in float32 (half dtypes) or in its own order.
TOL = {
    torch.float64: dict(atol=1e-10, rtol=1e-10),
    torch.float32: dict(atol=1e-5, rtol=1e-5),
    torch.float16: dict(atol=1e-2, rtol=1e-2),
    torch.bfloat16: dict(atol=5e-2, rtol=2e-2),
}


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def tol(dtype):
    return TOL.get(dtype, {})


def make(shape, dtype=torch.float32, layout="contiguous", low=-3, high=4):
    """Random data of `shape` and `dtype`, laid out as asked: "contiguous", "transposed" (the
    dims reversed in memory), "step" (every other element of the last dim) or "offset" (an
    as_strided view at storage offset 3)."""
    shape = tuple(shape)
    if layout == "transposed" and len(shape) > 1:
        return make(shape[::-1], dtype, "contiguous", low, high).permute(
            *reversed(range(len(shape))))
    if layout == "step" and shape:
        wide = shape[:-1] + (2 * shape[-1],)
        return make(wide, dtype, "contiguous", low, high)[..., ::2]
    if layout == "offset":
        n = math.prod(shape)
        flat = make((n + 3,), dtype, "contiguous", low, high)
        strides = [math.prod(shape[i + 1:]) for i in range(len(shape))]
        return flat.as_strided(shape, strides, 3)
    if dtype.is_floating_point:
        return torch.randn(shape, dtype=torch.float64).to(dtype)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape).bool()
    if dtype == torch.uint8:
        low = max(low, 0)
    return torch.randint(low, high, shape, dtype=dtype)


def index(shape, size, layout="contiguous", dtype=torch.int64):
    """Indices in [0, size) of `shape`."""
    return make(shape, dtype, layout, 0, max(size, 1))


def raises(match, op, *args, code="invalid_argument", **kwargs):
    """kiln's op rejects the arguments with KilnError(code), naming `match`."""
    with pytest.raises(KilnError) as info:
        ir.eval_op(op, *args, **kwargs)
    assert info.value.code == code, str(info.value)
    assert match in str(info.value)


def tuple_cases(op, params):
    """cases() for a parametrization of several names: each tuple is one case of `op`."""
    return [pytest.param(*p, marks=pytest.mark.op(op)) for p in params]


def dtype_id(d):
    return str(d).replace("torch.", "")


# --- mm, bmm, matmul, addmm, linear -----------------------------------------------------------

MATMUL_DTYPES = FLOATS + INTS


@pytest.mark.parametrize("dtype", cases("mm", MATMUL_DTYPES), ids=dtype_id)
@pytest.mark.parametrize("shapes,layout", [
    (((2, 3), (3, 4)), "contiguous"),
    (((1, 1), (1, 1)), "contiguous"),
    (((0, 3), (3, 4)), "contiguous"),
    (((2, 0), (0, 4)), "contiguous"),  # an empty inner dim: zeros
    (((3, 5), (5, 2)), "transposed"),
    (((3, 5), (5, 2)), "step"),
    (((2, 3), (3, 2)), "offset"),
])
def test_mm(dtype, shapes, layout):
    a, b = (make(s, dtype, layout) for s in shapes)
    check("mm", torch.mm, a, b, **tol(dtype))


@pytest.mark.parametrize("dtype", cases("bmm", MATMUL_DTYPES), ids=dtype_id)
@pytest.mark.parametrize("shapes,layout", [
    (((2, 2, 3), (2, 3, 4)), "contiguous"),
    (((0, 2, 3), (0, 3, 4)), "contiguous"),
    (((3, 1, 0), (3, 0, 2)), "contiguous"),
    (((2, 3, 4), (2, 4, 3)), "transposed"),
    (((2, 3, 4), (2, 4, 3)), "step"),
    (((1, 2, 3), (1, 3, 2)), "offset"),
])
def test_bmm(dtype, shapes, layout):
    a, b = (make(s, dtype, layout) for s in shapes)
    check("bmm", torch.bmm, a, b, **tol(dtype))


MATMUL_SHAPES = [
    ((3,), (3,)),            # dot: 0-d
    ((3,), (3, 4)),          # vector @ matrix
    ((2, 3), (3,)),          # matrix @ vector
    ((2, 3), (3, 4)),
    ((5, 2, 3), (3, 4)),     # batched @ matrix
    ((2, 3), (5, 3, 4)),     # matrix @ batched
    ((3,), (5, 3, 4)),       # vector @ batched
    ((5, 2, 3), (3,)),       # batched @ vector
    ((2, 1, 2, 3), (4, 3, 5)),  # batch dims broadcast
    ((1, 3, 2, 3), (2, 1, 3, 1)),
    ((0, 2, 3), (3, 4)),     # an empty batch
    ((0,), (0,)),            # an empty dot: 0
    ((2, 0), (0, 3)),
]


@pytest.mark.parametrize("shapes", cases("matmul", MATMUL_SHAPES))
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_matmul_shapes(shapes, layout):
    a, b = (make(s, torch.float32, layout) for s in shapes)
    check("matmul", torch.matmul, a, b, **tol(torch.float32))


@pytest.mark.parametrize("dtype", cases("matmul", MATMUL_DTYPES), ids=dtype_id)
@pytest.mark.parametrize("shapes", [((3,), (3,)), ((2, 3), (3,)), ((2, 1, 3), (2, 3, 2))])
def test_matmul_dtypes(dtype, shapes):
    a, b = (make(s, dtype, "step") for s in shapes)
    check("matmul", torch.matmul, a, b, **tol(dtype))


@pytest.mark.op("matmul")
def test_matmul_int8_wraps_as_torch():
    a = torch.full((2, 8), 100, dtype=torch.int8)
    check("matmul", torch.matmul, a, a.t().contiguous())


@pytest.mark.parametrize("op,shapes,match", tuple_cases("matmul", [
    ("matmul", ((2, 3), (2, 3)), "'other': inner sizes differ"),
    ("matmul", ((2, 2, 3), (3, 3, 2)), "'other': batch sizes differ"),
]) + tuple_cases("mm", [
    ("mm", ((2, 3), (4, 2)), "'mat2': inner sizes differ"),
    ("mm", ((3,), (3, 2)), "'self': expected a 2-d tensor"),
    ("mm", ((2, 3, 4), (4, 2)), "'self': expected a 2-d tensor"),
]) + tuple_cases("bmm", [
    ("bmm", ((2, 2, 3), (3, 3, 2)), "'mat2': batch sizes differ"),
    ("bmm", ((2, 3), (3, 2)), "'self': expected a 3-d tensor"),
]))
def test_matmul_errors(op, shapes, match):
    a, b = (make(s) for s in shapes)
    with pytest.raises(RuntimeError):
        getattr(torch, op)(a, b)
    raises(match, op, a, b)


@pytest.mark.parametrize("op", cases("mm", ["mm"]) + cases("bmm", ["bmm"]) +
                         cases("matmul", ["matmul"]))
def test_matmul_dtype_errors(op):
    rank = 3 if op == "bmm" else 2
    a = make((2,) * rank, torch.float32)
    raises("dtype", op, a, a.double())  # torch: expected both to have the same dtype
    b = make((2,) * rank, torch.bool)
    with pytest.raises(RuntimeError, match="not implemented for 'Bool'"):
        getattr(torch, op)(b, b)
    raises("dtype", op, b, b)


@pytest.mark.parametrize("op", cases("mm", ["mm"]) + cases("matmul", ["matmul"]))
def test_matmul_complex_is_unsupported(op):
    # torch multiplies complex matrices; kiln's interpreter has no complex dtypes yet.
    a = torch.randn(2, 2, dtype=torch.complex64)
    with pytest.raises(KilnError) as info:
        ir.eval_op(op, a, a)
    assert info.value.code == "unsupported" and "c64" in str(info.value)


@pytest.mark.op("matmul")
def test_matmul_0d_error():
    with pytest.raises(RuntimeError):
        torch.matmul(torch.tensor(1.0), torch.ones(3))
    raises("0-d", "matmul", torch.tensor(1.0), torch.ones(3))


ADDMM_CASES = [
    # self's shape, beta, alpha, dtype
    ((2, 4), 1, 1, torch.float32),
    ((4,), 0.5, 2.0, torch.float32),
    ((), -1.0, 0.25, torch.float64),
    ((1, 4), 2, 3, torch.int64),
    ((2, 1), 1, -2, torch.int32),
    ((2, 4), 1, 1, torch.int8),
    ((2, 4), 1, 1, torch.uint8),
    ((2, 4), 0.5, 1.5, torch.float16),
    ((4,), 1.0, 0.5, torch.bfloat16),
]


@pytest.mark.parametrize("shape,beta,alpha,dtype", tuple_cases("addmm", ADDMM_CASES))
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_addmm(shape, beta, alpha, dtype, layout):
    self = make(shape, dtype, layout)
    a, b = make((2, 3), dtype, layout), make((3, 4), dtype, layout)
    check("addmm", torch.addmm, self, a, b, beta=beta, alpha=alpha, **tol(dtype))


@pytest.mark.parametrize("k", cases("addmm", [0, 1]))
def test_addmm_empty_and_unit_inner(k):
    self, a, b = make((2, 3)), make((2, k)), make((k, 3))
    check("addmm", torch.addmm, self, a, b, beta=2.0, alpha=3.0)


@pytest.mark.parametrize("which", cases("addmm", ["beta"]))
def test_addmm_zero_factor_ignores_nan(which):
    # torch documents that beta=0 ignores self, NaNs included. (Whether alpha=0
    # ignores a NaN product depends on the BLAS torch runs on: the reference
    # BLAS skips it, OpenBLAS does not; kiln's interpreter skips it.)
    self, a, b = torch.full((2, 3), float("nan")), make((2, 4)), make((4, 3))
    check("addmm", torch.addmm, self, a, b, **{which: 0.0})


@pytest.mark.parametrize("case", cases("addmm", ["self_3d", "self_shape", "mixed_dtype", "bool",
                                                 "float_alpha_for_ints"]))
def test_addmm_errors(case):
    a, b = make((2, 3)), make((3, 4))
    self, kwargs = make((2, 4)), {}
    if case == "self_3d":
        self, match = make((1, 2, 4)), "'self': must have at most 2 dims"
    elif case == "self_shape":
        self, match = make((3, 4)), "'self': does not broadcast"
    elif case == "mixed_dtype":
        self, match = self.double(), "'mat1': expected dtype f64"
    elif case == "bool":
        self, a, b = self.bool(), a.bool(), b.bool()
        match = "'self': dtype bool"
    else:
        # torch documents integer beta and alpha for integral inputs (and truncates a float
        # silently); kiln refuses a float, as for add's alpha.
        raises("'alpha': must not be a floating point number", "addmm", self.long(), a.long(),
               b.long(), alpha=0.5)
        return
    with pytest.raises(RuntimeError):
        torch.addmm(self, a, b, **kwargs)
    raises(match, "addmm", self, a, b, **kwargs)


LINEAR_CASES = [
    # input, weight, bias shapes
    ((3, 4), (2, 4), (2,)),
    ((3, 4), (2, 4), None),
    ((4,), (2, 4), (2,)),
    ((2, 3, 4), (5, 4), (5,)),
    ((2, 3, 4), (5, 4), None),
    ((3, 4), (2, 4), ()),
    ((3, 4), (2, 4), (1,)),
    ((3, 4), (2, 4), (3, 2)),  # bias broadcasts to the result
    ((0, 4), (2, 4), (2,)),
    ((3, 0), (2, 0), (2,)),
    ((3, 4), (0, 4), (0,)),
    ((3, 4), (4,), None),       # a 1-d weight: the out dim drops
]


@pytest.mark.parametrize("shapes", cases("linear", LINEAR_CASES))
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_linear(shapes, layout):
    x, w = make(shapes[0], layout=layout), make(shapes[1], layout=layout)
    args = (x, w) if shapes[2] is None else (x, w, make(shapes[2], layout=layout))
    check("linear", F.linear, *args, **tol(torch.float32))


@pytest.mark.parametrize("dtype", cases("linear", MATMUL_DTYPES), ids=dtype_id)
def test_linear_dtypes(dtype):
    x, w, b = make((2, 3, 4), dtype, "step"), make((5, 4), dtype), make((5,), dtype)
    check("linear", F.linear, x, w, b, **tol(dtype))


@pytest.mark.op("linear")
def test_linear_bool_error():
    x, w = make((3, 4), torch.bool), make((2, 4), torch.bool)
    with pytest.raises(RuntimeError):
        F.linear(x, w)
    raises("dtype bool", "linear", x, w)


@pytest.mark.parametrize("shapes,match", tuple_cases("linear", [
    (((3, 4), (2, 5), (2,)), "'weight': in_features differ"),
    (((3, 4), (2, 4), (3,)), "'bias': does not broadcast"),
    (((3, 4), (2, 4, 1), None), "'weight': must be 1-d or 2-d"),
    (((3, 4), (4,), (1,)), "'bias': needs a 2-d weight"),
]))
def test_linear_errors(shapes, match):
    x, w = make(shapes[0]), make(shapes[1])
    args = (x, w) if shapes[2] is None else (x, w, make(shapes[2]))
    with pytest.raises(RuntimeError):
        F.linear(*args)
    raises(match, "linear", *args)


@pytest.mark.op("linear")
def test_linear_dtype_error():
    with pytest.raises(RuntimeError):
        F.linear(make((3, 4)), make((2, 4)), make((2,), torch.float64))
    raises("bias", "linear", make((3, 4)), make((2, 4)), make((2,), torch.float64))


# --- softmax, log_softmax ---------------------------------------------------------------------

SOFTMAX_OPS = cases("softmax", ["softmax"]) + cases("log_softmax", ["log_softmax"])
SOFTMAX_SHAPES = [
    ((3, 4), 1, "contiguous"),
    ((3, 4), 0, "contiguous"),
    ((3, 4), -1, "transposed"),
    ((2, 3, 4), -2, "transposed"),
    ((2, 3, 4), 2, "step"),
    ((3, 4), 1, "offset"),
    ((), 0, "contiguous"),
    ((), -1, "contiguous"),
    ((1,), 0, "contiguous"),
    ((0, 3), 1, "contiguous"),
    ((3, 0), 1, "contiguous"),
]


@pytest.mark.parametrize("op", SOFTMAX_OPS)
@pytest.mark.parametrize("shape,dim,layout", SOFTMAX_SHAPES)
def test_softmax_shapes(op, shape, dim, layout):
    check(op, getattr(torch, op), make(shape, layout=layout), dim)


@pytest.mark.parametrize("op", SOFTMAX_OPS)
@pytest.mark.parametrize("dtype", FLOATS, ids=dtype_id)
def test_softmax_dtypes(op, dtype):
    check(op, getattr(torch, op), make((3, 5), dtype, "transposed"), 1)


@pytest.mark.parametrize("op", SOFTMAX_OPS)
@pytest.mark.parametrize("dtype,out", [
    (torch.float16, torch.float32), (torch.bfloat16, torch.float32),
    (torch.float32, torch.float64), (torch.int64, torch.float32), (torch.uint8, torch.float64),
], ids=lambda d: dtype_id(d))
def test_softmax_dtype_argument(op, dtype, out):
    check(op, getattr(torch, op), make((3, 4), dtype), -1, dtype=out)


@pytest.mark.parametrize("op", SOFTMAX_OPS)
def test_softmax_large_values_are_stable(op):
    x = torch.tensor([[1000.0, 0.0, -1000.0], [-float("inf"), 1.0, 2.0]])
    check(op, getattr(torch, op), x, 1)


@pytest.mark.parametrize("op", SOFTMAX_OPS)
def test_softmax_errors(op):
    fn = getattr(torch, op)
    with pytest.raises(IndexError):
        fn(make((3,)), 1)
    raises("dim", op, make((3,)), 1)
    raises("dim", op, make((2, 3)), -3)
    with pytest.raises(RuntimeError):
        fn(make((3,), torch.int64), 0)
    raises("self", op, make((3,), torch.int64), 0)
    raises("dtype", op, make((3,)), 0, dtype=torch.int64)


# --- layer_norm, rms_norm ---------------------------------------------------------------------

LAYER_NORM_CASES = [
    # input shape, normalized_shape, weight, bias, eps, layout
    ((3, 4), [4], True, True, 1e-5, "contiguous"),
    ((2, 3, 4), [3, 4], True, False, 1e-5, "transposed"),
    ((2, 3, 4), [4], False, False, 1e-3, "step"),
    ((3, 4), [4], True, True, 0.1, "offset"),
    ((5,), [5], True, True, 1e-5, "contiguous"),
    ((3, 1), [1], True, True, 1e-5, "contiguous"),
    ((0, 4), [4], True, True, 1e-5, "contiguous"),
    ((2, 3), [2, 3], False, False, 1e-5, "contiguous"),
]


@pytest.mark.parametrize("shape,normalized,weight,bias,eps,layout",
                         tuple_cases("layer_norm", LAYER_NORM_CASES))
def test_layer_norm(shape, normalized, weight, bias, eps, layout):
    x = make(shape, layout=layout)
    w = make(normalized, layout=layout) if weight else None
    b = make(normalized, layout=layout) if bias else None
    args = [x, normalized] + ([w] if weight else []) + ([b] if bias else [])
    check("layer_norm", F.layer_norm, *args, eps=eps, **tol(torch.float32))


@pytest.mark.parametrize("dtype", cases("layer_norm", FLOATS), ids=dtype_id)
def test_layer_norm_dtypes(dtype):
    x, w, b = make((2, 3, 4), dtype), make((4,), dtype), make((4,), dtype)
    check("layer_norm", F.layer_norm, x, [4], w, b, **tol(dtype))


@pytest.mark.parametrize("case", cases("layer_norm", ["bias_only_positional", "bias_only_keyword"]))
def test_layer_norm_bias_without_weight(case):
    # The absent weight is marked (weight=None), so the bias never binds to it.
    x, b = make((3, 4)), make((4,))
    if case == "bias_only_positional":
        check("layer_norm", F.layer_norm, x, [4], None, b)
    else:
        check("layer_norm", F.layer_norm, x, [4], bias=b)


@pytest.mark.parametrize("case", cases("layer_norm", ["shape", "empty_shape", "weight",
                                                      "weight_dtype", "int_input"]))
def test_layer_norm_errors(case):
    x, args = make((3, 4)), None
    if case == "shape":
        args, match = (x, [3]), "normalized_shape"
    elif case == "empty_shape":
        args, match = (x, []), "normalized_shape"
    elif case == "weight":
        args, match = (x, [4], make((3,))), "weight"
    elif case == "weight_dtype":
        args, match = (x, [4], make((4,), torch.float64)), "weight"
    else:
        args, match = (make((3, 4), torch.int64), [4]), "input"
    with pytest.raises(RuntimeError):
        F.layer_norm(*args)
    raises(match, "layer_norm", *args)


def rms_norm_reference(x, normalized_shape, weight=None, eps=None):
    """rms_norm's composition: x * rsqrt(mean(x^2) + eps) * weight, computed in float32 for half
    inputs, with eps = finfo(float32).eps when None (finfo(float64).eps for float64), as torch's
    kernels choose it."""
    eps = torch.finfo(torch.float64 if x.dtype == torch.float64 else torch.float32).eps if eps is None else eps
    dims = tuple(range(x.dim() - len(normalized_shape), x.dim()))
    up = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    y = up * torch.rsqrt(up.pow(2).mean(dims, keepdim=True) + eps)
    if weight is not None:
        y = y * (weight.float() if up is not x else weight)
    return y.to(x.dtype).contiguous()  # torch's kernels write a contiguous result


RMS_NORM_CASES = [
    # input shape, normalized_shape, weight, eps, layout, scale of the data
    ((3, 4), [4], True, None, "contiguous", 1.0),
    ((3, 4), [4], True, None, "contiguous", 1e-4),  # the default eps decides
    ((2, 3, 4), [3, 4], False, 1e-2, "transposed", 0.1),
    ((2, 3, 4), [4], True, 1e-6, "step", 1.0),
    ((3, 4), [4], False, 0.5, "offset", 1.0),
    ((5,), [5], True, None, "contiguous", 1.0),
    ((0, 4), [4], True, None, "contiguous", 1.0),
    ((3, 1), [1], True, None, "contiguous", 1.0),
]


@pytest.mark.parametrize("shape,normalized,weight,eps,layout,scale",
                         tuple_cases("rms_norm", RMS_NORM_CASES))
def test_rms_norm(shape, normalized, weight, eps, layout, scale):
    x = make(shape, layout=layout) * scale
    w = make(normalized, layout=layout) if weight else None
    check("rms_norm", rms_norm_reference, x, normalized, w, eps=eps, **tol(torch.float32))
    check("rms_norm", F.rms_norm, x, normalized, w, eps=eps, **tol(torch.float32))


@pytest.mark.parametrize("dtype", cases("rms_norm", FLOATS), ids=dtype_id)
@pytest.mark.parametrize("scale", [1.0, 1e-2])  # at 1e-2, finfo(dtype).eps shows
def test_rms_norm_dtypes(dtype, scale):
    x, w = (make((2, 3, 4)) * scale).to(dtype), make((4,), dtype)
    check("rms_norm", rms_norm_reference, x, [4], w, **tol(dtype))
    check("rms_norm", F.rms_norm, x, [4], w, **tol(dtype))


@pytest.mark.parametrize("case", cases("rms_norm", ["shape", "weight", "int_input"]))
def test_rms_norm_errors(case):
    x = make((3, 4))
    if case == "shape":
        raises("normalized_shape", "rms_norm", x, [3])
    elif case == "weight":
        raises("weight", "rms_norm", x, [4], make((4,), torch.float64))
    else:
        raises("input", "rms_norm", make((3, 4), torch.int32), [4])


# --- embedding, index_select, gather, scatter_add ---------------------------------------------

@pytest.mark.parametrize("dtype", cases("embedding", ALL), ids=dtype_id)
@pytest.mark.parametrize("indices_shape,layout", [
    ((3,), "contiguous"), ((2, 3), "transposed"), ((), "contiguous"), ((0,), "contiguous"),
    ((2, 4), "step"),
])
def test_embedding(dtype, indices_shape, layout):
    w = make((5, 3), dtype, layout)
    check("embedding", torch.embedding, w, index(indices_shape, 5, layout))


@pytest.mark.parametrize("idx", cases("embedding", [torch.int32]), ids=dtype_id)
def test_embedding_int32_indices(idx):
    check("embedding", torch.embedding, make((5, 3)), index((2, 3), 5, dtype=idx))


@pytest.mark.parametrize("case", cases("embedding", ["weight_3d", "float_indices",
                                                     "out_of_range"]))
def test_embedding_errors(case):
    if case == "weight_3d":
        args = (index((3,), 4), make((4, 2, 2)))
    elif case == "float_indices":
        args = (make((3,)), make((4, 2)))
    else:
        args = (torch.tensor([0, 4]), make((4, 2)))
    with pytest.raises((RuntimeError, IndexError)):
        F.embedding(*args)
    with pytest.raises(KilnError) as info:
        ir.eval_op("embedding", args[1], args[0])  # kiln's order: weight, indices
    assert info.value.code == "invalid_argument"


@pytest.mark.parametrize("dtype", cases("index_select", ALL), ids=dtype_id)
@pytest.mark.parametrize("shape,dim,idx_shape,layout", [
    ((3, 4), 0, (5,), "contiguous"),
    ((3, 4), -1, (2,), "transposed"),
    ((2, 3, 4), 1, (), "step"),
    ((3, 4), 1, (0,), "offset"),
    ((), 0, (1,), "contiguous"),
    ((), -1, (), "contiguous"),
    ((0, 4), 1, (3,), "contiguous"),
])
def test_index_select(dtype, shape, dim, idx_shape, layout):
    x = make(shape, dtype, layout)
    size = x.shape[dim] if x.dim() else 1
    check("index_select", torch.index_select, x, dim, index(idx_shape, size, layout))


@pytest.mark.parametrize("idx", cases("index_select", [torch.int32]), ids=dtype_id)
def test_index_select_int32(idx):
    check("index_select", torch.index_select, make((4, 3)), 0, index((5,), 4, dtype=idx))


@pytest.mark.parametrize("case", cases("index_select", ["dim", "index_2d", "float_index",
                                                        "out_of_range", "0d_self_two_values"]))
def test_index_select_errors(case):
    x = make((3, 4))
    args = {"dim": (x, 2, index((2,), 3)), "index_2d": (x, 0, index((2, 2), 3)),
            "float_index": (x, 0, make((2,))), "out_of_range": (x, 0, torch.tensor([0, 3])),
            "0d_self_two_values": (make(()), 0, index((2,), 1))}[case]
    with pytest.raises((RuntimeError, IndexError)):
        torch.index_select(*args)
    raises({"dim": "dim", "out_of_range": "out of range"}.get(case, "index"), "index_select",
           *args)


GATHER_CASES = [
    # self shape, dim, index shape, layout
    ((3, 4), 1, (3, 2), "contiguous"),
    ((3, 4), 0, (5, 4), "transposed"),  # the index may be longer along dim
    ((3, 4), -1, (2, 6), "contiguous"),  # and shorter elsewhere
    ((2, 3, 4), 1, (2, 2, 3), "step"),
    ((3, 4), 0, (2, 3), "offset"),
    ((), 0, (), "contiguous"),
    ((), 0, (3,), "contiguous"),  # a 0-d self counts as size 1
    ((5,), -1, (), "contiguous"),
    ((3, 4), 1, (0, 2), "contiguous"),
    ((3, 4), 1, (3, 0), "contiguous"),
    ((3, 4), 1, (4, 0), "contiguous"),  # an empty index is not checked against self
]


@pytest.mark.parametrize("dtype", cases("gather", ALL), ids=dtype_id)
@pytest.mark.parametrize("shape,dim,idx_shape,layout", GATHER_CASES)
def test_gather(dtype, shape, dim, idx_shape, layout):
    x = make(shape, dtype, layout)
    size = x.shape[dim] if x.dim() else 1
    check("gather", torch.gather, x, dim, index(idx_shape, size, layout))


@pytest.mark.parametrize("idx", cases("gather", [torch.int32]), ids=dtype_id)
def test_gather_int32(idx):
    args = (make((3, 4)), 1, index((3, 2), 4, dtype=idx))
    check_compiled("gather", check("gather", torch.gather, *args), *args)  # and compiled


@pytest.mark.parametrize("case", cases("gather", ["index_size", "rank", "int16", "dim",
                                                  "out_of_range", "out_of_range_0d"]))
def test_gather_errors(case):
    x = make((3, 4))
    args = {"index_size": (x, 1, index((4, 2), 4)),  # index.size(0) > self.size(0)
            "rank": (x, 1, index((3,), 4)),
            "int16": (x, 1, index((3, 2), 4, dtype=torch.int16)),
            "dim": (x, 2, index((3, 2), 3)),
            "out_of_range": (x, 1, torch.tensor([[4]])),
            "out_of_range_0d": (torch.tensor(1.0), 0, torch.tensor([1]))}[case]
    with pytest.raises((RuntimeError, IndexError)):
        torch.gather(*args)
    match = {"dim": "dim", "out_of_range": "out of range", "out_of_range_0d": "out of range"}
    raises(match.get(case, "index"), "gather", *args)


SCATTER_CASES = [
    # self shape, dim, index shape, src shape, layout
    ((3, 4), 1, (3, 2), (3, 2), "contiguous"),
    ((3, 4), 0, (5, 4), (5, 4), "transposed"),  # repeated targets accumulate
    ((3, 4), -1, (2, 6), (3, 7), "contiguous"),  # src may be larger than the index
    ((2, 3, 4), 1, (2, 2, 3), (2, 2, 3), "step"),
    ((3, 4), 0, (2, 3), (2, 3), "offset"),
    ((), 0, (), (), "contiguous"),
    ((), 0, (2,), (3,), "contiguous"),  # a 0-d self counts as size 1
    ((4,), 0, (1,), (), "contiguous"),  # and so does a 0-d src
    ((3, 4), 1, (0, 2), (1, 2), "contiguous"),
    ((3, 4), 1, (4, 0), (1, 1), "contiguous"),  # an empty index is not checked
]


@pytest.mark.parametrize("dtype", cases("scatter_add", ALL), ids=dtype_id)
@pytest.mark.parametrize("shape,dim,idx_shape,src_shape,layout", SCATTER_CASES)
def test_scatter_add(dtype, shape, dim, idx_shape, src_shape, layout):
    # Small integers, exact in every dtype, so that the order of accumulation does not matter.
    x = make(shape, torch.int64, layout).to(dtype)
    src = make(src_shape, torch.int64, layout, 0, 3).to(dtype)
    size = x.shape[dim] if x.dim() else 1
    check("scatter_add", torch.scatter_add, x, dim, index(idx_shape, size, layout), src)


@pytest.mark.parametrize("idx", cases("scatter_add", [torch.int32]), ids=dtype_id)
def test_scatter_add_int32(idx):
    args = (make((3, 4)), 1, index((3, 2), 4, dtype=idx), make((3, 2)))
    check_compiled("scatter_add", check("scatter_add", torch.scatter_add, *args), *args)  # and compiled


@pytest.mark.parametrize("case", cases("scatter_add", ["index_vs_self", "index_vs_src",
                                                       "src_dtype", "rank", "dim",
                                                       "out_of_range", "src_0d"]))
def test_scatter_add_errors(case):
    x = make((3, 4))
    args = {"index_vs_self": (x, 1, index((4, 2), 4), make((4, 2))),
            "index_vs_src": (x, 1, index((3, 2), 4), make((2, 2))),
            "src_dtype": (x, 1, index((3, 2), 4), make((3, 2), torch.float64)),
            "rank": (x, 1, index((3,), 4), make((3,))),
            "dim": (x, 2, index((3, 2), 3), make((3, 2))),
            "out_of_range": (x, 1, torch.tensor([[4]]), make((1, 1))),
            "src_0d": (make((4,)), 0, index((3,), 4), make(()))}[case]
    with pytest.raises((RuntimeError, IndexError)):
        torch.scatter_add(*args)
    match = {"dim": "dim", "out_of_range": "out of range", "src_dtype": "src",
             "index_vs_src": "index"}.get(case, "index")
    raises(match, "scatter_add", *args)


# --- cross_entropy ----------------------------------------------------------------------------

CE_INDEX_CASES = [
    # input shape, reduction, ignore_index (or None), weight
    ((4, 5), "mean", None, False),
    ((4, 5), "sum", None, False),
    ((4, 5), "none", None, False),
    ((5,), "none", None, False),      # one sample: a 0-d target
    ((5,), "mean", None, False),
    ((2, 5, 3), "none", None, False),  # [N, C, d1]
    ((2, 5, 3), "mean", None, True),
    ((4, 5), "mean", 2, False),       # targets of class 2 ignored
    ((4, 5), "none", 2, True),
    ((4, 5), "mean", 2, True),
    ((4, 5), "sum", -100, True),
    ((0, 5), "mean", None, False),    # no sample: nan
    ((0, 5), "none", None, False),
    ((4, 1), "mean", None, False),
]


def ce_inputs(shape, dtype=torch.float32, layout="contiguous"):
    x = make(shape, dtype, layout)
    batch = shape[:1] + shape[2:] if len(shape) > 1 else ()
    classes = shape[1] if len(shape) > 1 else shape[0]
    return x, index(batch, classes, layout), classes


@pytest.mark.parametrize("shape,reduction,ignore,weight",
                         tuple_cases("cross_entropy", CE_INDEX_CASES))
def test_cross_entropy_class_indices(shape, reduction, ignore, weight):
    x, target, classes = ce_inputs(shape)
    kwargs = {"reduction": reduction}
    if ignore is not None:
        kwargs["ignore_index"] = ignore
        target = target.clone()
        target.view(-1)[:1] = ignore  # at least one ignored
    if weight:
        kwargs["weight"] = make((classes,)).abs() + 0.5
    check("cross_entropy", F.cross_entropy, x, target, **kwargs, **tol(torch.float32))


@pytest.mark.parametrize("reduction", cases("cross_entropy", ["mean", "none"]))
def test_cross_entropy_all_ignored(reduction):
    x, target, _ = ce_inputs((3, 4))
    target = torch.full_like(target, -100)
    check("cross_entropy", F.cross_entropy, x, target, reduction=reduction)


@pytest.mark.parametrize("dtype", cases("cross_entropy", FLOATS), ids=dtype_id)
@pytest.mark.parametrize("shape,layout", [((4, 5), "transposed"), ((2, 5, 3), "transposed"),
                                          ((4, 5), "step")])
def test_cross_entropy_dtypes(dtype, shape, layout):
    x, target, _ = ce_inputs(shape, dtype, layout)
    check("cross_entropy", F.cross_entropy, x, target, **tol(dtype))
    check("cross_entropy", F.cross_entropy, x, target, reduction="none", **tol(dtype))


CE_SMOOTHING_CASES = [
    # input shape, reduction, label_smoothing, ignore_index, weight
    ((4, 5), "mean", 0.1, None, False),
    ((4, 5), "none", 0.2, None, False),
    ((4, 5), "sum", 0.3, 2, False),
    ((4, 5), "mean", 0.1, 2, True),
    ((4, 5), "none", 0.1, 2, True),
    ((2, 5, 3), "mean", 0.25, None, True),
    ((5,), "mean", 1.0, None, False),
]


@pytest.mark.parametrize("shape,reduction,smoothing,ignore,weight",
                         tuple_cases("cross_entropy", CE_SMOOTHING_CASES))
def test_cross_entropy_label_smoothing(shape, reduction, smoothing, ignore, weight):
    x, target, classes = ce_inputs(shape)
    kwargs = {"reduction": reduction, "label_smoothing": smoothing}
    if ignore is not None:
        kwargs["ignore_index"] = ignore
        target = target.clone()
        target.view(-1)[:1] = ignore
    if weight:
        kwargs["weight"] = make((classes,)).abs() + 0.5
    check("cross_entropy", F.cross_entropy, x, target, **kwargs, **tol(torch.float32))


CE_PROB_CASES = [
    # input shape, reduction, label_smoothing, weight
    ((4, 5), "mean", 0.0, False),
    ((4, 5), "sum", 0.0, False),
    ((4, 5), "none", 0.0, False),
    ((5,), "none", 0.0, False),
    ((2, 5, 3), "mean", 0.0, True),
    ((4, 5), "none", 0.2, True),
    ((4, 5), "mean", 0.1, False),
    ((0, 5), "mean", 0.0, False),   # no sample: nan
    ((0, 5), "sum", 0.0, True),
]


@pytest.mark.parametrize("shape,reduction,smoothing,weight",
                         tuple_cases("cross_entropy", CE_PROB_CASES))
def test_cross_entropy_probabilities(shape, reduction, smoothing, weight):
    x = make(shape, layout="transposed")
    class_dim = 1 if len(shape) > 1 else 0
    target = torch.softmax(make(shape), class_dim)
    kwargs = {"reduction": reduction, "label_smoothing": smoothing}
    if weight:
        kwargs["weight"] = make((shape[class_dim],)).abs() + 0.5
    check("cross_entropy", F.cross_entropy, x, target, **kwargs, **tol(torch.float32))


@pytest.mark.parametrize("dtype,target_dtype", tuple_cases("cross_entropy", [
    (torch.float64, torch.float64), (torch.bfloat16, torch.bfloat16),
    (torch.float16, torch.float16), (torch.float32, torch.float64),
    (torch.float64, torch.float32), (torch.bfloat16, torch.float32),
]), ids=dtype_id)
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_cross_entropy_probabilities_dtypes(dtype, target_dtype, reduction):
    # Mixed dtypes promote, as the probabilities multiply the log-probabilities.
    x, target = make((3, 4), dtype), torch.softmax(make((3, 4)), 1).to(target_dtype)
    check("cross_entropy", F.cross_entropy, x, target, label_smoothing=0.1, reduction=reduction,
          **tol(dtype))


@pytest.mark.parametrize("case", cases("cross_entropy", [
    "target_shape", "target_dtype", "weight_size", "reduction", "smoothing", "int_input",
    "prob_ignore_index", "out_of_range"]))
def test_cross_entropy_errors(case):
    x, target, _ = ce_inputs((3, 4))
    kwargs, match = {}, "target"
    if case == "target_shape":
        target = index((4,), 4)
    elif case == "target_dtype":
        target = target.int()
    elif case == "weight_size":
        kwargs, match = {"weight": make((5,))}, "weight"
    elif case == "reduction":
        kwargs, match = {"reduction": "avg"}, "reduction"
    elif case == "smoothing":
        kwargs, match = {"label_smoothing": 1.5}, "label_smoothing"
    elif case == "int_input":
        x, match = x.long(), "input"
    elif case == "prob_ignore_index":
        target, kwargs, match = torch.softmax(make((3, 4)), 1), {"ignore_index": 1}, "ignore_index"
    else:
        target, match = torch.tensor([0, 4, 1]), "out of range"
    with pytest.raises((RuntimeError, ValueError, IndexError)):
        F.cross_entropy(x, target, **kwargs)
    raises(match, "cross_entropy", x, target, **kwargs)


# --- dropout ----------------------------------------------------------------------------------
# The interpreter's random stream is its own (counter-based, from the explicit seed and offset
# inputs), so dropout is checked by its properties; the meta against torch's F.dropout.

def dropout(x, p, seed=0, offset=0, **kwargs):
    args = (x, torch.tensor(seed), torch.tensor(offset))
    out, meta = ir.eval_op("dropout", *args, p=p, **kwargs)
    maybe_check_compiled("dropout", out, *args, p=p, **kwargs)  # the same stream, compiled
    return out, meta


@pytest.mark.parametrize("dtype", cases("dropout", FLOATS), ids=dtype_id)
@pytest.mark.parametrize("shape,layout", [((4, 5), "transposed"), ((6,), "step"),
                                          ((), "contiguous"), ((0, 3), "contiguous")])
def test_dropout_meta_and_identities(dtype, shape, layout):
    x = make(shape, dtype, layout)
    expected = reference(F.dropout, x, 0.5, True)
    for p in (0.0, 0.5, 1.0):
        out, meta = dropout(x, p)
        assert_meta_matches(meta, expected)
        if p == 0.0:
            assert_values_match(out, x)  # p=0 is the identity
        elif p == 1.0:
            assert_values_match(out, torch.zeros_like(x))  # p=1 drops everything


@pytest.mark.parametrize("p", cases("dropout", [0.2, 0.5, 0.8]))
def test_dropout_keeps_scaled_elements_at_rate(p):
    x = make((40, 50), torch.float64) + 10  # no zeros of its own
    out, _ = dropout(x, p, seed=1234, offset=7)
    kept = out != 0
    assert_values_match(out[kept], x[kept] / (1 - p))  # kept elements are scaled by 1/(1-p)
    fraction = kept.double().mean().item()
    assert abs(fraction - (1 - p)) < 0.05, fraction  # 2000 draws: sd of the rate < 0.012


@pytest.mark.parametrize("dtype", cases("dropout", [torch.float16, torch.bfloat16]), ids=dtype_id)
def test_dropout_half_scales_in_its_dtype(dtype):
    x = make((8, 8), dtype)
    out, _ = dropout(x, 0.3, seed=5)
    kept = out != 0
    assert_values_match(out[kept], (x.float()[kept] / 0.7).to(dtype))


@pytest.mark.parametrize("case", cases("dropout", ["same", "other_seed", "other_offset"]))
def test_dropout_mask_is_a_function_of_seed_and_offset(case):
    x = make((20, 20), torch.float32) + 10
    first, _ = dropout(x, 0.5, seed=42, offset=3)
    seed, offset = {"same": (42, 3), "other_seed": (43, 3), "other_offset": (42, 1003)}[case]
    second, _ = dropout(x, 0.5, seed=seed, offset=offset)
    if case == "same":
        assert torch.equal(first, second)
    else:
        assert not torch.equal(first != 0, second != 0)


@pytest.mark.op("dropout")
def test_dropout_mask_does_not_depend_on_layout():
    # The counter is the element's row-major position, not its address in memory.
    x = make((5, 6), torch.float32, "transposed") + 10
    a, _ = dropout(x, 0.5, seed=9)
    b, _ = dropout(x.contiguous(), 0.5, seed=9)
    assert torch.equal(a, b)


@pytest.mark.parametrize("layout", cases("dropout", ["contiguous", "transposed"]))
def test_dropout_eval_is_identity(layout):
    x = make((4, 5), torch.float32, layout)
    expected = F.dropout(x, 0.5, training=False)
    out, meta = dropout(x, 0.5, train=False)
    assert_meta_matches(meta, expected)
    assert_values_match(out, expected)


@pytest.mark.parametrize("case", cases("dropout", ["p", "int_input", "seed_dtype", "seed_rank"]))
def test_dropout_errors(case):
    x, seed, offset, p = make((3, 4)), torch.tensor(0), torch.tensor(0), 0.5
    match = "p"
    if case == "p":
        p = 1.5
        with pytest.raises(ValueError):
            F.dropout(x, p)
    elif case == "int_input":
        x, match = x.long(), "input"
        with pytest.raises(RuntimeError):
            F.dropout(x, p)
    elif case == "seed_dtype":
        seed, match = torch.tensor(0.0), "seed"
    else:
        offset, match = torch.tensor([0]), "offset"
    raises(match, "dropout", x, seed, offset, p=p)


# --- scaled_dot_product_attention -------------------------------------------------------------

def sdpa_reference(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None):
    """torch's math composition: softmax(q @ k^T * scale + mask) @ v, in float32 for half
    inputs; a bool mask keeps where True, is_causal keeps the lower triangle; a row it masks
    whole is 0."""
    assert dropout_p == 0.0
    dtype = q.dtype
    if dtype in (torch.float16, torch.bfloat16):
        q, k, v = q.float(), k.float(), v.float()
        if attn_mask is not None and attn_mask.dtype != torch.bool:
            attn_mask = attn_mask.float()
    L, S = q.size(-2), k.size(-2)
    if scale is None:  # 1 / sqrt(E), inf for E = 0 as in C++
        scale = torch.tensor(float(q.size(-1)), dtype=torch.float64).rsqrt().item()
    bias = torch.zeros(L, S, dtype=q.dtype)
    if is_causal:
        bias.masked_fill_(~torch.ones(L, S, dtype=torch.bool).tril(), float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            bias = bias.masked_fill(~attn_mask, float("-inf"))
        else:
            bias = bias + attn_mask
    # torch scales q and k before their product: scores over an empty embedding are 0
    scores = q @ k.transpose(-2, -1) * scale if q.size(-1) else torch.zeros(L, S, dtype=q.dtype)
    weights = torch.softmax(scores + bias, dim=-1)
    # torch 2.x's safe softmax: a row whose every score is masked attends to nothing (0)
    weights = weights.masked_fill(bias.amax(-1, keepdim=True) == float("-inf"), 0.0)
    return (weights @ v).to(dtype)


SDPA_CASES = [
    # q, k, v shapes, mask (shape, "bool"/"float") or None, is_causal, scale
    ((2, 3, 4, 8), (2, 3, 5, 8), (2, 3, 5, 6), None, False, None),
    ((2, 3, 4, 8), (2, 3, 4, 8), (2, 3, 4, 8), None, True, None),
    ((2, 4, 8), (2, 5, 8), (2, 5, 3), ((4, 5), "bool"), False, None),
    ((2, 4, 8), (2, 5, 8), (2, 5, 3), ((2, 1, 5), "float"), False, None),
    ((4, 8), (5, 8), (5, 8), ((4, 5), "float"), False, 0.5),
    ((2, 2, 4, 8), (2, 2, 5, 8), (2, 2, 5, 8), ((2, 1, 4, 5), "bool"), False, None),
    ((2, 3, 6, 4), (2, 3, 6, 4), (2, 3, 6, 4), None, True, 0.1),
    ((1, 1, 1, 4), (1, 1, 1, 4), (1, 1, 1, 4), None, False, None),
    ((2, 0, 4), (2, 3, 4), (2, 3, 5), None, False, None),  # no query
    ((2, 4, 0), (2, 3, 0), (2, 3, 5), None, False, None),  # an empty embedding
]


def sdpa_inputs(shapes, dtype=torch.float32, layout="contiguous"):
    q, k, v = (make(s, dtype, layout) for s in shapes[:3])
    mask = None
    if shapes[3] is not None:
        shape, kind = shapes[3]
        if kind == "bool":
            mask = torch.rand(shape) < 0.7
            mask[..., 0] = True  # every row keeps a key
        else:
            mask = make(shape, dtype)
    return q, k, v, mask


@pytest.mark.parametrize("shapes", cases("scaled_dot_product_attention", SDPA_CASES))
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_attention(shapes, layout):
    q, k, v, mask = sdpa_inputs(shapes, layout=layout)
    kwargs = {"is_causal": shapes[4]}
    if mask is not None:
        kwargs["attn_mask"] = mask
    if shapes[5] is not None:
        kwargs["scale"] = shapes[5]
    check("scaled_dot_product_attention", sdpa_reference, q, k, v, **kwargs,
          **tol(torch.float32))
    check("scaled_dot_product_attention", F.scaled_dot_product_attention, q, k, v, **kwargs,
          **tol(torch.float32))


@pytest.mark.parametrize("dtype", cases("scaled_dot_product_attention", FLOATS), ids=dtype_id)
@pytest.mark.parametrize("mask", [None, ((4, 5), "float"), ((4, 5), "bool")])
def test_attention_dtypes(dtype, mask):
    shapes = ((2, 4, 8), (2, 5, 8), (2, 5, 3), mask, False, None)
    q, k, v, m = sdpa_inputs(shapes, dtype, "step")
    kwargs = {} if m is None else {"attn_mask": m}
    check("scaled_dot_product_attention", sdpa_reference, q, k, v, **kwargs, **tol(dtype))
    check("scaled_dot_product_attention", F.scaled_dot_product_attention, q, k, v, **kwargs, **tol(dtype))


def _dropout_factors(shape, seed, offset, p):
    """What kiln's dropout of this stream multiplies a tensor of `shape` by (0 or 1 / (1 - p)):
    torch cannot draw kiln's stream, so the reference multiplies by these."""
    ones = torch.ones(shape, dtype=torch.float64)
    return ir.eval_op("dropout", ones, seed, offset, p=p)[0]


# Dropout drops the [..., L, S] weights as `dropout` of the same seed and offset drops them
# (head size 8: no target keeps these calls whole, where cuDNN would draw its own mask).
@pytest.mark.parametrize("case", cases("scaled_dot_product_attention", [
    (torch.float32, None, False), (torch.float32, None, True), (torch.float64, ((4, 5), "bool"), False),
    (torch.bfloat16, None, True)]))
def test_attention_with_dropout(case):
    dtype, mask, causal = case
    shapes = ((2, 3, 4, 8), (2, 3, 5 if not causal else 4, 8), (2, 3, 5 if not causal else 4, 6), mask)
    q, k, v, m = sdpa_inputs(shapes, dtype)
    seed, offset = torch.tensor(17), torch.tensor(5 << 40)
    factors = _dropout_factors((2, 3, 4, shapes[1][2]), seed, offset, 0.3)
    assert 0 < (factors == 0).sum() < factors.numel()

    def reference(q, k, v, attn_mask=None, is_causal=False, **_):  # the math, the weights times the factors
        qf, kf, vf = (t.double() for t in (q, k, v))
        scores = qf @ kf.transpose(-2, -1) / 8 ** 0.5
        if is_causal:
            scores = scores.masked_fill(~torch.ones(scores.shape[-2:], dtype=torch.bool).tril(), float("-inf"))
        if attn_mask is not None:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        return ((torch.softmax(scores, -1) * factors) @ vf).to(q.dtype)

    kwargs = {"attn_mask": m} if m is not None else {}
    check("scaled_dot_product_attention", reference, q, k, v, dropout_p=0.3, is_causal=causal, seed=seed,
          offset=offset, **kwargs, **tol(dtype))


@pytest.mark.op("scaled_dot_product_attention")
def test_attention_fully_masked_row_is_zero():
    q, k, v = make((3, 4)), make((2, 4)), make((2, 4))
    mask = torch.tensor([[True, True], [False, False], [True, False]])
    check("scaled_dot_product_attention", sdpa_reference, q, k, v, attn_mask=mask)


# --- attention's backward pieces (flash attention's: the rule of scaled_dot_product_attention) --

def _attention_scores(q, k, is_causal, scale):
    """The scaled, causally masked scores in opmath (f32; f64 for f64)."""
    wide = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = scale if scale is not None else q.size(-1) ** -0.5
    scores = (q.to(wide) @ k.to(wide).transpose(-2, -1)) * scale
    if is_causal:
        keep = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    return scores


def attention_lse_reference(q, k, v, is_causal=False, scale=None):
    return torch.logsumexp(_attention_scores(q, k, is_causal, scale), -1)


def attention_grads_reference(which, g, q, k, v, out, lse, is_causal=False, scale=None):
    wide = lse.dtype
    s = scale if scale is not None else q.size(-1) ** -0.5
    p = torch.exp(_attention_scores(q, k, is_causal, scale) - lse[..., None])
    gw, qw, kw, vw = (t.to(wide) for t in (g, q, k, v))
    delta = (gw * out.to(wide)).sum(-1)
    ds = p * (gw @ vw.transpose(-2, -1) - delta[..., None]) * s
    if which == "attention_grad_query":
        return (ds @ kw).to(q.dtype)
    return torch.cat([ds.transpose(-2, -1) @ qw, p.transpose(-2, -1) @ gw], -1).to(q.dtype)


ATTENTION_PIECE_CASES = [
    # q, k, v shapes, is_causal, scale
    ((2, 3, 4, 8), (2, 3, 5, 8), (2, 3, 5, 6), False, None),
    ((2, 3, 6, 8), (2, 3, 6, 8), (2, 3, 6, 8), True, None),
    ((4, 8), (4, 8), (4, 3), True, 0.3),
    ((2, 5, 4), (2, 7, 4), (2, 7, 4), False, 2.0),
]


def attention_piece_inputs(shapes, dtype, layout="contiguous"):
    q, k, v = (make(sh, dtype, layout, low=-1, high=1) for sh in shapes[:3])
    wide = torch.float64 if dtype == torch.float64 else torch.float32
    lse = attention_lse_reference(q, k, v, shapes[3], shapes[4]).to(wide)
    g = make(shapes[0][:-1] + shapes[2][-1:], dtype, layout, low=-1, high=1)
    out = make(shapes[0][:-1] + shapes[2][-1:], dtype, layout, low=-1, high=1)
    return g, q, k, v, out, lse


@pytest.mark.parametrize("shapes", cases("attention_lse", ATTENTION_PIECE_CASES))
@pytest.mark.parametrize("dtype", FLOATS, ids=dtype_id)
def test_attention_lse(shapes, dtype):
    _, q, k, v, _, _ = attention_piece_inputs(shapes, dtype, "transposed")
    check("attention_lse", attention_lse_reference, q, k, v, is_causal=shapes[3],
          scale=shapes[4], **tol(dtype))


@pytest.mark.parametrize("op", [p for op in ("attention_grad_query", "attention_grad_key_value")
                                for p in cases(op, [op])])
@pytest.mark.parametrize("shapes", ATTENTION_PIECE_CASES)
@pytest.mark.parametrize("dtype", FLOATS, ids=dtype_id)
def test_attention_grad_pieces(op, shapes, dtype):
    args = attention_piece_inputs(shapes, dtype)
    check(op, lambda *a, **kw: attention_grads_reference(op, *a, **kw), *args,
          is_causal=shapes[3], scale=shapes[4], **tol(dtype))


@pytest.mark.parametrize("case", cases("attention_grad_query", ["lse_dtype", "lse_size", "grad_size",
                                                                 "grad_dtype", "scale"]))
def test_attention_piece_errors(case):
    g, q, k, v, out, lse = attention_piece_inputs(ATTENTION_PIECE_CASES[0], torch.float32)
    kwargs, match = {}, "lse"
    if case == "lse_dtype":
        lse = lse.double()
    elif case == "lse_size":
        lse = lse[..., :2]
    elif case == "grad_size":
        g, match = g[..., :2], "grad"
    elif case == "grad_dtype":
        g, match = g.double(), "grad"
    else:
        kwargs, match = {"scale": float("inf")}, "scale"
    raises(match, "attention_grad_query", g, q, k, v, out, lse, **kwargs)


@pytest.mark.parametrize("case", cases("scaled_dot_product_attention", [
    "mask_broadcast", "mask_dtype", "mask_and_causal", "embedding", "sequence", "batch",
    "int_query", "dropout_without_stream", "stream_without_dropout", "dropout_of_one",
    "float_seed"]))
def test_attention_errors(case):
    q, k, v = make((2, 4, 8)), make((2, 5, 8)), make((2, 5, 3))
    kwargs, match = {}, "attn_mask"
    if case == "mask_broadcast":
        kwargs = {"attn_mask": make((4, 4))}
    elif case == "mask_dtype":
        kwargs = {"attn_mask": make((4, 5), torch.float64)}
    elif case == "mask_and_causal":
        kwargs = {"attn_mask": make((4, 5)), "is_causal": True}
    elif case == "embedding":
        k, match = make((2, 5, 7)), "key"
    elif case == "sequence":
        v, match = make((2, 6, 3)), "value"
    elif case == "batch":
        k, match = make((3, 5, 8)), "key"
    elif case == "int_query":
        q, k, v, match = q.long(), k.long(), v.long(), "query"
    else:
        # kiln's graphs are pure: attention's dropout takes the explicit random stream of
        # `dropout` (0-d i64 seed and offset inputs), given exactly with a dropout_p in (0, 1).
        seed, offset = torch.tensor(3), torch.tensor(0)
        kwargs, match = {"dropout_p": 0.1}, "seed"
        if case == "stream_without_dropout":
            kwargs = {"seed": seed, "offset": offset}
        elif case == "dropout_of_one":
            kwargs, match = {"dropout_p": 1.0, "seed": seed, "offset": offset}, "dropout_p"
        elif case == "float_seed":
            kwargs = {"dropout_p": 0.1, "seed": seed.double(), "offset": offset}
    raises(match, "scaled_dot_product_attention", q, k, v, **kwargs)


# --- decompositions ---------------------------------------------------------------------------
# Composite ops decompose into core ops (ir.Graph.decompose); the decomposed graph must give
# torch's values too.

def eval_decomposed(op, *args, **kwargs):
    graph, tensors = ir.Graph(), []

    def lift(arg):
        if isinstance(arg, torch.Tensor):
            tensors.append(arg)
            return ir.placeholder_like(graph, f"arg{len(tensors) - 1}", arg)
        return arg

    value = graph.call(op, *[lift(a) for a in args], **{k: lift(v) for k, v in kwargs.items()})
    graph.set_outputs([value])
    (result,) = ir.run(graph.decompose(), *tensors)
    return result


def _ce_probs(shape):
    return torch.softmax(make(shape), 1 if len(shape) > 1 else 0)


DECOMPOSED = [
    ("softmax", torch.softmax, lambda: (make((3, 4), layout="transposed"), 0), {}),
    ("log_softmax", torch.log_softmax, lambda: (make((2, 3, 4)), -1), {"dtype": torch.float64}),
    ("addmm", torch.addmm, lambda: (make((4,)), make((2, 3)), make((3, 4))),
     {"beta": 0.5, "alpha": 2.0}),
    ("addmm", torch.addmm, lambda: (torch.full((2, 4), float("nan")), make((2, 3)),
                                    make((3, 4))), {"beta": 0}),
    ("linear", F.linear, lambda: (make((2, 3, 4)), make((5, 4)), make((5,))), {}),
    ("linear", F.linear, lambda: (make((3, 4)), make((4,))), {}),
    ("layer_norm", F.layer_norm, lambda: (make((2, 3, 4), layout="transposed"), [3, 4],
                                          make((3, 4)), make((3, 4))), {"eps": 1e-3}),
    ("rms_norm", rms_norm_reference, lambda: (make((3, 4)) * 1e-4, [4], make((4,))), {}),
    ("cross_entropy", F.cross_entropy, lambda: (make((4, 5)), index((4,), 5)),
     {"reduction": "sum", "weight": make((5,)).abs(), "label_smoothing": 0.1}),
    ("cross_entropy", F.cross_entropy,
     lambda: (make((2, 5, 3)), torch.tensor([[0, 1, 2], [3, -100, 4]])),
     {"weight": make((5,)).abs(), "label_smoothing": 0.3}),
    ("cross_entropy", F.cross_entropy, lambda: (make((4, 5)), _ce_probs((4, 5))),
     {"weight": make((5,)).abs(), "label_smoothing": 0.2}),
    ("cross_entropy", F.cross_entropy, lambda: (make((5,)), _ce_probs((5,))),
     {"reduction": "none"}),
    ("cross_entropy", F.cross_entropy,
     lambda: (make((2, 5, 3), layout="transposed"), index((3, 2), 5).t()), {"reduction": "none"}),
    ("rms_norm", rms_norm_reference, lambda: (make((3, 4), layout="transposed"), [4]), {}),
    ("scaled_dot_product_attention", sdpa_reference,
     lambda: (make((2, 4, 8), layout="transposed"), make((2, 5, 8)), make((2, 5, 3))), {}),
    ("scaled_dot_product_attention", sdpa_reference,
     lambda: (make((2, 4, 8)), make((2, 4, 8)), make((2, 4, 3))), {"is_causal": True}),
    ("scaled_dot_product_attention", sdpa_reference,
     lambda: (make((4, 8)), make((5, 8)), make((5, 3)), torch.rand(4, 5) < 0.7),
     {"scale": 0.3}),
    ("scaled_dot_product_attention", sdpa_reference,
     lambda: (make((4, 8)), make((5, 8)), make((5, 3)), make((5,))), {}),
]


@pytest.mark.parametrize("op,fn,args,kwargs", [
    pytest.param(*case, marks=pytest.mark.op(case[0]), id=f"{case[0]}-{i}")
    for i, case in enumerate(DECOMPOSED)])
def test_decomposition_matches_torch(op, fn, args, kwargs):
    args = args()
    expected = reference(fn, *args, **kwargs)
    assert_values_match(eval_decomposed(op, *args, **kwargs), expected, **tol(expected.dtype))
