"""Arithmetic, torch functions, Tensor methods and operators."""
import math

import torch
import torch.nn.functional as F

from corpus import call, program

r = torch.randn


@program(inputs=lambda n=4: r(n, 8))
def add_scalar(x):
    return x + 1


@program(inputs=lambda n=4: (r(n, 8), r(n, 8)))
def mul_add(x, y):
    return x * y + x


@program(inputs=lambda n=4: (r(n, 8), r(8)))
def broadcast_sub(x, b):
    return x - b


@program(inputs=lambda n=4: r(n, 8))
def reflected_ops(x):
    return 2 * x, 1 - x, 3 / (x.abs() + 1), 2 + x


@program(inputs=lambda n=4: r(n, 8))
def unary_chain(x):
    return torch.tanh(torch.sigmoid(x).exp()).neg()


@program(inputs=lambda n=4: r(n, 8))
def gelu_chain(x):
    return F.gelu(x * 0.5 + 1.0) * torch.sigmoid(x)


@program(inputs=lambda n=4: r(n, 8))
def gelu_tanh(x):
    return F.gelu(x, approximate="tanh")


@program(inputs=lambda n=4: r(n, 8))
def silu_relu(x):
    return F.silu(x) + F.relu(x)


@program(inputs=lambda n=4: r(n, 8))
def relu_method(x):
    return x.relu().sqrt()


@program(inputs=lambda n=4: r(n, 8))
def pow_ops(x):
    return x ** 2 + x.pow(3)


@program(inputs=lambda: (r(3, 4), r(4, 5)))
def matmul_op(a, b):
    return a @ b


@program(inputs=lambda: (r(2, 3, 4), r(2, 4, 5)))
def bmm_fn(a, b):
    return torch.bmm(a, b)


@program(inputs=lambda: (r(6, 4), r(3, 4), r(3)))
def linear_fn(x, w, b):
    return F.linear(x, w, b)


@program(inputs=lambda n=4: r(n, 8))
def softmax_fn(x):
    return F.softmax(x, dim=-1)


@program(inputs=lambda n=4: r(n, 8))
def log_softmax_method(x):
    return x.log_softmax(dim=1)


@program(inputs=lambda n=4: r(n, 8))
def torch_softmax(x):
    return torch.softmax(x, 0)


@program(inputs=lambda: (r(4, 8), r(8), r(8)))
def layer_norm_fn(x, w, b):
    return F.layer_norm(x, (8,), w, b, 1e-5)


@program(inputs=lambda n=4: r(n, 8))
def sum_dims(x):
    return x.sum(), x.sum(dim=0), x.sum(1, keepdim=True)


@program(inputs=lambda n=4: r(n, 8))
def mean_var(x):
    return x.mean(dim=-1), x.var(dim=-1)


@program(inputs=lambda n=4: r(n, 8))
def max_dim(x):
    values, indices = x.max(dim=1)
    return values, indices


@program(inputs=lambda n=4: r(n, 8))
def max_all(x):
    return x.max() + x.min()


@program(inputs=lambda n=4: (r(n, 8), r(n, 8)))
def maximum_fn(x, y):
    return torch.maximum(x, y), torch.max(x, y)


@program(inputs=lambda n=4: r(n, 8))
def argmax_fn(x):
    return x.argmax(dim=-1)


@program(inputs=lambda n=4: r(n, 8))
def amax_keep(x):
    return torch.amax(x, dim=1, keepdim=True)


@program(inputs=lambda n=4: r(n, 8))
def clamp_fn(x):
    return x.clamp(min=-0.5, max=0.5)


@program(inputs=lambda n=4: r(n, 8))
def where_fn(x):
    return torch.where(x > 0, x, x * 0.1)


@program(inputs=lambda n=4: r(n, 8))
def masked_fill_fn(x):
    return x.masked_fill(x < 0, 0.0)


@program(inputs=lambda n=4: r(n, 8))
def comparisons(x):
    return (x > 0) & (x < 1), x == x, x != 0


