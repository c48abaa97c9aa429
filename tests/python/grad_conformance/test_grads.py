"""Gradient conformance: every differentiable op's grads (its derivative rule, or its
decomposition's) against torch.autograd and central finite differences, in float64. Cases cover broadcasting, 0-d, size-1 and non-contiguous inputs."""
import pytest
import torch
import torch.nn.functional as F

from grad_harness import cases, check_grads, leaf
from kiln import ir

# --- pointwise -------------------------------------------------------------

# op: (torch fn, low, high), the range keeping it smooth and defined
UNARY = {
    "exp": (torch.exp, -2, 2), "exp2": (torch.exp2, -2, 2), "log": (torch.log, 0.5, 3),
    "log1p": (torch.log1p, -0.5, 2), "expm1": (torch.expm1, -2, 2), "sqrt": (torch.sqrt, 0.5, 3),
    "rsqrt": (torch.rsqrt, 0.5, 3), "sin": (torch.sin, -3, 3), "cos": (torch.cos, -3, 3),
    "tan": (torch.tan, -1, 1), "tanh": (torch.tanh, -2, 2), "sigmoid": (torch.sigmoid, -3, 3),
    "erf": (torch.erf, -2, 2), "reciprocal": (torch.reciprocal, 0.5, 3), "neg": (torch.neg, -2, 2),
    "abs": (torch.abs, 0.2, 2), "relu": (torch.relu, -2, 2), "silu": (F.silu, -3, 3),
    "gelu": (F.gelu, -3, 3), "floor": (torch.floor, -2, 2), "ceil": (torch.ceil, -2, 2),
    "round": (torch.round, -2, 2), "trunc": (torch.trunc, -2, 2), "sign": (torch.sign, -2, 2),
}
UNARY_CASES = [(op, shape, layout) for op in UNARY
               for shape, layout in [((2, 3), "contig"), ((3, 4), "t"), ((), "contig")]]


@pytest.mark.parametrize("case", [p for op, *rest in UNARY_CASES
                                  for p in cases(op, [(op, *rest)])])
def test_unary(case):
    op, shape, layout = case
    fn, low, high = UNARY[op]
    x = leaf(*shape, low=low, high=high, layout=layout)
    if op == "abs":  # away from the kink at 0
        x = (x.detach() * torch.where(torch.rand(x.shape) < 0.5, -1.0, 1.0).double()).requires_grad_()
    check_grads(op, fn, x)


@pytest.mark.parametrize("case", cases("gelu", ["tanh"]))
def test_gelu_forms(case):
    check_grads("gelu", F.gelu, leaf(2, 3, low=-3, high=3), approximate=case)


@pytest.mark.parametrize("case", cases("gelu_backward", ["none", "tanh"]))
def test_gelu_backward(case):
    """Differentiated through its decomposition (twice-differentiable gelu, as torch's)."""
    check_grads("gelu_backward", torch.ops.aten.gelu_backward, leaf(2, 3), leaf(2, 3, low=-3, high=3),
                approximate=case)


def _binary_cases():
    out = []
    for op, fn in [("add", torch.add), ("sub", torch.sub)]:
        out += [(op, fn, (leaf(2, 3), leaf(3)), {}), (op, fn, (leaf(2, 3), leaf(2, 1)), {"alpha": 2}),
                (op, fn, (leaf(2, 3), 1.5), {}), (op, fn, (leaf(3, 1, layout="t"), leaf(4)), {})]
    out += [("mul", torch.mul, (leaf(2, 1, 3), leaf(4, 3)), {}),
            ("mul", torch.mul, (leaf(2, 3), leaf()), {}),
            ("mul", torch.mul, (leaf(2, 3), 2.5), {}),
            ("mul", torch.mul, (leaf(2, 3), leaf(3, grad=False)), {}),
            ("div", torch.div, (leaf(2, 3), leaf(3, low=0.5, high=2)), {}),
            ("div", torch.div, (leaf(2, 3), 4.0), {}),
            ("div", torch.div, (leaf(2, 3), leaf(3, low=0.5, high=2)), {"rounding_mode": "floor"}),
            ("pow", torch.pow, (leaf(2, 3, low=0.5, high=2), 2.5), {}),
            ("pow", torch.pow, (leaf(2, 3), 3), {}),
            ("pow", torch.pow, (leaf(2, 3), 0), {}),
            ("pow", torch.pow, (leaf(2, 3, low=0.5, high=2), leaf(3)), {}),
            ("fmod", torch.fmod, (leaf(2, 3, low=-5, high=5), leaf(3, low=1, high=2)), {}),
            ("fmod", torch.fmod, (leaf(2, 3, low=-5, high=5), 1.5), {}),
            ("remainder", torch.remainder, (leaf(2, 3, low=-5, high=5), leaf(3, low=1, high=2)), {}),
            ("maximum", torch.maximum, (leaf(2, 3), leaf(3)), {}),
            ("minimum", torch.minimum, (leaf(2, 3), leaf(2, 1)), {})]
    return out


