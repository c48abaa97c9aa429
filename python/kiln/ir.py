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
from typing import Sequence

import torch

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


def eval_op(op: str, *args, **kwargs):
    """Runs one op through the IR: a graph with a placeholder per tensor argument, the call, and
    its result. Returns (result tensor, inferred meta) — handy to compare against torch; for an op
    giving a tuple (split, chunk, unbind), a list of tensors and a list of metas.

        out, meta = ir.eval_op("add", torch.ones(2, 3), torch.ones(3), alpha=2)
    """
    graph = Graph()
    tensors: list[torch.Tensor] = []

    def lift(arg):
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
        return run(graph, *tensors), meta
    graph.set_outputs([value])
    (result,) = run(graph, *tensors)
    return result, meta


__all__ = [
    "Graph",
    "Sym",
    "Value",
    "dtype_name",
    "eval_op",
    "op_names",
    "op_schema",
    "placeholder_like",
    "run",
    "torch_dtype",
]
