"""Torch tensors in the stack's shared memory, seen by every process by id.

Tensors returned here are CPU tensors whose storage is the shared segment
itself: writes through them are what other processes read. They stay valid
until the tensor is freed (shm_free); after that their bytes may be reused.
"""
import os
from typing import Sequence

import torch

from kiln._kiln import ShmBuffer, ShmStore, Stack

_DTYPE_NAMES = {
    torch.float32: "float32",
    torch.float64: "float64",
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
    torch.int8: "int8",
    torch.int16: "int16",
    torch.int32: "int32",
    torch.int64: "int64",
    torch.uint8: "uint8",
    torch.bool: "bool",
    torch.complex64: "complex64",
    torch.complex128: "complex128",
}
_TORCH_DTYPES = {name: dtype for dtype, name in _DTYPE_NAMES.items()}


def _dtype_name(dtype: torch.dtype) -> str:
    if dtype not in _DTYPE_NAMES:
        raise TypeError(f"kiln shared memory cannot hold {dtype}")
    return _DTYPE_NAMES[dtype]


_stores: dict[str, ShmStore] = {}


def _store_at(run_dir: str) -> ShmStore:
    # One mapping per stack and process, taken again when the stack restarted.
    store = _stores.get(run_dir)
    if store is None or not store.current:
        store = _stores[run_dir] = ShmStore.for_run_dir(run_dir)
    return store


def _store(stack: Stack | None) -> ShmStore:
    if stack is not None:
        return stack.shm()
    return _store_at(os.environ.get("KILN_RUN_DIR", ""))


def _tensor(buffer: ShmBuffer) -> torch.Tensor:
    # A view on the buffer: no copy; the tensor keeps the buffer (and its mapping) alive.
    meta = buffer.meta
    dtype = _TORCH_DTYPES[meta["dtype"]]
    if buffer.nbytes == 0:  # torch.frombuffer refuses empty buffers; there is nothing to share
        return torch.empty_strided(meta["sizes"], meta["strides"], dtype=dtype)
    # Bytes first, then the dtype: works for every dtype, bfloat16 included.
    flat = torch.frombuffer(buffer, dtype=torch.uint8).view(dtype)
    return flat.as_strided(meta["sizes"], meta["strides"])


def shm_empty(
    sizes: Sequence[int], dtype: torch.dtype = torch.float32, stack: Stack | None = None
) -> tuple[int, torch.Tensor]:
    """A new uninitialized tensor in shared memory: its id, and a CPU tensor over its bytes.

    The tensor is kept until shm_free(id). `stack`: default, $KILN_RUN_DIR or the default stack.

        tensor_id, x = kiln.shm_empty([2, 3])
        x.fill_(1.0)  # any process can now read it with kiln.shm_get(tensor_id)
    """
    store = _store(stack)
    tensor_id = store.allocate([int(size) for size in sizes], _dtype_name(dtype))
    return tensor_id, _tensor(store.buffer(tensor_id))


def shm_put(tensor: torch.Tensor, stack: Stack | None = None) -> int:
    """Copies `tensor` into shared memory (its one copy) and returns the new tensor's id.

    Dense layouts (contiguous, transposed, channels-last) are kept; others become contiguous.

        tensor_id = kiln.shm_put(torch.randn(4, 4))
        y = kiln.shm_get(tensor_id)  # equal values, no further copy
    """
    store = _store(stack)
    layout = torch.empty_like(tensor, device="meta")  # dense strides in the tensor's own order
    tensor_id = store.allocate(
        list(tensor.shape), _dtype_name(tensor.dtype), strides=list(layout.stride())
    )
    _tensor(store.buffer(tensor_id)).copy_(tensor.detach())
    return tensor_id


def shm_get(tensor_id: int, stack: Stack | None = None) -> torch.Tensor:
    """The tensor `tensor_id` as a CPU tensor over the shared bytes (no copy), with its stored
    dtype, sizes and strides. Raises KilnError with code "not_found" if it is not there.

        x = kiln.shm_get(tensor_id)
        x += 1  # every process sees the change
    """
    return _tensor(_store(stack).buffer(tensor_id))


def shm_free(tensor_id: int, stack: Stack | None = None) -> None:
    """Frees the tensor `tensor_id` now; tensors viewing it must no longer be used.

        kiln.shm_free(tensor_id)
        kiln.shm_get(tensor_id)  # raises KilnError(code="not_found")
    """
    _store(stack).free(tensor_id)
