"""kiln.ir on CUDA artifacts: hand-built plans (kernels compiled by NVRTC, extern products
through cuBLASLt) run on torch CUDA tensors, with torch's allocator and current stream.

The artifacts come from build/bin/kiln-cuda-test-artifacts (tests/runtime), which needs no
GPU; what runs them is skipped where torch sees no CUDA device."""
import re
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

    load.files = out  # the artifacts' files, for a test that runs one in a subprocess
    return load


def test_a_cuda_artifact_loads_anywhere_and_refuses_cpu_tensors(artifacts):
    compiled = artifacts("scale_add")
    assert compiled.target == "cuda:sm_90"
    assert "scale_add" in compiled.source
    with pytest.raises(kiln.KilnError) as err:
        compiled(torch.zeros(8), 3)
    assert err.value.code == "invalid_argument"
    assert "input 0 is on cpu" in str(err.value)


def test_a_runs_inputs_are_tensors_or_tuples_describing_memory(artifacts):
    run = artifacts("scale_add")._artifact.run  # what kiln.ir.Compiled calls
    allocate = lambda nbytes: torch.empty(nbytes, dtype=torch.uint8)  # noqa: E731
    x, count = torch.zeros(8), torch.tensor(5)
    described = ("float32", (8,), (1,), x.data_ptr(), -1)  # as kiln.ir.Kept keeps a saved value
    for inputs, message in [
            ([x, count], "input 0 is on cpu"),  # read, then refused: this artifact runs on CUDA
            ([described, count], "input 0 is on cpu"),
            (["x", count], "run input 0: expected a tensor or a (dtype, sizes, strides, address, "
                           "device) tuple, got str"),
            ([("float32", (8,)), count], "run input 0: a tuple of (dtype, sizes, strides, address, device)"),
            ([("float32", ("8",), (1,), 0, -1), count], "run input 0: its sizes are not a sequence of ints"),
            ([("float32", (8,), 1, 0, -1), count], "run input 0: its strides are not a sequence of ints"),
            ([("float32", (8,), (1,), "here", -1), count], "run input 0: its address is not an int"),
            ([x, "5"], "run input 1: expected a tensor")]:
        with pytest.raises(kiln.KilnError) as err:
            run(inputs, allocate)
        assert err.value.code == "invalid_argument"
        assert message in str(err.value), (inputs, str(err.value))


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
    # The run does not wait for its kernels: the error comes once the GPU got there, from a
    # later run or from kiln.check_errors(), once.
    compiled(x, torch.tensor([1, 8, 2], device="cuda"))
    with pytest.raises(kiln.KilnError) as err:
        kiln.check_errors()
    assert err.value.code == "invalid_argument"
    assert "gather: an index is out of range" in str(err.value)
    kiln.check_errors()  # reported: nothing left
    compiled(x, torch.tensor([1, 8, 2], device="cuda"))
    torch.cuda.synchronize()
    with pytest.raises(kiln.KilnError, match="gather: an index is out of range"):
        compiled(x, torch.tensor([7, 0, 3], device="cuda"))  # the next run reports it
    (y,) = compiled(x, torch.tensor([7, 0, 3], device="cuda"))
    torch.testing.assert_close(y, x[[7, 0, 3]])


@needs_gpu
def test_a_replayed_kernels_index_error_is_a_typed_error(artifacts):
    from kiln import _cudagraph
    replayed = _cudagraph.Replayed(artifacts("gather"))
    x = torch.arange(8, dtype=torch.float32, device="cuda")
    good, bad = torch.tensor([7, 0, 3], device="cuda"), torch.tensor([1, 8, 2], device="cuda")
    for _ in range(3):  # run, captured, replayed
        (y,) = replayed(x, good)
        torch.testing.assert_close(y, x[[7, 0, 3]])
    replayed(x, bad)
    assert replayed.replays == 3 and not replayed.reasons, replayed.reasons
    with pytest.raises(kiln.KilnError, match="gather: an index is out of range"):
        kiln.check_errors()
    kiln.check_errors()  # reported: nothing left
    for _ in range(2):  # each replay starts from clean status words
        (y,) = replayed(x, good)
    kiln.check_errors()
    torch.testing.assert_close(y, x[[7, 0, 3]])


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


