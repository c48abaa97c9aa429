"""Programs with graph breaks: what the tracer refuses runs eagerly at that point, the code
around it compiles (kiln._resume). Each is compared with eager, grads where it trains."""
import io
import contextlib
import logging
import warnings

import torch
import torch.nn as nn

from corpus import call, inference, program

QUIET = io.StringIO()
LOG = logging.getLogger("kiln.corpus.breaks")
LOG.isEnabledFor(logging.DEBUG)  # the logger's level cache, filled as any earlier call would


def r(*shape):
    return torch.randn(*shape)


def say(*parts):
    with contextlib.redirect_stdout(QUIET):
        print(*parts)


@program(inputs=lambda n=4: r(n, 8), breaks="calling builtins.print")
def print_in_the_middle(x):
    y = x.relu() * 2
    print("y", y.shape, file=QUIET)
    return y.sum(dim=1) + 1


@program(inputs=lambda: r(4, 8), breaks="a branch on a tensor's value")
def branch_on_a_sum(x):
    y = x.sin()
    if y.sum() > 0:
        return y * 2
    return y - 1


@program(inputs=lambda: r(4, 8), breaks="a branch on a tensor's value")
def branch_on_a_max_with_a_fallthrough(x):
    y = x * 3
    if y.max() > 100:
        y = y / 100
    return y.exp().mean(dim=0)


@program(inputs=lambda: r(3, 5), breaks="a branch on a tensor's value")
def branch_on_all(x):
    z = x.abs()
    if (z >= 0).all():
        z = z + 1
    else:
        z = z - 1
    return z.log()


@program(inputs=lambda: r(6), breaks="where Python needs a number")
def branch_on_an_item(x):
    s = x.sum().item()
    if s > 0:
        return x * s
    return x - s


@program(inputs=lambda: r(6), breaks="where Python needs a number")
def item_in_an_int(x):
    n = int(x.abs().sum().item()) % 4 + 1
    return x.repeat(n)


@program(inputs=lambda: r(4, 4), breaks="calling builtins.print")
def two_prints(x):
    a = x @ x
    print("a", file=QUIET)
    b = a.tanh()
    print("b", file=QUIET)
    return b + a


@program(inputs=lambda: r(4, 4), breaks="calling builtins.print")
def print_of_a_computed_value(x):
    m = x.mean()
    print("mean is", m, file=QUIET)
    return x - m


@program(inputs=lambda: r(2, 3))  # traced through: the logger is off for debug
def logging_call(x):
    y = x * 2
    LOG.debug("y %s", y.shape)
    return y + 1


@program(inputs=lambda: r(2, 3), breaks="")
def warnings_warn(x):
    y = x + 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        z = y * 2
    return z


def helper_that_prints(t):
    say("helper", t.shape)
    return t * 2


@program(inputs=lambda: r(3, 4), breaks="")
def break_inside_a_called_function(x):
    y = x + 1
    z = helper_that_prints(y)
    return z.relu()


def outer_helper(t):
    return helper_that_prints(t + 1) - 1


@program(inputs=lambda: r(3, 4), breaks="")
def break_two_calls_deep(x):
    return outer_helper(x * 2).sum(dim=0)


@program(inputs=lambda: (r(5), 3), breaks="calling builtins.print")
def break_inside_a_loop(x, n):
    t = x + 1
    for i in range(n):
        t = t * 2
        if i == 1:
            print("mid", i, file=QUIET)
    return t


@program(inputs=lambda: r(4), breaks="a branch on a tensor's value")
def branch_on_a_tensor_in_a_loop(x):
    t = x
    for _ in range(3):
        if t.sum() > 0:
            t = t - 1
        else:
            t = t + 2
    return t


@program(inputs=lambda: (r(3), 2), breaks="calling builtins.print")
def ints_and_lists_live_across(x, k):
    xs = [x, x * 2]
    m = k * 3
    print(len(xs), file=QUIET)
    return xs[1] + xs[0] * m


