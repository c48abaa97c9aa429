"""kiln's graph IR from Python: build small graphs, print them, run the reference interpreter.

    from kiln import ir
    g = ir.Graph()
    s0 = g.symbol("s0", hint=8, min=2)
    x = g.placeholder("x", "float32", [s0, 768])
    b = g.placeholder("bias", "float32", [768])
    y = g.call("add", x, b)
    g.set_outputs([y, g.call("sum", y, dim=[1], keepdim=True)])
    print(g)                                   # the FX-style text
    out, total = ir.run(g, torch.randn(8, 768), torch.randn(768))

Graph.call binds its arguments to the op's schema (ir.op_schema(name)): graph values go to
tensor arguments, numbers, lists, dtypes, strings and symbols become attributes.
Errors are KilnError with code "invalid_argument", "not_found" or "unsupported".
"""
import functools
import os
from typing import Any, Sequence

import torch

from kiln._kiln import Stack
from kiln._kiln import ir as _ir

Graph = _ir.Graph
Sym = _ir.Sym
Value = _ir.Value
op_names = _ir.op_names
op_schema = _ir.op_schema

_TORCH_DTYPES = {
    "float32": torch.float32,
    "float64": torch.float64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "int8": torch.int8,
    "int16": torch.int16,
    "int32": torch.int32,
    "int64": torch.int64,
    "uint8": torch.uint8,
    "bool": torch.bool,
    "complex64": torch.complex64,
    "complex128": torch.complex128,
}
_DTYPE_NAMES = {dtype: name for name, dtype in _TORCH_DTYPES.items()}


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype of a kiln dtype name ("float32", ...)."""
    return _TORCH_DTYPES[name]


def dtype_name(dtype: torch.dtype) -> str:
    """The kiln name of a torch dtype."""
    if dtype not in _DTYPE_NAMES:
        raise TypeError(f"kiln has no dtype for {dtype}")
    return _DTYPE_NAMES[dtype]


def placeholder_like(graph: Graph, name: str, tensor: torch.Tensor) -> Value:
    """A placeholder with the tensor's dtype, sizes, strides and storage offset (all concrete)."""
    return graph.placeholder(
        name,
        dtype_name(tensor.dtype),
        list(tensor.shape),
        list(tensor.stride()),
        tensor.storage_offset(),
        requires_grad=tensor.requires_grad,
    )


def _raw(tensor: torch.Tensor):
    # The storage from its start to the tensor's last element, so that the
    # interpreter sees the same strides and offset (views stay views).
    tensor = tensor.detach().cpu()
    if tensor.numel() == 0:
        span = tensor.storage_offset()
    else:
        span = tensor.storage_offset() + 1 + sum(
            (size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride())
        )
    flat = tensor.as_strided((span,), (1,), 0)
    return (
        dtype_name(tensor.dtype),
        list(tensor.shape),
        list(tensor.stride()),
        tensor.storage_offset(),
        flat.view(torch.uint8).numpy(),
    )


def _tensor(raw) -> torch.Tensor:
    name, sizes, strides, offset, data = raw
    dtype = torch_dtype(name)
    if len(data) == 0:
        return torch.empty_strided(sizes, strides, dtype=dtype)
    flat = torch.frombuffer(bytearray(data), dtype=torch.uint8).view(dtype)
    return flat.as_strided(sizes, strides, offset)


def run(graph: Graph, *inputs: torch.Tensor) -> list[torch.Tensor]:
    """Runs the reference interpreter on CPU copies of `inputs` (one per placeholder, with their
    strides and storage offsets) and returns the outputs as new CPU tensors with the strides the
    interpreter gave them. A symbolic-int output comes back as a 0-d int64 tensor."""
    return [_tensor(raw) for raw in graph.interpret([_raw(t) for t in inputs])]


# As an argument of op_graph/eval_op: a fresh unbacked symbol of the graph (the `symbol`
# that item, nonzero and masked_select bind).
UNBACKED = object()


