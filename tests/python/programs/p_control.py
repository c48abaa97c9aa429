"""Branches and loops: on constants, on sizes (guards), unrolled loops."""
import torch
import torch.nn.functional as F

from corpus import call, program

r = torch.randn


@program(inputs=lambda: r(8, 4))
def branch_on_size(x):
    if x.shape[0] > 4:
        return x * 2
    return x + 1


@program(inputs=lambda: r(2, 4))
def branch_on_size_else(x):
    if x.shape[0] > 4:
        return x * 2
    return x + 1


@program(inputs=lambda: r(8, 4))
def branch_on_dim(x):
    if x.dim() == 2:
        x = x.unsqueeze(0)
    return x.sum(0)


@program(inputs=lambda: call(r(4, 4), mode="gelu"))
def branch_on_str(x, mode="relu"):
    if mode == "relu":
        return F.relu(x)
    elif mode == "gelu":
        return F.gelu(x)
    return x


@program(inputs=lambda: call(r(4, 4), flag=True))
def branch_on_bool(x, flag=False):
    return x * 2 if flag else x


@program(inputs=lambda: call(r(4, 4), bias=None))
def branch_on_none(x, bias=None):
    if bias is not None:
        x = x + bias
    return x


@program(inputs=lambda: call(r(4, 4), bias=r(4)))
def branch_on_not_none(x, bias=None):
    if bias is not None:
        x = x + bias
    return x


@program(inputs=lambda: r(4, 4))
def for_range(x):
    for i in range(3):
        x = x * 2 + i
    return x


@program(inputs=lambda: r(4, 4))
def for_range_step(x):
    acc = torch.zeros_like(x)
    for i in range(10, 0, -3):
        acc = acc + x * i
    return acc


@program(inputs=lambda: r(4, 4))
def while_loop(x):
    n = 0
    while n < 4:
        x = x.sin()
        n += 1
    return x


@program(inputs=lambda: r(4, 4))
def break_continue(x):
    for i in range(10):
        if i % 2 == 0:
            continue
        if i > 6:
            break
        x = x + i
    return x


@program(inputs=lambda: (r(4, 4), r(4, 4), r(4, 4)))
def for_tuple_args(*xs):
    total = 0
    for x in xs:
        total = total + x
    return total


@program(inputs=lambda: r(4, 4))
def for_enumerate(x):
    ys = [x, x * 2, x * 3]
    out = x
    for i, y in enumerate(ys):
        out = out + y * i
    return out


@program(inputs=lambda: (r(4, 4), r(4, 4)))
def for_zip(x, y):
    out = 0
    for a, b in zip([x, y], [y, x]):
        out = out + a * b
    return out


@program(inputs=lambda: r(4, 4))
def nested_loops(x):
    for i in range(2):
        for j in range(3):
            x = x + i * j
    return x


@program(inputs=lambda: r(4, 4))
def loop_over_size(x):
    for i in range(x.shape[0]):
        x = x + i
    return x


@program(inputs=lambda: r(4, 4))
def ternary(x):
    k = 3
    return x * (2 if k > 2 else 1)


@program(inputs=lambda: r(4, 4))
def and_or(x):
    a, b = 1, 0
    if a and not b:
        x = x + 1
    if b or a:
        x = x * 2
    return x


@program(inputs=lambda: r(4, 4))
def assert_static(x):
    assert x.dim() == 2, "2-d only"
    return x + 1


@program(inputs=lambda: r(4, 4), breaks="assertion")
def assert_fails(x):
    assert x.dim() == 3, "3-d only"
    return x


@program(inputs=lambda: r(4, 4))
def min_max_builtins(x):
    n = max(x.shape[0], 2)
    m = min(3, x.shape[1], 5)
    return x[:m] * n


@program(inputs=lambda: r(4, 4))
def sum_abs_builtins(x):
    return x * sum([1, 2, 3]) + abs(-2)


@program(inputs=lambda: r(4, 4))
def isinstance_checks(x):
    if isinstance(x, torch.Tensor) and not isinstance(3, float):
        return x * 3
    return x


@program(inputs=lambda: r(4, 4))
def in_operator(x):
    names = ("a", "b")
    if "a" in names and "z" not in names:
        return x + 1
    return x


@program(inputs=lambda: r(4, 4))
def fstring_const(x):
    key = f"layer{2}_{'w'}"
    return x * len(key)
