"""mode="reduce-overhead" of kiln.compile: a CUDA artifact's launches replayed from CUDA graphs.

    replayed = Replayed(compiled, in_place, cloned)     # compiled: a pure graph's artifact
    results = replayed(*inputs)                          # as compiled(*inputs)
    graphed = CudaGraphed(compiled, mutated_inputs, user_outputs)   # an inference entry's

The first call with a given input layout runs the artifact as it is (the warm-up: modules
loaded, cuBLASLt's algorithms picked); the second captures its launches into a
torch.cuda.CUDAGraph, in a memory pool of its own. Inputs that `in_place` names (an entry's
nn.Parameters, a backward's saved values) are read where they are: their address is part of
the layout. The others are copied into the graph's own buffers before each replay.

Outputs live in the graph's memory, which the next replay overwrites. The first `cloned` of
them are handed out as copies (what a user keeps); the rest as aliases of that memory (what
autograd saves for the backward, a backward's grads), as torch's cudagraph trees do. A replay
waits for none of them: before replaying, the memory is checked to be unused (no alias alive,
by the storages' reference counts); when it is still in use — two forwards before their
backwards, `retain_graph=True`, a grad kept from the previous step — the call runs uncaptured
and the reason is kept in `reasons`.

A kernel's error (an index out of range) is reported after a replay as after a run (the
artifact's ReplayStatus). What runs uncaptured, with its reason: an artifact with
data-dependent sizes (the host reads them), a handed-out output that views a copied input
(eager's result would view the caller's tensor), a layout past the limit of graphs per
artifact.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Callable

import torch

from kiln.ir import storage_address

GRAPHS_PER_ENTRY = 8
WARM_LAYOUTS = 64  # layouts remembered as run once (inputs in place at changing addresses)


def parameters_in_place(k: int, t) -> bool:
    return isinstance(t, torch.nn.Parameter)


class Replayed:
    def __init__(self, compiled, in_place: Callable[[int, object], bool] = parameters_in_place,
                 cloned: int | None = None, uncaptured: str | None = None):
        """`cloned`: how many outputs, first, are handed out as copies (None: all).
        `uncaptured`: why no layout is ever captured."""
        self.compiled = compiled
        self.in_place = in_place
        self.cloned = cloned
        self.reasons: list[str] = [uncaptured] if uncaptured else []
        if uncaptured is None and compiled.data_dependent:
            self.reasons.append("it has data-dependent sizes: the host reads them while it runs")
        self._uncaptured = bool(self.reasons)
        self._graphs: dict = {}            # layout -> _Captured, or None where capture failed
        self._warm: OrderedDict = OrderedDict()  # layouts run once
        self.replays = 0

    def __getattr__(self, name):  # key, explain, source, target, ...: the artifact's
        if name == "compiled":
            raise AttributeError(name)
        return getattr(self.compiled, name)

    def __call__(self, *inputs) -> list[torch.Tensor]:
        if self._uncaptured:
            return self.compiled(*inputs)
        layout = tuple(_layout(t, symbolic, self.in_place(k, t))
                       for k, (t, symbolic) in enumerate(zip(inputs, self.compiled.symbolic_ints)))
        if layout not in self._graphs:
            if layout not in self._warm:
                self._warm[layout] = True
                if len(self._warm) > WARM_LAYOUTS:
                    self._warm.popitem(last=False)
                return self.compiled(*inputs)
            self._capture(layout, inputs)
        captured = self._graphs[layout]
        if captured is None:
            return self.compiled(*inputs)
        if captured.in_use():
            self._note("the outputs of its previous replay are still in use (saved for a backward that "
                       "has not run, or kept)")
            return self.compiled(*inputs)
        self.replays += 1
        return captured.replay(inputs)

    def _note(self, reason: str) -> None:
        if reason not in self.reasons:
            self.reasons.append(reason)

    def _capture(self, layout, inputs) -> None:
        reason, captured = None, None
        if sum(g is not None for g in self._graphs.values()) >= GRAPHS_PER_ENTRY:
            reason = f"more than {GRAPHS_PER_ENTRY} input layouts"
        else:
            try:
                captured = _Captured(self.compiled, inputs, self.in_place, self.cloned)
            except (RuntimeError, ValueError) as e:  # torch's capture errors, an output viewing an input
                reason = str(e).splitlines()[0]
        if reason is not None:
            self._note(reason)
        self._graphs[layout] = captured


class CudaGraphed(Replayed):
    """An inference entry's artifact: every output is a copy; a mutated input's new value
    (an output of the pure graph) is copied into the caller's tensor after the replay."""

    def __init__(self, compiled, mutated_inputs: list[int], user_outputs: int, uncaptured: str | None = None):
        super().__init__(compiled, uncaptured=uncaptured)
        self.mutated_inputs = mutated_inputs
        self.user_outputs = user_outputs

    def __call__(self, *inputs) -> list[torch.Tensor]:
        results = super().__call__(*inputs)
        with torch.no_grad():
            for k, i in enumerate(self.mutated_inputs):
                inputs[i].copy_(results[self.user_outputs + k])
        return results[:self.user_outputs]