BINARY = _binary_cases()


@pytest.mark.parametrize("case", [p for c in BINARY for p in cases(c[0], [c])])
def test_binary(case):
    op, fn, args, kwargs = case
    check_grads(op, fn, *args, fd=op not in ("fmod", "remainder"), **kwargs)


def test_maximum_ties_split_the_grad():
    x = leaf(4)
    y = x.detach().clone().requires_grad_()
    check_grads("maximum", torch.maximum, x, y, fd=False)


@pytest.mark.parametrize("case", cases("clamp", ["numbers", "min only", "tensors", "max tensor"]))
def test_clamp(case):
    x = leaf(2, 3)
    if case == "numbers":
        check_grads("clamp", torch.clamp, x, min=-0.5, max=0.7)
    elif case == "min only":
        check_grads("clamp", torch.clamp, x, min=0.1)
    elif case == "tensors":
        lo, hi = leaf(3, low=-1, high=0), leaf(2, 1, low=-0.5, high=1)
        check_grads("clamp", torch.clamp, x, lo, hi)
    else:
        check_grads("clamp", torch.clamp, x, max=leaf(3, low=-1, high=1))


@pytest.mark.parametrize("case", cases("where", ["tensors", "number"]))
def test_where(case):
    cond = torch.rand(2, 3, generator=torch.Generator().manual_seed(3)) < 0.5
    if case == "tensors":
        check_grads("where", torch.where, cond, leaf(3), leaf(2, 1))
    else:
        check_grads("where", torch.where, cond, leaf(2, 3), 0.5)


@pytest.mark.parametrize("case", cases("to_dtype", [torch.float32, torch.float64]))
def test_to_dtype(case):
    check_grads("to_dtype", lambda x, dtype: x.to(dtype), leaf(2, 3), dtype=case,
                atol=1e-6, rtol=1e-5, fd=False)


@pytest.mark.parametrize("op", cases("contiguous", ["contiguous"]) + cases("clone", ["clone"]))
def test_copies(op):
    check_grads(op, lambda x: getattr(x, op)(), leaf(3, 2, layout="t"))


# --- reductions ------------------------------------------------------------

REDUCE = [("sum", torch.sum, {}), ("sum", torch.sum, {"dim": [1]}),
          ("sum", torch.sum, {"dim": [0, 2], "keepdim": True}),
          ("mean", torch.mean, {}), ("mean", torch.mean, {"dim": [1]}),
          ("mean", torch.mean, {"dim": [0, 2], "keepdim": True}),
          ("prod", torch.prod, {}), ("prod", torch.prod, {"dim": 1}),
          ("prod", torch.prod, {"dim": 2, "keepdim": True}),
          ("amax", torch.amax, {"dim": [1]}), ("amin", torch.amin, {"dim": [0, 2], "keepdim": True}),
          ("var", torch.var, {"dim": [1]}), ("var", torch.var, {"dim": [1], "correction": 0}),
          ("std", torch.std, {"dim": [2], "keepdim": True})]


@pytest.mark.parametrize("case", [p for c in REDUCE for p in cases(c[0], [c])])
def test_reduce(case):
    op, fn, kwargs = case
    check_grads(op, fn, leaf(2, 3, 4, low=0.5 if op == "prod" else -2), **kwargs)


