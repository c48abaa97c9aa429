"""Conformance of the pointwise ops against torch on CPU: unary, binary (tensor-tensor,
tensor-0-d and tensor-Python-scalar operands, type promotion), where, clamp, to_dtype and every
in-place form `op_`.

Where torch refuses a dtype or an argument, kiln must refuse it too (KilnError invalid_argument).
Each case loops over a few layouts (0-d, size-1, empty, broadcast, transposed, sliced with a step,
as_strided with an offset) so that the file stays fast.
"""
import contextlib

import pytest
import torch

from harness import (_HALF, _half_dtype, _upcast, assert_meta_matches, assert_values_match, cases,
                     check, maybe_check_compiled)

from kiln import KilnError, ir

f64, f32, f16, bf16 = torch.float64, torch.float32, torch.float16, torch.bfloat16
i64, i32, i8, u8, b8 = torch.int64, torch.int32, torch.int8, torch.uint8, torch.bool
DTYPES = [f64, f32, f16, bf16, i64, i32, i8, u8, b8]


def _name(dtype):
    return str(dtype).replace("torch.", "")


def make(shape, dtype, seed, low=-3.0, high=3.0, layout="contig", nonzero=False):
    """Random data of `shape` (fixed seed) laid out as `layout`: contig, t (dims reversed in
    memory), step (every other element of a wider last dim), offset (as_strided, offset 3)."""
    gen = torch.Generator().manual_seed(seed)

    def fill(sizes):
        if dtype == b8:
            return torch.rand(sizes, generator=gen) < 0.5
        if dtype.is_floating_point:
            x = torch.rand(sizes, generator=gen, dtype=f64) * (high - low) + low
        else:
            lo = max(int(low), 0) if dtype == u8 else int(low)
            x = torch.randint(lo, int(high) + 1, sizes, generator=gen)
        if nonzero:
            x = torch.where(x == 0, torch.ones_like(x), x)
        return x.to(dtype)

    shape = tuple(shape)
    if layout == "contig" or not shape:
        return fill(shape)
    if layout == "t":
        return fill(shape[::-1]).permute(*reversed(range(len(shape))))
    if layout == "step":
        return fill(shape[:-1] + (2 * shape[-1],))[..., ::2]
    assert layout == "offset"
    n = 1
    for s in shape:
        n *= s
    strides = [1] * len(shape)
    for d in range(len(shape) - 1, 0, -1):
        strides[d - 1] = strides[d] * max(shape[d], 1)
    return fill((n + 3,)).as_strided(shape, strides, 3)


def expect_refusal(op, *args, **kwargs):
    with pytest.raises(KilnError) as info:
        ir.eval_op(op, *args, **kwargs)
    assert info.value.code == "invalid_argument", info.value.message
    return info.value.message


_NO_HALF_KERNEL: set = set()  # (fn, dtype): torch has no CPU kernel (harness.reference)


def _via_float32(fn, half):
    def run(*args, **kwargs):
        result = fn(*_upcast(args), **{k: _upcast(v) for k, v in kwargs.items()})
        return result.to(half) if result.is_floating_point() else result
    return run


def reference_fn(fn, *args, **kwargs):
    """fn, or fn through float32 where torch lacks the half-precision CPU kernel, as
    harness.reference does; remembered, since torch's exceptions are slow."""
    half = _half_dtype(list(args) + list(kwargs.values()))
    if half is None:
        return fn
    if (fn, half) not in _NO_HALF_KERNEL:
        try:
            fn(*args, **kwargs)
            return fn
        except (RuntimeError, TypeError) as e:
            if "not implemented for" not in str(e):
                return fn
        _NO_HALF_KERNEL.add((fn, half))
    return _via_float32(fn, half)


def conform(op, fn, *args, atol=None, rtol=None, **kwargs):
    """check() where torch accepts the arguments; where torch refuses them, kiln must refuse.
    Returns whether torch accepted them."""
    fn = reference_fn(fn, *args, **kwargs)
    try:
        fn(*args, **kwargs)
    except (RuntimeError, TypeError):  # TypeError: torch's schema takes no number there
        expect_refusal(op, *args, **kwargs)
        return False
    check(op, fn, *args, atol=atol, rtol=rtol, **kwargs)
    return True


def opmath(fn):
    """fn computed on float32 copies and rounded to the half dtype of torch's result (what a GPU
    computes). For ops whose torch CPU kernels round intermediate steps to half precision
    (gelu, add/sub with alpha: up to several ulps off), kiln rounds once, like this."""
    def run(*args, **kwargs):
        result = reference_fn(fn, *args, **kwargs)(*args, **kwargs)
        if result.dtype not in _HALF:
            return result
        upcast = fn(*_upcast(args), **{k: _upcast(v) for k, v in kwargs.items()})
        return upcast.to(result.dtype)
    return run


def through_float64(fn):
    """fn computed on float64 copies and rounded to the argument's dtype."""
    def run(x, **kwargs):
        return fn(x.double(), **kwargs).to(x.dtype)
    return run


OPMATH = {"gelu", "gelu_tanh", "add_alpha", "sub_alpha"}  # and gelu_backward


# --- unary ------------------------------------------------------------------------------------

