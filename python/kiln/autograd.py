"""kiln's autograd from Python: the joint forward+backward graph of an IR graph and its
partition into a forward and a backward graph (libs/autograd).

    from kiln import autograd, ir
    joint = autograd.backward(g, [True, False])        # grads of the first input
    y, dx = ir.run(joint.graph, x, w, torch.ones_like(y_expected))  # outputs, then grads
    p = autograd.partition(g, [True, True], memory_budget=0.0)
    outs_and_saved = ir.run(p.forward, x, w); grads = ir.run(p.backward, *saved, tangent)

kiln.compile runs such forward and backward graphs (from the partitioner service, which also
functionalizes mutations) inside a torch.autograd.Function: see kiln._train.
"""
from dataclasses import dataclass
from typing import Sequence

from kiln._kiln import ir as _ir
from kiln.ir import Graph

differentiable_ops = _ir.differentiable_ops
differentiability = _ir.differentiability


@dataclass
class Joint:
    """The joint graph: inputs = the forward's, then one tangent per entry of `tangent_of`
    (the forward output it is the grad of); outputs = the forward's `forward_outputs`, then one
    grad per entry of `grad_of` (the input it is the grad of)."""
    graph: Graph
    forward_nodes: int
    forward_outputs: int
    tangent_of: list
    grad_of: list


@dataclass
class Partition:
    """forward: the inputs -> the outputs, then the saved values; backward: the saved values,
    then the tangents -> the grads. saved/recomputed are ids of `joint.graph`."""
    joint: Joint
    forward: Graph
    backward: Graph
    saved: list
    recomputed: list
    forward_outputs: int
    tangent_of: list
    grad_of: list


def backward(graph: Graph, requires_grad: Sequence[bool]) -> Joint:
    """The joint forward+backward graph of `graph` for the inputs marked in requires_grad."""
    return Joint(**_ir.backward(graph, list(requires_grad)))


def partition(graph: Graph, requires_grad: Sequence[bool], memory_budget: float = 0.25) -> Partition:
    """backward(), then the min-cut partition: 0 recomputes all it can, 1 recomputes nothing."""
    info = _ir.partition(graph, list(requires_grad), memory_budget)
    info["joint"] = Joint(**info["joint"])
    return Partition(**info)


def functionalize(graph: Graph) -> tuple[Graph, int, list]:
    """The graph without mutations, how many of its outputs are the original's, and the inputs
    it mutated: one more output each, that input's new value (to copy into it)."""
    info = _ir.functionalize(graph)
    return info["graph"], info["user_outputs"], info["mutated_inputs"]


__all__ = ["Joint", "Partition", "backward", "differentiability", "differentiable_ops",
           "functionalize", "partition"]