@pytest.mark.parametrize("case", cases("prod", ["one zero", "two zeros"]))
def test_prod_with_zeros(case):
    x = leaf(2, 4, low=0.5).detach()
    x[0, 1] = 0
    if case == "two zeros":
        x[0, 3] = 0
    check_grads("prod", torch.prod, x.requires_grad_(), dim=1, fd=False)


@pytest.mark.parametrize("case", cases("amax", ["ties"]))
def test_amax_ties_share_the_grad(case):
    x = torch.tensor([[1.0, 3.0, 3.0], [2.0, 0.0, 2.0]], dtype=torch.float64, requires_grad=True)
    check_grads("amax", torch.amax, x, dim=[1], fd=False)


# --- views -----------------------------------------------------------------

def _slice(x, dim, start=None, end=None, step=1):
    index = [slice(None)] * x.dim()
    index[dim] = slice(start, end, step)
    return x[tuple(index)]


VIEWS = [
    ("view", lambda x, size: x.view(size), (leaf(2, 3),), {"size": [3, 2]}),
    ("reshape", lambda x, size: x.reshape(size), (leaf(3, 2, layout="t"),), {"size": [6]}),
    ("flatten", torch.flatten, (leaf(2, 3, 2),), {"start_dim": 1}),
    ("unflatten", torch.unflatten, (leaf(2, 6),), {"dim": 1, "sizes": [2, 3]}),
    ("permute", torch.permute, (leaf(2, 3, 4),), {"dims": [2, 0, 1]}),
    ("transpose", torch.transpose, (leaf(2, 3),), {"dim0": 0, "dim1": 1}),
    ("expand", lambda x, size: x.expand(size), (leaf(1, 3),), {"size": [4, 3]}),
    ("expand", lambda x, size: x.expand(size), (leaf(3),), {"size": [2, 2, 3]}),
    ("squeeze", lambda x, dim: x.squeeze(dim[0]), (leaf(2, 1, 3),), {"dim": [1]}),
    ("squeeze", torch.squeeze, (leaf(1, 3, 1),), {}),
    ("unsqueeze", torch.unsqueeze, (leaf(2, 3),), {"dim": 1}),
    ("slice", _slice, (leaf(3, 6),), {"dim": 1, "start": 1, "end": 5, "step": 2}),
    ("slice", _slice, (leaf(5, 2),), {"dim": 0, "start": -3}),
    ("select", torch.select, (leaf(3, 4),), {"dim": 1, "index": -1}),
    ("select", torch.select, (leaf(3),), {"dim": 0, "index": 1}),
    ("narrow", torch.narrow, (leaf(4, 3),), {"dim": 0, "start": 1, "length": 2}),
    ("cat", torch.cat, ([leaf(2, 1), leaf(2, 3), leaf(2, 2, layout="t")],), {"dim": 1}),
    ("cat", torch.cat, ([leaf(2), leaf(3)],), {}),
    ("stack", torch.stack, ([leaf(2, 3), leaf(2, 3)],), {"dim": 1}),
    ("split", torch.split, (leaf(5, 2),), {"split_size": 2}),
    ("split_with_sizes", torch.split, (leaf(2, 5),), {"split_sizes": [1, 4], "dim": 1}),
    ("chunk", torch.chunk, (leaf(6, 2),), {"chunks": 3}),
    ("unbind", torch.unbind, (leaf(3, 2),), {"dim": 1}),
]
_TORCH_KW = {"split": {"split_size_or_sections": 2}, "split_with_sizes": {"split_size_or_sections": [1, 4], "dim": 1},
             "unflatten": {"dim": 1, "sizes": (2, 3)}}


@pytest.mark.parametrize("case", [p for c in VIEWS for p in cases(c[0], [c])])
def test_views(case):
    op, fn, args, kwargs = case
    check_grads(op, fn, *args, torch_kwargs=_TORCH_KW.get(op), **kwargs)


# --- matrix products -------------------------------------------------------

