"""kiln.autograd from Python: the partition of gelu(x @ w1) @ w2 under memory budgets, and the
forward then backward graphs giving torch's grads through the reference interpreter."""
import pytest
import torch
import torch.nn.functional as F

from kiln import KilnError, autograd, ir


def mlp():
    g = ir.Graph()
    x = g.placeholder("x", "float64", [4, 8])
    w1 = g.placeholder("w1", "float64", [8, 16])
    w2 = g.placeholder("w2", "float64", [16, 2])
    h = g.call("mm", x, w1)
    a = g.call("gelu", h)
    g.set_outputs([g.call("mm", a, w2)])
    return g, {x.id: "x", w1.id: "w1", w2.id: "w2", h.id: "h", a.id: "a"}


def saved_names(p, names):
    return {names.get(v, p.joint.graph.node(v)["target"]) for v in p.saved}


@pytest.mark.parametrize("budget, saved", [(0.0, {"x", "w1", "w2", "h"}),
                                           (0.5, {"x", "w1", "w2", "h"}),
                                           (1.0, {"x", "w1", "w2", "h", "a"})])
def test_saved_values_follow_the_budget(budget, saved):
    g, names = mlp()
    p = autograd.partition(g, [True, True, True], memory_budget=budget)
    assert saved_names(p, names) == saved
    recomputed = {names.get(v) for v in p.recomputed}
    assert recomputed == (set() if budget == 1.0 else {"a"})  # gelu, in the backward


@pytest.mark.parametrize("budget", [0.0, 0.5, 1.0])
def test_forward_then_backward_give_torch_grads(budget):
    g, _ = mlp()
    p = autograd.partition(g, [True, True, True], memory_budget=budget)
    gen = torch.Generator().manual_seed(0)
    x, w1, w2 = (torch.randn(*s, generator=gen, dtype=torch.float64, requires_grad=True)
                 for s in [(4, 8), (8, 16), (16, 2)])
    tangent = torch.randn(4, 2, generator=gen, dtype=torch.float64)
    fw = ir.run(p.forward, x, w1, w2)
    y, saved = fw[:p.forward_outputs], fw[p.forward_outputs:]
    grads = ir.run(p.backward, *saved, tangent)
    expected = F.gelu(x @ w1) @ w2
    torch.testing.assert_close(y[0], expected.detach())
    for mine, theirs in zip(grads, torch.autograd.grad(expected, [x, w1, w2], tangent)):
        torch.testing.assert_close(mine, theirs)


def test_refusals_are_typed():
    g, _ = mlp()
    with pytest.raises(KilnError) as info:
        autograd.partition(g, [True, True, True], memory_budget=2.0)
    assert info.value.code == "invalid_argument"
    with pytest.raises(KilnError) as info:
        autograd.backward(g, [True])
    assert info.value.code == "invalid_argument"


def test_attention_saves_its_rows_logsumexp_from_the_forward():
    # The backward's logsumexp of attention's scores moves into the forward, beside
    # the attention (codegen's flash forward writes both), and is saved: the
    # backward never runs the scores' product again for it.
    g = ir.Graph()
    q, k, v = (g.placeholder(n, "float64", [2, 3, 5, 4]) for n in "qkv")
    g.set_outputs([g.call("scaled_dot_product_attention", q, k, v, is_causal=True, scale=0.3)])
    p = autograd.partition(g, [True, True, True])
    joint = p.joint.graph
    lse = [v for v in range(len(joint)) if joint.node(v)["target"] == "attention_lse"]
    assert len(lse) == 1 and lse[0] < p.joint.forward_nodes, str(joint)
    assert lse[0] in p.saved
    assert "attention_lse" in str(p.forward) and "attention_lse" not in str(p.backward)
    gen = torch.Generator().manual_seed(0)
    leaves = [torch.randn(2, 3, 5, 4, generator=gen, dtype=torch.float64, requires_grad=True)
              for _ in range(3)]
    tangent = torch.randn(2, 3, 5, 4, generator=gen, dtype=torch.float64)
    fw = ir.run(p.forward, *leaves)
    y, saved = fw[:p.forward_outputs], fw[p.forward_outputs:]
    grads = ir.run(p.backward, *saved, tangent)
    q, k, v = leaves  # torch's sdpa, spelled out
    scores = (q @ k.transpose(-2, -1)) * 0.3
    scores = scores.masked_fill(torch.ones(5, 5, dtype=torch.bool).triu(1), float("-inf"))
    expected = torch.softmax(scores, dim=-1) @ v
    torch.testing.assert_close(y[0], expected.detach())
    for mine, theirs in zip(grads, torch.autograd.grad(expected, leaves, tangent)):
        torch.testing.assert_close(mine, theirs)
