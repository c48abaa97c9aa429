"""Other dtypes: half, bfloat16, double, integers, bools."""
import torch

from harness import program

r = torch.randn


@program(inputs=lambda: r(4, 8).double())
def double_math(x):
    return (x.exp() + x.sin()) * 2


@program(inputs=lambda: torch.randint(-5, 5, (4, 8)))
def int_math(x):
    return x * 3 + x // 2 - x % 3


@program(inputs=lambda: torch.randint(0, 100, (4, 8), dtype=torch.int32))
def int32_sum(x):
    return x.sum(dim=1)


@program(inputs=lambda: r(4, 8) > 0)
def bool_logic(m):
    return m & ~m | m, m.any(dim=1), m.all()


@program(inputs=lambda: r(4, 8).half(), rtol=1e-3, atol=1e-3)
def half_to_float(x):
    return x.float() * 2


@program(inputs=lambda: r(4, 8).bfloat16(), rtol=1e-2, atol=1e-2)
def bfloat_to_float(x):
    return x.float().exp()


@program(inputs=lambda: r(4, 8))
def mixed_promotion(x):
    return x + torch.ones(4, 8, dtype=torch.float64), x * 2


@program(inputs=lambda: torch.randint(0, 5, (4, 8)))
def int_to_float_div(x):
    return x / 2, x.float() / 3


@program(inputs=lambda: r(4, 8))
def sum_with_dtype(x):
    return x.sum(dtype=torch.float64)


@program(inputs=lambda: r(4, 8))
def softmax_dtype(x):
    return torch.softmax(x, dim=-1, dtype=torch.float64)


@program(inputs=lambda: r(4, 8))
def comparison_to_float(x):
    return (x > 0).float() * x