UNARY_LAYOUTS = [
    ((2, 3), "contig"), ((), "contig"), ((2, 1, 3), "t"), ((0, 3), "contig"),
    ((3, 4), "t"), ((2, 5), "step"), ((2, 3), "offset"),
]
# op -> (torch function, kwargs, value range)
UNARY = {
    "neg": (torch.neg, {}, (-3, 3)),
    "abs": (torch.abs, {}, (-3, 3)),
    "exp": (torch.exp, {}, (-3, 3)),
    "exp2": (torch.exp2, {}, (-3, 3)),
    "log": (torch.log, {}, (0.1, 5)),
    "log1p": (torch.log1p, {}, (-0.5, 5)),
    "expm1": (torch.expm1, {}, (-3, 3)),
    "sqrt": (torch.sqrt, {}, (0, 5)),
    "rsqrt": (torch.rsqrt, {}, (0.1, 5)),
    "sin": (torch.sin, {}, (-3, 3)),
    "cos": (torch.cos, {}, (-3, 3)),
    "tan": (torch.tan, {}, (-1.2, 1.2)),
    "tanh": (torch.tanh, {}, (-3, 3)),
    "sigmoid": (torch.sigmoid, {}, (-3, 3)),
    "relu": (torch.relu, {}, (-3, 3)),
    "gelu": (torch.nn.functional.gelu, {}, (-3, 3)),
    "gelu_tanh": (torch.nn.functional.gelu, {"approximate": "tanh"}, (-3, 3)),
    "silu": (torch.nn.functional.silu, {}, (-3, 3)),
    "erf": (torch.erf, {}, (-3, 3)),
    "reciprocal": (torch.reciprocal, {}, (-3, 3)),
    "sign": (torch.sign, {}, (-3, 3)),
    "floor": (torch.floor, {}, (-3, 3)),
    "ceil": (torch.ceil, {}, (-3, 3)),
    "round": (torch.round, {}, (-3, 3)),
    "trunc": (torch.trunc, {}, (-3, 3)),
    "logical_not": (torch.logical_not, {}, (-1, 1)),
    "isnan": (torch.isnan, {}, (-3, 3)),
    "isinf": (torch.isinf, {}, (-3, 3)),
}


def _op(variant):
    return variant.split("_tanh")[0]


@pytest.mark.parametrize(
    "variant,dtype",
    [pytest.param(v, d, marks=pytest.mark.op(_op(v)), id=f"{v}-{_name(d)}")
     for v in UNARY for d in DTYPES],
)
def test_unary(variant, dtype):
    fn, kwargs, (low, high) = UNARY[variant]
    fn = opmath(fn) if variant in OPMATH else fn
    for k, (shape, layout) in enumerate(UNARY_LAYOUTS):
        x = make(shape, dtype, seed=k, low=low, high=high, layout=layout)
        if not conform(_op(variant), fn, x, **kwargs):
            break  # refused for the dtype: once is enough


SPECIAL = [0.0, -0.0, 1.0, -1.0, float("inf"), float("-inf"), float("nan"), 0.5, -2.5, 1e-30]


@pytest.mark.parametrize("variant", [pytest.param(v, marks=pytest.mark.op(_op(v)), id=v)
                                     for v in UNARY])
def test_unary_special_values(variant):
    # nan, infinities, signed zeros, a tie for round, a value below f16's range
    fn, kwargs, _ = UNARY[variant]
    fn = opmath(fn) if variant in OPMATH else fn
    if variant == "gelu":
        # torch 2.11's vectorized float32 CPU gelu gives nan at inf (its scalar path and
        # float64 give inf, the limit, which kiln gives): the reference is float64's, rounded
        fn = through_float64(fn)
    for dtype in (f64, f32, f16, bf16):
        with case_of(dtype):
            conform(_op(variant), fn, torch.tensor(SPECIAL, dtype=dtype), **kwargs)


# --- gelu_backward: the gelu rule's one op ------------------------------------------------------

GELU_BACKWARD_LAYOUTS = UNARY_LAYOUTS[:2] + [((0, 3), "contig"), ((3, 4), "t"), ((2, 5), "step"),
                                             ((2, 3), "offset")]


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("dtype", [pytest.param(d, marks=pytest.mark.op("gelu_backward"),
                                                id=_name(d)) for d in (f64, f32, f16, bf16)])
def test_gelu_backward(dtype, approximate):
    """torch's gelu_backward, the half dtypes computed in f32 and rounded once (as the GPU
    computes it)."""
    fn = opmath(torch.ops.aten.gelu_backward)
    for k, (shape, layout) in enumerate(GELU_BACKWARD_LAYOUTS):
        grad = make(shape, dtype, seed=k, layout=layout)
        x = make(shape, dtype, seed=k + 10, layout=layout)
        check("gelu_backward", fn, grad, x, approximate=approximate)


def test_gelu_backward_broadcasts_and_refuses_what_torch_refuses():
    grad, x = make((2, 3), f64, seed=0), make((3,), f64, seed=1)
    check("gelu_backward", torch.ops.aten.gelu_backward, grad, x, approximate="tanh")
    assert "'self'" in expect_refusal("gelu_backward", grad, x.to(i64))
    assert "'approximate'" in expect_refusal("gelu_backward", grad, grad, approximate="erf")
    with pytest.raises(RuntimeError):
        torch.ops.aten.gelu_backward(grad, grad, approximate="erf")


# --- binary -----------------------------------------------------------------------------------