def op_graph(op: str, *args, **kwargs) -> tuple[Graph, list[torch.Tensor]]:
    """A graph applying one op: a placeholder per tensor argument (with its layout), the call,
    and its result as the output (a tuple's pieces, for split and the like); and the tensors
    to run it on, in placeholder order."""
    graph = Graph()
    tensors: list[torch.Tensor] = []

    def lift(arg):
        if arg is UNBACKED:
            return graph.unbacked()
        if isinstance(arg, torch.Tensor):
            tensors.append(arg)
            return placeholder_like(graph, f"arg{len(tensors) - 1}", arg)
        if isinstance(arg, (list, tuple)) and arg and all(isinstance(a, torch.Tensor) for a in arg):
            return [lift(a) for a in arg]
        return arg

    value = graph.call(op, *[lift(a) for a in args], **{k: lift(v) for k, v in kwargs.items()})
    meta = value.meta
    if isinstance(meta, list):  # a tuple: its pieces are the outputs
        graph.set_outputs([graph.call("getitem", value, index=i) for i in range(len(meta))])
    else:
        graph.set_outputs([value])
    return graph, tensors


def eval_op(op: str, *args, **kwargs):
    """Runs one op through the IR (op_graph, then the interpreter). Returns (result tensor,
    inferred meta) — handy to compare against torch; for an op giving a tuple (split, chunk,
    unbind), a list of tensors and a list of metas.

        out, meta = ir.eval_op("add", torch.ones(2, 3), torch.ones(3), alpha=2)
    """
    graph, tensors = op_graph(op, *args, **kwargs)
    meta = graph.value(len(tensors)).meta
    results = run(graph, *tensors)
    return (results, meta) if isinstance(meta, list) else (results[0], meta)


def _cache_dir() -> str:
    # Where the codegen service caches artifacts; loaded libraries go there too.
    if os.environ.get("KILN_CACHE_DIR"):
        return os.environ["KILN_CACHE_DIR"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "kiln")


@functools.lru_cache(maxsize=None)
def _cuda_available() -> bool:
    """torch.cuda.is_available(), asked once: it queries the driver, and calls run per step."""
    return torch.cuda.is_available()


