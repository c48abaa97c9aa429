"""split, split_with_sizes, chunk, unbind and getitem: the pieces torch gives, as views."""
import pytest
import torch

from harness import assert_meta_matches, assert_values_match, cases, maybe_check_compiled
import kiln
from kiln import ir

torch.manual_seed(0)
BASE = torch.randn(6, 5)
INPUTS = {
    "contiguous": BASE,
    "transposed": BASE.t(),
    "stepped": BASE[::2, 1:],
    "offset": torch.arange(60.0).as_strided((5, 4), (1, 6), 3),
    "empty": torch.empty(0, 3),
    "int": torch.arange(20).reshape(4, 5),
    "half": BASE.half(),
    "bool": BASE > 0,
}


def check_pieces(op, expected, x, *args, **kwargs):
    pieces, metas = ir.eval_op(op, x, *args, **kwargs)
    maybe_check_compiled(op, pieces, x, *args, **kwargs)
    assert len(pieces) == len(expected)
    for piece, meta, want in zip(pieces, metas, expected):
        assert_meta_matches(meta, want)
        assert meta["storage_offset"] == want.storage_offset()
        assert_values_match(piece, want)


SPLITS = [(name, size, dim) for name in INPUTS for size, dim in [(2, 0), (3, 1), (1, -1)]]


@pytest.mark.parametrize("case", cases("split", SPLITS, ids=[f"{c[0]}-{c[1]}-{c[2]}" for c in SPLITS]))
def test_split(case):
    name, size, dim = case
    x = INPUTS[name]
    check_pieces("split", torch.split(x, size, dim), x, size, dim=dim)


WITH_SIZES = [("contiguous", [1, 2, 3], 0), ("transposed", [2, 0, 4], 1), ("stepped", [1, 3], 1),
              ("empty", [0, 0], 0), ("int", [5], -1)]


@pytest.mark.parametrize("case", cases("split_with_sizes", WITH_SIZES))
def test_split_with_sizes(case):
    name, sizes, dim = case
    x = INPUTS[name]
    check_pieces("split_with_sizes", torch.split(x, sizes, dim), x, sizes, dim=dim)


CHUNKS = [(name, chunks, dim) for name in INPUTS for chunks, dim in [(3, 0), (4, 1), (1, -2)]]


@pytest.mark.parametrize("case", cases("chunk", CHUNKS, ids=[f"{c[0]}-{c[1]}-{c[2]}" for c in CHUNKS]))
def test_chunk(case):
    name, chunks, dim = case
    x = INPUTS[name]
    check_pieces("chunk", torch.chunk(x, chunks, dim), x, chunks, dim=dim)


UNBINDS = [(name, dim) for name in INPUTS for dim in (0, -1)]


@pytest.mark.parametrize("case", cases("unbind", UNBINDS, ids=[f"{c[0]}-{c[1]}" for c in UNBINDS]))
def test_unbind(case):
    name, dim = case
    x = INPUTS[name]
    check_pieces("unbind", torch.unbind(x, dim), x, dim=dim)


@pytest.mark.parametrize("case", cases("getitem", ["alias"]))
def test_getitem_pieces_alias_their_input(case):
    g = ir.Graph()
    x = g.placeholder("x", "float32", [4, 3])
    pieces = g.call("chunk", x, 2)
    g.call("mul_", g.call("getitem", pieces, index=1), 10.0)
    g.set_outputs([x])
    data = torch.arange(12.0).reshape(4, 3)
    (written,) = ir.run(g, data)
    expected = data.clone()
    expected.chunk(2)[1].mul_(10.0)
    assert torch.equal(written, expected)


@pytest.mark.parametrize("op,args", [("split_with_sizes", ([2, 2],)), ("chunk", (0,)),
                                     ("split", (-1,)), ("unbind", ())])
def test_bad_arguments_are_refused(op, args):
    x = torch.randn(5)
    dim = 0 if op != "unbind" else 1
    torch_op = torch.split if op == "split_with_sizes" else getattr(torch, op)
    with pytest.raises((RuntimeError, IndexError)):
        torch_op(x, *args, dim=dim)
    with pytest.raises(kiln.KilnError) as err:
        ir.eval_op(op, x, *args, dim=dim)
    assert err.value.code == "invalid_argument"