BINARY_SHAPES = [
    ((2, 3), "contig", (2, 3), "contig"),
    ((2, 3), "contig", (3,), "contig"),  # broadcast
    ((4, 1), "contig", (1, 3), "contig"),  # both broadcast
    ((), "contig", (2, 3), "contig"),  # 0-d self
    ((2, 3), "t", (), "contig"),  # 0-d tensor other
    ((3, 4), "t", (3, 4), "step"),  # non-contiguous both
    ((2, 3), "offset", (2, 1), "t"),
    ((0, 3), "t", (1, 3), "contig"),  # empty and transposed: torch's result is contiguous
    ((2, 3, 4), "t", (3, 1), "contig"),  # the result follows self's order
    ((4, 1, 3), "step", (2, 1), "t"),  # size 1 against size 2
]
# variant -> (kiln op, torch function, kwargs, self range, other range, other nonzero)
BINARY = {
    "add": ("add", torch.add, {}, (-5, 5), (-5, 5), False),
    "add_alpha": ("add", torch.add, {"alpha": 2}, (-5, 5), (-5, 5), False),
    "sub": ("sub", torch.sub, {}, (-5, 5), (-5, 5), False),
    "sub_alpha": ("sub", torch.sub, {"alpha": 3}, (-5, 5), (-5, 5), False),
    "mul": ("mul", torch.mul, {}, (-5, 5), (-5, 5), False),
    "div": ("div", torch.div, {}, (-5, 5), (-5, 5), True),
    "div_floor": ("div", torch.div, {"rounding_mode": "floor"}, (-9, 9), (-4, 4), True),
    "div_trunc": ("div", torch.div, {"rounding_mode": "trunc"}, (-9, 9), (-4, 4), True),
    "pow": ("pow", torch.pow, {}, (0, 3), (0, 3), False),
    "maximum": ("maximum", torch.maximum, {}, (-5, 5), (-5, 5), False),
    "minimum": ("minimum", torch.minimum, {}, (-5, 5), (-5, 5), False),
    "fmod": ("fmod", torch.fmod, {}, (-9, 9), (-4, 4), True),
    "remainder": ("remainder", torch.remainder, {}, (-9, 9), (-4, 4), True),
    "eq": ("eq", torch.eq, {}, (-2, 2), (-2, 2), False),
    "ne": ("ne", torch.ne, {}, (-2, 2), (-2, 2), False),
    "lt": ("lt", torch.lt, {}, (-2, 2), (-2, 2), False),
    "le": ("le", torch.le, {}, (-2, 2), (-2, 2), False),
    "gt": ("gt", torch.gt, {}, (-2, 2), (-2, 2), False),
    "ge": ("ge", torch.ge, {}, (-2, 2), (-2, 2), False),
    "logical_and": ("logical_and", torch.logical_and, {}, (-1, 1), (-1, 1), False),
    "logical_or": ("logical_or", torch.logical_or, {}, (-1, 1), (-1, 1), False),
    "bitwise_and": ("bitwise_and", torch.bitwise_and, {}, (-9, 9), (-9, 9), False),
    "bitwise_or": ("bitwise_or", torch.bitwise_or, {}, (-9, 9), (-9, 9), False),
    "bitwise_xor": ("bitwise_xor", torch.bitwise_xor, {}, (-9, 9), (-9, 9), False),
}


SCALARS = {v: (2, -1.5, True) for v in BINARY}
SCALARS.update({"pow": (2, 0.5, True), "div_floor": (2, -1.5), "div_trunc": (2, -1.5),
                "fmod": (2, -1.5), "remainder": (2, -1.5)})


def _binary_cases(dtypes):
    return [
        pytest.param(v, d, marks=pytest.mark.op(BINARY[v][0]), id=f"{v}-{_name(d)}")
        for v in BINARY for d in dtypes
    ]


@pytest.mark.parametrize("variant,dtype", _binary_cases(DTYPES))
def test_binary(variant, dtype):
    op, fn, kwargs, (lo_a, hi_a), (lo_b, hi_b), nonzero = BINARY[variant]
    fn = opmath(fn) if variant in OPMATH else fn
    for k, (sa, la, sb, lb) in enumerate(BINARY_SHAPES):
        a = make(sa, dtype, seed=k, low=lo_a, high=hi_a, layout=la)
        b = make(sb, dtype, seed=100 + k, low=lo_b, high=hi_b, layout=lb, nonzero=nonzero)
        if not conform(op, fn, a, b, **kwargs):
            break
    a = make((2, 3), dtype, seed=9, low=lo_a, high=hi_a, layout="t")
    for number in SCALARS[variant]:  # a Python number: its category alone can promote
        with case_of(number):
            conform(op, fn, a, number, **kwargs)


# Mixed operands: (self dtype, other as a dtype of a tensor / 0-d tensor, or a Python scalar).
PROMOTIONS = [
    (i64, 2.5), (b8, 3), (u8, i8), (f16, ("0d", f32)), (i32, ("0d", f64)), (bf16, f16),
    (i8, b8), (f32, 3), (b8, 2.5), (u8, ("0d", i64)), (i32, i64), (f16, 0.1), (b8, True),
    (f32, f64), (i64, ("0d", f16)), (("0d", i64), ("0d", f32)), (u8, -2), (i8, ("0d", b8)),
]