class Compiled:
    """A graph compiled by the stack's codegen service, run in this process by libs/runtime.

    Call it with tensors on the artifact's device (one per placeholder, laid out as the
    placeholders say; a symbolic-int placeholder takes a 0-d int64 CPU tensor, or an int on
    CUDA); it returns new torch tensors (views of memory torch allocated: no copies), or
    views of an input where the graph returns one. A CUDA artifact runs on its inputs'
    device, on torch's current stream, with torch's caching allocator, and does not wait for
    the GPU (an index out of range or an integer division by zero in a kernel is raised by a
    later run or kiln.check_errors(); sizes that depend on data are read on the host); a
    symbolic-int output comes back as a 0-d int64 CPU tensor.
    """

    def __init__(self, artifact: bytes, cache_hit: bool, cache_dir: str):
        os.makedirs(cache_dir, exist_ok=True)
        self._artifact = _ir.load_artifact(artifact, cache_dir)
        self.cache_hit = cache_hit
        self.explain = self._artifact.explain  # the scheduled kernels
        self.source = self._artifact.source    # the generated C++ (or CUDA C++)
        self.key = self._artifact.key          # its content key in the artifact cache
        self.target = self._artifact.target    # "cpu" or "cuda:sm_NN"
        self._cuda = self.target.startswith("cuda")
        self.symbolic_ints = self._artifact.symbolic_ints  # per input: a symbolic int, else a tensor
        self.data_dependent = self._artifact.data_dependent  # a run reads sizes from data (waits for the GPU)

    def __call__(self, *tensors) -> list[torch.Tensor]:
        return self._run(tensors, capture=False)[0]

    def capture(self, *tensors) -> tuple[list[torch.Tensor], Any]:
        """As a call, on a CUDA stream that captures a graph (torch.cuda.graph with
        capture_error_mode="relaxed"): (outputs, status), where `status.replaying()` is to be
        called before each replay of the graph and `status.replayed(device, stream)` after it
        (a kernel's error is then raised as a run's would be), or None when no kernel reports
        errors."""
        return self._run(tensors, capture=True)

    def _run(self, tensors, capture: bool):
        inputs, device, tensors = self._marshal(tensors)
        raw, status = self._execute(inputs, device, capture)
        return [self._tensor(r, tensors) for r in raw], status

    def run_keeping(self, tensors, keep_from: int, written=frozenset()) -> tuple[list[torch.Tensor], "Kept"]:
        """As a call, but the outputs from `keep_from` on stay as a later run's inputs (a
        training forward's saved values, which only the backward reads): a Kept, not torch
        tensors. `written`: inputs the caller changes in place after the run; a kept view of
        one is copied first, so it keeps the value it had."""
        inputs, device, tensors = self._marshal(tensors)
        raw, _ = self._execute(inputs, device, capture=False)
        returned = {id(r[3]) for r in raw[:keep_from] if r[3] is not None}
        kept = Kept(raw[keep_from:], tensors, device, written, returned)
        return [self._tensor(r, tensors) for r in raw[:keep_from]], kept

    def run_after(self, kept: "Kept", owners: list, *tensors, donate: bool = False) -> list[torch.Tensor]:
        """A call whose first inputs are `kept`'s values (`owners`: kept.owners, alive), then
        `tensors`. `donate`: the caller gives up the memory of the kept values no one else
        holds (a backward whose graph is not retained): the run may write over them
        (PlanBuffer::reuses), and frees those it took after their last use — provided
        `owners` is the only reference to them left."""
        inputs, device, tensors = self._marshal(tensors)
        donated = kept.donations(owners) if donate else None
        raw, _ = self._execute(kept.inputs + inputs, device, capture=False, donated=donated)
        if donated is not None:
            kept.take_back(owners, donated)
        every = _KeptThenTensors(kept, owners, tensors)
        return [self._tensor(r, every) for r in raw]

    def _marshal(self, tensors):
        """The artifact's inputs of `tensors` (the run reads their dtype, sizes, strides,
        address and device), the device the run is on (None: none on CUDA), and the tensors
        as passed."""
        if not self._cuda:  # the device matters to a CUDA run only
            return list(tensors), None, tensors
        tensors = self._cuda_inputs(tensors)
        device = next((t.get_device() for t in tensors if getattr(t, "is_cuda", False)), None)
        return list(tensors), device, tensors

    def _execute(self, inputs, device, capture: bool, donated=None):
        """The artifact's raw outputs of a run on `inputs` (see kiln._kiln.ir.Artifact.run)."""
        status = None
        if self._cuda:
            available = _cuda_available()
            if device is None:  # no CUDA input: torch's current device (inputs are checked in C++)
                device = torch.cuda.current_device() if available else 0
            on = torch.device("cuda", device)
            stream = torch.cuda.current_stream(on).cuda_stream if available else 0
            # allocate None: torch's caching allocator, called from C++ (no Python call a
            # buffer); the outputs a run hands out whole are made in their own layout
            if capture:
                raw, status = self._artifact.capture(inputs, None, device, stream, None)
            else:
                raw = self._artifact.run(inputs, None, device, stream, donated)
        elif capture:
            raise ValueError("kiln: only a CUDA artifact is captured into a CUDA graph")
        else:
            raw = self._artifact.run(inputs, None, 0, 0, donated)
        return raw, status

    def _cuda_inputs(self, tensors) -> tuple:
        """Symbolic ints as 0-d int64 host tensors; 0-d CPU tensors (scalars, as torch lets
        them mix with CUDA tensors) copied to the device of the call's CUDA tensors."""
        device = next((t.device for t in tensors if isinstance(t, torch.Tensor) and t.is_cuda), None)
        out = []
        for t, symbolic in zip(tensors, self.symbolic_ints):
            if isinstance(t, int):
                t = torch.tensor(t, dtype=torch.int64)
            elif not symbolic and not t.is_cuda and t.dim() == 0:
                t = t.to(device if device is not None else torch.device("cuda", torch.cuda.current_device()))
            out.append(t)
        return tuple(out) + tuple(tensors[len(out):])

    @staticmethod
    def _tensor(raw, inputs):
        name, sizes, strides, base, offset, value, input = raw
        if base is not None:  # offset None: base is the output, made in its layout
            return base if offset is None else base.view(torch_dtype(name)).as_strided(sizes, strides, offset)
        dtype = torch_dtype(name)
        if value is not None:  # a symbolic int, computed on the host
            return torch.tensor(value, dtype=dtype)
        if input is not None and inputs[input].dtype == dtype:  # a view of that input
            t = inputs[input]
            return t.as_strided(sizes, strides, t.storage_offset() + (offset - t.data_ptr()) // t.element_size())
        empty = 0 in sizes  # an empty view may start just past the end (x[7:] of 5 rows)
        for t in inputs:  # a view of an input: `offset` is its address
            start = t.data_ptr() - t.storage_offset() * t.element_size()
            storage = t.untyped_storage()
            end = start + max(storage.nbytes(), 1)
            if t.dtype == dtype and start <= offset and (offset < end or (empty and offset <= end)):
                return t.as_strided(sizes, strides, (offset - start) // t.element_size())
        if empty:  # of an empty input (its storage may have no address): nothing to alias
            device = next((t.device for t in inputs if t.device.type == "cuda"), "cpu")
            return torch.empty(sizes, dtype=dtype, device=device).as_strided(sizes, strides)
        raise RuntimeError("kiln: an output views memory that is not an input's")


class Kept:
    """A run's outputs kept as a later run's inputs, never made torch tensors: `inputs`, in
    the form a run takes them, and `owners`, the tensors whose memory they are (the run's
    allocations, the call's inputs they view, a copy where the caller writes that input):
    whoever keeps a Kept keeps its owners alive (kiln's training forward saves them for
    autograd, which frees them after the backward and checks that no input changed)."""

    __slots__ = ("inputs", "owners", "_entries", "_uses", "_returned")

    def __init__(self, raw, call_inputs, device, written=frozenset(), returned=frozenset()):
        """`returned`: ids of the allocations the call's own outputs view (never donated)."""
        self.inputs, self.owners, self._entries = [], [], []
        owner_index: dict[int, int] = {}
        self._uses: list[int] = []  # per owner: how many kept values it holds
        self._returned: set[int] = set()  # owners the call's outputs view too
        where = -1 if device is None else device
        changed = {storage_address(call_inputs[i]) for i in written}

        def own(t: torch.Tensor) -> int:
            if id(t) not in owner_index:
                owner_index[id(t)] = len(self.owners)
                self.owners.append(t)
                self._uses.append(0)
                if id(t) in returned:
                    self._returned.add(owner_index[id(t)])
            self._uses[owner_index[id(t)]] += 1
            return owner_index[id(t)]

        for r in raw:
            name, sizes, strides, base, offset, value, input = r
            if value is not None:  # a symbolic int: a 0-d int64 host tensor, as a run takes one
                t = torch.tensor(value, dtype=torch.int64)
                self._add(("int64", (), (), t.data_ptr(), -1), own(t), "whole", None)
            elif base is not None:  # memory of the run: base's bytes from `offset` elements on
                address = base.data_ptr() + (offset or 0) * _element_size(name)
                # (no reference to base but the owners': autograd decides when it is freed)
                self._add((name, sizes, strides, address, where), own(base), "bytes", offset)
            else:  # a view of a call input (`offset` is its address): that input is the owner
                owner = Kept._viewed_input(r, call_inputs)
                if owner is None or (changed and storage_address(owner) in changed):
                    # the caller writes that input: keep the value it has now
                    view = Compiled._tensor(r, call_inputs).clone()
                    self._add((name, view.shape, view.stride(), view.data_ptr(), view.get_device()),
                              own(view), "whole", None)
                else:
                    # (base is None: the raw output holds no memory)
                    self._add((name, sizes, strides, offset, owner.get_device()), own(owner), "view",
                              r[:6] + (None,))

    @staticmethod
    def _viewed_input(raw, call_inputs):
        """The call input a raw output views (of its dtype), or None."""
        name, _, _, _, offset, _, input = raw
        dtype = torch_dtype(name)
        if input is not None and call_inputs[input].dtype == dtype:
            return call_inputs[input]
        view = Compiled._tensor(raw, call_inputs)
        return next((t for t in call_inputs
                     if t.dtype == dtype and storage_address(t) == storage_address(view)), None)

    def _add(self, entry, owner: int, kind: str, detail) -> None:
        """How the value is made a tensor of its owner, by `kind`: "whole" (the owner
        itself), "view" (`detail`: the raw output viewing that input) or "bytes" (`detail`:
        the element offset in the run's allocation; dtype, sizes and strides are the entry's)."""
        self.inputs.append(entry)
        self._entries.append((owner, kind, detail))

    def donations(self, owners: list) -> list:
        """Per kept value: the allocation it alone is, moved out of `owners` (a run may take
        it over), or None (memory of an input, shared with another kept value or with the
        call's outputs)."""
        donated = []
        for owner, kind, _ in self._entries:
            alone = kind == "bytes" and self._uses[owner] == 1
            if alone and owner not in self._returned and owners[owner] is not None:
                donated.append(owners[owner])
                owners[owner] = None
            else:
                donated.append(None)
        return donated

    def take_back(self, owners: list, donated: list) -> None:
        """What a run did not take of donations(owners), back into `owners`."""
        for (owner, _, _), t in zip(self._entries, donated):
            if t is not None:
                owners[owner] = t

    def tensor(self, k: int, owners) -> torch.Tensor:
        """Kept value k as a torch tensor (a view of its owner; `owners`: self.owners)."""
        owner, kind, detail = self._entries[k]
        if kind == "whole":
            return owners[owner]
        if kind == "view":
            return Compiled._tensor(detail, [owners[owner]])
        if detail is None:  # the allocation is the value, made as it
            return owners[owner]
        name, sizes, strides, _, _ = self.inputs[k]
        return owners[owner].view(torch_dtype(name)).as_strided(sizes, strides, detail)


class _KeptThenTensors:
    """A run's inputs when the first are a Kept's: its values made tensors only when an
    output turns out to view one."""

    def __init__(self, kept: Kept, owners, tensors):
        self._kept, self._owners, self._tensors = kept, owners, tensors

    def __len__(self):
        return len(self._kept.inputs) + len(self._tensors)

    def __getitem__(self, k: int) -> torch.Tensor:
        kept = len(self._kept.inputs)
        return self._kept.tensor(k, self._owners) if k < kept else self._tensors[k - kept]

    def __iter__(self):
        return (self[k] for k in range(len(self)))


def storage_address(t: torch.Tensor) -> int:
    """The address of the memory `t` is a view of."""
    return t.untyped_storage().data_ptr()


@functools.lru_cache(maxsize=None)
def _element_size(name: str) -> int:
    return torch.empty((), dtype=torch_dtype(name)).element_size()


def target_for(graph: Graph) -> str:
    """Where a traced graph runs: "cuda:sm_NN" (the architecture of its device) when any of
    its values lives on a CUDA device, else "cpu"; "cuda:sm_NN+deterministic" under
    torch.use_deterministic_algorithms (scatters then add in order, as torch's
    deterministic kernels; kiln.compile guards on the setting)."""
    for i in range(len(graph)):
        meta = graph.value(i).meta
        for m in meta if isinstance(meta, list) else [meta]:
            device = m.get("device", "cpu") if isinstance(m, dict) else "cpu"
            if device.startswith("cuda"):
                index = int(device[5:]) if device.startswith("cuda:") else torch.cuda.current_device()
                major, minor = torch.cuda.get_device_capability(index)
                deterministic = "+deterministic" if torch.are_deterministic_algorithms_enabled() else ""
                return f"cuda:sm_{major}{minor}{deterministic}"
    return "cpu"


def check_errors() -> None:
    """Waits for kiln's CUDA work so far and raises the first kernel error not reported yet
    (KilnError "invalid_argument": an index out of range, an integer division by zero).

    A CUDA run does not wait for its kernels: such an error is raised by the first kiln run
    after the GPU finished the run that made it, or here. KILN_CUDA_SYNC_ERRORS=1 makes
    each run that can fail wait and raise its own error (as CUDA_LAUNCH_BLOCKING in torch).
    """
    _ir.check_cuda_errors()


def compile(graph: Graph, stack: Stack | None = None, target: str = "cpu") -> Compiled:
    """Compiles `graph` through the stack's codegen service (cached by content) and loads it.
    `target` is "cpu", or "cuda" / "cuda:sm_NN" for torch CUDA tensors.

        compiled = ir.compile(g)              # the stack at $KILN_RUN_DIR, else the default one
        (y,) = compiled(torch.randn(8, 768))  # any size its symbols admit
        print(compiled.explain)
    Raises KilnError: "unsupported" for an op without a lowering, "internal" when the C++
    compiler failed (its messages and the source in `detail`).
    """
    from kiln._stack import connect

    stack = stack or connect()
    artifact, hit = stack.compile(graph, target)
    return Compiled(artifact, hit, _cache_dir())


__all__ = [
    "Compiled",
    "Graph",
    "Sym",
    "Value",
    "check_errors",
    "compile",
    "dtype_name",
    "eval_op",
    "op_graph",
    "op_names",
    "op_schema",
    "placeholder_like",
    "run",
    "target_for",
    "torch_dtype",
]
