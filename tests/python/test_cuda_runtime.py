"""kiln.ir on CUDA artifacts: hand-built plans (kernels compiled by NVRTC, extern products
through cuBLASLt) run on torch CUDA tensors, with torch's allocator and current stream.

The artifacts come from build/bin/kiln-cuda-test-artifacts (tests/runtime), which needs no
GPU; what runs them is skipped where torch sees no CUDA device."""
import subprocess

import pytest
import torch

import kiln
from kiln import ir
from kiln_cli import BIN_DIR

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    tool = BIN_DIR / "kiln-cuda-test-artifacts"
    if not tool.exists():
        pytest.skip("kiln was built without the CUDA toolkit (no kiln-cuda-test-artifacts)")
    out = tmp_path_factory.mktemp("cuda-artifacts")
    done = subprocess.run([str(tool), str(out)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    cache = tmp_path_factory.mktemp("cuda-cache")

    def load(name: str) -> ir.Compiled:
        return ir.Compiled((out / f"{name}.kiln").read_bytes(), False, str(cache))

    return load


def test_a_cuda_artifact_loads_anywhere_and_refuses_cpu_tensors(artifacts):
    compiled = artifacts("scale_add")
    assert compiled.target == "cuda:sm_90"
    assert "scale_add" in compiled.source
    with pytest.raises(kiln.KilnError) as err:
        compiled(torch.zeros(8), 3)
    assert err.value.code == "invalid_argument"
    assert "input 0 is on cpu" in str(err.value)


@needs_gpu
def test_a_pointwise_kernel_runs_on_the_current_stream_without_copies(artifacts):
    compiled = artifacts("scale_add")
    x = torch.randn(100_000, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    before = torch.cuda.memory_allocated()
    with torch.cuda.stream(side):  # kiln queues on torch's current stream: this one
        y, total = compiled(x, 5)
    side.synchronize()
    assert y.device == x.device and y.dtype == torch.float32
    assert torch.cuda.memory_allocated() > before  # the output is memory of torch's allocator
    torch.testing.assert_close(y, 2 * x + 5)
    assert total.device.type == "cpu" and total.item() == 100_005  # a symbolic int: host


@needs_gpu
def test_a_kernels_index_error_is_a_typed_error(artifacts):
    compiled = artifacts("gather")
    x = torch.arange(8, dtype=torch.float32, device="cuda")
    (y,) = compiled(x, torch.tensor([7, 0, 3], device="cuda"))
    torch.testing.assert_close(y, x[[7, 0, 3]])
    with pytest.raises(kiln.KilnError) as err:
        compiled(x, torch.tensor([1, 8, 2], device="cuda"))
    assert err.value.code == "invalid_argument"
    assert "gather: an index is out of range" in str(err.value)


@needs_gpu
def test_matrix_products_match_torch(artifacts):
    a, b = torch.randn(64, 32, device="cuda"), torch.randn(32, 48, device="cuda")
    torch.testing.assert_close(artifacts("mm_f32")(a, b)[0], torch.mm(a, b), rtol=1e-5, atol=1e-5)
    bias = torch.randn(48, device="cuda")
    torch.testing.assert_close(artifacts("addmm_f32")(bias, a, b)[0], torch.addmm(bias, a, b),
                               rtol=1e-5, atol=1e-5)
    column = torch.randn(64, 1, device="cuda")
    torch.testing.assert_close(artifacts("addmm_scaled_f32")(column, a, b)[0],
                               torch.addmm(column, a, b, beta=0.5, alpha=2), rtol=1e-5, atol=1e-5)
    p, q = torch.randn(2, 1, 5, 7, device="cuda"), torch.randn(3, 7, 4, device="cuda")
    torch.testing.assert_close(artifacts("matmul_f32")(p, q)[0], torch.matmul(p, q), rtol=1e-5, atol=1e-5)
    u = torch.randn(4, 16, 8, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(4, 8, 24, device="cuda", dtype=torch.bfloat16)
    torch.testing.assert_close(artifacts("bmm_bf16")(u, v)[0], torch.bmm(u, v), rtol=2e-2, atol=2e-2)


@needs_gpu
def test_a_kernel_feeding_an_extern_call(artifacts):
    compiled = artifacts("scale_then_matmul")
    x, w = torch.randn(1000, device="cuda"), torch.randn(1000, 8, device="cuda")
    (z,) = compiled(x, 3, w)
    torch.testing.assert_close(z, (2 * x + 3) @ w, rtol=1e-4, atol=1e-4)
    with pytest.raises(kiln.KilnError) as err:
        compiled(x, torch.tensor(3, device="cuda"), w)  # a symbolic int must be on the host
    assert "symbolic int" in str(err.value)


@needs_gpu
def test_compile_for_cuda_through_the_stack(stack):
    g = ir.Graph()
    n = g.symbol("s0", hint=8, min=2)
    x = g.placeholder("x", "float32", [n, 16], device="cuda")
    w = g.placeholder("w", "float32", [16, 32], device="cuda")
    g.set_outputs([g.call("relu", g.call("mm", x, w))])
    compiled = ir.compile(g, stack, target="cuda")
    assert compiled.target.startswith("cuda")
    xs, ws = torch.randn(37, 16, device="cuda"), torch.randn(16, 32, device="cuda")
    (y,) = compiled(xs, ws)
    torch.testing.assert_close(y, torch.relu(xs @ ws), rtol=1e-5, atol=1e-5)