# A product shape's first call times cuBLASLt's candidate algorithms on its own operands
# and keeps the fastest (KILN_MATMUL_AUTOTUNE=0: the heuristic's first, untimed); the
# choice is logged at debug level. Run in a subprocess: the choice is per process.
AUTOTUNED_PRODUCT = """
import sys, torch
from kiln import ir
compiled = ir.Compiled(open(sys.argv[1], "rb").read(), False, sys.argv[2])
a, b = torch.randn(64, 32, device="cuda"), torch.randn(32, 48, device="cuda")
for _ in range(3):  # the first call chooses; the others run the choice
    (c,) = compiled(a, b)
    torch.testing.assert_close(c, a @ b, rtol=1e-5, atol=1e-5)
print("products match")
"""


@needs_gpu
@pytest.mark.parametrize("autotune", ["1", "0"])
def test_a_products_first_call_times_cublaslts_candidates(artifacts, tmp_path, autotune):
    import os
    import sys
    env = dict(os.environ, KILN_LOG_LEVEL="debug", KILN_MATMUL_AUTOTUNE=autotune)
    done = subprocess.run([sys.executable, "-c", AUTOTUNED_PRODUCT, str(artifacts.files / "mm_f32.kiln"),
                           str(tmp_path)], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert "products match" in done.stdout
    chosen = re.findall(r"cuBLASLt: 48x64x32 \(batch 1, epilogue \d+\): algorithm (\d+) of (\d+)",
                        done.stderr)
    if autotune == "0":
        assert chosen == []
    else:  # one choice for the shape, however many calls
        assert len(chosen) == 1, done.stderr
        assert 1 <= int(chosen[0][0]) <= int(chosen[0][1])


@needs_gpu
def test_deterministic_artifacts_products_take_the_heuristics_algorithm(stack, tmp_path):
    # torch.use_deterministic_algorithms compiles for "+deterministic": its products run
    # cuBLASLt's heuristic's first algorithm, untimed, the same in every process.
    import os
    import sys
    g = ir.Graph()
    a = g.placeholder("a", "float32", [64, 32], device="cuda:0")
    b = g.placeholder("b", "float32", [32, 48], device="cuda:0")
    g.set_outputs([g.call("mm", a, b)])
    env = dict(os.environ, KILN_LOG_LEVEL="debug")
    for target, choices in (("cuda:sm_90", 1), ("cuda:sm_90+deterministic", 0)):
        artifact, _ = stack.compile(g, target)
        path = tmp_path / f"{target.replace(':', '-')}.kiln"
        path.write_bytes(artifact)
        done = subprocess.run([sys.executable, "-c", AUTOTUNED_PRODUCT, str(path), str(tmp_path)],
                              capture_output=True, text=True, timeout=120, env=env)
        assert done.returncode == 0, done.stderr
        assert "products match" in done.stdout
        assert len(re.findall(r"cuBLASLt: 48x64x32 .*: algorithm", done.stderr)) == choices, done.stderr


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


# Row kernels (a reduction or a normalisation per row) read and write a row 16 bytes at a
# time when its extent is static and a multiple of the vector, and every such access is
# aligned: checked by the runtime per launch, which reads an aligned copy of a misaligned
# input (static shapes: no twin to compile; a twin, element by element, only where rows are
# a symbolic step apart). Each case: the graph, the inputs' dtypes and sizes, torch's
# result, and whether the kernel has the path.
ROW_CASES = {
    "softmax_f32_warp_rows": (lambda g, x: [g.call("softmax", x, dim=-1)], [("float32", [64, 1024])],
                              lambda x: [torch.softmax(x, -1)], True),
    "layer_norm_bf16_block_rows": (
        lambda g, x, w, b: [g.call("layer_norm", x, [4096], w, b)],
        [("bfloat16", [16, 4096]), ("bfloat16", [4096]), ("bfloat16", [4096])],
        lambda x, w, b: [torch.nn.functional.layer_norm(x, [4096], w, b)], True),
    "sum_and_argmax_of_1000": (lambda g, x: [g.call("sum", x, [-1]), g.call("argmax", x, -1)],
                               [("float32", [33, 1000])], lambda x: [x.sum(-1), x.argmax(-1)], True),
    "bf16_to_f32_softmax": (lambda g, x: [g.call("softmax", g.call("to_dtype", x, "float32"), dim=-1)],
                            [("bfloat16", [8, 512])], lambda x: [torch.softmax(x.float(), -1)], True),
    "odd_extent_1001": (lambda g, x: [g.call("log_softmax", x, dim=-1)], [("float32", [5, 1001])],
                        lambda x: [torch.log_softmax(x, -1)], False),
    "long_rows_looped": (lambda g, x: [g.call("softmax", x, dim=-1)], [("float32", [3, 65536])],
                         lambda x: [torch.softmax(x, -1)], True),
}


def _row_case(stack, name):
    build, specs, _, _ = ROW_CASES[name]
    g = ir.Graph()
    values = [g.placeholder(f"in{k}", dtype, sizes) for k, (dtype, sizes) in enumerate(specs)]
    g.set_outputs(build(g, *values))
    return ir.compile(g, stack, target="cuda:sm_90")


@pytest.mark.parametrize("name", sorted(ROW_CASES))
def test_row_kernels_take_the_16_byte_path_where_extents_allow(stack, name):
    compiled = _row_case(stack, name)
    assert ("*reinterpret_cast<uint4*>(kiln_b" in compiled.source  # a vector store
            or "*reinterpret_cast<const uint4*>(kiln_b" in compiled.source) == ROW_CASES[name][3]
    assert "kiln_kernel_0_unaligned" not in compiled.source


@needs_gpu
@pytest.mark.parametrize("offset", [0, 1], ids=["aligned", "misaligned"])
@pytest.mark.parametrize("name", sorted(ROW_CASES))
def test_row_kernels_match_torch_on_both_paths(stack, name, offset):
    compiled = _row_case(stack, name)
    _, specs, eager, _ = ROW_CASES[name]
    torch.manual_seed(0)
    inputs = []
    for dtype, sizes in specs:
        numel = 1
        for s in sizes:
            numel *= s
        # A storage offset of one element misaligns the rows: the element-by-element path.
        storage = torch.randn(numel + offset, device="cuda", dtype=ir.torch_dtype(dtype))
        inputs.append(storage[offset:].view(sizes))
    got = compiled(*inputs)
    for g, w in zip(got, eager(*inputs)):
        if w.dtype == torch.int64:
            assert torch.equal(g, w)
        else:
            # f32 sums of ~1000 terms of size ~1 in another order: ~1e-5 apart near zero.
            rtol, atol = (2e-2, 2e-2) if w.dtype == torch.bfloat16 else (1e-5, 1e-4)
            torch.testing.assert_close(g, w, rtol=rtol, atol=atol)


# A half-precision product with dims that are not multiples of 8 (GPT-2's 50257-token head)
# reads zero-padded operands: cuBLASLt's Hopper kernels need the dims so (5-7x faster than
# the fallback it picks otherwise); the pads fuse into the kernels producing the operands.
def _odd_product(stack):
    g = ir.Graph()
    x = g.placeholder("x", "bfloat16", [2048, 1024], device="cuda")
    w = g.placeholder("w", "bfloat16", [1001, 1024], device="cuda")
    logits = g.call("mm", g.call("mul", x, other=2.0), g.call("transpose", w, dim0=0, dim1=1))
    g.set_outputs([g.call("log_softmax", g.call("to_dtype", logits, "float32"), dim=-1)])
    return ir.compile(g, stack, target="cuda:sm_90")


def test_half_products_with_odd_dims_read_padded_operands(stack):
    compiled = _odd_product(stack)
    assert "over [1008, 1024]" in compiled.explain, compiled.explain  # w padded to 1008 rows
    assert "[2048, 1008]" not in compiled.explain  # x * 2 is not: M and K are multiples of 8


@needs_gpu
def test_padded_products_match_torch(stack):
    compiled = _odd_product(stack)
    # Logits of a few units: one bf16 rounding step of a product (another kernel adds in
    # another order) stays within the tolerance.
    x = torch.randn(2048, 1024, device="cuda", dtype=torch.bfloat16) / 32
    w = torch.randn(1001, 1024, device="cuda", dtype=torch.bfloat16)
    (y,) = compiled(x, w)
    assert y.shape == (2048, 1001)
    torch.testing.assert_close(y, torch.log_softmax(((x * 2) @ w.t()).float(), -1), rtol=2e-2, atol=5e-2)


# An embedding's grad: a scatter_add along dim 0 of many rows into few. On CUDA every element
# adds atomically (all loops in parallel); under torch.use_deterministic_algorithms the target
# is "+deterministic" and the rows add in order, the same sums bit for bit on every run.
def _embedding_grad(stack, target):
    g = ir.Graph()
    w = g.placeholder("w", "float32", [500, 64], device="cuda")
    i = g.placeholder("i", "int64", [8192, 64], device="cuda")
    s = g.placeholder("s", "float32", [8192, 64], device="cuda")
    g.set_outputs([g.call("scatter_add", w, 0, i, s)])
    return ir.compile(g, stack, target=target)


def test_cuda_scatters_add_atomically_unless_deterministic(stack):
    assert "scatter in any order (atomics)" in _embedding_grad(stack, "cuda:sm_90").explain
    ordered = _embedding_grad(stack, "cuda:sm_90+deterministic")
    assert "scatter in order over [8192]" in ordered.explain
    assert ordered.target == "cuda:sm_90+deterministic"


@needs_gpu
def test_atomic_and_ordered_scatters_match_torch(stack):
    w = torch.randn(500, 64, device="cuda")
    i = torch.randint(0, 500, (8192, 1), device="cuda").expand(8192, 64).contiguous()
    s = torch.randn(8192, 64, device="cuda")
    expected = w.scatter_add(0, i, s)
    (atomic,) = _embedding_grad(stack, "cuda:sm_90")(w, i, s)
    torch.testing.assert_close(atomic, expected, rtol=1e-4, atol=1e-4)
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        probe = ir.Graph()
        probe.set_outputs([probe.placeholder("x", "float32", [2], device="cuda")])
        assert ir.target_for(probe).endswith("+deterministic")
    finally:
        torch.use_deterministic_algorithms(previous)
    ordered = _embedding_grad(stack, "cuda:sm_90+deterministic")
    first, second = ordered(w, i, s)[0], ordered(w, i, s)[0]
    assert torch.equal(first, second)
    torch.testing.assert_close(first, expected, rtol=1e-4, atol=1e-4)


# Column max/min/sum over many rows split in two passes (partials over chunks of rows, then
# theirs), int64's max and min too: a chunk past the rows' end is the reduction's identity.
def _column_reductions(stack, rows):
    g = ir.Graph()
    f = g.placeholder("f", "float32", [rows, 96], device="cuda")
    i = g.placeholder("i", "int64", [rows, 96], device="cuda")
    g.set_outputs([g.call("amax", i, dim=[0]), g.call("amin", i, dim=[0]),
                   g.call("sum", f, dim=[0]), g.call("amax", f, dim=[0])])
    return ir.compile(g, stack, target="cuda:sm_90")


def test_column_reductions_of_many_rows_split_int64_too(stack):
    text = _column_reductions(stack, 8192).explain
    assert text.count("(max of [") == 4 and "(max of [8192])" not in text, text
    assert "(min of [8192])" not in text, text


@needs_gpu
def test_split_column_reductions_match_torch(stack):
    def f(x, i):
        return i.amax(0), i.amin(0), x.sum(0), x.amax(0)

    fast = kiln.compile(f, stack=stack)
    # 8192 rows: static chunks; then a dynamic row count, whose last chunk may run past
    # the rows' end (the identity there, INT64_MIN for int64's max), or hold no row at all.
    for rows in (8192, 4099, 1000, 7):
        x = torch.randn(rows, 96, device="cuda")
        i = torch.randint(-2**62, 2**62, (rows, 96), device="cuda")
        i[0, 0] = -2**63  # the identity itself is a value too
        for got, want in zip(fast(x, i), f(x, i)):
            torch.testing.assert_close(got, want, rtol=1e-4 if got.is_floating_point() else 0,
                                       atol=1e-3 if got.is_floating_point() else 0)
    assert len(fast.cache.entries) == 2, kiln.explain(fast)


def _padded_rows(stack, rows=1024, width=40001, pad=7):
    """exp of bf16 rows padded with zeros (GPT-2's logits grad: 50257 of a row of 50264), and
    each padded row's max, as one row kernel."""
    g = ir.Graph()
    x = g.placeholder("x", "bfloat16", [rows, width], device="cuda")
    e = g.call("to_dtype", g.call("exp", g.call("to_dtype", x, "float32")), "bfloat16")
    padded = g.call("cat", [e, g.call("zeros", size=[rows, pad], dtype="bfloat16", device="cuda")], dim=1)
    g.set_outputs([padded, g.call("amax", padded, dim=[1])])
    return ir.compile(g, stack, target="cuda:sm_90")


def test_a_padded_row_loads_by_vectors_up_to_the_pad(stack):
    # The values under the cat's condition, 16 bytes a load up to the last whole vector
    # before the pad (positions 0..39999); from there one by one. No GPU needed.
    source = _padded_rows(stack).source
    assert source.count("kiln_jv < 5000;") == 2, source  # the cat's row and the max's
    assert source.count("kiln_j = 40000 + kiln_lane; kiln_j < 40008;") == 2, source


@needs_gpu
def test_padded_rows_by_vectors_match_torch(stack):
    compiled = _padded_rows(stack)
    x = torch.randn(1024, 40001, device="cuda", dtype=torch.bfloat16)
    padded, top = compiled(x)
    want = torch.cat([x.float().exp().bfloat16(), torch.zeros(1024, 7, device="cuda", dtype=torch.bfloat16)], 1)
    assert torch.equal(padded, want)
    assert torch.equal(top, want.amax(1))


# Attention as flash attention's kernels: q, k, v strided views ([b, l, h, e] transposed to
# [b, h, l, e], as GPT's heads of one projection), sequences that are not multiples of the
# kernels' 64-row tiles. The backward's pieces take the forward's out and logsumexp.
def _attention(stack, op, dtype="bfloat16", l=100, s=100, e=64, causal=True, **scale):
    g = ir.Graph()
    def heads(name, rows):
        x = g.placeholder(name, dtype, [2, rows, 3, e], device="cuda")
        return g.call("transpose", x, dim0=1, dim1=2)
    q, k, v = heads("q", l), heads("k", s), heads("v", s)
    if op in ("scaled_dot_product_attention", "attention_lse"):
        g.set_outputs([g.call(op, q, k, v, is_causal=causal, **scale)])
    else:
        grad, out = heads("grad", l), heads("out", l)
        lse = g.placeholder("lse", "float32", [2, 3, l], device="cuda")
        g.set_outputs([g.call(op, grad, q, k, v, out, lse, is_causal=causal, **scale)])
    return ir.compile(g, stack, target="cuda:sm_90")


ATTENTION_OPS = ["scaled_dot_product_attention", "attention_lse", "attention_grad_query",
                 "attention_grad_key_value"]


@pytest.mark.parametrize("op", ATTENTION_OPS)
def test_attention_runs_as_flash_kernels_where_they_take_it(stack, op):
    kind = {"scaled_dot_product_attention": "fwd", "attention_lse": "lse",
            "attention_grad_query": "dq", "attention_grad_key_value": "dkv"}[op]
    assert f"by kiln_flash_{kind}_d64_bf16_causal" in _attention(stack, op).explain
    delta = ", kiln_flash_delta_d32_f16" if kind in ("dq", "dkv") else ""
    assert f"by kiln_flash_{kind}_d32_f16{delta}\n" in _attention(stack, op, "float16", e=32,
                                                                   causal=False).explain + "\n"
    assert "kiln_flash" in _attention(stack, op, scale=0.5).explain
    # The decomposition; the forward takes a row's largest score for its largest scaled
    # one, so a scale of zero or below is not the kernels'.
    for other in (dict(dtype="float32"), dict(e=80), dict(e=24), dict(scale=-0.5), dict(scale=0.0)):
        assert "kiln_flash" not in _attention(stack, op, **other).explain


def _attention_reference(op, q, k, v, grad=None, out=None, lse=None, causal=True):
    q, k, v = (t.transpose(1, 2).float() for t in (q, k, v))
    scores = q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5
    if causal:
        keep = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    if op == "attention_lse":
        return torch.logsumexp(scores, -1)
    if op == "scaled_dot_product_attention":
        return torch.softmax(scores, -1) @ v
    grad = grad.transpose(1, 2).float()
    delta = (grad * out.transpose(1, 2).float()).sum(-1)
    p = torch.exp(scores - lse[..., None])
    ds = p * (grad @ v.transpose(-2, -1) - delta[..., None]) * q.shape[-1] ** -0.5
    if op == "attention_grad_query":
        return ds @ k
    return torch.cat([ds.transpose(-2, -1) @ q, p.transpose(-2, -1) @ grad], -1)


def _cuda_kernels_of(fn):
    """fn's result and the names of the CUDA kernels it ran."""
    torch.cuda.synchronize()  # earlier work stays out of the window
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        result = fn()
        torch.cuda.synchronize()
    return result, {e.key for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA}


# cuDNN's fused attention runs the forward and the grads where it takes them (as torch
# does); KILN_CUDNN=0 (read each call) makes kiln's own flash kernels run them.
# cuDNN has no call of the logsumexp alone: kiln's kernel runs attention_lse.
LIBRARY_AND_OP = [(library, op) for library in ("cudnn", "kiln") for op in ATTENTION_OPS
                  if (library, op) != ("cudnn", "attention_lse")]


@needs_gpu
@pytest.mark.parametrize("library,op", LIBRARY_AND_OP,
                         ids=[f"{library}-{op}" for library, op in LIBRARY_AND_OP])
@pytest.mark.parametrize("shape", [(100, 100, 64, True), (64, 200, 32, False), (130, 70, 16, False),
                                   (1, 1, 64, True)], ids=str)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_flash_attention_matches_torch(stack, monkeypatch, library, op, shape, dtype):
    if library == "cudnn" and not torch.backends.cudnn.is_available():
        pytest.skip("this torch has no cuDNN (kiln loads torch's)")
    monkeypatch.setenv("KILN_CUDNN", "1" if library == "cudnn" else "0")
    l, s, e, causal = shape
    compiled = _attention(stack, op, dtype, l, s, e, causal)
    assert "kiln_flash" in compiled.explain
    torch.manual_seed(0)
    t = getattr(torch, dtype)
    q, grad = (torch.randn(2, l, 3, e, device="cuda", dtype=t) for _ in range(2))
    k, v = (torch.randn(2, s, 3, e, device="cuda", dtype=t) for _ in range(2))
    lse = _attention_reference("attention_lse", q, k, v, causal=causal)
    out = _attention_reference("scaled_dot_product_attention", q, k, v, causal=causal)
    out = out.to(t).transpose(1, 2).contiguous()  # [2, l, 3, e], as the operands
    args = (q, k, v) if op in ATTENTION_OPS[:2] else (q, k, v, grad, out, lse)
    (actual,), kernels = _cuda_kernels_of(lambda: compiled(*args))
    # The profiler names a kernel by its function handle, and a handle freed by an unloaded
    # module is reused: seen on the H100, cuDNN's run-time compiled bprop reported as an
    # earlier test's kiln_flash_fwd_d64_bf16_causal, and this artifact's kiln_flash_lse_d32_f16
    # as an earlier kiln_flash_lse_d64_f16_causal. So on the kiln path a flash kernel counts as
    # ours by its prefix, and on the cuDNN path only this artifact's names count as ours.
    names = set(re.findall(r"kiln_flash_\w+", compiled.explain))
    theirs = {k for k in kernels if "sdpa" in k or "cudnn" in k}
    ours = (kernels & names) if library == "cudnn" else {
        k for k in kernels if k.startswith("kiln_flash_")}
    assert (theirs and not ours) if library == "cudnn" else (ours and not theirs), kernels
    expected = _attention_reference(op, *(args[:3]), *args[3:], causal=causal)
    if op == "attention_lse":
        torch.testing.assert_close(actual, expected, rtol=1e-3, atol=1e-3)
    else:  # operands rounded to bf16/f16 inside the kernel (P, dS), as flash attention's
        scale = max(expected.abs().max().item(), 1.0)  # relative to the largest, at least 1
        torch.testing.assert_close(actual.float() / scale, expected / scale, rtol=0, atol=2e-2)
