"""kiln: a torch.compile-like compiler whose stages run as a stack of services.

    import kiln
    stack = kiln.connect()  # the stack that `kiln up` started
"""
from kiln._kiln import KilnError, ShmStore, Stack
from kiln._shm import shm_empty, shm_free, shm_get, shm_put
from kiln._stack import connect, status
from kiln import guards, ir
from kiln.guards import explain

__all__ = [
    "KilnError",
    "ShmStore",
    "Stack",
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
