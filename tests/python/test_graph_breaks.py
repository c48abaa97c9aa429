"""Graph breaks (kiln._resume, docs/tracer.md): what the tracer refuses runs eagerly at
that point, the code before it is one graph and the code after it a frame of its own."""
import contextlib
import copy
import dis
import io

import pytest
import torch

import kiln
from kiln import _resume
from kiln._compile import frames


def test_prints_run_once_per_call_in_order_around_the_graphs(stack):
    def f(x, y):
        a = x * 2 + y
        print("a is", a.shape)
        b = a.relu() * 3
        print("b", b.dtype)
        return b + 1

    fast = kiln.compile(f, stack=stack)
    x, y = torch.randn(4), torch.randn(4)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        torch.testing.assert_close(fast(x, y), f(x, y))
        fast(x, y)
    assert out.getvalue() == "a is torch.Size([4])\nb torch.float32\n" * 3  # kiln's two calls, eager's one
    assert len(fast.graph_breaks) == 1 and "calling builtins.print" in fast.graph_breaks[0]
    assert kiln._compile._tally(fast) == (3, 2)  # graphs before, between and after the breaks
    assert "graphs: 3, breaks: 2" in kiln.explain(fast)


def test_a_branch_on_a_tensor_takes_either_side(stack):
    def f(x):
        y = x.sin()
        if y.sum() > 0:
            return y * 2
        return y - 1

    fast = kiln.compile(f, stack=stack)
    for x in (torch.ones(5), -torch.ones(5), torch.ones(5)):
        torch.testing.assert_close(fast(x), f(x))
    assert "a branch on a tensor's value" in fast.graph_breaks[0]
    assert len(frames(fast)) == 3  # the frame and one resume function per side
    assert all(not f.fallback_reasons for f in frames(fast))


def test_a_branch_on_item_of_a_tensor(stack):
    def f(x):
        n = int(x.sum().item())
        if n > 3:
            return x * n
        return x

    fast = kiln.compile(f, stack=stack)
    for x in (torch.ones(5), torch.zeros(5)):
        torch.testing.assert_close(fast(x), f(x))
    assert fast.graph_breaks


def test_fullgraph_raises_at_the_first_break(stack):
    def f(x):
        print("no")
        return x + 1

    with pytest.raises(kiln.Unsupported, match="calling builtins.print"):
        kiln.compile(f, fullgraph=True, stack=stack)(torch.ones(2))


def test_a_break_inside_a_loop_resumes_with_the_loop_left(stack):
    def f(x, n):
        t = x + 1
        for i in range(n):
            t = t * 2
            if i == 1:
                print("mid", i)
        return t

    fast = kiln.compile(f, stack=stack)
    x = torch.randn(3)
    with contextlib.redirect_stdout(io.StringIO()):
        for _ in range(2):
            torch.testing.assert_close(fast(x, 4), f(x, 4))
    resumed = [f for f in frames(fast)[1:]]
    assert resumed and all(not f.fallback_reasons for f in resumed)  # the loop's rest is traced too


def test_live_lists_dicts_and_ints_cross_the_break(stack):
    def f(x, k):
        xs = [x, x * 2]
        d = {"a": x + 1, "n": k}
        m = k * 3
        print(len(xs))
        return xs[1] + d["a"] * d["n"] + m

    fast = kiln.compile(f, stack=stack)
    with contextlib.redirect_stdout(io.StringIO()):
        torch.testing.assert_close(fast(torch.ones(3), 2), f(torch.ones(3), 2))


def inner_that_prints(x):
    print("inner", file=io.StringIO())
    y = x * 2
    return y.relu()


def test_a_break_in_a_called_function_breaks_at_the_call_and_compiles_the_callee(stack):
    def f(x):
        y = x + 1
        z = inner_that_prints(y)
        return z - 1

    fast = kiln.compile(f, stack=stack)
    for _ in range(2):
        torch.testing.assert_close(fast(torch.ones(3)), f(torch.ones(3)))
    assert "at CALL" in fast.graph_breaks[0]  # the call of inner_that_prints, in f
    callees = [m for k, m in fast._continuations.items() if k[0] == "callee"]
    assert [c.__qualname__ for c in callees] == ["inner_that_prints"]
    assert callees[0].graph_breaks  # its own break, the code around it compiled
    assert len(callees[0].cache.entries) == 1  # one cache per function: the second call hits