MATMUL = [
    ("mm", torch.mm, (leaf(2, 3), leaf(3, 4)), {}),
    ("mm", torch.mm, (leaf(2, 3, layout="t"), leaf(3, 4, grad=False)), {}),
    ("bmm", torch.bmm, (leaf(2, 2, 3), leaf(2, 3, 2)), {}),
    ("matmul", torch.matmul, (leaf(3), leaf(3)), {}),
    ("matmul", torch.matmul, (leaf(3), leaf(3, 2)), {}),
    ("matmul", torch.matmul, (leaf(2, 3), leaf(3)), {}),
    ("matmul", torch.matmul, (leaf(2, 1, 2, 3), leaf(3, 3, 2)), {}),
    ("matmul", torch.matmul, (leaf(3), leaf(2, 3, 2)), {}),
    ("addmm", torch.addmm, (leaf(3), leaf(2, 3), leaf(3, 3)), {}),
    ("addmm", torch.addmm, (leaf(2, 3), leaf(2, 2), leaf(2, 3)), {"beta": 0.5, "alpha": 2.0}),
    ("linear", F.linear, (leaf(2, 3), leaf(4, 3), leaf(4)), {}),
    ("linear", F.linear, (leaf(2, 2, 3), leaf(4, 3)), {}),
]


@pytest.mark.parametrize("case", [p for c in MATMUL for p in cases(c[0], [c])])
def test_matmul(case):
    op, fn, args, kwargs = case
    check_grads(op, fn, *args, **kwargs)


# --- convolution -----------------------------------------------------------

CONVOLUTION = [
    (F.conv1d, leaf(2, 3, 7), leaf(4, 3, 3), leaf(4), dict(stride=[2], padding=[1])),
    (F.conv2d, leaf(2, 4, 5, 6), leaf(6, 2, 3, 2), leaf(6),
     dict(stride=[1, 2], padding=[1, 0], dilation=[2, 1], groups=2)),
    (F.conv2d, leaf(1, 3, 5, 5, layout="t"), leaf(3, 1, 3, 3), None, dict(padding=[1], groups=3)),
    (F.conv3d, leaf(1, 2, 4, 3, 4), leaf(2, 2, 2, 2, 2), leaf(2, grad=False), dict(padding=[1])),
]


@pytest.mark.parametrize("case", [p for c in CONVOLUTION for p in cases("convolution", [c])])
def test_convolution(case):
    fn, x, w, b, geometry = case
    args = (x, w) if b is None else (x, w, b)
    torch_kwargs = {k: (v if k == "groups" else tuple(v)) for k, v in geometry.items()}
    check_grads("convolution", fn, *args, torch_kwargs=torch_kwargs, **geometry)


# --- indexing --------------------------------------------------------------

def _index(*values, shape=None):
    t = torch.tensor(values, dtype=torch.int64)
    return t if shape is None else t.reshape(shape)


INDEXING = [
    ("index_select", torch.index_select, leaf(4, 3), 0, _index(2, 0, 2), None),
    ("index_select", torch.index_select, leaf(3, 4), 1, _index(1), None),
    ("gather", torch.gather, leaf(3, 4), 1, _index(0, 3, 3, 1, 2, 2, shape=(3, 2)), None),
    ("scatter_add", torch.scatter_add, leaf(3, 4), 1, _index(0, 3, 3, 1, 2, 2, shape=(3, 2)),
     leaf(3, 2)),
]


@pytest.mark.parametrize("case", [p for c in INDEXING for p in cases(c[0], [c])])
def test_indexing(case):
    op, fn, x, dim, index, src = case
    if src is None:
        check_grads(op, lambda x, dim, index: fn(x, dim, index), x, dim=dim, index=index)
    else:
        check_grads(op, lambda x, dim, index, src: fn(x, dim, index, src), x, dim=dim,
                    index=index, src=src)


@pytest.mark.parametrize("case", cases("embedding", [(4, 3), (5, 2)]))
def test_embedding(case):
    # kiln's embedding(weight, indices); torch's F.embedding(indices, weight)
    indices = _index(1, 3, 1, 0, shape=(2, 2))
    check_grads("embedding", lambda w, i: F.embedding(i, w), leaf(*case), indices)


