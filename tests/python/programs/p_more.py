"""More of everything: reductions, views, mixed control flow, small utilities."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from corpus import call, inference, program

r = torch.randn


@program(inputs=lambda: r(3, 4, 5))
def reduce_many_dims(x):
    return x.sum(dim=(0, 2)), x.mean(dim=[1, 2], keepdim=True), x.prod(dim=1)


@program(inputs=lambda: r(3, 4, 5))
def std_var_unbiased(x):
    return x.std(dim=-1), x.var(dim=0)


@program(inputs=lambda: r(6, 5))
def argmin_keepdim(x):
    return x.argmin(dim=0, keepdim=True)


@program(inputs=lambda: r(6, 5))
def min_dim(x):
    v, i = torch.min(x, dim=1, keepdim=True)
    return v * 2, i


@program(inputs=lambda: r(6, 5))
def any_all_dims(x):
    return (x > 0).any(dim=1), (x > -3).all(dim=0)


@program(inputs=lambda: r(2, 3, 4))
def view_as_chain(x):
    return x.reshape(-1).view(4, 6).t().reshape(3, 8)


@program(inputs=lambda n=3: (r(2, n, 4), r(2, 1, 4), r(8, n)))
def shaped_as_another(x, bias, flat):
    return x + bias.expand_as(x), flat.view_as(x.reshape(8, -1)).reshape_as(x.transpose(0, 1)).sum(0)


@program(inputs=lambda: r(2, 3, 4))
def transpose_then_sum(x):
    return x.transpose(0, 2).sum(dim=0)


@program(inputs=lambda: r(2, 3))
def expand_broadcast_ops(x):
    return x.unsqueeze(-1).expand(2, 3, 4) * torch.arange(4)


@program(inputs=lambda: r(8))
def one_dim_ops(x):
    return x.cumsum if False else x.sort if False else x * x.sum()


@program(inputs=lambda: r(4, 4))
def scalar_tensor_ops(x):
    s = x.sum()
    return x / s, x - x.mean()


@program(inputs=lambda: (r(4, 4), r(4, 1), r(1, 4)))
def broadcast_three(a, b, c):
    return a * b + c


@program(inputs=lambda: r(4, 4))
def chained_methods(x):
    return x.abs().add(1).log().mul(2).sub(0.5).div(3).neg().exp()


@program(inputs=lambda: r(4, 4))
def functional_methods(x):
    return x.sigmoid().tanh().relu().sin().cos()


@program(inputs=lambda: r(4, 4))
def floor_ceil_round(x):
    return (x * 3).floor(), (x * 3).ceil(), (x * 3).round(), (x * 3).trunc()


@program(inputs=lambda: r(4, 4))
def sign_reciprocal(x):
    return x.sign() * x.abs().add(1).reciprocal()


@program(inputs=lambda: (r(4, 4), r(4, 4)))
def remainder_fmod(x, y):
    return torch.remainder(x, 0.7), torch.fmod(x, 0.7)


@program(inputs=lambda: (r(4, 4) > 0, r(4, 4) > 0))
def logical_ops(a, b):
    return torch.logical_and(a, b), torch.logical_or(a, b), torch.logical_not(a)


@program(inputs=lambda: r(4, 4))
def exp2_expm1(x):
    return torch.exp2(x), torch.expm1(x)


@program(inputs=lambda: r(4, 4))
def loop_accumulate_list(x):
    outs = [x]
    for _ in range(4):
        outs.append(outs[-1] * 0.5 + 1)
    return outs[-1], len(outs)


@program(inputs=lambda: r(4, 4))
def loop_over_dict_keys(x):
    scales = {"a": 1.0, "b": 2.0, "c": 3.0}
    out = x
    for name in scales:
        out = out + scales[name]
    return out


@program(inputs=lambda: r(4, 4))
def loop_with_index_math(x):
    total = torch.zeros_like(x)
    for i in range(1, 5):
        total = total + x ** i / math.factorial(i) if False else total + x * i
    return total


@program(inputs=lambda: r(4, 4))
def early_return(x):
    for i in range(10):
        if i == 3:
            return x * i
    return x


@program(inputs=lambda: r(4, 4))
def nested_function_returns_tuple(x):
    def split(y):
        return y * 2, y * 3
    a, b = split(x)
    return a - b


@program(inputs=lambda: r(4, 4))
def higher_order(x):
    def apply(f, y):
        return f(y)
    return apply(torch.sin, x) + apply(lambda t: t * 2, x)


@program(inputs=lambda: r(4, 4))
def generator_expression_sum(x):
    return sum(x * i for i in range(3)) if False else sum([x * i for i in range(3)])


@program(inputs=lambda: call(r(4, 4), r(4, 4), weight=0.3))
def keyword_mix(a, b, weight=0.5):
    return torch.lerp(a, b, weight) if False else a + (b - a) * weight


@program(inputs=lambda: r(4, 4))
def shape_tuple_ops(x):
    shape = x.shape
    new = shape[:1] + (2, 2)
    return x.reshape(new)


@program(inputs=lambda: r(2, 3, 4))
def size_negative_index(x):
    return x.reshape(x.size(-3) * x.size(-2), x.size(-1))


@program(inputs=lambda: r(4, 4))
def ones_of_size(x):
    return torch.ones(x.shape[0]) + torch.zeros(2, x.shape[1]).sum(0)


@program(inputs=lambda: r(4, 4))
def identity(x):
    return x


@program(inputs=lambda: r(4, 4))
def returns_input_view(x):
    return x[1:], x.t()


@program(inputs=lambda: r(4, 6))
def split_sizes_list(x):
    a, b = x.split([2, 4], dim=1)
    return a.sum(1) + b.sum(1)


@program(inputs=lambda: r(4, 6))
def gather_index_select(x):
    idx = torch.arange(3)
    return x.index_select(1, idx) if False else x[:, :3] * 2


lin_a = inference(nn.Linear(4, 4))
lin_b = inference(nn.Linear(4, 4))


@program(inputs=lambda: r(3, 4))
def shared_weights_twice(x):
    return lin_a(lin_a(x)) + lin_b(x)


@program(inputs=lambda: r(3, 4))
def linear_weight_transposed_matmul(x):
    return torch.matmul(x, lin_a.weight.T) + lin_a.bias


@program(inputs=lambda: r(3, 4))
def addmm_fn(x):
    return torch.addmm(lin_a.bias, x, lin_a.weight.t())