def test_a_module_forward_breaks_and_trains_across_the_break(stack):
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(4, 8)
            self.b = torch.nn.Linear(8, 2)

        def forward(self, x):
            h = self.a(x).relu()
            if h.mean() > 10:  # never: a break all the same
                h = h * 0
            return self.b(h)

    model = M()
    ref = copy.deepcopy(model)
    fast = kiln.compile(model, stack=stack)
    x = torch.randn(3, 4)
    fast(x).square().sum().backward()
    ref(x).square().sum().backward()
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad)
    assert fast._compiled_forward.graph_breaks


def test_no_grad_around_the_compiled_frame_holds_on_both_sides(stack):
    def f(x):
        y = x * 2
        print("between")
        return y + x

    fast = kiln.compile(f, stack=stack)
    x = torch.ones(3, requires_grad=True)
    with contextlib.redirect_stdout(io.StringIO()):
        with torch.no_grad():
            out = fast(x)
        assert not out.requires_grad
        out = fast(x)
    assert out.requires_grad
    out.sum().backward()
    torch.testing.assert_close(x.grad, torch.full((3,), 3.0))


def test_a_break_inside_no_grad_runs_under_no_grad_and_restores_grad_mode(stack):
    def f(x):
        with torch.no_grad():
            y = x * 2
            print("inside", torch.is_grad_enabled())
            z = y * x
        return z + x

    fast = kiln.compile(f, stack=stack)
    x = torch.ones(3, requires_grad=True)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        got, want = fast(x), f(x)
    assert out.getvalue() == "inside False\n" * 2
    assert torch.is_grad_enabled()  # the region's exit ran, after the break
    torch.testing.assert_close(got, want)
    got.sum().backward()
    torch.testing.assert_close(x.grad, torch.ones(3))  # only `+ x` is recorded, as eagerly
    assert not fast.fallback_reasons and fast.graph_breaks


def test_an_exception_of_the_eager_part_reaches_the_frames_handler(stack):
    def check(t):
        print("check", file=io.StringIO())
        if (t < 0).any():
            raise ValueError("negative")
        return t

    def f(x):
        cleanup = []
        try:
            y = check(x) * 2
        except ValueError as e:
            y = x.abs() + len(str(e))
        finally:
            cleanup.append(1)
        return y, len(cleanup)

    fast = kiln.compile(f, stack=stack)
    for x in (torch.ones(3), -torch.ones(3), torch.ones(3)):
        got, want = fast(x), f(x)
        torch.testing.assert_close(got[0], want[0])
        assert got[1] == want[1] == 1
    assert not fast.fallback_reasons


def test_a_resume_function_recompiles_for_new_shapes(stack):
    def f(x):
        y = x.cos()
        print("shape", y.shape)
        return y * x

    fast = kiln.compile(f, stack=stack)
    with contextlib.redirect_stdout(io.StringIO()):
        for n in (3, 5, 7, 9):
            x = torch.randn(n)
            torch.testing.assert_close(fast(x), f(x))
    resumed = frames(fast)[1]
    assert len(resumed.cache.entries) == 2  # static, then dynamic
    assert len(fast.cache.entries) == 2


def test_a_raise_after_the_break_reaches_the_caller(stack):
    def f(x):
        y = x + 1
        if y.sum() > 100:
            raise ValueError("too big")
        return y

    fast = kiln.compile(f, stack=stack)
    torch.testing.assert_close(fast(torch.ones(2)), f(torch.ones(2)))
    with pytest.raises(ValueError, match="too big"):
        fast(torch.full((2,), 100.0))


