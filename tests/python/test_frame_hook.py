"""The frame hook (python/src/frame_hook.c): while a compiled function runs Python eagerly (a
fallback, the eager part of a graph break), each frame of a user's function it calls is
offered to kiln and compiled in its own right; torch's, kiln's and the standard library's
frames are not, nor code kiln.disable marks."""
import io

import pytest
import torch

import kiln
from kiln import _compile, _kiln

SINK = io.StringIO()  # where the programs below print


def _callees(fast) -> dict:
    """The frames kiln compiled where `fast` (and what it compiled) ran Python, by name."""
    return {f.__qualname__: f for f in _compile.frames(fast)[1:] if f._resume_of is None}


def _compiled_entries(frame) -> list:
    return [e for e in frame.cache.entries if not isinstance(e.value, _compile._Eager)]


def helper_to_compile(t):
    return (t * 3).sin() + 1


def test_a_fallback_compiles_the_functions_it_calls(stack):
    def f(x):
        r = range(3)  # live across the print: no graph break there, the frame runs eagerly
        print("p", file=SINK)
        return helper_to_compile(x) + len(r)

    fast = kiln.compile(f, stack=stack)
    x = torch.randn(5)
    for _ in range(3):
        torch.testing.assert_close(fast(x), f(x))
    assert fast.fallback_reasons and not fast.graph_breaks
    helper = _callees(fast)["helper_to_compile"]
    assert len(helper.cache.entries) == 1 and _compiled_entries(helper)  # compiled once, then hit
    assert not any(fn.__module__.split(".")[0] in ("torch", "kiln", "io") for fn in _compile._callees)
    assert _kiln.offering() is None  # offering ends with the eager part


def innermost_that_prints(t):
    u = t.cos()
    print("deep", file=SINK)
    return u * 2


def middle(t):
    return innermost_that_prints(t + 1) - 1


def test_a_break_two_calls_deep_makes_each_caller_a_frame_of_its_own(stack):
    def f(x):
        return middle(x * 2).relu()

    fast = kiln.compile(f, stack=stack)
    x = torch.randn(4)
    for _ in range(2):
        torch.testing.assert_close(fast(x), f(x))
    callees = _callees(fast)
    assert {"middle", "innermost_that_prints"} <= set(callees)
    assert "at CALL" in fast.graph_breaks[0]  # f breaks at its call of middle
    assert "calling builtins.print" in callees["innermost_that_prints"].graph_breaks[0]
    assert all(len(c.cache.entries) == 1 for c in callees.values())


def called_by_a_disabled_function(t):
    return t.tanh()


@kiln.disable
def disabled_caller(t):
    return called_by_a_disabled_function(t) * 2


def test_kiln_disable_covers_everything_the_disabled_function_calls(stack):
    def f(x):
        print("p", file=SINK)
        return disabled_caller(x) + 1

    fast = kiln.compile(f, stack=stack)
    torch.testing.assert_close(fast(torch.ones(3)), f(torch.ones(3)))
    assert called_by_a_disabled_function not in _compile._callees
    assert disabled_caller not in _compile._callees


def raises_after_a_print(t):
    print("p", file=SINK)
    if t.shape[0] > 1:
        raise ValueError("too long")
    return t


def test_an_exception_of_a_compiled_callee_reaches_the_eager_caller(stack):
    def f(x):
        r = range(2)  # the frame runs eagerly
        print("p", file=SINK)
        try:
            return raises_after_a_print(x)
        except ValueError as e:
            return x + len(r) + len(str(e))

    fast = kiln.compile(f, stack=stack)
    for _ in range(2):
        torch.testing.assert_close(fast(torch.ones(3)), f(torch.ones(3)))
    assert _compiled_entries(_callees(fast)["raises_after_a_print"])  # it ran compiled, and raised
    with pytest.raises(ValueError, match="too long"):
        raises_after_a_print(torch.ones(2))
    assert _kiln.offering() is None


def test_a_module_with_hooks_runs_them_eagerly_around_its_compiled_forward(stack):
    seen = []
    m = torch.nn.Linear(4, 3)
    m.register_forward_pre_hook(lambda mod, args: seen.append("pre"))
    m.register_forward_hook(lambda mod, args, out: seen.append("post"))
    fast = kiln.compile(m, stack=stack)
    x = torch.randn(2, 4)
    for _ in range(2):
        torch.testing.assert_close(fast(x), m(x))
    assert seen == ["pre", "post"] * 4  # kiln's calls and eager's, once each
    assert _compiled_entries(fast._compiled_forward)  # compiled between its hooks


def test_call_offering_restores_the_outer_state_and_checks_its_arguments():
    answers = []

    def callback(fn, args, kwargs):
        answers.append((fn.__name__, args, kwargs))
        return None  # run it as it is

    def leaf(a, *rest, k=1, **more):
        return a + sum(rest) + k + sum(more.values())

    def outer():
        return leaf(1, 2, 3, k=4, z=5)

    assert _kiln.call_offering(callback, outer.__code__, outer, (), None) == 15
    assert answers == [("leaf", (1, 2, 3), {"k": 4, "z": 5})]  # outer skipped once, leaf offered
    assert _kiln.offering() is None
    with pytest.raises(TypeError):
        _kiln.call_offering(callback, None, outer, [], None)

    def ran(fn, args, kwargs):
        return ("ran by kiln",)

    assert _kiln.call_offering(ran, None, outer, (), None) == "ran by kiln"

    def broken(fn, args, kwargs):
        raise KeyError("from the callback")

    with pytest.raises(KeyError):
        _kiln.call_offering(broken, None, outer, (), None)
    assert _kiln.offering() is None


class DoubledLinear(torch.nn.Linear):
    def __call__(self, *args, **kwargs):
        return super().__call__(*args, **kwargs) * 2


def test_a_module_whose_class_overrides_call_runs_that_call(stack):
    m = DoubledLinear(4, 3)
    fast = kiln.compile(m, stack=stack)
    x = torch.randn(2, 4)
    for _ in range(2):
        torch.testing.assert_close(fast(x), m(x))  # not forward alone: 2 * forward
    # the class's __call__, offered by the hook, compiled whole: super().__call__ runs the module
    call = [c for fn, per in _compile._callees.items() if fn is DoubledLinear.__call__ for c in per.values()]
    assert call and _compiled_entries(call[0])