# --- nn --------------------------------------------------------------------

@pytest.mark.parametrize("case", cases("softmax", [(1, 2), (-1, 3)]) +
                         cases("log_softmax", [(1, 2), (-1, 3)]))
def test_softmax(request, case):
    op = request.node.get_closest_marker("grad_op").args[0]
    dim, rank = case
    x = leaf(*(2, 3, 4)[:rank])
    check_grads(op, getattr(torch, op), x, dim=dim)


@pytest.mark.parametrize("case", cases("layer_norm", ["affine", "plain"]))
def test_layer_norm(case):
    def fn(x, normalized_shape, weight=None, bias=None, eps=1e-5):
        return F.layer_norm(x, normalized_shape, weight, bias, eps)
    x = leaf(2, 3, 4)
    if case == "affine":
        check_grads("layer_norm", fn, x, normalized_shape=[3, 4], weight=leaf(3, 4),
                    bias=leaf(3, 4), eps=1e-5)
    else:
        check_grads("layer_norm", fn, x, normalized_shape=[4])


def _rms_norm(x, normalized_shape, weight=None, eps=1e-6):
    dims = list(range(x.dim() - len(normalized_shape), x.dim()))
    y = x * torch.rsqrt(x.pow(2).mean(dims, keepdim=True) + eps)
    return y * weight if weight is not None else y


@pytest.mark.parametrize("case", cases("rms_norm", ["weight", "plain"]))
def test_rms_norm(case):
    x = leaf(2, 4)
    weight = {"weight": leaf(4)} if case == "weight" else {}
    for fn in (_rms_norm, F.rms_norm):  # the composition, and torch's own op
        check_grads("rms_norm", fn, x, normalized_shape=[4], eps=1e-6, **weight)


CROSS_ENTROPY = [
    ("mean", {}), ("sum", {"reduction": "sum"}), ("none", {"reduction": "none"}),
    ("weight", {"weight": True}), ("smoothing", {"label_smoothing": 0.1}),
    ("ignore", {"ignore_index": 1}), ("probabilities", {"probabilities": True}),
]


@pytest.mark.parametrize("case", cases("cross_entropy", CROSS_ENTROPY, [c[0] for c in CROSS_ENTROPY]))
def test_cross_entropy(case):
    _, kwargs = case
    kwargs = dict(kwargs)
    x = leaf(4, 3)
    target = _index(0, 2, 1, 1)
    if kwargs.pop("probabilities", False):
        target = torch.softmax(leaf(4, 3, grad=False), 1).requires_grad_()
    args = [x, target]
    if kwargs.pop("weight", False):
        args.append(leaf(3, low=0.5, high=2, grad=False))
    check_grads("cross_entropy", F.cross_entropy, *args, **kwargs)


@pytest.mark.parametrize("case", cases("dropout", [0.3, 0.0]) + cases("dropout", ["eval"]))
def test_dropout(case):
    x = leaf(3, 4)
    seed, offset = torch.tensor(5, dtype=torch.int64), torch.tensor(0, dtype=torch.int64)
    p = 0.5 if case == "eval" else case
    train = case != "eval"
    # torch cannot draw kiln's stream: its reference multiplies by kiln's own mask
    (mask,) = ir.run(ir.op_graph("dropout", torch.ones(3, 4, dtype=torch.float64), seed, offset,
                                 p=p, train=train)[0], torch.ones(3, 4, dtype=torch.float64),
                     seed, offset)
    check_grads("dropout", lambda x, s, o, p, train: x * mask, x, seed, offset, p=p, train=train)


def _attention(q, k, v, attn_mask=None, is_causal=False, scale=None, dropped=None):
    scale = scale if scale is not None else q.shape[-1] ** -0.5
    scores = q @ k.transpose(-2, -1) * scale
    if is_causal:
        keep = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool \
            else scores + attn_mask
    weights = torch.softmax(scores, -1)
    return (weights if dropped is None else weights * dropped) @ v