def _layout(t, symbolic: bool, in_place: bool):
    if symbolic:  # an int or a 0-d int64 tensor: its value is baked into the graph's launches
        return int(t)
    # torch.Size is a tuple (equal, same hash): not copied, as a call makes ~150 of these
    where = t.data_ptr() if in_place else None
    return (t.dtype, t.device, t.shape, t.stride(), where)


class _Captured:
    """One input layout's CUDA graph, the memory it reads and writes, and its outputs."""

    def __init__(self, compiled, inputs, in_place, cloned: int | None):
        device = next(t.device for t in inputs if isinstance(t, torch.Tensor) and t.is_cuda)
        self.device = device
        # The graph's copies of the inputs it does not read in place (None for those: holding
        # them would keep, say, a forward's saved values alive for its backward's graph).
        kept = [symbolic or in_place(k, t) for k, (t, symbolic) in enumerate(zip(inputs, compiled.symbolic_ints))]
        self.static = [None if keep else self._static(t, device) for t, keep in zip(inputs, kept)]
        arguments = [t if keep else s for t, s, keep in zip(inputs, self.static, kept)]
        self.graph = torch.cuda.CUDAGraph()
        # Relaxed: a run with kernels that may fail allocates pinned host memory for their
        # status words while it is captured (kiln.ir.Compiled.capture).
        with torch.cuda.graph(self.graph, capture_error_mode="relaxed"):
            self.outputs, self.status = compiled.capture(*arguments)
        self.cloned = len(self.outputs) if cloned is None else cloned
        copied = {storage_address(s) for s in self.static if s is not None}
        read_in_place = {storage_address(t): k for k, (t, keep) in enumerate(zip(inputs, kept))
                         if keep and isinstance(t, torch.Tensor)}
        del arguments
        if any(o.is_cuda and storage_address(o) in copied for o in self.outputs[:self.cloned]):
            raise ValueError("an output views an input")
        # An output viewing an input read in place is made again from the call's input (holding
        # it would hold that input: a backward's graph, its forward's saved values).
        self._views = {}  # output -> (input, its view's sizes, strides, storage offset)
        for j, o in enumerate(self.outputs):
            if o.is_cuda and storage_address(o) in read_in_place:
                self._views[j] = (read_in_place[storage_address(o)], tuple(o.shape), o.stride(), o.storage_offset())
                self.outputs[j] = None
        # The aliased outputs' memory (the graph's, or its copies of inputs), whose reference
        # counts say whether an alias handed out earlier is alive.
        watched = {}
        for o in self.outputs[self.cloned:]:
            if o is not None and o.is_cuda:
                watched.setdefault(storage_address(o), o.untyped_storage())
        self._watched = list(watched.values())  # held: their handles stay valid
        self._handles = [s._cdata for s in self._watched]
        self._baseline = [torch._C._storage_Use_Count(h) for h in self._handles]

    @staticmethod
    def _static(t, device):
        buffer = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=device)
        buffer.copy_(t)
        return buffer

    def in_use(self) -> bool:
        uses = torch._C._storage_Use_Count
        return any(uses(h) != n for h, n in zip(self._handles, self._baseline))

    def replay(self, inputs) -> list[torch.Tensor]:
        for s, t in zip(self.static, inputs):
            if s is not None and s.data_ptr() != t.data_ptr():
                s.copy_(t, non_blocking=True)
        if self.status is not None:
            self.status.replaying()
        self.graph.replay()
        if self.status is not None:
            self.status.replayed(self.device.index, torch.cuda.current_stream(self.device).cuda_stream)
        outputs = [o if o is not None else self._view_of(inputs, j) for j, o in enumerate(self.outputs)]
        return ([o.clone() if o.is_cuda else o for o in outputs[:self.cloned]] +
                [o if j in self._views else o.detach() for j, o in enumerate(outputs) if j >= self.cloned])

    def _view_of(self, inputs, j: int) -> torch.Tensor:
        k, sizes, strides, offset = self._views[j]
        return inputs[k].as_strided(sizes, strides, offset)