def _operand(spec, shape, seed, low, high, nonzero):
    if not isinstance(spec, (tuple, torch.dtype)):
        return spec  # a Python scalar
    if isinstance(spec, tuple):
        shape, spec = (), spec[1]
    return make(shape, spec, seed=seed, low=low, high=high, nonzero=nonzero)


def _spec_id(spec):
    if isinstance(spec, tuple):
        return "0d" + _name(spec[1])
    return _name(spec) if isinstance(spec, torch.dtype) else repr(spec)


@contextlib.contextmanager
def case_of(*what):
    """Names the case of a loop in its failure."""
    try:
        yield
    except (AssertionError, KilnError) as e:
        raise AssertionError(f"case {what}: {e}") from e


@pytest.mark.parametrize("variant", [pytest.param(v, marks=pytest.mark.op(BINARY[v][0]), id=v)
                                     for v in BINARY])
def test_binary_promotion(variant):
    op, fn, kwargs, (lo_a, hi_a), (lo_b, hi_b), nonzero = BINARY[variant]
    fn = opmath(fn) if variant in OPMATH else fn
    for self_spec, other_spec in PROMOTIONS:
        with case_of(_spec_id(self_spec), _spec_id(other_spec)):
            a = _operand(self_spec, (2, 3), 1, lo_a, hi_a, False)
            b = _operand(other_spec, (3,), 2, lo_b, hi_b, nonzero)
            conform(op, fn, a, b, **kwargs)  # maximum/minimum: numbers are refused


@pytest.mark.parametrize("variant", [pytest.param(v, marks=pytest.mark.op(BINARY[v][0]), id=v)
                                     for v in BINARY if not v.startswith("bitwise")])
def test_binary_special_values(variant):
    # every pair of signed zeros, infinities, nan and a few finite values; for floor division
    # torch's fmod-based formula (-7 // inf is -1, where floor(-7 / inf) would be -0)
    op, fn, kwargs = BINARY[variant][:3]
    fn = opmath(fn) if variant in OPMATH else fn
    values = [0.0, -0.0, 1.5, -1.5, 7.0, -7.0, float("inf"), float("-inf"), float("nan")]
    for dtype in (f64, f32, f16, bf16):
        a = torch.tensor(values, dtype=dtype).repeat_interleave(len(values))
        b = torch.tensor(values, dtype=dtype).repeat(len(values))
        with case_of(dtype):
            conform(op, fn, a, b, **kwargs)


@pytest.mark.parametrize("dtype", cases("div", [f32, f64, f16, bf16]))
def test_floor_division_matches_torch_exactly(dtype):
    # Quotients that land next to an integer, where floor(a / b) and torch's formula differ.
    a = make((64,), dtype, seed=7, low=-50, high=50)
    b = make((64,), dtype, seed=8, low=0.05, high=0.5)
    b = torch.where(torch.arange(64) % 2 == 0, b, -b)
    for mode in ("floor", "trunc"):
        actual = check("div", torch.div, a, b, rounding_mode=mode, atol=0, rtol=0)
        assert actual.dtype == dtype
    check("remainder", torch.remainder, a, b, atol=0, rtol=0)


@pytest.mark.parametrize("dtype", cases("pow", [i64, i32, i8, u8]))
def test_integer_pow_of_negative_tensor_exponents(dtype):
    if dtype == u8:
        base = torch.tensor([0, 1, 2, 3], dtype=dtype)
        exponent = torch.tensor([0, 3, 5, 2], dtype=dtype)
    else:
        base = torch.tensor([1, -1, -1, 2, -2, 3, 0], dtype=dtype)
        exponent = torch.tensor([-3, -3, -2, -1, -1, 2, 3], dtype=dtype)
    check("pow", torch.pow, base, exponent)
    check("pow", torch.pow, base, exponent[2:3].reshape(()))  # 0-d tensor exponent


@pytest.mark.parametrize("dtype", cases("pow", [i64, i8]))
def test_integer_pow_of_negative_scalar_is_refused(dtype):
    message = expect_refusal("pow", torch.tensor([1, 2], dtype=dtype), -1)
    assert "'other'" in message


@pytest.mark.parametrize("case", cases("add", [(i8, 100, 100), (u8, 200, 100)]))
def test_integer_overflow_wraps(case):
    # u8 wraps (unsigned arithmetic), i8 is computed in int and narrowed: both defined in C++,
    # unlike overflow of i32 and i64, which is not tested
    dtype, a, b = case
    x = torch.tensor([a, -a if dtype != u8 else a], dtype=dtype)
    check("add", torch.add, x, torch.tensor([b, b], dtype=dtype))
    check("add", torch.add, x, b)


@pytest.mark.parametrize("op", cases("div", ["div_floor", "div_trunc"]) + cases("fmod", ["fmod"])
                         + cases("remainder", ["remainder"]))
def test_integer_division_by_zero_is_refused(op):
    # torch raises ZeroDivisionError for integral floor/trunc division, fmod and remainder
    kiln_op, fn, kwargs = BINARY[op][:3]
    a, b = torch.tensor([3, 4], dtype=i32), torch.tensor([1, 0], dtype=i32)
    with pytest.raises(RuntimeError):
        fn(a, b, **kwargs)
    with pytest.raises(KilnError):
        ir.eval_op(kiln_op, a, b, **kwargs)


# --- where, clamp, to_dtype -------------------------------------------------------------------