def _dropout_factors(shape, seed, offset, p):
    """The factors (0 or 1 / (1 - p)) kiln's dropout of this stream gives a tensor of `shape`:
    torch cannot draw kiln's stream, so its references multiply by these."""
    ones = torch.ones(shape, dtype=torch.float64)
    (factors,) = ir.run(ir.op_graph("dropout", ones, seed, offset, p=p)[0], ones, seed, offset)
    assert 0 < (factors == 0).sum() < factors.numel()  # some weights dropped, some kept
    return factors


def _scores(q, k, is_causal, scale, attn_mask=None):
    scores = q @ k.transpose(-2, -1) * (scale if scale is not None else q.shape[-1] ** -0.5)
    if is_causal:
        keep = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool \
            else scores + attn_mask
    return scores


def _attention_lse(q, k, v, attn_mask=None, is_causal=False, scale=None):
    return torch.logsumexp(_scores(q, k, is_causal, scale, attn_mask), -1)


def _attention_grads(g, q, k, v, out, lse, attn_mask=None, is_causal=False, scale=None, dropped=None):
    """dq and [dk, dv]: flash attention's backward from the rows' lse and delta = sum(g * out);
    with dropout, dP and the weights dv takes multiplied by the forward's factors."""
    s = scale if scale is not None else q.shape[-1] ** -0.5
    delta = (g * out).sum(-1)
    p = torch.exp(_scores(q, k, is_causal, scale, attn_mask) - lse[..., None])
    factors = 1 if dropped is None else dropped
    ds = p * ((g @ v.transpose(-2, -1)) * factors - delta[..., None]) * s
    return ds @ k, torch.cat([ds.transpose(-2, -1) @ q, (p * factors).transpose(-2, -1) @ g], -1)


@pytest.mark.parametrize("case", cases("attention_lse", ["plain", "causal", "mask"]))
def test_attention_lse(case):
    q, k, v = leaf(2, 3, 4), leaf(2, 5, 4), leaf(2, 5, 2, grad=False)
    if case == "mask":
        check_grads("attention_lse", _attention_lse, q, k, v, leaf(3, 5, grad=False), scale=0.7)
        return
    check_grads("attention_lse", _attention_lse, q, k, v, is_causal=case == "causal", scale=0.7)


@pytest.mark.parametrize("case", [p for op in ("attention_grad_query", "attention_grad_key_value")
                                  for p in cases(op, [(op, False, 0, False), (op, True, 0, False),
                                                      (op, True, 0.4, False), (op, False, 0, True),
                                                      (op, False, 0.4, True)],
                                                 [op + "-plain", op + "-causal", op + "-dropout", op + "-mask",
                                                  op + "-mask-dropout"])])
def test_attention_backward_pieces(case):
    op, causal, p, masked = case
    q, k, v, g = leaf(2, 3, 4), leaf(2, 3, 4), leaf(2, 3, 2), leaf(2, 3, 2)
    mask = torch.tensor([[True, True, False], [False, True, True], [True, False, True]]) if masked else None
    lse = _attention_lse(q, k, v, mask, causal).detach().requires_grad_()
    out = leaf(2, 3, 2)
    which = 0 if op == "attention_grad_query" else 1
    extra, dropped = {}, None
    if p:  # the forward's random stream again: the same weights dropped
        extra = {"dropout_p": p, "seed": torch.tensor(11), "offset": torch.tensor(3 << 40)}
        dropped = _dropout_factors((2, 3, 3), extra["seed"], extra["offset"], p)
    if masked:
        extra["attn_mask"] = mask
    check_grads(op, lambda *a, **kw: _attention_grads(*a[:6], mask, is_causal=causal, dropped=dropped)[which],
                g, q, k, v, out, lse, is_causal=causal, **extra)


@pytest.mark.parametrize("case", cases("scaled_dot_product_attention",
                                       ["plain", "causal", "mask", "float-mask", "bool-mask", "dropout",
                                        "dropout-causal", "dropout-mask"]))
