"""Data-dependent ops and runtime asserts: item, nonzero and masked_select bind an unbacked
symbol (their `symbol` argument, ir.UNBACKED here), sym_int gives an expression of symbols,
_assert_scalar checks a condition at run time."""
import pytest
import torch

import harness
import kiln
from harness import cases, check, maybe_check_compiled
from kiln import ir

torch.manual_seed(0)


@pytest.mark.parametrize("x", cases("nonzero", [
    torch.tensor([[0.0, 1.5, 0.0], [2.0, 0.0, -3.0]]),
    torch.tensor([0, 0, 0]),
    torch.randint(0, 2, (3, 4, 5)),
    torch.tensor([True, False, True]),
    torch.tensor([[0.0, float("nan")], [-0.0, 1.0]]),
    torch.randn(4, 6)[:, ::2],  # strided
    torch.tensor([1.0, 0.0], dtype=torch.bfloat16),
], ids=["f32", "none", "int3d", "bool", "nan_negzero", "strided", "bf16"]))
def test_nonzero(x):
    check("nonzero", torch.nonzero, x, symbol=ir.UNBACKED, torch_kwargs={})


@pytest.mark.parametrize("case", cases("masked_select", [
    (torch.randn(3, 4), None),
    (torch.randn(3, 4), torch.tensor([True, False, True, True])),  # the mask broadcasts
    (torch.randn(4), torch.tensor([[True], [False]])),  # self broadcasts
    (torch.arange(6).view(2, 3), torch.zeros(2, 3, dtype=torch.bool)),  # nothing selected
    (torch.randn(5).to(torch.bfloat16), None),
], ids=["same", "mask_bcast", "self_bcast", "empty", "bf16"]))
def test_masked_select(case):
    x, mask = case
    mask = x > 0 if mask is None else mask
    check("masked_select", torch.masked_select, x, mask, symbol=ir.UNBACKED, torch_kwargs={})


def test_masked_select_needs_a_bool_mask():
    with pytest.raises(kiln.KilnError, match="mask"):
        ir.op_graph("masked_select", torch.ones(3), torch.ones(3), symbol=ir.UNBACKED)


@pytest.mark.parametrize("t", cases("item", [
    torch.tensor(7), torch.tensor([-3]), torch.tensor(True), torch.tensor([[200]], dtype=torch.uint8),
    torch.tensor(-5, dtype=torch.int8),
], ids=["i64", "one_elem", "bool", "u8", "i8"]))
def test_item(t):
    out, meta = ir.eval_op("item", t, symbol=ir.UNBACKED)
    assert out.item() == t.item() and str(meta["sym"]).startswith("u")
    maybe_check_compiled("item", out, t, symbol=ir.UNBACKED)


def test_item_narrows_the_symbol_to_the_dtype_and_refuses_floats():
    graph, _ = ir.op_graph("item", torch.tensor(True), symbol=ir.UNBACKED)
    assert "symbol u0 in [0, 1]" in str(graph)
    with pytest.raises(kiln.KilnError, match="symbols are integers"):
        ir.op_graph("item", torch.tensor(1.5), symbol=ir.UNBACKED)
    with pytest.raises(kiln.KilnError, match="one element"):
        ir.op_graph("item", torch.tensor([1, 2]), symbol=ir.UNBACKED)
    with pytest.raises(kiln.KilnError, match="hint"):  # a backed symbol is no binding
        g = ir.Graph()
        g.call("item", ir.placeholder_like(g, "t", torch.tensor(1)), symbol=g.symbol("s0", hint=3))


def _sym_int_graph():
    g = ir.Graph()
    s = g.symbol("s0", hint=4, min=2)
    x = g.placeholder("x", "float32", [s, 3])
    g.set_outputs([g.call("sym_int", value=s * 2 + 1), g.call("sum", x)])
    return g


@pytest.mark.parametrize("n", cases("sym_int", [2, 5]))
def test_sym_int(n):
    x = torch.ones(n, 3)
    value, total = ir.run(_sym_int_graph(), x)
    assert value.item() == 2 * n + 1 and total.item() == 3 * n
    if harness.stack is not None:
        compiled = ir.compile(_sym_int_graph(), harness.stack)(x)
        assert compiled[0].item() == 2 * n + 1
        harness.compiled_tally[("sym_int", "ok")] += 1
        harness.stack.compile(_sym_int_graph(), "cuda")
        harness.cuda_tally[("sym_int", "cubin")] += 1


def _asserting_graph():
    """y = x.view(n, -1) for n = t.item(), with the assert the view needs made explicit."""
    g = ir.Graph()
    x = g.placeholder("x", "float32", [4, 6])
    t = g.placeholder("t", "int64", [])
    u = g.call("item", t, symbol=g.unbacked())
    n = u.meta["sym"]
    g.call("_assert_scalar", condition=n.ge(1), message="n is positive")
    g.call("_assert_scalar", condition=(24 % n).eq(0), message="n divides 24")
    g.set_outputs([g.call("view", x, size=[n, -1])])
    return g


@pytest.mark.parametrize("case", cases("_assert_scalar", [(3, True), (8, True), (5, False), (0, False)]))
def test_assert_scalar(case):
    n, holds = case
    x, t = torch.randn(4, 6), torch.tensor(n)
    runs = [lambda: ir.run(_asserting_graph(), x, t)[0]]
    if harness.stack is not None:
        compiled = ir.compile(_asserting_graph(), harness.stack)
        runs.append(lambda: compiled(x, t)[0])
    for run in runs:
        if holds:
            assert torch.equal(run(), x.view(n, -1))
        else:
            with pytest.raises(kiln.KilnError, match="runtime assert failed"):
                run()
    if harness.stack is not None:
        harness.compiled_tally[("_assert_scalar", "ok")] += 1
        harness.stack.compile(_asserting_graph(), "cuda")
        harness.cuda_tally[("_assert_scalar", "cubin")] += 1


def test_an_assert_survives_dead_code_elimination_and_the_wire():
    g = _asserting_graph()
    assert str(g.dce()).count("_assert_scalar") == 2
    back = ir.Graph.from_bytes(g.to_bytes())
    assert str(back) == str(g)