@program(inputs=lambda: r(3), breaks="calling builtins.print")
def dicts_live_across(x):
    d = {"a": x + 1, "b": x.cos()}
    print(sorted(d), file=QUIET)
    return d["a"] * d["b"]


@program(inputs=lambda: r(3), breaks="calling builtins.print")
def a_tuple_on_the_stack_at_the_break(x):
    return (x + 1, print("in a tuple", file=QUIET), x * 2)


@program(inputs=lambda: r(3), breaks="calling builtins.print")
def a_pending_call_below_the_break(x):
    return torch.add(x * 2, torch.tensor(float(print("arg", file=QUIET) is None)))


@program(inputs=lambda: call(r(3), scale=2.0), breaks="calling builtins.print")
def keywords_across(x, *, scale):
    y = x * scale
    print("scale", scale, file=QUIET)
    return y + scale


class Weights(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 3))


@program(inputs=lambda: (Weights(),), breaks="calling builtins.print", atol=1e-5)
def training_across_a_print(m):
    h = (m.w * 2).sin()
    print("between", file=QUIET)
    return (h * m.w).sum()


@program(inputs=lambda: (Weights(),), breaks="a branch on a tensor's value")
def training_across_a_branch(m):
    h = m.w.exp()
    if h.sum() > 1:
        h = h * 2
    return h.mean()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 16)
        self.b = nn.Linear(16, 4)

    def forward(self, x):
        h = self.a(x).relu()
        if h.mean() > 100:  # never taken: a break all the same
            h = h * 0
        return self.b(h)


@program(inputs=lambda n=3: (inference(Net()), r(n, 8)), breaks="a branch on a tensor's value")
def module_with_a_data_dependent_branch(m, x):
    return m(x)


@program(inputs=lambda: (Net(), r(3, 8)), breaks="a branch on a tensor's value")
def training_a_module_with_a_branch(m, x):
    return m(x).square().sum()


