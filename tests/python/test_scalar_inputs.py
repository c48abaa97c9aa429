"""Python floats and 0-d tensor inputs through kiln.compile (issue 9, seed 000): a float argument
that changes between calls becomes a 0-d f64 graph input (automatic dynamic, as for ints), Python
arithmetic on it is recorded in the graph, and it is specialised (guarded by value) only where
Python needs the number. `.item()` of a floating tensor is a float the graph computes too, and
`.item()` of a 0-d CPU int/float tensor input is backed by its value: guards can read it."""
import math

import pytest

import torch
import torch.nn.functional as F

import kiln
from kiln import _trace, guards, ir

LRS = (0.1, 0.2, 0.3, 0.05, 1e-3)


def entries(fn):
    return len(fn.cache.entries)


def dynamic_entry_text(fn) -> str:
    return fn.cache.entries[-1].guards.text()


def test_a_learning_rate_that_changes_recompiles_once(stack):
    def sgd(p, g, lr):
        return p - lr * g

    fast = kiln.compile(sgd, stack=stack)
    p, g = torch.randn(64), torch.randn(64)
    for lr in LRS:
        torch.testing.assert_close(fast(p, g, lr), sgd(p, g, lr))
    assert entries(fast) == 2  # the first call's, specialised; then one for every lr
    text = dynamic_entry_text(fast)
    assert "type(L['lr']) is builtins.float" in text and "L['lr'] ==" not in text
    assert fast.fallback_reasons == []


def test_the_graph_takes_a_dynamic_float_as_a_0d_f64_input(stack):
    def g(x, lr):
        return x * lr

    frame = {"forcedDynamic": ["L['lr']"]}
    traced = _trace.trace(g, (torch.randn(3), 0.5), {}, frame=frame, stack=stack)
    assert traced.float_inputs == [False, True]
    assert "f64[]" in str(traced.graph)
    compiled = ir.compile(traced.graph, stack)
    x = torch.randn(3)
    for lr in (0.5, -2.25, 1e-8):
        result = _trace.rebuild(traced.outputs, compiled(*_trace.graph_inputs(traced, g, (x, lr), {})))
        torch.testing.assert_close(result, x * lr, rtol=0, atol=0)


def test_promotion_is_a_python_floats(stack):
    def scale(x, lr):
        return x * lr + lr

    fast = kiln.compile(scale, stack=stack)
    cases = [torch.arange(6), torch.randn(6).bfloat16(), torch.randn(6).double(), torch.tensor(3.0),
             torch.tensor(True)]
    for x in cases:
        for lr in LRS[:3]:
            got, want = fast(x, lr), scale(x, lr)
            assert got.dtype == want.dtype, (x.dtype, got.dtype, want.dtype)
            tol = 1e-2 if x.dtype == torch.bfloat16 else 1e-6
            torch.testing.assert_close(got, want, rtol=tol, atol=tol)


def test_adam_bias_corrections_of_a_step_count_stay_in_the_graph(stack):
    def update(p, m, v, lr, step):
        c1 = 1 - 0.9 ** step
        c2 = 1 - 0.999 ** step
        return p - lr / c1 * m / (v.sqrt() / math.sqrt(c2) + 1e-8)

    fast = kiln.compile(update, stack=stack)
    p, m, v = torch.randn(32), torch.randn(32), torch.rand(32)
    for step, lr in enumerate(LRS, start=1):
        torch.testing.assert_close(fast(p, m, v, lr, step), update(p, m, v, lr, step))
    assert entries(fast) == 2
    assert "L['step'] ==" not in dynamic_entry_text(fast)


def test_floats_returned_are_pythons(stack):
    def f(x, lr):
        return x + 1, lr * 2, 1 / lr, 2 ** lr, lr ** 2, -lr, lr // 0.03, lr % 0.03, abs(-lr), math.sqrt(lr)

    fast = kiln.compile(f, stack=stack)
    x = torch.randn(3)
    for lr in LRS:
        got, want = fast(x, lr), f(x, lr)
        for a, b in zip(got[1:], want[1:]):
            assert type(a) is float and a == b, (lr, got, want)
    assert entries(fast) == 2


def test_a_branch_on_the_float_specialises_it(stack):
    def f(x, lr):
        if lr > 0.15:
            return x * 2
        return x * 3

    fast = kiln.compile(f, stack=stack)
    x = torch.randn(4)
    for lr in LRS + LRS:
        torch.testing.assert_close(fast(x, lr), f(x, lr))
    assert entries(fast) == len(LRS)  # guarded by value: one entry per lr, each reused
    assert "L['lr'] == 0.2" in "".join(e.guards.text() for e in fast.cache.entries)


def test_an_op_that_needs_a_constant_specialises_the_float(stack):
    def f(x, lr):
        return x + torch.full((4,), lr)

    fast = kiln.compile(f, stack=stack)
    x = torch.randn(4)
    for lr in LRS:
        torch.testing.assert_close(fast(x, lr), f(x, lr))
    assert fast.fallback_reasons == []


def test_an_alpha_of_a_dynamic_float_stays_in_the_graph(stack):
    def step(p, g, lr):
        return p.add(g, alpha=-lr)

    fast = kiln.compile(step, stack=stack)
    p, g = torch.randn(16), torch.randn(16)
    for lr in LRS:
        torch.testing.assert_close(fast(p, g, lr), step(p, g, lr))
    assert entries(fast) == 2