def test_the_resume_code_is_well_formed_python():
    def f(x, flag):
        total = x
        for k in range(3):
            total = total + k
        print("t")
        try:
            total = total * 2
        except RuntimeError:
            total = total - 1
        return total, flag

    code = f.__code__
    listed = _resume.instructions(code)
    target = next(k for k, i in enumerate(listed) if i.opname == "POP_TOP" and listed[k - 1].opname == "CALL")
    assert _resume.stack_depths(code)[listed[target].offset] == 1  # print's result
    layout = _resume.Layout(code, ("value",), ("flag", "total"))
    resumed = _resume.resume_function(f, layout, target, 0)
    assert resumed.__code__.co_varnames[:3] == ("__kiln_s0", "flag", "total")
    out = resumed(None, True, torch.ones(2))  # no cells
    torch.testing.assert_close(out[0], torch.full((2,), 2.0))
    assert out[1] is True
    list(dis.get_instructions(resumed.__code__))  # dis reads it
    assert list(resumed.__code__.co_lines())


@kiln.disable
def disabled_helper(t):
    print("helper", file=io.StringIO())
    return t * 2


def test_kiln_disable_marks_code_never_compiled(stack):
    def f(x):
        return disabled_helper(x + 1) - 1

    fast = kiln.compile(f, stack=stack)
    torch.testing.assert_close(fast(torch.ones(3)), f(torch.ones(3)))
    assert not any(k[0] == "callee" for k in fast._continuations)  # called as it is
    with kiln.disable():
        torch.testing.assert_close(fast(torch.zeros(3)), f(torch.zeros(3)))
    assert len(fast.cache.entries) == 1  # the disabled call compiled nothing


def test_a_frames_cells_cross_the_break_shared_with_its_closures(stack):
    def f(x, k):
        scale = k * 2
        y = (lambda t: t * scale)(x)  # a closure over scale: a cell of f
        print("between", file=io.StringIO())
        scale = scale + 1  # the closures after the break see the cell's new value
        return (lambda t: t * scale)(y) + scale

    fast = kiln.compile(f, stack=stack)
    for k in (1, 2):
        torch.testing.assert_close(fast(torch.ones(3), k), f(torch.ones(3), k))
    assert fast.graph_breaks and not any(fr.fallback_reasons for fr in frames(fast))


def test_writing_a_closure_cell_of_the_call_is_seen_by_the_next_call(stack):
    def counter():
        n = 0

        def step(x):
            nonlocal n
            n += 1
            return x + n
        return step

    step, reference = counter(), counter()
    fast = kiln.compile(step, stack=stack)
    for _ in range(3):
        torch.testing.assert_close(fast(torch.zeros(2)), reference(torch.zeros(2)))


def test_zero_argument_super_works_after_a_break(stack):
    class Base(torch.nn.Module):
        def scale(self, t):
            return t * 2

    class Child(Base):
        def scale(self, t):
            u = t + 1
            print("child", file=io.StringIO())
            return super().scale(u)  # reads `self` from the frame's first slot

    child = Child()
    fast = kiln.compile(Child.scale, stack=stack)
    torch.testing.assert_close(fast(child, torch.ones(2)), child.scale(torch.ones(2)))
    assert fast.graph_breaks


def test_functions_made_in_the_traced_code_cross_the_break(stack):
    def f(x, k):
        scale = k * 2
        scaled = lambda t, bias=1.0: t * scale + bias  # noqa: E731 - a closure over a cell of f
        adders = [lambda t, j=j: t + j for j in range(2)]
        y = scaled(x)
        print("between", file=io.StringIO())
        scale = scale + 1  # the closure sees the cell's new value
        return scaled(y) + adders[1](y)

    fast = kiln.compile(f, stack=stack)
    for k in (1, 2):
        torch.testing.assert_close(fast(torch.ones(3), k), f(torch.ones(3), k))
    assert fast.graph_breaks and not any(fr.fallback_reasons for fr in frames(fast))


def test_format_specs_and_floats_are_pythons_to_format(stack):
    def f(x, s):
        print(f"[{x.shape[0]:04d}] [{s.item():.2f}] [{s.item()}] [{x.shape[0]:>3}] {str(2.0)}")
        return x + 1

    fast = kiln.compile(f, stack=stack)
    got, want = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(got):
        fast(torch.ones(3), torch.tensor(2.0))
    with contextlib.redirect_stdout(want):
        f(torch.ones(3), torch.tensor(2.0))
    assert got.getvalue() == want.getvalue() == "[0003] [2.00] [2.0] [  3] 2.0\n"


