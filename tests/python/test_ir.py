"""kiln.ir: building graphs from Python, their text, wire form and passes, and the interpreter."""
import pytest
import torch

import kiln
from kiln import ir


def small_graph():
    g = ir.Graph()
    s0 = g.symbol("s0", hint=8, min=2)
    x = g.placeholder("x", "float32", [s0, 4])
    b = g.placeholder("bias", torch.float32, [4])
    y = g.call("add", x, b, alpha=2)
    g.set_outputs([y, g.call("sum", y, dim=[1], keepdim=True)])
    return g, s0


def test_printed_form_names_symbols_and_attributes():
    g, _ = small_graph()
    assert str(g) == (
        "symbol s0 in [2, inf] hint 8\n"
        '%0 : f32[s0, 4] = placeholder("x")\n'
        '%1 : f32[4] = placeholder("bias")\n'
        "%2 : f32[s0, 4] = add(%0, %1, alpha=2)\n"
        "%3 : f32[s0, 1] = sum(%2, dim=[1], keepdim=True)\n"
        "return (%2, %3)\n"
    )


def test_meta_carries_symbols():
    g, s0 = small_graph()
    total = g.outputs[1]
    assert total.meta["sizes"] == [s0, 1]
    assert total.meta["strides"] == [1, 1]
    assert total.meta["dtype"] == "float32"
    assert str(s0 * 2 + 1) == "2*s0 + 1"
    assert (s0 * 4) // 4 == s0
    assert (s0 + 3).range == (5, None)


def test_node_lists_inputs_and_attributes():
    g, _ = small_graph()
    node = g.node(3)
    assert node["target"] == "sum" and node["kind"] == "call"
    assert node["inputs"] == [2]
    assert node["attrs"] == {"dim": [1], "keepdim": True}


def test_wire_round_trip_keeps_structural_hash():
    g, _ = small_graph()
    h = ir.Graph.from_bytes(g.to_bytes())
    assert h.structural_hash() == g.structural_hash()
    assert str(h) == str(g)
    with pytest.raises(kiln.KilnError) as err:
        ir.Graph.from_bytes(b"\x00" * 24)
    assert err.value.code == "malformed"


def test_passes_return_new_graphs():
    g = ir.Graph()
    x = g.placeholder("x", "float32", [3])
    a = g.call("exp", x)
    b = g.call("exp", x)
    g.call("neg", x)  # dead
    g.set_outputs([g.call("mul", a, b)])
    assert len(g.dce()) == 4
    assert len(g.cse().dce()) == 3
    d = ir.Graph()
    t = d.placeholder("t", "float32", [2, 5])
    d.set_outputs([d.call("softmax", t, dim=1)])
    decomposed = d.decompose()
    assert "softmax" not in str(decomposed)
    decomposed.verify()
    x = torch.randn(2, 5)
    (expected,) = ir.run(d, x)
    (got,) = ir.run(decomposed, x)
    torch.testing.assert_close(got, expected)


def test_errors_are_typed_and_name_the_argument():
    g, s0 = small_graph()
    x = g.value(0)
    with pytest.raises(kiln.KilnError) as err:
        g.call("add", x, g.placeholder("y", "float32", [5]))
    assert err.value.code == "invalid_argument" and "'other'" in str(err.value)
    with pytest.raises(kiln.KilnError) as err:
        g.call("mm", x, x)
    assert err.value.code == "unsupported"
    with pytest.raises(kiln.KilnError) as err:
        g.call("no_such_op", x)
    assert err.value.code == "not_found"
    with pytest.raises(kiln.KilnError) as err:
        g.call("sum", x, dims=[0])
    assert "no argument named 'dims'" in str(err.value)
    with pytest.raises(kiln.KilnError) as err:
        g.call("add", x, torch.ones(3))
    assert "add: argument 'other'" in str(err.value)
    other = ir.Graph()
    with pytest.raises(kiln.KilnError, match="another graph"):
        other.call("neg", x)


def test_interpreter_runs_views_and_keeps_strides():
    g = ir.Graph()
    x = g.placeholder("x", "float32", [4, 3], [6, 2], 1)  # a strided view
    g.set_outputs([g.call("transpose", x, dim0=0, dim1=1), g.call("mul", x, 2.0)])
    base = torch.arange(30, dtype=torch.float32)
    view = base.as_strided((4, 3), (6, 2), 1)
    transposed, doubled = ir.run(g, view)
    assert torch.equal(transposed, view.t())
    assert transposed.stride() == (2, 6)
    assert torch.equal(doubled, view * 2)


@pytest.mark.parametrize(
    "dtype", [torch.float16, torch.bfloat16, torch.bool, torch.int8, torch.uint8, torch.int64]
)
def test_interpreter_round_trips_every_dtype(dtype):
    x = (torch.arange(-3, 9).reshape(3, 4) * 7).to(dtype)
    out, meta = ir.eval_op("clone", x)
    assert out.dtype == dtype and torch.equal(out, x)
    assert meta["dtype"] == ir.dtype_name(dtype)


def test_empty_tensors_and_inputs_that_disagree():
    g = ir.Graph()
    s0 = g.symbol("s0", hint=3)
    x = g.placeholder("x", "int64", [s0, 0])
    g.set_outputs([g.call("sum", x, dim=[1])])
    (total,) = ir.run(g, torch.zeros(3, 0, dtype=torch.int64))
    assert torch.equal(total, torch.zeros(3, dtype=torch.int64))
    with pytest.raises(kiln.KilnError) as err:
        ir.run(g, torch.zeros(3, 1, dtype=torch.int64))
    assert err.value.code == "invalid_argument"


def test_tuple_results_come_back_piece_by_piece():
    x = torch.arange(10.0).reshape(5, 2)
    pieces, metas = ir.eval_op("split", x, 2)
    assert [p.tolist() for p in pieces] == [p.tolist() for p in torch.split(x, 2)]
    assert [m["sizes"] for m in metas] == [[2, 2], [2, 2], [1, 2]]
    assert [m["storage_offset"] for m in metas] == [0, 4, 8]


def test_absent_optional_arguments_before_given_ones_are_marked():
    g = ir.Graph()
    x = g.placeholder("x", "float32", [5])
    hi = g.placeholder("hi", "float32", [5])
    y = g.call("clamp", x, max=hi)  # min is absent: hi must not bind to it
    assert g.node(y.id)["attrs"] == {"min": None}
    assert "clamp(%0, %1, min=None)" in str(g)
    g.set_outputs([y, g.call("clamp", x, hi)])  # given as min: no marker needed
    assert g.node(g.outputs[1].id)["attrs"] == {}
    a, b = torch.randn(5), torch.zeros(5)
    low_capped, high_floored = ir.run(g, a, b)
    assert torch.equal(low_capped, torch.clamp(a, max=b))
    assert torch.equal(high_floored, torch.clamp(a, min=b))
    h = ir.Graph.from_bytes(g.to_bytes())
    assert h.structural_hash() == g.structural_hash() and str(h) == str(g)
