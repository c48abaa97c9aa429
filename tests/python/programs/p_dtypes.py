"""Other dtypes: half, bfloat16, double, integers, bools."""
import torch

from corpus import program

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


# Tensor.to and Tensor.type read each argument they take (or refuse the call).
@program(inputs=lambda: (r(4, 8), r(4, 8).half()), rtol=1e-3, atol=1e-3)
def type_of_another_tensors_type_name(x, h):
    return x.type(h.type()), h.type(), x.type(torch.float64)


@program(inputs=lambda: (r(4, 8), r(2, 2).double()))
def to_another_tensors_dtype(x, other):
    return x.to(other), x.to("cpu", torch.float16, non_blocking=True), x.to(device="cpu", dtype=torch.int32)


@program(inputs=lambda: r(4, 8), breaks="Tensor.to(copy=True)")
def to_with_a_copy(x):
    y = x.to(torch.float32, copy=True)
    y.add_(1)
    return x, y


@program(inputs=lambda: r(4, 8), breaks="Tensor.to() with the keyword memory_format")
def to_with_a_memory_format(x):
    return x.to(torch.float64, memory_format=torch.contiguous_format)
