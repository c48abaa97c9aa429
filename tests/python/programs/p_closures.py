"""Inlined functions, closures and cells."""
import torch
import torch.nn.functional as F

from corpus import program

r = torch.randn
SCALE = 0.5


def helper(x, k=2):
    return x * k


def outer_helper(x):
    return helper(x, 3) + helper(x)


@program(inputs=lambda: r(4, 4))
def call_global_helper(x):
    return outer_helper(x)


@program(inputs=lambda: r(4, 4))
def global_constant(x):
    return x * SCALE


@program(inputs=lambda: r(4, 4))
def closure_read(x):
    k = 3
    def inner(y):
        return y * k
    return inner(x) + 1


@program(inputs=lambda: r(4, 4))
def closure_write(x):
    total = x
    def add(y):
        nonlocal total
        total = total + y
    add(x)
    add(x * 2)
    return total


@program(inputs=lambda: r(4, 4))
def nested_closures(x):
    a = 2
    def f(y):
        b = 3
        def g(z):
            return z * a + b
        return g(y) * 2
    return f(x)


@program(inputs=lambda: r(4, 4))
def lambda_fn(x):
    sq = lambda t: t * t
    return sq(x) + sq(x + 1)


@program(inputs=lambda: r(4, 4))
def default_in_inner(x):
    def f(y, scale=4.0):
        return y * scale
    return f(x) + f(x, 2.0)


@program(inputs=lambda: r(4, 4))
def star_args(x):
    def f(*ys):
        return sum(ys)
    return f(x, x, x)


@program(inputs=lambda: r(4, 4))
def star_kwargs(x):
    def f(y, **opts):
        return y * opts["scale"] + opts["shift"]
    return f(x, scale=2, shift=1)


@program(inputs=lambda: r(4, 4))
def call_with_unpacking(x):
    def f(a, b, c=0):
        return a * b + c
    args = (x, 2)
    kwargs = {"c": 1}
    return f(*args, **kwargs)


@program(inputs=lambda: r(4, 4))
def keyword_only(x):
    def f(y, *, k):
        return y + k
    return f(x, k=5)


@program(inputs=lambda: r(4, 4))
def recursion_bounded(x):
    def f(y, n):
        if n == 0:
            return y
        return f(y * 2, n - 1)
    return f(x, 3)


def make_scaler(k):
    def scale(x):
        return x * k
    return scale


scale3 = make_scaler(3.0)


@program(inputs=lambda: r(4, 4))
def closure_of_global(x):
    return scale3(x)


@program(inputs=lambda: r(4, 4))
def functional_alias(x):
    act = F.gelu
    return act(x)


@program(inputs=lambda: r(4, 4))
def torch_fn_in_list(x):
    fns = [torch.sin, torch.cos]
    out = x
    for f in fns:
        out = f(out)
    return out


from other_module import activated, offset_by_scale, scaled  # noqa: E402


@program(inputs=lambda: r(4, 4))
def call_other_module(x):
    return scaled(x) + x * SCALE  # other_module.SCALE is 10, this module's 0.5


@program(inputs=lambda: r(4, 4))
def call_other_module_torch(x):
    return activated(x) - SCALE


@program(inputs=lambda: r(4, 4))
@offset_by_scale
def decorated_in_another_module(x):  # the wrapper (other_module's globals, this __module__)
    return x * SCALE  # this module's SCALE, 0.5; the wrapper adds other_module's, 10


@program(inputs=lambda: r(4, 4))
def generator_expression(x):
    a, b, c = (x * k for k in range(3))
    return a + b + c, tuple(y.sum() for y in (x, x + 1))


@program(inputs=lambda: r(4, 4))
def generator_function(x):
    def powers(y, n):
        for k in range(n):
            yield y ** k
    return sum(powers(x, 3))
