"""Training entries of kiln.compile: a traced call that autograd would record (an input
or a parameter requires grad under grad mode) is functionalized, differentiated and
partitioned by the partitioner service; its forward and backward graphs are compiled
by the codegen service and run here inside a torch.autograd.Function.

    runner = compile_training(traced, stack, inputs, "cpu", memory_budget=0.25)   # KilnError when a service fails
    out = runner(fn, args, kwargs)                      # as eager; out.backward() runs the backward artifact

The forward artifact returns the call's outputs, the new values of the inputs it
mutated (copied into them after it ran, as eager's in-place ops would have left
them) and the values saved for the backward. Those stay the backward's inputs as the
run left them (ir.Kept: no torch tensor is made of them); autograd holds the memory
they are, and the inputs they view, as saved tensors (save_for_backward: freed after
the backward, and an input changed in place before it is an error, as in eager). Under mode="reduce-overhead" on the GPU both artifacts replay CUDA graphs
(kiln._cudagraph.Replayed): the forward's saved values and the backward's grads are then
aliases of the graphs' memory, which a replay overwrites only once they are dead.
Inputs are passed to the Function as they are, never detached: autograd records edges
to those that require grad only. The backward runs once per forward
(`retain_graph=True` lets it run again); it is not differentiable itself, so double
backward raises torch's error for once-differentiable functions.
"""
from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from kiln import _trace, ir
from kiln._kiln import KilnError

class NotTrainable(Exception):
    """The call runs eagerly under grad mode: `reason` says why (not a failure of the stack)."""


def requires_grad_mask(inputs: list) -> list[bool]:
    return [isinstance(t, torch.Tensor) and t.requires_grad for t in inputs]


def compile_training(traced: _trace.Traced, stack, inputs: list, target: str, *,
                     memory_budget: float, mode: str = "default") -> "TrainingRunner":
    """The training runner of a traced call whose graph inputs are `inputs` (read from it).
    Raises NotTrainable for graphs kiln cannot train (an op without a derivative rule or a
    lowering, a mutation of an input that carries grad), KilnError when the stack fails."""
    mask = requires_grad_mask(inputs)
    try:
        parts = stack.partition(traced.graph, mask, memory_budget=memory_budget)
        # A mutated input whose new value carries grad would join autograd's graph in eager.
        mutated = range(parts["user_outputs"], parts["user_outputs"] + len(parts["mutated_inputs"]))
        if any(i in parts["tangent_of"] for i in mutated):
            raise NotTrainable("an in-place update of an input with a value that requires grad")
        forward, backward = _compile_both(stack, parts["forward"], parts["backward"], target)
    except KilnError as e:
        if e.code in ("unsupported", "invalid_argument"):
            raise NotTrainable(f"training graph: {e.message}") from e
        raise
    if mode == "reduce-overhead" and target.startswith("cuda"):
        from kiln._cudagraph import Replayed
        saved = len(backward.symbolic_ints) - len(parts["tangent_of"])
        user_outputs = parts["user_outputs"]
        forward = Replayed(forward, cloned=user_outputs)  # parameters read in place
        backward = Replayed(backward, in_place=lambda k, t: k < saved, cloned=0)
    return TrainingRunner(traced, parts, forward, backward)


def _compile_both(stack, forward: ir.Graph, backward: ir.Graph, target: str):
    """The forward and backward artifacts, compiled at once: the codegen service runs a
    worker for each (the stack's connection serves one call at a time, so the backward
    goes through a second one, from a thread; the RPC runs without the GIL)."""
    import concurrent.futures

    from kiln._stack import connect

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        second = pool.submit(lambda: connect(stack.endpoint).compile(backward, target))
        forward_artifact = stack.compile(forward, target)
        backward_artifact = second.result()
    return ir.Compiled(*forward_artifact, ir._cache_dir()), ir.Compiled(*backward_artifact, ir._cache_dir())


