"""Checks the grads kiln's joint graph computes for one op against torch.autograd and, for small
inputs, against central finite differences of kiln's own forward, all in float64.

    check_grads("mul", torch.mul, leaf(2, 3), leaf(3))

builds the op's graph (ir.op_graph; tensors that require grad mark the inputs to differentiate),
its joint graph (autograd.backward), runs it through the reference interpreter with random
tangents, and compares the grads with torch.autograd.grad of `fn` on the same tensors.
"""
import itertools

import pytest
import torch

from kiln import autograd, ir
from harness import twin  # a copy keeping the layout
from test_cpoint import make  # the op conformance suite's data generator

f64 = torch.float64
_seeds = itertools.count(1)
FD_MAX_ELEMENTS = 40  # finite differences when the inputs to differentiate are this small


def cases(op: str, params: list, ids=None):
    """One pytest param per case, marked with the op for the tally."""
    return [pytest.param(p, marks=pytest.mark.grad_op(op), id=None if ids is None else ids[i])
            for i, p in enumerate(params)]


def leaf(*shape, low=-2.0, high=2.0, layout="contig", grad=True, nonzero=False):
    """Random float64 data (a fresh seed each call) laid out as `layout` (see make), as a leaf
    that requires grad unless grad=False."""
    x = make(shape, f64, next(_seeds), low, high, layout, nonzero).detach()
    return x.requires_grad_(grad)


def _flat_tensors(args):
    for a in args:
        if isinstance(a, torch.Tensor):
            yield a
        elif isinstance(a, (list, tuple)):
            yield from (t for t in a if isinstance(t, torch.Tensor))


def check_grads(op: str, fn, *args, fd=True, atol=1e-8, rtol=1e-6, torch_kwargs=None, **kwargs):
    graph, tensors = ir.op_graph(op, *args, **kwargs)
    mask = [t.requires_grad for t in tensors]
    joint = autograd.backward(graph, mask)
    expected = fn(*args, **(kwargs if torch_kwargs is None else torch_kwargs))
    outs = list(expected) if isinstance(expected, (list, tuple)) else [expected]
    gen = torch.Generator().manual_seed(7)
    tangents = [torch.randn(outs[i].shape, generator=gen, dtype=outs[i].dtype)
                for i in joint.tangent_of]
    results = ir.run(joint.graph, *[t.detach() for t in tensors], *tangents)
    grads = results[joint.forward_outputs:]
    wanted = [tensors[i] for i in joint.grad_of]
    assert len(grads) == len(wanted) == sum(mask)
    torch_grads = torch.autograd.grad([outs[i] for i in joint.tangent_of], wanted, tangents,
                                      allow_unused=True)
    for i, (mine, theirs) in enumerate(zip(grads, torch_grads)):
        theirs = torch.zeros_like(wanted[i]) if theirs is None else theirs
        assert mine.shape == theirs.shape, f"grad {i}: sizes {list(mine.shape)} vs torch's"
        assert mine.dtype == theirs.dtype, f"grad {i}: dtype {mine.dtype} vs torch's"
        torch.testing.assert_close(mine, theirs, atol=atol, rtol=rtol, equal_nan=True,
                                   msg=lambda m: f"grad {i} vs torch.autograd: {m}")
    if fd and sum(t.numel() for t in wanted) <= FD_MAX_ELEMENTS:
        _check_finite_differences(graph, tensors, joint, tangents, grads)


def _check_finite_differences(graph, tensors, joint, tangents, grads, h=1e-6):
    """d<tangents, f(x)>/dx by central differences of kiln's forward, per element."""
    inputs = [twin(t.detach()) for t in tensors]

    def objective():
        outs = ir.run(graph, *inputs)
        return sum((outs[i].to(f64) * t.to(f64)).sum().item()
                   for i, t in zip(joint.tangent_of, tangents))

    for k, index in enumerate(joint.grad_of):
        x = inputs[index]
        numeric = torch.zeros(x.shape, dtype=f64)
        for pos in itertools.product(*[range(n) for n in x.shape]):
            old = x[pos].item()
            x[pos] = old + h
            up = objective()
            x[pos] = old - h
            down = objective()
            x[pos] = old
            numeric[pos] = (up - down) / (2 * h)
        torch.testing.assert_close(grads[k].to(f64), numeric, atol=1e-5, rtol=1e-4,
                                   msg=lambda m: f"grad {k} vs finite differences: {m}")
