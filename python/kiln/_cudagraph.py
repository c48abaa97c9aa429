"""mode="reduce-overhead" of kiln.compile: a CUDA entry's launches replayed from a CUDA graph.

    graphed = CudaGraphed(compiled, mutated_inputs, user_outputs)   # compiled: a pure graph's
    outputs = graphed(*inputs)                                       # as compiled(*inputs)

The first call with a given input layout runs the artifact as it is (the warm-up: modules
loaded, cuBLASLt's workspace allocated); the second captures its launches into a
torch.cuda.CUDAGraph on the entry's own copies of the inputs (nn.Parameters are used in
place: their address is part of the layout); later calls copy their inputs into those copies
and replay. Outputs are copies of the graph's memory (the next replay overwrites it), so
they behave as default mode's. The graph is pure (kiln.ir.functionalize): a mutated input's
new value is an output, copied into the caller's tensor after the replay.

A layout that cannot be captured runs uncaptured, with the reason kept in `reasons`: an
artifact whose kernels report errors (reading their status waits for the GPU), an output
that views an input, a layout past the limit of graphs per entry.
"""
from __future__ import annotations

import torch

GRAPHS_PER_ENTRY = 8


class CudaGraphed:
    def __init__(self, compiled, mutated_inputs: list[int], user_outputs: int, uncaptured: str | None = None):
        """`uncaptured`: why no layout is ever captured (the graph could not be made pure)."""
        self.compiled = compiled
        self.mutated_inputs = mutated_inputs
        self.user_outputs = user_outputs
        self.reasons: list[str] = [uncaptured] if uncaptured else []
        self._uncaptured = uncaptured is not None
        self._graphs: dict = {}   # layout -> _Captured, or None where capture failed
        self._warm: set = set()   # layouts run once

    def __getattr__(self, name):  # key, explain, source, target, ...: the artifact's
        if name == "compiled":
            raise AttributeError(name)
        return getattr(self.compiled, name)

    def __call__(self, *inputs) -> list[torch.Tensor]:
        if self._uncaptured:
            return self.compiled(*inputs)
        layout = tuple(_layout(t, symbolic) for t, symbolic in zip(inputs, self.compiled.symbolic_ints))
        captured = self._graphs.get(layout)
        if captured is None and layout in self._warm and layout not in self._graphs:
            captured = self._capture(layout, inputs)
        if captured is None:
            self._warm.add(layout)
            results = self.compiled(*inputs)
        else:
            results = captured.replay(inputs)
        return self._write_back(inputs, results)

    def _write_back(self, inputs, results) -> list[torch.Tensor]:
        with torch.no_grad():
            for k, i in enumerate(self.mutated_inputs):
                inputs[i].copy_(results[self.user_outputs + k])
        return results[:self.user_outputs]

    def _capture(self, layout, inputs):
        reason = None
        if self.compiled.synchronizes:
            reason = ("its kernels report errors (indexing, integer division) or it has data-dependent sizes: "
                      "reading them waits for the GPU")
        elif sum(g is not None for g in self._graphs.values()) >= GRAPHS_PER_ENTRY:
            reason = f"more than {GRAPHS_PER_ENTRY} input layouts"
        captured = None
        if reason is None:
            try:
                captured = _Captured(self.compiled, inputs)
            except (RuntimeError, ValueError) as e:  # torch's capture errors, an output viewing an input
                reason = str(e).splitlines()[0]
        if reason is not None and reason not in self.reasons:
            self.reasons.append(reason)
        self._graphs[layout] = captured
        return captured


def _layout(t, symbolic: bool):
    if symbolic:  # an int or a 0-d int64 tensor: its value is baked into the graph's launches
        return int(t)
    where = t.data_ptr() if isinstance(t, torch.nn.Parameter) else None
    return (t.dtype, t.device, tuple(t.shape), tuple(t.stride()), where)


class _Captured:
    """One input layout's CUDA graph and the memory it reads and writes."""

    def __init__(self, compiled, inputs):
        device = next(t.device for t in inputs if isinstance(t, torch.Tensor) and t.is_cuda)
        self.static = [t if symbolic else self._static(t, device)
                       for t, symbolic in zip(inputs, compiled.symbolic_ints)]
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.outputs = compiled(*self.static)
        owned = {_storage(s) for s, t in zip(self.static, inputs) if isinstance(s, torch.Tensor) and s is not t}
        if any(_storage(o) in owned for o in self.outputs if o.is_cuda):
            raise ValueError("an output views an input")

    @staticmethod
    def _static(t, device):
        if isinstance(t, torch.nn.Parameter):
            return t
        buffer = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=device)
        buffer.copy_(t)
        return buffer

    def replay(self, inputs) -> list[torch.Tensor]:
        for s, t in zip(self.static, inputs):
            if isinstance(s, torch.Tensor) and s is not t and s.data_ptr() != t.data_ptr():
                s.copy_(t, non_blocking=True)
        self.graph.replay()
        return [o.clone() if o.is_cuda else o for o in self.outputs]


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()