def test_item_of_a_float_tensor_stays_in_the_graph(stack):
    def f(x):
        return x * x.sum().item(), x.max().item()

    fast = kiln.compile(f, fullgraph=True, stack=stack)
    for seed in range(4):
        x = torch.randn(5, generator=torch.Generator().manual_seed(seed))
        got, want = fast(x), f(x)
        torch.testing.assert_close(got[0], want[0])
        assert type(got[1]) is float and got[1] == want[1]
    assert entries(fast) == 1  # the value is data: no guard on it


def test_a_branch_on_an_item_float_breaks_the_graph(stack):
    def f(x):
        if x.sum().item() > 0:
            return x * 2
        return x

    fast = kiln.compile(f, stack=stack)
    x = torch.randn(4)
    torch.testing.assert_close(fast(x), f(x))
    assert any("computed from tensor data" in r for r in fast.graph_breaks), fast.graph_breaks


def test_training_with_a_dynamic_learning_rate_scale(stack):
    def loss(x, w, scale):
        return (F.gelu(x @ w) * scale).sum()

    fast = kiln.compile(loss, stack=stack)
    x = torch.randn(4, 8)
    for scale in LRS:
        w1 = torch.randn(8, 3, generator=torch.Generator().manual_seed(1), requires_grad=True)
        w2 = w1.detach().clone().requires_grad_()
        fast(x, w1, scale).backward()
        loss(x, w2, scale).backward()
        torch.testing.assert_close(w1.grad, w2.grad)
    assert entries(fast) == 2


def test_automatic_dynamic_observes_floats():
    frame = guards.FrameState()
    frame.observe((torch.randn(2), 0.1))
    assert not frame.dynamic_float("L['arg1']")
    assert not frame.observe((torch.randn(2), 0.1))  # the same value: nothing changes
    assert frame.observe((torch.randn(2), 0.2))
    assert frame.dynamic_float("L['arg1']") and not frame.dynamic_int("L['arg1']")
    assert "L['arg1']: dynamic" in frame.text()
    restored = guards.FrameState.from_bytes(frame.to_bytes())
    assert restored.dynamic_float("L['arg1']")


def test_item_of_a_0d_int_input_is_a_backed_symbol(stack):
    def f(x, n):
        return x.view(n.item(), -1) * 2

    fast = kiln.compile(f, stack=stack)
    x = torch.randn(8)
    for n in (2, 4, 8, 2):
        torch.testing.assert_close(fast(x, torch.tensor(n)), f(x, torch.tensor(n)))
    assert entries(fast) == 1  # backed: the view's divisibility is a guard on the value, not a recompile
    text = dynamic_entry_text(fast)
    assert "= L['n'].item()" in text and "L['n'].item() ==" not in text
    with pytest.raises(RuntimeError):  # as eager: 8 elements do not view as [3, -1]
        fast(x, torch.tensor(3))


def test_a_branch_on_a_0d_int_input_is_a_guard_on_its_value(stack):
    def f(x, n):
        if n.item() > 3:
            return x * 2
        return x - 1

    fast = kiln.compile(f, stack=stack)
    x = torch.randn(4)
    for n in (2, 5, 1, 9, 3):
        torch.testing.assert_close(fast(x, torch.tensor(n)), f(x, torch.tensor(n)))
    assert entries(fast) == 2  # one per side of the branch
    assert fast.fallback_reasons == []


def test_item_of_a_0d_float_input_is_backed_by_its_value(stack):
    def scale(x, t):
        return x * t.item(), t.item() * 2

    def branch(x, t):
        return x * 2 if t.item() > 0.3 else x

    fast_scale, fast_branch = kiln.compile(scale, stack=stack), kiln.compile(branch, stack=stack)
    x = torch.randn(4)
    for v in (0.5, 0.25, 0.5, 2.0):
        got, want = fast_scale(x, torch.tensor(v)), scale(x, torch.tensor(v))
        torch.testing.assert_close(got[0], want[0])
        assert got[1] == want[1] and type(got[1]) is float
        torch.testing.assert_close(fast_branch(x, torch.tensor(v)), branch(x, torch.tensor(v)))
    assert entries(fast_scale) == 1
    assert entries(fast_branch) == 3  # specialised: guarded by value, as a Python float is
    assert "L['t'].item() == 0.5" in "".join(e.guards.text() for e in fast_branch.cache.entries)


def test_item_after_the_graph_writes_the_input_reads_the_new_value(stack):
    def f(x, n):
        n.add_(1)
        return x * n.item()

    fast = kiln.compile(f, stack=stack)
    x = torch.randn(4)
    for v in (3, 3, 5):
        mine, theirs = torch.tensor(v), torch.tensor(v)
        torch.testing.assert_close(fast(x, mine), f(x, theirs))
        assert mine.item() == theirs.item() == v + 1


def test_a_dynamic_int_before_a_tensor_binds_each_input(stack):
    def f(n, x):  # the int's placeholder comes first: tensors are bound by placeholder, ints included
        return x * n

    fast = kiln.compile(f, stack=stack)
    x = torch.randn(5)
    for n in (5, 6, 7):
        torch.testing.assert_close(fast(n, x), f(n, x))
    assert any("s0" in str(e.value.graph) for e in fast.cache.entries)  # the int turned dynamic