def test_detach_after_a_break_does_not_require_grad(stack):
    w = torch.randn(3, requires_grad=True)

    def f(x):
        loss = (x * w).sum()
        print("loss", file=io.StringIO())
        return loss.detach(), loss

    got, kept = kiln.compile(f, stack=stack)(torch.ones(3))
    assert not got.requires_grad and kept.requires_grad


def test_an_iterator_in_a_local_crosses_the_break(stack):
    def f(x):
        it = iter((1, 2, 3, 4))
        x = x + next(it)
        print("break", file=io.StringIO())
        return x + next(it)

    fast = kiln.compile(f, stack=stack)
    for _ in range(2):
        torch.testing.assert_close(fast(torch.zeros(2)), f(torch.zeros(2)))


def test_a_submodules_hooks_run_and_a_new_hook_is_seen(stack):
    seen = []
    m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    fast = kiln.compile(m, stack=stack)
    x = torch.randn(2, 4)
    fast(x)
    m[1].register_forward_hook(lambda mod, i, o: seen.append("sub"))
    torch.testing.assert_close(fast(x), m(x))
    assert seen == ["sub", "sub"]  # kiln's call and eager's
    m.register_forward_hook(lambda mod, i, o: seen.append("top"))
    fast(x)
    assert seen[-2:] == ["sub", "top"]


def test_a_break_at_a_method_load_puts_the_null_back(stack):
    def f(x, sizes):
        y = x + 1
        return y * sizes.__len__()  # a tuple's method: LOAD_METHOD / LOAD_ATTR's method form, refused

    fast = kiln.compile(f, stack=stack)
    for _ in range(2):
        torch.testing.assert_close(fast(torch.ones(2), (1, 2, 2)), f(torch.ones(2), (1, 2, 2)))
    assert any("__len__" in b for b in fast.graph_breaks), fast.graph_breaks


def test_a_refused_attribute_of_a_callable_expression_above_its_null(stack):
    import warnings

    def f(x):
        if x.sum() > 0:
            warnings.warn("positive")  # [NULL, warnings] then LOAD_ATTR warn, refused
        return x.cumsum(0)

    fast = kiln.compile(f, stack=stack)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for x in (torch.ones(3), -torch.ones(3), torch.ones(3)):
            torch.testing.assert_close(fast(x), f(x))
    assert [str(w.message) for w in caught] == ["positive"] * 4


_logger = __import__("logging").getLogger("kiln.tests.graph_breaks")


def _warn_if_narrow(x):
    if x.shape[-1] != 4:
        import warnings
        warnings.warn("expected a last dim of 4", UserWarning, stacklevel=2)
    return x.sum(-1)


def test_a_call_run_at_a_break_reports_the_callers_line(stack):
    """A log record's line and a warning's stacklevel read the frame that runs the refused
    call: the line is the function's own, not the line inside the callee where it broke."""
    import logging
    import warnings
    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append((record.funcName, record.lineno))

    def model(x):
        h = x + 1
        _logger.info("batch %d", x.shape[0])
        y = _warn_if_narrow(h)
        return y.relu()

    log_line = model.__code__.co_firstlineno + 2
    warn_line = model.__code__.co_firstlineno + 3
    handler = Keep()
    _logger.addHandler(handler)
    _logger.setLevel(logging.INFO)
    try:
        fast = kiln.compile(model, stack=stack)
        x = torch.randn(2, 3)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = fast(x)
            expected = model(x)
        torch.testing.assert_close(got, expected)
    finally:
        _logger.removeHandler(handler)
    assert records == [("model", log_line)] * 2, records
    assert [w.lineno for w in caught] == [warn_line] * 2, [(w.filename, w.lineno) for w in caught]
    assert fast.graph_breaks  # the log call and the warning ran at breaks
