"""kiln: a torch.compile-like compiler whose stages run as a stack of services.

    import kiln
    fast = kiln.compile(model)   # or @kiln.compile on a function
    y = fast(x)                  # what model(x) gives, compiled by the stack
    print(kiln.explain(fast))    # guards, graphs, kernels, fallbacks
"""
from kiln._kiln import KilnError, ShmStore, Stack
from kiln._shm import shm_empty, shm_free, shm_get, shm_put
from kiln._stack import connect, status
from kiln import guards, ir
from kiln._compile import Unsupported, compile, explain

__all__ = [
    "KilnError",
    "ShmStore",
    "Stack",
    "Unsupported",
    "compile",
    "connect",
    "explain",
    "guards",
    "ir",
    "shm_empty",
    "shm_free",
    "shm_get",
    "shm_put",
    "status",
]