WHERE_CASES = [
    ((2, 3), (2, 3), f32, (2, 3), f32),
    ((2, 3), (3,), f64, (2, 1), f64),
    ((3, 4), (3, 4), i64, (), f32),  # 0-d other
    ((2, 1), (1, 3), i32, (2, 3), i8),
    ((), (2, 3), f16, (2, 3), f32),
    ((0, 3), (0, 3), u8, (3,), u8),
    ((3, 4), (3, 4), b8, (3, 4), b8),
    ((2, 3), (2, 3), bf16, 2.5, None),  # Python scalar other
    ((2, 3), 1, None, 2.5, None),  # two scalars: the default float
    ((2, 3), (2, 3), u8, (2, 3), i8),
    ((2, 3), 7, None, (2, 3), i32),
    ((2, 3), (2, 3), f16, ((), b8), None),
]


@pytest.mark.filterwarnings("ignore:where received a uint8 condition")
@pytest.mark.parametrize("case", cases("where", WHERE_CASES))
def test_where(case):
    cond_shape, self_spec, self_dtype, other_spec, other_dtype = case
    cond = make(cond_shape, b8, seed=1, layout="t" if len(cond_shape) > 1 else "contig")
    if self_dtype == u8:  # torch still takes a u8 condition (deprecated)
        cond = cond.to(u8)

    def operand(spec, dtype, seed):
        if isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[1], torch.dtype):
            return make(spec[0], spec[1], seed=seed)
        if isinstance(spec, tuple):
            return make(spec, dtype, seed=seed, layout="step" if spec else "contig")
        return spec

    check("where", torch.where, cond, operand(self_spec, self_dtype, 2),
          operand(other_spec, other_dtype, 3))


@pytest.mark.parametrize("dtype", cases("where", [i64, i8, f32]))
def test_where_refuses_a_non_bool_condition(dtype):
    cond = make((2, 3), dtype, seed=1)
    with pytest.raises(RuntimeError):
        torch.where(cond, torch.ones(2, 3), torch.zeros(2, 3))
    assert "'condition'" in expect_refusal("where", cond, torch.ones(2, 3), torch.zeros(2, 3))


CLAMP_CASES = [
    (f32, (2, 3), {"min": -1.0}),
    (f32, (2, 3), {"max": 0.5}),
    (f64, (3, 4), {"min": -1.0, "max": 1.0}),
    (f16, (2, 3), {"min": -1, "max": 1}),
    (bf16, (2, 3), {"min": -0.5}),
    (i64, (2, 3), {"min": -1, "max": 2}),
    (i32, (2, 3), {"min": 2.5}),  # int tensor, float bound: f32
    (i8, (2, 3), {"max": 1}),
    (u8, (2, 3), {"min": 2, "max": 4}),
    (b8, (2, 3), {"min": 0}),  # bool with an int bound: i64
    (f32, (2, 3), {"min": 2.0, "max": 1.0}),  # min > max: max wins
    (f32, (2, 3), {"min": ("t", (2, 3), f32)}),
    (f32, (2, 3), {"max": ("t", (3,), f32)}),  # broadcast bound
    (f32, (2, 3), {"min": ("t", (2, 1), f32), "max": ("t", (3,), f32)}),
    (i64, (2, 3), {"min": ("t", (), f32)}),  # 0-d float bound on an int tensor
    (i32, (2, 3), {"min": ("t", (2, 3), f64)}),
    (f16, (2, 3), {"max": ("t", (), f32)}),
    (f32, (0, 3), {"min": 0.0}),
    (f32, (), {"min": ("t", (2, 3), f32)}),  # the bound broadcasts self
    (b8, (2, 3), {"min": ("t", (2, 3), b8)}),
    (u8, (2, 3), {"min": ("t", (3,), i8)}),
    (f32, (2, 3), {"min": ("t", (3,), f32), "max": 1.0}),  # torch has no mixed overload
    (f32, (2, 3), {"min": 0.0, "max": ("t", (3,), f32)}),
]


@pytest.mark.parametrize("case", cases("clamp", CLAMP_CASES))
def test_clamp(case):
    dtype, shape, bounds = case
    x = make(shape, dtype, seed=4, layout="t" if len(shape) > 1 else "contig")
    kwargs = {}
    for k, (name, bound) in enumerate(bounds.items()):
        if isinstance(bound, tuple):
            bound = make(bound[1], bound[2], seed=5 + k, low=-2, high=2)
        kwargs[name] = bound
    conform("clamp", torch.clamp, x, **kwargs)


@pytest.mark.parametrize("dtype", cases("clamp", [f32, f64]))
def test_clamp_propagates_nan(dtype):
    x = torch.tensor([float("nan"), 1.0, -3.0, 3.0], dtype=dtype)
    check("clamp", torch.clamp, x, min=-1.0, max=1.0)
    bound = torch.tensor([0.0, float("nan"), 0.0, 0.0], dtype=dtype)
    check("clamp", torch.clamp, x, min=bound)


def _to_copy(x, dtype):
    # kiln's to_dtype is always a new tensor, as aten._to_copy (x.to(x.dtype) would alias x)
    return torch.ops.aten._to_copy(x, dtype=dtype)


TO_LAYOUTS = [((2, 3), "contig"), ((), "contig"), ((0, 2), "contig"), ((3, 4), "t"),
              ((2, 5), "step"), ((2, 3), "offset"), ((0, 3), "t")]


