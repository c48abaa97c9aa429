"""kiln: a torch.compile-like compiler whose stages run as a stack of services.

    import kiln
    fast = kiln.compile(model)   # or @kiln.compile on a function
    y = fast(x)                  # what model(x) gives, compiled by the stack
    print(kiln.explain(fast))    # guards, graphs, kernels, fallbacks
    prog = kiln.export(model, (x,), dynamic_shapes={"x": {0: kiln.Dim("batch")}})  # a .kiln program
"""

def _openblas_core() -> None:
    """OpenBLAS (kiln's CPU matrix products) picks its kernels by the CPU's model, and takes a
    model it does not know (Debian 12's 0.3.21: newer Xeons, the generic model of virtual
    machines) for a Prescott: SSE3 kernels. Unless OPENBLAS_CORETYPE is set, it
    names the kernels the CPU's features take; read when _kiln loads OpenBLAS, so set first."""
    import os
    if "OPENBLAS_CORETYPE" in os.environ:
        return
    try:
        with open("/proc/cpuinfo") as f:
            flags = set(next((line for line in f if line.startswith("flags")), "").split())
    except OSError:
        return
    if {"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"} <= flags:
        os.environ["OPENBLAS_CORETYPE"] = "SkylakeX"
    elif {"avx2", "fma"} <= flags:
        os.environ["OPENBLAS_CORETYPE"] = "Haswell"


def _check_torch() -> None:
    """_kiln links the C++ libraries of the torch it was built against: under another torch
    it would mix two torch builds in one process. Refused at import, naming both."""
    import os
    import torch
    from kiln import _build_info as built

    libdir = os.path.join(os.path.dirname(torch.__file__), "lib")
    if torch.__version__ != built.TORCH_VERSION or os.path.realpath(libdir) != os.path.realpath(built.TORCH_LIBDIR):
        raise ImportError(
            f"kiln was built against torch {built.TORCH_VERSION} ({built.TORCH_LIBDIR}, for {built.PYTHON}); "
            f"this interpreter imports torch {torch.__version__} ({libdir}). Run kiln under the "
            f"interpreter it was built for, or rebuild it for this one (scripts/build)")


_check_torch()
_openblas_core()

from kiln._kiln import KilnError, ShmStore, Stack
from kiln._shm import shm_empty, shm_free, shm_get, shm_put
from kiln._stack import connect, status
from kiln import guards, ir
from kiln.ir import check_errors
from kiln._compile import Unsupported, compile, disable, explain
from kiln._export import ConstraintViolation, Dim, ExportedProgram, export, load_program

__all__ = [
    "ConstraintViolation",
    "Dim",
    "ExportedProgram",
    "KilnError",
    "ShmStore",
    "Stack",
    "Unsupported",
    "check_errors",
    "compile",
    "connect",
    "disable",
    "explain",
    "export",
    "guards",
    "ir",
    "load_program",
    "shm_empty",
    "shm_free",
    "shm_get",
    "shm_put",
    "status",
]