def test_attention(case):
    q, k, v = leaf(2, 3, 4), leaf(2, 3, 4), leaf(2, 3, 2)
    if case in ("plain", "causal", "mask"):
        args = (leaf(3, 3, grad=True),) if case == "mask" else ()  # a mask's grad: the decomposition's
        for fn in (_attention, F.scaled_dot_product_attention):  # the composition, and torch's own op
            check_grads("scaled_dot_product_attention", fn, q, k, v, *args, is_causal=case == "causal")
    elif case in ("float-mask", "bool-mask"):  # a mask that needs none: flash attention's rule
        mask = leaf(2, 1, 3, grad=False) if case == "float-mask" else torch.tensor([[True, False, True]])
        check_grads("scaled_dot_product_attention", _attention, q, k, v, mask)
    else:  # the weights kiln's stream drops get no grad, the kept ones theirs scaled
        causal = case == "dropout-causal"
        mask = leaf(3, 3, grad=False) if case == "dropout-mask" else None
        seed, offset = torch.tensor(11), torch.tensor(3 << 40)
        dropped = _dropout_factors((2, 3, 3), seed, offset, 0.4)
        check_grads("scaled_dot_product_attention",
                    lambda q, k, v, m, *_, **kw: _attention(q, k, v, m, is_causal=causal, dropped=dropped),
                    q, k, v, mask, 0.4, causal, seed=seed, offset=offset)


# --- bfloat16: grads in the inputs' dtype; fused rules compute in f32, as torch's kernels ----

BF16 = [("gelu", F.gelu, 1, {}), ("silu", F.silu, 1, {}), ("softmax", torch.softmax, 1, {"dim": 1}),
        ("log_softmax", torch.log_softmax, 1, {"dim": 1}), ("exp", torch.exp, 1, {}),
        ("mul", torch.mul, 2, {}), ("sum", torch.sum, 1, {"dim": [0]}), ("mm", torch.mm, 2, {})]


@pytest.mark.parametrize("case", [p for c in BF16 for p in cases(c[0], [c], [c[0] + "-bf16"])])
def test_bf16(case):
    op, fn, arity, kwargs = case
    shapes = [(3, 4), (4, 4)] if op == "mm" else [(3, 4), (3, 4)]
    args = [leaf(*shapes[i]).detach().bfloat16().requires_grad_() for i in range(arity)]
    check_grads(op, fn, *args, fd=False, atol=2e-2, rtol=2e-2, **kwargs)


@pytest.mark.parametrize("case", cases("as_strided", [((2, 2), (1, 2), 1), ((3, 2), (1, 1), 0)],
                                       ["transposed-window", "overlapping-view"]))
def test_as_strided(case):
    size, stride, offset = case
    check_grads("as_strided", torch.as_strided, leaf(2, 4), size=list(size), stride=list(stride),
                storage_offset=offset)


# Of an input that is not contiguous: a transposed one reads each storage element once; an
# expanded one (stride 0) reads one three times, and torch shares its grad among them.
@pytest.mark.parametrize("case", cases("as_strided", ["transposed", "expanded"]))
def test_as_strided_of_a_strided_input(case):
    if case == "transposed":
        x = leaf(4, 2, layout="t")  # [4, 2] over [2, 4] memory
        check_grads("as_strided", torch.as_strided, x, size=[3, 2], stride=[1, 3], storage_offset=1)
    else:
        x = leaf(4).detach().expand(3, 4).requires_grad_()
        # finite differences cannot move one of three aliased elements alone
        check_grads("as_strided", torch.as_strided, x, size=[2, 3], stride=[1, 1], storage_offset=0,
                    fd=False)


# --- data-dependent --------------------------------------------------------

@pytest.mark.parametrize("case", cases("masked_select", [((3, 4), (3, 4)), ((3, 4), (4,)), ((4,), (2, 1))]))
def test_masked_select(case):
    # the mask's count is an unbacked symbol; its grad scatters back through the broadcast
    shape, mask_shape = case
    mask = torch.rand(mask_shape, generator=torch.Generator().manual_seed(3)) > 0.4
    check_grads("masked_select", lambda x, mask: torch.masked_select(x, mask), leaf(*shape), mask,
                symbol=ir.UNBACKED, torch_kwargs={})