@pytest.mark.parametrize("src", [
    pytest.param(s, marks=pytest.mark.op("to_dtype"), id=_name(s)) for s in DTYPES])
def test_to_dtype(src):
    # float -> int truncates toward zero; negative floats to u8 and values out of the target's
    # range are undefined in torch, so the data stays in range there.
    for dst in DTYPES:
        low = 0.0 if dst in (u8,) else -100.0
        for k, (shape, layout) in enumerate(TO_LAYOUTS):
            x = make(shape, src, seed=k, low=low, high=100.0, layout=layout)
            with case_of(dst, shape, layout):
                check("to_dtype", _to_copy, x, dtype=ir.dtype_name(dst),
                      torch_kwargs={"dtype": dst})


@pytest.mark.parametrize("dst", cases("to_dtype", [u8, i8, i32, b8, f16]))
def test_to_dtype_wraps_integers(dst):
    # int -> narrower int wraps (two's complement); int/float -> bool is "nonzero"
    x = torch.tensor([300, -1, 200, -129, 0, 2**40 + 5], dtype=i64)
    check("to_dtype", _to_copy, x, dtype=ir.dtype_name(dst), torch_kwargs={"dtype": dst})
    y = torch.tensor([2.5, -0.0, float("nan"), float("inf"), 0.0, -1e-30], dtype=f32)
    if dst in (b8, f16):
        check("to_dtype", _to_copy, y, dtype=ir.dtype_name(dst),
              torch_kwargs={"dtype": dst})


@pytest.mark.parametrize("case", cases("to_dtype", [(f32, f16), (f32, bf16), (f64, f32),
                                                   (f64, f16), (bf16, f16)]))
def test_to_dtype_rounds_to_nearest_even_and_overflows_to_infinity(case):
    src, dst = case
    x = torch.tensor([7e4, -1e10, 65519.0, 65520.0, 3.4e38, 1e39, 1 + 2**-11, 1 + 3 * 2**-11,
                      1 + 2**-8, 1e-8, -6e-8, 2**-25], dtype=f64).to(src)
    check("to_dtype", _to_copy, x, dtype=ir.dtype_name(dst), torch_kwargs={"dtype": dst},
          atol=0, rtol=0)


# --- in-place forms -------------------------------------------------------------------------

def _torch_inplace(op):
    """torch's in-place method for kiln's `op_`; gelu_ and silu_ are aten ops, not methods."""
    if op in ("gelu_", "silu_"):
        return getattr(torch.ops.aten, op)
    return getattr(torch.Tensor, op)


def clone_view(x):
    """A copy of x with its own storage and x's sizes, strides and storage offset."""
    return torch.tensor([], dtype=x.dtype).set_(
        x.untyped_storage().clone(), x.storage_offset(), x.size(), x.stride())


def _inplace_reference(op, x, *args, **kwargs):
    """torch's op_ on a clone: (the tensor returned, the clone after). Half dtypes without a CPU
    kernel go through float32 as in harness.reference."""
    target = clone_view(x)
    fn = _torch_inplace(op)
    if (op, x.dtype) not in _NO_HALF_KERNEL:
        try:
            return fn(target, *args, **kwargs), target
        except RuntimeError as e:
            if x.dtype not in _HALF or "not implemented for" not in str(e):
                raise
        _NO_HALF_KERNEL.add((op, x.dtype))
    up = [a.float() if isinstance(a, torch.Tensor) and a.dtype in _HALF else a for a in args]
    target32 = x.float()
    fn(target32, *up, **kwargs)
    target.copy_(target32)
    return target, target


def check_inplace(op, x, *args, opmath_fn=None, **kwargs):
    """kiln's `op_` against torch's on a clone of x: the result, its meta (self's), and that the
    input was written. Where torch refuses, kiln must refuse. `opmath_fn`: the out-of-place op
    whose opmath() values are the reference for half dtypes."""
    try:
        result, target = _inplace_reference(op, x, *args, **kwargs)
    except (RuntimeError, TypeError):
        expect_refusal(op, clone_view(x), *args, **kwargs)
        return False
    assert result.data_ptr() == target.data_ptr()
    if opmath_fn is not None and x.dtype in _HALF:
        target.copy_(opmath(opmath_fn)(x, *args, **kwargs))
    graph = ir.Graph()
    inputs = [clone_view(x)]
    lifted = [ir.placeholder_like(graph, "self", inputs[0])]
    for k, a in enumerate(args):
        if isinstance(a, torch.Tensor):
            inputs.append(a)
            lifted.append(ir.placeholder_like(graph, f"arg{k}", a))
        else:
            lifted.append(a)
    lifted_kwargs = {}
    for name, a in kwargs.items():
        if isinstance(a, torch.Tensor):
            inputs.append(a)
            a = ir.placeholder_like(graph, name, a)
        lifted_kwargs[name] = a
    value = graph.call(op, *lifted, **lifted_kwargs)
    meta = value.meta
    assert meta["dtype"] == ir.dtype_name(x.dtype)
    assert meta["sizes"] == list(x.shape)
    assert meta["strides"] == list(x.stride())
    graph.set_outputs([value, lifted[0]])
    out, written = ir.run(graph, *inputs)
    maybe_check_compiled(op, out, clone_view(x), *args, **kwargs)
    assert_meta_matches(meta, target)
    assert_values_match(out, target)
    assert_values_match(written, target)
    assert list(written.stride()) == list(x.stride())
    return True


