"""Data-dependent values through kiln.compile (issue 9): .item(), nonzero and boolean masks give
unbacked symbols; what an op needs of them becomes a runtime assert; results match eager and a
violated assert raises a readable error."""
import pytest
import torch

import kiln


def entries(fn):
    return len(fn.cache.entries)


def graph_text(fn) -> str:
    return kiln.explain(fn)


def test_a_masked_selection_sums_as_eager(stack):
    def f(x):
        return x[x > 0].sum()

    fast = kiln.compile(f, fullgraph=True, stack=stack)
    for seed in range(3):
        x = torch.randn(5, 4, generator=torch.Generator().manual_seed(seed))
        torch.testing.assert_close(fast(x), f(x))
    torch.testing.assert_close(fast(-torch.ones(5, 4)), f(-torch.ones(5, 4)))  # nothing selected
    assert entries(fast) == 1  # the count is data: no recompile
    assert "masked_select" in graph_text(fast) and "symbol u0" in graph_text(fast)


def test_a_count_of_nonzeros_returns_as_an_int(stack):
    def f(x):
        return torch.nonzero(x).shape[0] * 2

    fast = kiln.compile(f, fullgraph=True, stack=stack)
    for x in ([[0, 1], [2, 0], [3, 3]], [[0, 0], [0, 0], [0, 0]], [[5, 5], [5, 5], [0, 5]]):
        x = torch.tensor(x)
        assert fast(x) == f(x)
    assert entries(fast) == 1
    assert "sym_int(value=2*u0)" in graph_text(fast)


def test_nonzero_and_masked_select_match_eager(stack):
    def f(x, y):
        idx = x.nonzero()
        picked = torch.masked_select(y, x != 0)
        return idx * 10, picked + 1

    fast = kiln.compile(f, fullgraph=True, stack=stack)
    x = torch.tensor([[0.0, 1.0, 0.0], [2.0, 0.0, 3.0]])
    y = torch.randn(2, 3)
    for got, want in zip(fast(x, y), f(x, y)):
        torch.testing.assert_close(got, want)


def test_a_view_by_an_item_size_asserts_at_run_time(stack):
    def f(x, n):
        return x.view(n.item(), -1) * 2

    fast = kiln.compile(f, fullgraph=True, stack=stack)
    x = torch.randn(4, 6)
    # 1-element tensors of 1 dim: .item() of a 0-d CPU input would be backed by its value
    # (test_scalar_inputs.py); of any other tensor it is data.
    for n in (3, 8, 24):
        torch.testing.assert_close(fast(x, torch.tensor([n])), f(x, torch.tensor([n])))
    assert entries(fast) == 1  # n's value is not guarded
    assert "_assert_scalar(condition=24 % u0 == 0" in graph_text(fast)
    with pytest.raises(kiln.KilnError, match=r"runtime assert failed: 24 % u0 == 0 \(view's arguments\) with u0 = 5"):
        fast(x, torch.tensor([5]))


def test_an_item_shared_by_two_ops_is_asserted_once(stack):
    def f(x, n):
        k = n.item()
        return x.view(k, -1).sum(0), x.reshape(k, -1).amax(0)

    fast = kiln.compile(f, fullgraph=True, stack=stack)
    x, n = torch.randn(6, 4), torch.tensor([12])  # 1-d: .item() is unbacked
    for got, want in zip(fast(x, n), f(x, n)):
        torch.testing.assert_close(got, want)
    assert graph_text(fast).count("_assert_scalar(condition") == 1


def test_a_branch_on_data_falls_back_with_its_reason(stack):
    def f(x):
        if x.sum().long().item() > 0:
            return x + 1
        return x - 1

    fast = kiln.compile(f, stack=stack)
    x = torch.ones(3)
    torch.testing.assert_close(fast(x), f(x))
    assert any("depends on data" in r for r in fast.fallback_reasons)
    with pytest.raises(kiln.Unsupported, match="depends on data"):
        kiln.compile(f, fullgraph=True, stack=stack)(x)


def test_a_branch_the_ranges_decide_is_no_fallback(stack):
    def f(x):
        n = torch.nonzero(x).shape[0]
        if n >= 0:  # a count is never negative: decided without the data
            return x * 2
        return x

    fast = kiln.compile(f, fullgraph=True, stack=stack)
    torch.testing.assert_close(fast(torch.ones(3)), torch.ones(3) * 2)


def test_training_through_a_masked_selection(stack):
    def f(x, w):
        h = x @ w
        return (h[h > 0] ** 2).sum()

    fast = kiln.compile(f, fullgraph=True, stack=stack)
    x = torch.randn(6, 4)
    w1 = torch.randn(4, 3, requires_grad=True)
    w2 = w1.detach().clone().requires_grad_()
    fast(x, w1).backward()
    f(x, w2).backward()
    torch.testing.assert_close(w1.grad, w2.grad)