class TrainingRunner:
    """A compiled training entry: forward and backward artifacts, where the inputs come from
    and how the result is built."""

    def __init__(self, traced: _trace.Traced, parts: dict, forward: ir.Compiled, backward: ir.Compiled):
        self.read_inputs = _trace.inputs_reader(traced)
        self.traced = traced
        self.graph = traced.graph
        self.parts = parts
        self.forward = forward
        self.backward = backward
        self.user_outputs = parts["user_outputs"]
        self.mutated_inputs = parts["mutated_inputs"]
        self.forward_outputs = self.user_outputs + len(self.mutated_inputs)
        self.tangent_of = parts["tangent_of"]
        self.grad_of = parts["grad_of"]

    def __call__(self, fn, args, kwargs):
        inputs = self.read_inputs(fn, args, kwargs)
        results = _KilnFunction.apply(self, *inputs)
        outputs = list(results[:self.user_outputs])
        for k, i in enumerate(self.mutated_inputs):
            with torch.no_grad():
                inputs[i].copy_(results[self.user_outputs + k])
        if self.traced.side_effects:
            _trace.replay(self.traced, outputs, fn, args, kwargs)
        return self.traced.rebuild(outputs, (fn, args, kwargs))

    @property
    def explain(self) -> str:
        p = self.parts
        uncaptured = [f"{name} runs without a CUDA graph for some calls: " + "; ".join(a.reasons)
                      for name, a in (("forward", self.forward), ("backward", self.backward))
                      if getattr(a, "reasons", None)]
        return "\n".join(uncaptured + [
                f"forward ({p['user_outputs']} outputs, {len(p['mutated_inputs'])} mutated inputs "
                f"{p['mutated_inputs']}, {p['saved']} saved, {p['recomputed']} recomputed):\n{p['forward']}\n"
                f"forward kernels:\n{self.forward.explain}\n"
                f"backward (grads of inputs {p['grad_of']}):\n{p['backward']}\n"
                f"backward kernels:\n{self.backward.explain}"])


def _graph_released() -> bool:
    """Whether the running backward frees the graph after it (no retain_graph): its saved
    values are read once."""
    return not torch._C._autograd._get_current_graph_task_keep_graph()


class _KilnFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, runner: TrainingRunner, *inputs):
        ctx.runner = runner
        ctx.num_inputs = len(inputs)
        if isinstance(runner.forward, ir.Compiled):
            # The saved values stay as the backward's inputs (ir.Kept): no torch tensor is
            # made of them; autograd keeps the memory they are (and the inputs they view).
            outputs, kept = runner.forward.run_keeping(inputs, runner.forward_outputs,
                                                       written=runner.mutated_inputs)
            ctx.kept = kept
            ctx.save_for_backward(*kept.owners)
            kept.owners = None  # autograd's from here: freed after the backward
        else:  # CUDA graphs' replays hand out saved values as tensors
            results = runner.forward(*inputs)
            outputs, saved = results[:runner.forward_outputs], results[runner.forward_outputs:]
            if runner.mutated_inputs:  # a saved input must keep the value the backward was planned with
                written = {ir.storage_address(inputs[i]) for i in runner.mutated_inputs}
                saved = [s.clone() if ir.storage_address(s) in written else s for s in saved]
            ctx.kept = None
            ctx.save_for_backward(*saved)
        ctx.output_layouts = [(o.shape, o.dtype, o.device) for o in outputs]
        differentiable = set(runner.tangent_of)
        ctx.mark_non_differentiable(*[o for k, o in enumerate(outputs) if k not in differentiable])
        return tuple(outputs)

    @staticmethod
    @once_differentiable
    def backward(ctx, *grads):
        runner = ctx.runner
        tangents = []
        for k in runner.tangent_of:
            g = grads[k]
            if g is None:
                shape, dtype, device = ctx.output_layouts[k]
                g = torch.zeros(shape, dtype=dtype, device=device)
            tangents.append(g.contiguous())
        if ctx.kept is not None:
            # torch's error if freed (a second backward) or changed in place
            owners = list(ctx.saved_tensors)
            donate = _graph_released() and hasattr(ctx, "maybe_clear_saved_tensors")
            if donate:  # no later backward reads them: autograd lets go, the run may reuse them
                ctx.maybe_clear_saved_tensors()
            results = runner.backward.run_after(ctx.kept, owners, *tangents, donate=donate)
        else:
            results = runner.backward(*ctx.saved_tensors, *tangents)
        out = [None] * (1 + ctx.num_inputs)
        for grad, i in zip(results, runner.grad_of):
            out[1 + i] = grad
        return tuple(out)