INPLACE_UNARY = [_op(v) for v in UNARY if v != "gelu_tanh"]
INPLACE_BINARY = {v: spec for v, spec in BINARY.items() if spec[0] not in ("maximum", "minimum")}


def _inplace_ops():
    return sorted(n for n in ir.op_names() if n.endswith("_") and n[:-1] in _family())


def _family():
    return {_op(v) for v in UNARY} | {spec[0] for spec in BINARY.values()} | {"where", "clamp",
                                                                              "to_dtype"}


@pytest.mark.parametrize("variant", [
    pytest.param(v, marks=pytest.mark.op(_op(v) + "_"), id=v + "_")
    for v in UNARY if _op(v) not in ("isnan", "isinf")  # torch has no isnan_, isinf_
])
def test_unary_inplace(variant):
    fn, kwargs, (low, high) = UNARY[variant]
    op = _op(variant) + "_"
    ref = fn if variant in OPMATH else None
    for dtype in DTYPES:
        for k, (shape, layout) in enumerate(UNARY_LAYOUTS[:6]):
            x = make(shape, dtype, seed=k, low=low, high=high, layout=layout)
            with case_of(dtype, shape, layout):
                if not check_inplace(op, x, opmath_fn=ref, **kwargs):
                    break


INPLACE_SHAPES = [
    ((2, 3), "contig", (2, 3), "contig"),
    ((2, 3), "t", (3,), "contig"),  # other broadcasts to self
    ((), "contig", (), "contig"),
    ((3, 4), "step", (3, 1), "offset"),
    ((0, 3), "contig", (3,), "contig"),
]


def _inplace_cases():
    return [pytest.param(v, marks=pytest.mark.op(INPLACE_BINARY[v][0] + "_"), id=v + "_")
            for v in INPLACE_BINARY]


@pytest.mark.parametrize("variant", _inplace_cases())
def test_binary_inplace(variant):
    op, fn, kwargs, (lo_a, hi_a), (lo_b, hi_b), nonzero = INPLACE_BINARY[variant]
    ref = fn if variant in OPMATH else None
    for dtype in DTYPES:
        for k, (sa, la, sb, lb) in enumerate(INPLACE_SHAPES):
            a = make(sa, dtype, seed=k, low=lo_a, high=hi_a, layout=la)
            b = make(sb, dtype, seed=100 + k, low=lo_b, high=hi_b, layout=lb, nonzero=nonzero)
            with case_of(dtype, sa, la, sb, lb):
                if not check_inplace(op + "_", a, b, opmath_fn=ref, **kwargs):
                    break
        for number in SCALARS[variant]:
            a = make((2, 3), dtype, seed=9, low=lo_a, high=hi_a, layout="t")
            with case_of(dtype, number):
                check_inplace(op + "_", a, number, opmath_fn=ref, **kwargs)


# self dtype, other: torch computes in the promoted dtype, then casts to self's
INPLACE_PROMOTIONS = [(u8, i8), (f16, f32), (f32, i64), (i32, 2.5), (b8, i64), (f32, f64),
                      (i64, ("0d", f64)), (f16, 0.1), (bf16, ("0d", f64)), (i8, i64)]


@pytest.mark.parametrize("variant", _inplace_cases())
def test_binary_inplace_promotion(variant):
    op, fn, kwargs, (lo_a, hi_a), (lo_b, hi_b), nonzero = INPLACE_BINARY[variant]
    for self_dtype, other_spec in INPLACE_PROMOTIONS:
        with case_of(self_dtype, _spec_id(other_spec)):
            a = make((2, 3), self_dtype, seed=1, low=lo_a, high=hi_a)
            b = _operand(other_spec, (3,), 2, lo_b, hi_b, nonzero)
            check_inplace(op + "_", a, b, opmath_fn=fn if variant in OPMATH else None, **kwargs)


@pytest.mark.parametrize("variant", cases("add_", ["add"]) + cases("mul_", ["mul"])
                         + cases("eq_", ["eq"]) + cases("bitwise_or_", ["bitwise_or"]))
def test_inplace_refuses_to_broadcast_self(variant):
    op, fn, kwargs = BINARY[variant][:3]
    a, b = make((3,), i32, seed=1), make((2, 3), i32, seed=2)
    with pytest.raises(RuntimeError):
        _torch_inplace(op + "_")(a.clone(), b)
    assert "'self'" in expect_refusal(op + "_", a, b)


@pytest.mark.parametrize("variant", cases("add_", ["add"]) + cases("neg_", ["neg"])
                         + cases("clamp_", ["clamp"]))
def test_inplace_refuses_an_expanded_self(variant):
    # torch: "more than one element of the written-to tensor refers to a single memory location"
    x = make((1, 3), f32, seed=1).expand(2, 3)
    args = {"add": (1.0,), "neg": (), "clamp": (0.0,)}[variant]
    with pytest.raises(RuntimeError):
        _torch_inplace(variant + "_")(x, *args)
    assert "'self'" in expect_refusal(variant + "_", x, *args)
    check_inplace(variant + "_", make((1, 3), f32, seed=1).expand(1, 3), *args)  # size 1: fine