class Logs(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        y = self.fc(x)
        say("forward", y.shape)
        return y.relu()


@program(inputs=lambda: (inference(Logs()), r(2, 4)), breaks="")
def break_inside_a_module_forward(m, x):
    return m(x) + 1


@program(inputs=lambda: r(4, 4), breaks="calling builtins.print")
def no_grad_around_a_break_in_the_caller(x):
    with torch.no_grad():
        y = x * 2
    print("after no_grad", file=QUIET)
    return y + x


@program(inputs=lambda: r(4, 4), breaks="calling builtins.print")
def break_inside_no_grad(x):
    with torch.no_grad():
        print("inside", file=QUIET)
        y = x * 2
    return y + x


@program(inputs=lambda: r(4, 4), breaks="calling builtins.print")
def break_inside_try(x):
    try:
        print("inside try", file=QUIET)
        y = x * 2
    except RuntimeError:
        y = x
    return y


def raises_on_negative(t):
    say("checking")
    if (t < 0).any():
        raise ValueError("negative")
    return t


@program(inputs=lambda: r(4, 4), breaks="")
def a_break_whose_call_raises_into_the_frames_handler(x):
    try:
        y = raises_on_negative(x) * 2
    except ValueError:
        y = x.abs()
    return y + 1


@program(inputs=lambda: r(4, 4), breaks="calling builtins.print")
def break_inside_try_finally(x):
    out = []
    try:
        y = x * 2
        print("in try", file=QUIET)
        out.append(y)
    finally:
        out.append(x + 1)
    return out[0] + out[1]


@program(inputs=lambda: r(4, 4), breaks="calling builtins.print")
def break_inside_autocast_off(x):
    with torch.autocast("cpu", enabled=False):
        y = x @ x
        print("autocast", file=QUIET)
        z = y @ x
    return z


@program(inputs=lambda: (Weights(),), breaks="calling builtins.print")
def no_grad_region_with_a_break_in_training(m):
    with torch.no_grad():
        frozen = m.w * 3
        print("frozen", file=QUIET)
        frozen = frozen + 1
    return (m.w * frozen).sum()


GLOBAL_SCALE = [1.0]


@program(inputs=lambda: r(3), breaks="calling builtins.print")
def global_list_read_across(x):
    y = x * GLOBAL_SCALE[0]
    print("scale", GLOBAL_SCALE[0], file=QUIET)
    return y + GLOBAL_SCALE[0]


@program(inputs=lambda: r(3), breaks="calling builtins.print")
def return_right_after_the_break(x):
    y = x + 1
    return print("done", file=QUIET) or y


@program(inputs=lambda: r(4), breaks="a branch on a tensor's value")
def early_return_on_data(x):
    if x.min() > 10:
        return x
    y = x * 2
    return y.cumsum(0)


@program(inputs=lambda: r(2, 3), breaks="calling builtins.print")
def shape_crosses_as_a_size(x):
    s = x.shape
    print(s, file=QUIET)
    return x.reshape(s[1], s[0]) * 1.0


COUNTER = {"calls": 0}


@program(inputs=lambda: r(3), breaks="")
def a_global_written_at_the_break(x):
    global LAST_SUM
    y = x * 2
    LAST_SUM = 1.0  # noqa: F841 - a global write: Python's to run, once, in order
    print("wrote", file=QUIET)
    return y + 1


@program(inputs=lambda n=4: r(n), breaks="a branch on a tensor's value")
def while_loop_on_data(x):
    steps = 0
    while x.abs().max() > 1 and steps < 10:
        x = x / 2
        steps += 1
    return x * steps


@program(inputs=lambda: r(5), breaks="a branch on a tensor's value")
def nan_check_early_exit(x):
    y = x.log()  # NaN where x < 0
    if torch.isnan(y).any():
        return torch.nan_to_num(y, nan=0.0)
    return y


@program(inputs=lambda: r(4, 4), breaks="a branch on a tensor's value")
def clamp_in_a_helper_with_a_branch(x):
    def helper(t):
        if t.mean() > 0:
            return t.clamp(min=0)
        return t.clamp(max=0)
    return helper(x * 2) + 1


@program(inputs=lambda: r(4, 4), breaks="")
def list_comprehension_with_a_print(x):
    rows = [say_and_return(row) for row in x]
    return torch.stack(rows).sum(dim=0)


def say_and_return(t):
    say("row")
    return t * 2


@program(inputs=lambda: r(3, 3), breaks="calling builtins.print")
def star_args_across(x, *rest):
    parts = (x, x.t())
    print(len(parts), file=QUIET)
    return torch.add(*parts)


@program(inputs=lambda: call(r(3), alpha=0.5, beta=2.0), breaks="calling builtins.print")
def kwargs_dict_across(x, **options):
    y = x * options["alpha"]
    print(sorted(options), file=QUIET)
    return y + options["beta"]


@program(inputs=lambda: r(6), breaks="calling builtins.print")
def unpacked_results_across(x):
    a, b = x.chunk(2)
    print("chunks", file=QUIET)
    c, d = a.sort()
    return c + b, d


@program(inputs=lambda: r(4), breaks="calling builtins.print")
def nested_containers_across(x):
    state = {"hist": [x, x * 2], "meta": (1, "a")}
    print("state", file=QUIET)
    return state["hist"][1] * state["meta"][0] + len(state["meta"][1])


@program(inputs=lambda: r(4), breaks="calling builtins.print")
def three_breaks_in_a_row(x):
    a = x + 1
    print(1, file=QUIET)
    b = a * 2
    print(2, file=QUIET)
    c = b - 3
    print(3, file=QUIET)
    return c.relu()


@program(inputs=lambda: r(4), breaks="a branch on a tensor's value")
def nested_branches_on_data(x):
    if x.sum() > 0:
        if x.max() > 1:
            return x * 3
        return x * 2
    if x.min() < -1:
        return x - 3
    return x - 2


@program(inputs=lambda: r(4))
def a_format_spec_in_an_f_string(x):
    m = x.mean()
    label = f"{x.shape[0]:03d}"
    return x - m, label


class Gate(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        h = self.proj(x)
        return h if h.norm() > 0 else x


class Stack(nn.Module):
    def __init__(self):
        super().__init__()
        self.gates = nn.ModuleList([Gate(), Gate()])

    def forward(self, x):
        for g in self.gates:
            x = g(x).tanh()
        return x


@program(inputs=lambda: (inference(Stack()), r(2, 4)), breaks="a branch on a tensor's value")
def modules_in_a_loop_each_breaking(m, x):
    return m(x)


@program(inputs=lambda: (Stack(), r(2, 4)), breaks="a branch on a tensor's value")
def training_modules_in_a_loop_each_breaking(m, x):
    return m(x).square().mean()


@program(inputs=lambda: r(3, 4), breaks="calling builtins.print")
def no_grad_block_spanning_a_print(x):
    with torch.no_grad():
        a = x * 2
        print("in no_grad", file=QUIET)
        b = a + x
    return b


@program(inputs=lambda: r(3, 4), breaks="calling builtins.print")
def enable_grad_inside_no_grad_with_a_print(x):
    with torch.no_grad():
        with torch.enable_grad():
            a = x * 2
            print("enabled", file=QUIET)
        b = a + 1
    return b


def checked(t):
    if (t > 5).any():
        raise ValueError("too big")
    return t


@program(inputs=lambda: r(4), breaks="")
def except_around_a_call_that_breaks(x):
    try:
        y = checked(x * 10)
    except ValueError:
        y = x.clamp(max=0.5)
    return y * 2


@program(inputs=lambda: r(4), breaks="")
def finally_after_a_break(x):
    log = []
    try:
        y = x * 2
        say("body")
    finally:
        log.append("finally")
    return y, len(log)


@program(inputs=lambda: r(4), breaks="calling builtins.print")
def a_slice_on_the_stack_at_the_break(x):
    return x[1:print("s", file=QUIET) or 3]


@program(inputs=lambda: r(2, 3), breaks="calling builtins.print")
def dtype_and_device_across(x):
    dt, dev = x.dtype, x.device
    print(dt, dev, file=QUIET)
    return torch.ones(2, 3, dtype=dt, device=dev) + x


@program(inputs=lambda: r(4, 4), breaks="calling builtins.print")
def bound_method_pending_at_the_break(x):
    return x.add(print("arg", file=QUIET) or 1)


@program(inputs=lambda: r(5), breaks="a branch on a tensor's value")
def any_and_all_flags(x):
    pos = x > 0
    if pos.all():
        return x
    if pos.any():
        return x * pos
    return -x


@program(inputs=lambda: r(4), breaks="calling builtins.print")
def closure_read_after_the_break(x):
    k = 3
    scale = lambda t: t * k  # noqa: E731 - a closure over a cell of this frame, live across
    y = scale(x)
    print("k", k, file=QUIET)
    k = 4
    return scale(y)


@program(inputs=lambda: r(4), breaks="a branch on a tensor's value")
def branch_on_a_tensor_compared_with_a_tensor(x):
    y = x * 2
    if (y > x).sum() >= 2:
        return y
    return x


@program(inputs=lambda: r(2, 3, 8), breaks="calling builtins.print")
def a_size_crosses_the_break(x):  # HF's attention: input_shape = x.shape[:-1] ... reshape(*input_shape, -1)
    input_shape = x.shape[:-1]
    print("shape", file=QUIET)
    return x.reshape(*input_shape, -1, 2).sum(-1)


class _DoubledLinear(torch.nn.Linear):  # HF's GradientCheckpointingLayer overrides __call__ so
    def __call__(self, *args, **kwargs):
        return super().__call__(*args, **kwargs) * 2


class _WithOwnCall(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = _DoubledLinear(4, 4)

    def forward(self, x):
        return self.inner(x) + 1


_with_own_call = _WithOwnCall()


@program(inputs=lambda: r(2, 4))
def a_submodule_whose_class_overrides_call(x):
    return _with_own_call(x)