# x.half().float() inside one kernel keeps x's f32 value, as torch.compile's default does
# (Inductor's emulate_precision_casts off); eager rounds it to f16: 2^-11 relative.
@program(inputs=lambda n=4: r(n, 8), rtol=1e-3, atol=1e-3)
def to_dtype(x):
    return x.double() * 2, x.half().float(), x.to(torch.float64)


@program(inputs=lambda n=4: r(n, 8))
def type_as(x):
    return x.long().type_as(x)


@program(inputs=lambda n=4: r(n, 8))
def floor_div(x):
    return x // 0.5, x % 0.7


@program(inputs=lambda n=4: r(n, 8))
def math_constants(x):
    return x * math.sqrt(2.0) + math.pi


@program(inputs=lambda n=4: r(n, 8))
def rsqrt_fn(x):
    return torch.rsqrt(x.abs() + 1e-3)


@program(inputs=lambda n=4: (r(n, 8), r(n, 8)))
def cat_fn(x, y):
    return torch.cat([x, y], dim=0), torch.cat((x, y), 1)


@program(inputs=lambda n=4: (r(n, 8), r(n, 8)))
def stack_fn(x, y):
    return torch.stack([x, y]), torch.stack((x, y), dim=-1)


@program(inputs=lambda n=4: r(n, 8))
def neg_invert(x):
    return -x, ~(x > 0)


@program(inputs=lambda n=4: r(n, 8))
def clone_detachless(x):
    return x.clone() + 1


@program(inputs=lambda n=4: r(n, 8))
def zeros_like_ops(x):
    return torch.zeros_like(x) + torch.ones_like(x) * 2


@program(inputs=lambda n=4: r(n, 8))
def full_like_op(x):
    return torch.full_like(x, 3.0) - x


@program(inputs=lambda n=4: r(n, 8), breaks="cannot decide whether it broadcasts")  # other sizes raise
def creation_ops(x):
    return x + torch.ones(4, 8) + torch.zeros((4, 8))


@program(inputs=lambda n=4: r(n, 8))
def arange_op(x):
    return x + torch.arange(8)


@program(inputs=lambda n=4: r(n, 8))
def keyword_args(x):
    return torch.sum(input=x, dim=1)


@program(inputs=lambda: call(r(4, 8), scale=3.0))
def caller_keywords(x, scale=1.0):
    return x * scale


@program(inputs=lambda n=4: r(n, 8))
def default_args(x, scale=2.0, shift=1):
    return x * scale + shift


@program(inputs=lambda n=4: r(n, 8))
def erf_log(x):
    return torch.erf(x) + torch.log1p(x.abs())


@program(inputs=lambda n=4: r(n, 8))
def isnan_where(x):
    y = x / (x - x)
    return torch.where(torch.isnan(y), torch.zeros_like(y), y)


@program(inputs=lambda: (r(4, 8), torch.randint(0, 8, (4,))))
def cross_entropy_fn(logits, target):
    return F.cross_entropy(logits, target)


@program(inputs=lambda: (torch.randint(0, 10, (4, 3)), r(10, 6)))
def embedding_fn(idx, w):
    return F.embedding(idx, w)


if hasattr(F, "scaled_dot_product_attention"):  # torch >= 2.0 (the GPU machine's)
    @program(inputs=lambda: (r(2, 4, 8, 16), r(2, 4, 8, 16), r(2, 4, 8, 16)))
    def sdpa_causal(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


@program(inputs=lambda: (r(2, 4, 8, 16), r(2, 4, 8, 16), r(2, 4, 8, 16)), atol=1e-4)
def attention_explicit(q, k, v):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    return torch.softmax(scores, dim=-1) @ v


@program(inputs=lambda: r(4, 8), breaks="branch on a tensor's value")
def branch_on_value(x):
    if x.sum() > 0:
        return x
    return -x


@program(inputs=lambda n=4: r(n, 8))
def dropout_training(x):
    # The mask is random (a fresh seed each call): what is compared is what does not
    # depend on it: kept elements scaled by 1 / (1 - p), dropped ones 0.
    y = F.dropout(x, 0.25, training=True)
    return torch.where(y != 0, y * 0.75, x)


@program(inputs=lambda n=4: r(n, 8))
def dropout_eval(x):
    return F.dropout(x, 0.5, training=False) * 2
