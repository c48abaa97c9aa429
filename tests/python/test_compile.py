"""kiln.ir.compile: graphs compiled by the stack's codegen service and run here on torch tensors."""
import pytest
import torch

import kiln
from kiln import ir


def mlp_graph():
    g = ir.Graph()
    batch = g.symbol("s0", hint=8, min=1)
    x = g.placeholder("x", "float32", [batch, 16])
    w = g.placeholder("w", "float32", [32, 16])
    b = g.placeholder("b", "float32", [32])
    h = g.call("gelu", g.call("linear", x, w, b))
    g.set_outputs([g.call("softmax", h, dim=-1), g.call("sum", h, dim=[1])])
    return g


def test_compiled_graph_matches_the_interpreter_for_every_batch(stack):
    g = mlp_graph()
    compiled = ir.compile(g, stack)
    assert "extern" in compiled.explain and "kernel" in compiled.explain
    w, b = torch.randn(32, 16), torch.randn(32)
    for n in (1, 7, 64, 1000):
        x = torch.randn(n, 16)
        got = compiled(x, w, b)
        expected = ir.run(g, x, w, b)
        assert [t.shape for t in got] == [torch.Size([n, 32]), torch.Size([n])]
        for a, e in zip(got, expected):
            torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-5)
    again = ir.compile(g, stack)
    assert again.cache_hit


def test_outputs_may_view_inputs_and_strided_inputs_run(stack):
    g = ir.Graph()
    x = g.placeholder("x", "float32", [4, 3], [1, 4])  # a transposed input
    g.set_outputs([g.call("transpose", x, dim0=0, dim1=1), g.call("exp", x)])
    compiled = ir.compile(g, stack)
    base = torch.randn(3, 4)
    t = base.t()
    view, e = compiled(t)
    assert view.data_ptr() == base.data_ptr() and torch.equal(view, base)
    torch.testing.assert_close(e, t.exp())


def test_a_run_takes_the_callers_allocators(stack):
    # Artifact.run with Python callables instead of torch's allocator called in C++ (None):
    # a buffer from allocate(nbytes), an output handed out whole from allocate_output.
    g = ir.Graph()
    x = g.placeholder("x", "float32", [64, 8])
    w = g.placeholder("w", "float32", [8, 8])
    product = g.call("linear", x, w)  # an extern call's result: a buffer of the run's own
    g.set_outputs([g.call("sum", g.call("exp", product), dim=[1]), g.call("exp", x)])
    compiled = ir.compile(g, stack)
    made = []

    def allocate(nbytes):
        made.append(("bytes", nbytes))
        return torch.empty(nbytes, dtype=torch.uint8)

    def allocate_output(nbytes, dtype, sizes, strides):
        made.append((dtype, tuple(sizes)))
        return torch.empty_strided(sizes, strides, dtype=ir.torch_dtype(dtype))

    t, m = torch.randn(64, 8), torch.randn(8, 8)
    raw = compiled._artifact.run([t, m], allocate, 0, 0, None, allocate_output)
    total, e = (compiled._tensor(r, [t, m]) for r in raw)
    torch.testing.assert_close(total, (t @ m.t()).exp().sum(1))
    torch.testing.assert_close(e, t.exp())
    assert ("float32", (64, 8)) in made and any(kind == "bytes" for kind, _ in made), made


def test_an_output_that_is_all_of_its_buffer_is_that_allocation(stack):
    g = ir.Graph()
    x = g.placeholder("x", "float32", [4, 3])
    e = g.call("exp", x)
    g.set_outputs([e, g.call("slice", e, dim=0, start=1, end=3, step=1), g.call("sum", x, dim=[1])])
    compiled = ir.compile(g, stack)
    t = torch.randn(4, 3)
    whole, part, total = compiled(t)
    # made as the outputs they are (TorchBlock's strided blocks): no view of bytes built after the run
    assert whole._base is None and total._base is None
    assert ir.storage_address(part) == ir.storage_address(whole) and part.data_ptr() == whole.data_ptr() + 12
    torch.testing.assert_close(whole, t.exp())
    torch.testing.assert_close(part, t.exp()[1:3])
    torch.testing.assert_close(total, t.sum(1))


def test_what_cannot_compile_raises_typed_errors(stack):
    g = ir.Graph()
    x = g.placeholder("x", "complex64", [3])
    g.set_outputs([g.call("neg", x)])  # no stage computes with complex dtypes yet
    with pytest.raises(kiln.KilnError) as err:
        ir.compile(g, stack)
    assert err.value.code == "unsupported"
    ok = ir.Graph()
    y = ok.placeholder("y", "float32", [3])
    ok.set_outputs([ok.call("neg", y)])
    compiled = ir.compile(ok, stack)
    with pytest.raises(kiln.KilnError) as err:
        compiled(torch.zeros(4))
    assert err.value.code == "invalid_argument" and "size 4" in str(err.value)


def test_in_place_ops_write_the_callers_tensor(stack):
    g = ir.Graph()
    x = g.placeholder("x", "float32", [2, 3])
    before = g.call("mul", x, 2.0)         # reads x before the write
    g.call("add_", x, 1.0)
    g.set_outputs([before, g.call("mul", x, 3.0)])
    compiled = ir.compile(g, stack)
    t = torch.arange(6.0).reshape(2, 3)
    original = t.clone()
    doubled, tripled = compiled(t)
    assert torch.equal(t, original + 1)    # the caller's tensor was written
    assert torch.equal(doubled, original * 2) and torch.equal(tripled, (original + 1) * 3)


def test_cpu_products_run_openblas_on_torchs_openmp_pool_with_this_cpus_kernels():
    """kiln's CPU matrix products: OpenBLAS's OpenMP build (one thread pool with torch and
    kiln's kernels, not a second one spinning beside it), with the kernels of this CPU's
    features, not the Prescott ones OpenBLAS takes a CPU model it does not know for."""
    import ctypes
    import os

    blas = next((line.split()[-1] for line in open(f"/proc/{os.getpid()}/maps") if "libopenblas" in line), None)
    if blas is None:
        pytest.skip("this build has no OpenBLAS (CPU products run as plain loops)")
    lib = ctypes.CDLL(blas)
    assert lib.openblas_get_parallel() == 2, f"{blas} is not OpenBLAS's OpenMP build"
    lib.openblas_get_corename.restype = ctypes.c_char_p
    core = lib.openblas_get_corename().decode()
    flags = set(next((l for l in open("/proc/cpuinfo") if l.startswith("flags")), "").split())
    if {"avx2", "fma"} <= flags:
        assert core.lower() != "prescott", f"OpenBLAS runs {core} kernels on a CPU with AVX2"


def test_import_refuses_a_torch_other_than_the_builds():
    """_kiln links the C++ libraries of the torch it was built against: under another torch,
    `import kiln` raises ImportError naming both (here a build record of torch 1.13)."""
    import subprocess
    import sys

    code = ("import sys, types\n"
            "built = types.ModuleType('kiln._build_info')\n"
            "built.TORCH_VERSION, built.TORCH_LIBDIR, built.PYTHON = '1.13.1', '/usr/lib', '/usr/bin/python3'\n"
            "sys.modules['kiln._build_info'] = built\n"
            "try:\n    import kiln\nexcept ImportError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout
    assert "built against torch 1.13.1" in out and f"imports torch {torch.__version__}" in out, out
