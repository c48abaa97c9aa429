"""Python 3.12 bytecode, checked where only 3.11 runs: each file in fixtures312/ is a
program's final TraceRequest as Python 3.12 on the GPU machine listed it
(`KILN_CAPTURE_REQUESTS`, see corpus.py and scripts/device-run). The tracer must
read it and build a graph that computes what the program computes here."""
import pathlib

import pytest
import torch

import corpus
from kiln import _kiln, _trace, ir

corpus.load_all()
FIXTURES = pathlib.Path(__file__).parent / "fixtures312"
BY_NAME = {p.name: p for p in corpus.PROGRAMS}
FILES = sorted(FIXTURES.glob("*.bin")) if FIXTURES.is_dir() else []


@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_312_request(path):
    p = BY_NAME.get(path.stem)
    if p is None:
        pytest.skip(f"no program {path.stem} in this torch's corpus (gone, or defined only where torch has it)")
    request = path.read_bytes()
    assert _kiln.capnp_decode("TraceRequest", request)["code"]["pythonVersion"] == "3.12"
    reply = _kiln.capnp_decode("TraceReply", _kiln.trace(request))
    brk = reply.get("traced", {}).get("graphBreak", {})
    if brk.get("isSet"):  # the code after the break is traced as its own frame: not in this request
        # (the break the program names may be in a frame resumed or called after this one)
        assert p.breaks is not None, brk
        return
    if p.falls_back is not None:
        if "traced" in reply and reply["traced"]["requiresGrad"]:
            assert "grad" in p.falls_back  # traced, and kiln.compile runs it eagerly (autograd)
        else:
            assert "unsupported" in reply and p.falls_back in reply["unsupported"]["reason"], reply
        return
    assert "traced" in reply, reply.get("unsupported") or reply
    traced = _trace.Traced(reply)
    args, kwargs = corpus.arguments(p)
    expected_args, expected_kwargs = corpus._clone(args), corpus._clone(kwargs)
    expected = p.fn(*expected_args, **expected_kwargs)
    fn, call_args = _trace.normalize(p.fn, args)
    results = ir.run(traced.graph, *_trace.graph_inputs(traced, fn, call_args, kwargs))
    corpus.compare(_trace.rebuild(traced.outputs, results, (fn, call_args, kwargs)), expected, p)