@pytest.mark.parametrize("variant", cases("add", ["add"]) + cases("sub", ["sub"])
                         + cases("add_", ["add_"]))
def test_bool_alpha(variant):
    # torch takes alpha=True for bool results only
    a, b = make((2, 3), b8, seed=1), make((3,), b8, seed=2)
    if variant == "add_":
        check_inplace("add_", a, b, alpha=True)
    else:
        conform(variant, getattr(torch, variant), a, b, alpha=True)
    f = make((2, 3), f32, seed=3)
    torch_fn = _torch_inplace(variant) if variant.endswith("_") else getattr(torch, variant)
    with pytest.raises(RuntimeError):
        torch_fn(f.clone(), f, alpha=True)
    assert "'alpha'" in expect_refusal(variant, f, f, alpha=True)


@pytest.mark.parametrize(
    "case",
    cases("clamp_", [(f32, {"min": -1.0}), (f32, {"max": 0.5}), (i64, {"min": -1, "max": 1}),
                     (i32, {"min": 1.5}), (f16, {"min": ("t", (3,), f32)}),
                     (f32, {"min": ("t", (2, 3), i64), "max": ("t", (), f32)}),
                     (u8, {"max": ("t", (3,), u8)}), (f32, {"min": ("t", (4, 2, 3), f32)})]),
)
def test_clamp_inplace(case):
    dtype, bounds = case
    x = make((2, 3), dtype, seed=3, layout="t")
    kwargs = {}
    for k, (name, bound) in enumerate(bounds.items()):
        if isinstance(bound, tuple):
            bound = make(bound[1], bound[2], seed=5 + k, low=-2, high=2)
        kwargs[name] = bound
    check_inplace("clamp_", x, **kwargs)


def test_registry_has_only_torchs_inplace_forms():
    for op in _inplace_ops():
        assert op in ("gelu_", "silu_") or hasattr(torch.Tensor, op), f"torch has no {op}"
    for op in ("isnan_", "isinf_", "maximum_", "minimum_", "to_dtype_", "where_"):
        assert op not in ir.op_names()


# --- argument errors and unsupported dtypes ----------------------------------------------------

ERRORS = [
    ("add", (torch.ones(2, 3), torch.ones(4)), {}, "other"),
    ("mul", (torch.ones(2, 3), torch.ones(3, 2)), {}, "other"),
    ("div", (torch.ones(2), torch.ones(2)), {"rounding_mode": "bad"}, "rounding_mode"),
    ("gelu", (torch.ones(2),), {"approximate": "x"}, "approximate"),
    ("bitwise_and", (torch.ones(2), torch.ones(2)), {}, "other"),
    ("add", (torch.ones(2, dtype=i64), torch.ones(2, dtype=i64)), {"alpha": 2.0}, "alpha"),
    ("sub", (torch.ones(2, dtype=b8), torch.ones(2, dtype=b8)), {}, "self"),
    ("sub", (torch.ones(2, dtype=i64), torch.ones(2, dtype=b8)), {}, "other"),
    ("sub", (torch.ones(2, dtype=b8), 1), {}, "self"),
    ("clamp", (torch.ones(2),), {}, "min"),
    ("where", (torch.ones(2, dtype=b8), torch.ones(3), torch.ones(2)), {}, "self"),
    ("silu", (torch.ones(2, dtype=i64),), {}, "self"),
    ("neg", (torch.ones(2, dtype=b8),), {}, "self"),
    ("add_", (torch.ones(2, dtype=i64), 1.5), {}, "self"),
    ("mul_", (torch.ones(2, dtype=b8), torch.ones(2, dtype=u8)), {}, "self"),
    ("eq", (torch.ones(2, 3), torch.ones(2)), {}, "other"),
]


@pytest.mark.parametrize("op,args,kwargs,arg", [
    pytest.param(op, args, kwargs, arg, marks=pytest.mark.op(op), id=f"{op}-{arg}-{k}")
    for k, (op, args, kwargs, arg) in enumerate(ERRORS)
])
def test_bad_arguments_are_refused(op, args, kwargs, arg):
    fn = _torch_inplace(op) if op.endswith("_") else getattr(torch, op, None)
    if op in ("gelu", "silu"):
        fn = getattr(torch.nn.functional, op)
    with pytest.raises(RuntimeError):
        fn(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args], **kwargs)
    assert f"'{arg}'" in expect_refusal(op, *args, **kwargs)


@pytest.mark.parametrize("op", cases("exp", ["exp"]) + cases("add", ["add"])
                         + cases("to_dtype", ["to_dtype"]))
def test_complex_is_unsupported(op):
    x = torch.ones(2, dtype=torch.complex64)
    args = {"exp": (x,), "add": (x, x), "to_dtype": (x,)}[op]
    kwargs = {"dtype": "complex128"} if op == "to_dtype" else {}
    with pytest.raises(KilnError) as info:
        ir.eval_op(op, *args, **kwargs)
    assert "c64" in info.value.message or "complex" in info.value.message


def test_every_pointwise_op_has_cases():
    registered = set(ir.op_names())
    assert _family() <= registered, f"missing from the registry: {_family() - registered}"
    covered = {op + "_" for op in INPLACE_UNARY} | {op + "_" for op, *_ in INPLACE_BINARY.values()}
    assert set(_inplace_ops()) <= covered | {"clamp_"}
