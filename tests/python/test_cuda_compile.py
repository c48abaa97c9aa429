"""kiln.compile on CUDA tensors: graphs whose values live on a GPU compile for its
architecture and run there (torch's stream and allocator); training runs both artifacts on
the GPU; mode="reduce-overhead" replays CUDA graphs with default mode's results. Skipped
where torch sees no CUDA device (scripts/device-run gpu runs them on the H100)."""
import re

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import kiln
from kiln import _cudagraph, _train, ir

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


def runner_of(fast):
    (entry,) = fast.cache.entries
    return entry.value


def training_runner_of(module):
    """The latest entry of a compiled module's forward (nn.Sequential's entries are all its
    instances', as Dynamo's of one code object)."""
    runner = module._compiled_forward.cache.entries[-1].value
    assert isinstance(runner, _train.TrainingRunner), kiln.explain(module)
    return runner


def test_modes_are_checked_and_reduce_overhead_is_default_mode_on_the_cpu(stack):
    with pytest.raises(ValueError, match="max-autotune"):
        kiln.compile(lambda x: x, mode="max-autotune")

    def f(x):
        return x * 2 + 1

    fast = kiln.compile(f, mode="reduce-overhead", stack=stack)
    x = torch.randn(5)
    for _ in range(3):
        torch.testing.assert_close(fast(x), f(x))
    assert runner_of(fast).compiled.target == "cpu"


def test_functionalize_returns_mutated_inputs_as_outputs():
    from kiln import autograd
    g = ir.Graph()
    x = g.placeholder("x", "float32", [4])
    g.call("add_", x, 1)
    g.set_outputs([g.call("mul", x, 2)])
    pure, user_outputs, mutated = autograd.functionalize(g)
    assert user_outputs == 1 and mutated == [0]
    assert "add_" not in str(pure)
    out, new_x = ir.run(pure, torch.ones(4))
    torch.testing.assert_close(out, torch.full((4,), 4.0))
    torch.testing.assert_close(new_x, torch.full((4,), 2.0))


@needs_gpu
def test_a_cuda_call_compiles_for_the_gpu_and_matches_eager(stack):
    def f(x, w, scale):
        return F.gelu(x @ w) * scale + x.softmax(dim=-1).sum(dim=-1, keepdim=True)

    fast = kiln.compile(f, stack=stack)
    x, w = torch.randn(64, 32, device="cuda"), torch.randn(32, 32, device="cuda")
    scale = torch.tensor(0.5)  # a 0-d CPU tensor beside CUDA tensors, as torch allows
    for _ in range(2):
        torch.testing.assert_close(fast(x, w, scale), f(x, w, scale), rtol=1e-4, atol=1e-4)
    compiled = runner_of(fast).compiled
    major, minor = torch.cuda.get_device_capability()
    assert compiled.target == f"cuda:sm_{major}{minor}"
    assert fast(x, w, scale).device == x.device


@needs_gpu
def test_emulate_precision_casts_rounds_between_fused_ops_on_the_gpu(stack):
    # As on the CPU (test_kiln_compile.py): with the option a fused bf16 chain is eager's bit
    # for bit; without it the chain keeps its intermediates in float32.
    def f(x, y, z):
        return ((x + y) * z - x) * y

    torch.manual_seed(0)
    x, y, z = (torch.randn(1 << 16, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    rounded = kiln.compile(f, stack=stack, options={"emulate_precision_casts": True})
    fused = kiln.compile(f, stack=stack)
    assert torch.equal(rounded(x, y, z), f(x, y, z))
    assert not torch.equal(fused(x, y, z), f(x, y, z))
    assert runner_of(rounded).compiled.target.endswith("+emulate-precision-casts")
    assert not rounded.fallback_reasons and not fused.fallback_reasons


@needs_gpu
def test_long_softmax_rows_match_eager(stack):
    # Rows of a vocabulary's length (looped, not kept in registers); infinities and NaNs
    # come out as eager's.
    def f(x):
        return torch.log_softmax(x.float(), dim=-1), torch.softmax(x.float(), dim=-1)

    fast = kiln.compile(f, stack=stack)
    x = (torch.randn(6, 50257, device="cuda") * 4).to(torch.bfloat16)
    x[1, 7] = float("inf")
    x[2, :] = float("-inf")
    x[3, 100] = float("nan")
    x[4, :-1] = float("-inf")
    for got, want in zip(fast(x), f(x)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6, equal_nan=True)


@needs_gpu
def test_dynamic_sizes_on_the_gpu(stack):
    def f(x):
        return F.layer_norm(x, (x.shape[-1],)) * 2

    fast = kiln.compile(f, stack=stack)
    for rows in (8, 16, 33, 1000):
        x = torch.randn(rows, 96, device="cuda", dtype=torch.bfloat16)
        torch.testing.assert_close(fast(x), f(x))
    assert len(fast.cache.entries) == 2, kiln.explain(fast)


@needs_gpu
def test_data_dependent_sizes_on_the_gpu(stack):
    def f(x, n):
        picked = x[x > 0]
        return picked * 2, torch.nonzero(x).shape[0], x.view(n.item(), -1).sum(1)

    fast = kiln.compile(f, fullgraph=True, stack=stack)
    for seed in range(3):
        x = torch.randn(6, 8, device="cuda", generator=torch.Generator("cuda").manual_seed(seed))
        n = torch.tensor(12, device="cuda")  # .item() of a CUDA tensor: unbacked, read at run time
        for got, want in zip(fast(x, n), f(x, n)):
            torch.testing.assert_close(got, want)
    with pytest.raises(kiln.KilnError, match="runtime assert failed"):
        fast(x, torch.tensor(7, device="cuda"))


@needs_gpu
def test_dynamic_floats_and_float_items_on_the_gpu(stack):
    def f(p, g, lr):
        return p - lr * g * g.abs().max().item(), lr * 2

    fast = kiln.compile(f, stack=stack)
    p, g = torch.randn(256, device="cuda"), torch.randn(256, device="cuda")
    for lr in (0.1, 0.2, 0.3, 1e-3):
        got, want = fast(p, g, lr), f(p, g, lr)
        torch.testing.assert_close(got[0], want[0])
        assert got[1] == want[1] and type(got[1]) is float
    assert len(fast.cache.entries) == 2


@needs_gpu
def test_reduce_overhead_replays_with_a_dynamic_float(stack):
    def f(p, g, lr):
        return p - lr * g

    fast = kiln.compile(f, mode="reduce-overhead", stack=stack)
    p, g = torch.randn(256, device="cuda"), torch.randn(256, device="cuda")
    with torch.no_grad():
        for lr in (0.1, 0.2, 0.3, 1e-3, 0.2):
            torch.testing.assert_close(fast(p, g, lr), f(p, g, lr))
    assert len(fast.cache.entries) == 2
    graphed = fast.cache.entries[-1].value.compiled
    assert graphed._graphs and not graphed.reasons, graphed.reasons


@needs_gpu
def test_reduce_overhead_runs_data_dependent_sizes_uncaptured(stack):
    def f(x):
        return x[x > 0] + 1

    fast = kiln.compile(f, mode="reduce-overhead", stack=stack)
    for _ in range(3):
        x = torch.randn(64, device="cuda")
        torch.testing.assert_close(fast(x), f(x))
    assert any("data-dependent sizes" in r for r in runner_of(fast).compiled.reasons)


@needs_gpu
def test_training_runs_forward_and_backward_on_the_gpu(stack):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 8)).cuda()
    reference = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 8)).cuda()
    reference.load_state_dict(model.state_dict())
    fast = kiln.compile(model, stack=stack)
    x = torch.randn(16, 32, device="cuda")
    fast(x).square().mean().backward()
    reference(x).square().mean().backward()
    assert not fast._compiled_forward.fallback_reasons, fast._compiled_forward.fallback_reasons
    for got, want in zip(model.parameters(), reference.parameters()):
        assert got.grad.device == want.grad.device
        torch.testing.assert_close(got.grad, want.grad, rtol=1e-4, atol=1e-5)
    runner = training_runner_of(fast)
    assert runner.forward.target.startswith("cuda") and runner.backward.target.startswith("cuda")


@needs_gpu
@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_dropout_trains_on_the_gpu_with_a_fresh_mask_each_step(stack, mode):
    def f(x, w):
        return F.dropout(F.gelu(x @ w), p=0.25, training=True)

    fast = kiln.compile(f, mode=mode, stack=stack)
    x = torch.randn(256, 64, device="cuda")
    # x @ w of unit scale: gelu of a product below ~-5.7 is exactly 0, as a dropped element is.
    w = nn.Parameter(torch.randn(64, 128, device="cuda") / 8)
    masks = []
    for step in range(4):
        w.grad = None
        y = fast(x, w)
        h, kept = F.gelu(x @ w).detach(), y.detach() != 0
        torch.testing.assert_close(y.detach()[kept], h[kept] / 0.75, rtol=1e-4, atol=1e-5)
        assert 0.2 < 1 - kept.float().mean().item() < 0.3
        t = torch.randn_like(y)
        y.backward(t)
        h = (x @ w).detach().requires_grad_()
        want, = torch.autograd.grad(F.gelu(h), h, t * kept / 0.75)  # the forward's mask, replayed
        torch.testing.assert_close(w.grad, x.t() @ want, rtol=1e-4, atol=1e-4)
        masks.append(kept)
    assert all(not torch.equal(a, b) for a, b in zip(masks, masks[1:]))
    runner = runner_of(fast)
    assert isinstance(runner, _train.TrainingRunner) and runner.forward.target.startswith("cuda")


@needs_gpu
def test_reduce_overhead_replays_a_cuda_graph(stack):
    def f(x, w):
        return torch.relu(x @ w) + 1

    fast = kiln.compile(f, mode="reduce-overhead", stack=stack)
    w = nn.Parameter(torch.randn(16, 16, device="cuda"))
    xs = [torch.randn(8, 16, device="cuda") for _ in range(4)]
    with torch.no_grad():
        outs = [fast(x, w) for x in xs]
        for x, out in zip(xs, outs):  # each call's output is its own: a replay does not overwrite it
            torch.testing.assert_close(out, f(x, w))
    graphed = runner_of(fast).compiled
    assert isinstance(graphed, _cudagraph.CudaGraphed)
    assert [g for g in graphed._graphs.values() if g is not None], graphed.reasons
    assert graphed._graphs and not graphed.reasons


@needs_gpu
def test_reduce_overhead_writes_mutated_inputs_back(stack):
    def f(x, total):
        total.add_(x.sum())
        return x * 2

    fast = kiln.compile(f, mode="reduce-overhead", stack=stack)
    total, expected = torch.zeros((), device="cuda"), torch.zeros((), device="cuda")
    for k in range(4):
        x = torch.full((8,), float(k), device="cuda")
        torch.testing.assert_close(fast(x, total), x * 2)
        expected += x.sum()
        torch.testing.assert_close(total, expected)
    assert not runner_of(fast).compiled.reasons


@needs_gpu
def test_reduce_overhead_runs_uncaptured_where_an_output_views_an_input(stack):
    def f(x):
        return x.t(), x + 1

    fast = kiln.compile(f, mode="reduce-overhead", stack=stack)
    for _ in range(3):
        x = torch.randn(4, 6, device="cuda")
        view, plus = fast(x)
        assert view.data_ptr() == x.data_ptr()  # still a view of the caller's tensor
        torch.testing.assert_close(plus, x + 1)
    assert any("views an input" in r for r in runner_of(fast).compiled.reasons)


def _twin_models(width):
    """Two equal models; each test its own width, so that no entry of nn.Sequential's forward
    made by another test holds for its calls."""
    torch.manual_seed(width)
    make = lambda: nn.Sequential(nn.Embedding(64, width), nn.Linear(width, 64), nn.GELU(),  # noqa: E731
                                 nn.Linear(64, 64)).cuda()
    model, reference = make(), make()
    reference.load_state_dict(model.state_dict())
    return model, reference


@needs_gpu
def test_reduce_overhead_trains_from_cuda_graphs(stack):
    model, reference = _twin_models(32)
    fast = kiln.compile(model, mode="reduce-overhead", stack=stack)
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.5) for m in (model, reference)]
    for step in range(5):
        idx = torch.randint(0, 64, (16,), device="cuda")
        target = torch.randint(0, 64, (16,), device="cuda")
        for f, optimizer in zip((fast, reference), optimizers):
            optimizer.zero_grad(set_to_none=True)
            F.cross_entropy(f(idx), target).backward()
            optimizer.step()
        for got, want in zip(model.parameters(), reference.parameters()):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    runner = training_runner_of(fast)
    # run, captured, then replayed: the backward's saved inputs are the captured forward's
    assert runner.forward.replays == 4 and runner.backward.replays == 3, runner.explain
    assert not runner.forward.reasons and not runner.backward.reasons
    bad = idx.clone()
    bad[3] = 64  # an index out of range, in a replay: reported by a later replay or check_errors
    with pytest.raises(kiln.KilnError, match="an index is out of range"):
        fast(bad).sum().backward()
        kiln.check_errors()
    assert runner.forward.replays == 5


@needs_gpu
def test_reduce_overhead_training_runs_uncaptured_while_a_replays_outputs_are_in_use(stack):
    model, reference = _twin_models(48)
    fast = kiln.compile(model, mode="reduce-overhead", stack=stack)
    xs = [torch.randint(0, 64, (16,), device="cuda") for _ in range(2)]
    for f, m in ((fast, model), (reference, reference)):
        for _ in range(3):  # run, captured, replayed: the grads are the replay's memory
            m.zero_grad(set_to_none=True)
            f(xs[0]).square().mean().backward()
        # Grads kept (accumulated into): the next backward may not overwrite them.
        f(xs[1]).square().mean().backward()
        # Two forwards before their backward: the second may not overwrite what the first saved.
        (f(xs[0]).square().mean() + f(xs[1]).sin().mean()).backward()
    for got, want in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(got.grad, want.grad, rtol=1e-4, atol=1e-5)
    runner = training_runner_of(fast)
    assert any("still in use" in r for r in runner.forward.reasons), runner.forward.reasons
    assert any("still in use" in r for r in runner.backward.reasons), runner.backward.reasons


@needs_gpu
def test_cuda_autocast_casts_as_eager(stack):
    def f(x, w, b):
        h = F.linear(x, w, b)
        return h.softmax(-1), F.layer_norm(h, (h.shape[-1],)), h.sum(), F.gelu(h) * 2

    fast = kiln.compile(f, stack=stack)
    x, w, b = (torch.randn(*s, device="cuda") for s in ((64, 128), (256, 128), (256,)))
    with torch.autocast("cuda", dtype=torch.bfloat16):
        want, got = f(x, w, b), fast(x, w, b)
    assert [t.dtype for t in got] == [t.dtype for t in want]
    for g, e in zip(got, want):
        torch.testing.assert_close(g, e, rtol=2e-2, atol=2e-2)


def test_a_cuda_training_graph_partitions_and_compiles_without_a_gpu(stack):
    # Causal attention and slicing: their decompositions and derivative rules make index
    # tensors (arange), which must live on the graph's device.
    g = ir.Graph()
    q, k, v = (g.placeholder(n, "float32", [2, 4, 16, 8], device="cuda:0", requires_grad=True) for n in "qkv")
    y = g.call("scaled_dot_product_attention", q, k, v, is_causal=True)
    g.set_outputs([g.call("sum", g.call("slice", y, dim=2, start=1, end=9, step=2))])
    parts = stack.partition(g, [True, True, True])
    for graph in (parts["forward"], parts["backward"]):
        metas = [graph.value(i).meta for i in range(len(graph))]
        assert all(m["device"] == "cuda:0" for m in metas if isinstance(m, dict) and "device" in m), graph
        assert ir.compile(graph, stack, "cuda").target == "cuda:sm_90"


def _flash_training_parts(stack):
    g = ir.Graph()
    q, k, v = (g.placeholder(n, "bfloat16", [2, 4, 100, 64], device="cuda:0", requires_grad=True)
               for n in "qkv")
    y = g.call("scaled_dot_product_attention", q, k, v, is_causal=True)
    g.set_outputs([g.call("sum", g.call("to_dtype", y, "float32"))])
    return stack.partition(g, [True, True, True])


def test_attention_trains_through_flash_kernels(stack):
    parts = _flash_training_parts(stack)
    forward = ir.compile(parts["forward"], stack, "cuda").explain
    backward = ir.compile(parts["backward"], stack, "cuda").explain
    # The forward writes its rows' logsumexp beside its output (one call of two
    # results, saved for the backward), so the backward does not recompute it.
    assert re.search(r"= scaled_dot_product_attention\(q, k, v\) by kiln_flash_fwd_d64_bf16_causal, "
                     r"and buf\d+\n", forward), forward
    # The grads are one call of two results: cuDNN's backward (all three grads at once
    # from the saved out and logsumexp), else kiln's delta, dq and [dk, dv] kernels.
    assert re.search(r"= attention_grad_query\(buf\d+, saved\d, saved\d, saved\d, saved\d, saved\d\) "
                     r"by kiln_flash_dq_d64_bf16_causal, kiln_flash_dkv_d64_bf16_causal, "
                     r"kiln_flash_delta_d64_bf16, and buf\d+\n", backward), backward
    assert backward.count("extern ") == 1, backward
    assert "attention_lse" not in backward and "kiln_flash_lse" not in backward, backward
    assert "matmul" not in forward + backward  # no [L, S] scores anywhere


def test_attention_with_dropout_trains_through_cudnn_calls(stack):
    g = ir.Graph()
    q, k, v = (g.placeholder(n, "bfloat16", [2, 4, 100, 64], device="cuda:0", requires_grad=True)
               for n in "qkv")
    seed = g.placeholder("seed", "int64", [], device="cuda:0")
    offset = g.call("full", size=[], fill_value=1 << 40, dtype="int64", device="cuda:0")
    y = g.call("scaled_dot_product_attention", q, k, v, None, 0.1, True, seed=seed, offset=offset)
    g.set_outputs([g.call("sum", g.call("to_dtype", y, "float32"))])
    parts = stack.partition(g, [True, True, True, False])
    forward = ir.compile(parts["forward"], stack, "cuda").explain
    backward = ir.compile(parts["backward"], stack, "cuda").explain
    # One call each way, of the random stream too, naming no kernel of ours (cuDNN's alone
    # drop weights): the [L, S] scores never reach memory.
    assert re.search(r"= scaled_dot_product_attention\(q, k, v, seed, buf\d+\) on cuDNN alone with dropout 0.1, "
                     r"and buf\d+\n", forward), forward
    assert re.search(r"= attention_grad_query\(buf\d+, saved\d, saved\d, saved\d, saved\d, saved\d, "
                     r"saved\d, buf\d+\) on cuDNN alone with dropout 0.1, and buf\d+\n",
                     backward), backward  # the offset: a constant again
    assert "kiln_flash" not in forward + backward and "matmul" not in forward + backward
    assert "attention_lse" not in backward and "dropout(" not in forward + backward


def test_attention_of_head_sizes_past_our_kernels_trains_through_cudnn_calls(stack):
    g = ir.Graph()
    q, k = (g.placeholder(n, "bfloat16", [2, 4, 100, 128], device="cuda:0", requires_grad=True) for n in "qk")
    v = g.placeholder("v", "bfloat16", [2, 4, 100, 96], device="cuda:0", requires_grad=True)
    y = g.call("scaled_dot_product_attention", q, k, v, is_causal=True)
    g.set_outputs([g.call("sum", g.call("to_dtype", y, "float32"))])
    parts = stack.partition(g, [True, True, True])
    forward = ir.compile(parts["forward"], stack, "cuda").explain
    backward = ir.compile(parts["backward"], stack, "cuda").explain
    # Head sizes 128 and 96: no kernel of ours, one cuDNN call each way.
    assert re.search(r"= scaled_dot_product_attention\(q, k, v\) on cuDNN alone, and buf\d+\n", forward), forward
    assert re.search(r"= attention_grad_query\(buf\d+, saved\d, saved\d, saved\d, saved\d, saved\d\) "
                     r"on cuDNN alone, and buf\d+\n", backward), backward
    assert "kiln_flash" not in forward + backward and "matmul" not in forward + backward


def test_the_offsets_of_several_attentions_with_dropout_are_one_kernel(stack):
    # Each attention's dropout has an offset of its own, a constant the cuDNN call reads from
    # memory: written together, first, by one kernel (forward and backward alike).
    g = ir.Graph()
    x = g.placeholder("x", "bfloat16", [2, 4, 64, 64], device="cuda:0", requires_grad=True)
    seed = g.placeholder("seed", "int64", [], device="cuda:0")
    y = x
    for layer in range(3):
        offset = g.call("full", size=[], fill_value=(layer + 1) << 40, dtype="int64", device="cuda:0")
        y = g.call("scaled_dot_product_attention", y, y, y, None, 0.1, True, seed=seed, offset=offset)
    g.set_outputs([g.call("sum", g.call("to_dtype", y, "float32"))])
    parts = stack.partition(g, [True, False])
    for explain in (ir.compile(parts["forward"], stack, "cuda").explain,
                    ir.compile(parts["backward"], stack, "cuda").explain):
        assert explain.count("on cuDNN alone with dropout 0.1") == 3, explain
        assert re.match(r"kernel 0 over \[\]: buf\d+ \(pointwise \[\]\), buf\d+ \(pointwise \[\]\), "
                        r"buf\d+ \(pointwise \[\]\)\n", explain), explain
        assert len(re.findall(r"over \[\]: buf\d+ \(pointwise", explain)) == 1, explain


@pytest.mark.parametrize("mask", ["bool", "float"])
def test_masked_attention_trains_through_cudnn_calls(stack, mask):
    g = ir.Graph()
    q = g.placeholder("q", "bfloat16", [2, 4, 100, 64], device="cuda:0", requires_grad=True)
    k, v = (g.placeholder(n, "bfloat16", [2, 4, 104, 64], device="cuda:0", requires_grad=True) for n in "kv")
    if mask == "bool":  # a key padding mask
        m = g.placeholder("mask", "bool", [2, 1, 1, 104], device="cuda:0")
    else:
        m = g.placeholder("mask", "bfloat16", [100, 104], device="cuda:0")
    y = g.call("scaled_dot_product_attention", q, k, v, m)
    g.set_outputs([g.call("sum", g.call("to_dtype", y, "float32"))])
    parts = stack.partition(g, [True, True, True, False])
    forward = ir.compile(parts["forward"], stack, "cuda").explain
    backward = ir.compile(parts["backward"], stack, "cuda").explain
    # One cuDNN call each way, the mask its bias (a bool one made 0 / -inf by a kernel of its
    # own, the mask's size): no [L, S] scores in memory.
    bias = r"buf\d+" if mask == "bool" else r"mask"
    assert re.search(r"= scaled_dot_product_attention\(q, k, v, " + bias + r"\) on cuDNN alone, and buf\d+\n",
                     forward), forward
    assert re.search(r"= attention_grad_query\(buf\d+, saved\d, saved\d, saved\d, saved\d, saved\d, "
                     r"(buf|saved)\d+\) on cuDNN alone, and buf\d+\n", backward), backward
    assert "kiln_flash" not in forward + backward and "matmul" not in forward + backward
    if mask == "bool":
        assert re.search(r"kernel \d+ over \[2, 104\]", forward), forward


@needs_gpu
@pytest.mark.parametrize("mask", ["key_padding", "float_rows", "bool_full"])
def test_masked_attention_on_cudnn_matches_eager(stack, mask):
    torch.manual_seed(0)
    batch, heads, rows, keys = 2, 4, 96, 200
    q = torch.randn(batch, heads, rows, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k, v = (torch.randn(batch, heads, keys, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            for _ in range(2))
    if mask == "key_padding":  # the last keys of each sample hidden
        m = torch.ones(batch, 1, 1, keys, dtype=torch.bool, device="cuda")
        m[0, ..., 150:] = False
        m[1, ..., 17:] = False
    elif mask == "float_rows":
        m = torch.randn(rows, keys, device="cuda", dtype=torch.bfloat16)
    else:
        m = torch.rand(batch, heads, rows, keys, device="cuda") < 0.7
        m[..., 0] = True  # every row keeps a key

    def fn(q, k, v, m):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=m)

    fast = kiln.compile(fn, stack=stack)
    out = fast(q, k, v, m)
    assert not fast.fallback_reasons, fast.fallback_reasons
    twins = [t.detach().float().requires_grad_() for t in (q, k, v)]
    scores = twins[0] @ twins[1].transpose(-2, -1) / 8
    scores = scores.masked_fill(~m, float("-inf")) if m.dtype == torch.bool else scores + m.float()
    want = torch.softmax(scores, -1) @ twins[2]
    torch.testing.assert_close(out.float(), want, rtol=0, atol=2e-2)
    grad = torch.randn_like(out)
    out.backward(grad)
    want.backward(grad.float())
    for got, ref in zip((q, k, v), twins):
        scale = max(ref.grad.abs().max().item(), 1.0)
        torch.testing.assert_close(got.grad.float() / scale, ref.grad / scale, rtol=0, atol=2e-2)
    if mask == "key_padding":  # the hidden keys got no grad
        assert (k.grad[0, :, 150:] == 0).all() and (v.grad[1, :, 17:] == 0).all()


@needs_gpu
def test_masked_attention_with_dropout_on_cudnn_drops_the_same_weights_both_ways(stack):
    # v the identity: the output is the masked, dropped weights, which tell cuDNN's draws.
    torch.manual_seed(0)
    p = 0.2
    q, k = (torch.randn(2, 3, 64, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(2))
    v = torch.eye(64, device="cuda", dtype=torch.bfloat16).expand(2, 3, 64, 64).contiguous().requires_grad_()
    m = torch.rand(2, 1, 64, 64, device="cuda") < 0.8
    m[..., 0] = True

    def fn(q, k, v, m):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=m, dropout_p=p)

    fast = kiln.compile(fn, stack=stack)
    out = fast(q, k, v, m)
    assert not fast.fallback_reasons, fast.fallback_reasons
    q2, k2, v2 = (t.detach().float().requires_grad_() for t in (q, k, v))
    weights = torch.softmax((q2 @ k2.transpose(-2, -1) / 8).masked_fill(~m, float("-inf")), -1)
    kept = out.detach() != 0
    assert not (kept & ~m).any()  # masked weights stay dropped
    torch.testing.assert_close(out.detach().float()[kept], weights.detach()[kept] / (1 - p), rtol=2e-2, atol=1e-3)
    dropped = 1 - kept[m.expand_as(kept) & (weights > 1e-3)].float().mean().item()
    assert 0.15 < dropped < 0.25, dropped
    grad = torch.randn_like(out)
    out.backward(grad)
    ((weights * kept.float() / (1 - p)) @ v2).backward(grad.float())
    for got, want in ((q.grad, q2.grad), (k.grad, k2.grad), (v.grad, v2.grad)):
        scale = max(want.abs().max().item(), 1.0)
        torch.testing.assert_close(got.float() / scale, want / scale, rtol=0, atol=3e-2)


@needs_gpu
@pytest.mark.parametrize("widths", [(128, 128, True), (96, 64, False), (80, 80, True)])
def test_attention_of_head_sizes_past_our_kernels_matches_eager(stack, widths):
    embed, embed_v, causal = widths
    torch.manual_seed(0)

    def fn(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    q, k = (torch.randn(2, 4, 200, embed, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            for _ in range(2))
    v = torch.randn(2, 4, 200, embed_v, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    twins = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    fast = kiln.compile(fn, stack=stack)
    out = fast(q, k, v)
    assert not fast.fallback_reasons, fast.fallback_reasons
    want = fn(*twins)
    torch.testing.assert_close(out.float(), want.float(), rtol=0, atol=2e-2)
    grad = torch.randn_like(out)
    out.backward(grad)
    want.backward(grad)
    for got, ref in zip((q, k, v), twins):
        scale = max(ref.grad.float().abs().max().item(), 1.0)
        torch.testing.assert_close(got.grad.float() / scale, ref.grad.float() / scale, rtol=0, atol=2e-2)


@needs_gpu
@pytest.mark.parametrize("causal,embed,mode", [(False, 64, "default"), (True, 64, "default"),
                                               (True, 128, "default"), (True, 64, "reduce-overhead")])
def test_attention_dropout_on_cudnn_drops_the_same_weights_both_ways(stack, causal, embed, mode):
    # v the identity: the output is the dropped weights themselves, which tell the mask
    # cuDNN drew; the backward must drop those again (v's grad sums them by row).
    torch.manual_seed(0)
    p = 0.25

    def fn(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=causal)

    fast = kiln.compile(fn, mode=mode, stack=stack)
    q, k = (torch.randn(2, 3, 64, embed, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            for _ in range(2))
    v = torch.eye(64, device="cuda", dtype=torch.bfloat16).expand(2, 3, 64, 64).contiguous().requires_grad_()
    hidden = torch.ones(64, 64, dtype=torch.bool, device="cuda").triu(1)
    masks = []
    for step in range(3):  # each step draws a fresh mask (a fresh seed), as eager's dropout does
        for t in (q, k, v):
            t.grad = None
        out = fast(q, k, v)
        assert not fast.fallback_reasons, fast.fallback_reasons
        scores = (q.detach().float() @ k.detach().float().transpose(-2, -1)) / embed ** 0.5
        weights = torch.softmax(scores.masked_fill(hidden, float("-inf")) if causal else scores, -1)
        kept = out.detach() != 0
        torch.testing.assert_close(out.detach().float()[kept], weights[kept] / (1 - p), rtol=2e-2, atol=1e-3)
        dropped = 1 - kept[weights > 1e-3].float().mean().item()
        assert 0.2 < dropped < 0.3, dropped
        grad = torch.randn_like(out)
        out.backward(grad)
        # The same mask through torch's math: grads of softmax(scores) * mask / (1 - p) @ v.
        q2, k2, v2 = (t.detach().float().requires_grad_() for t in (q, k, v))
        s2 = (q2 @ k2.transpose(-2, -1)) / embed ** 0.5
        s2 = s2.masked_fill(hidden, float("-inf")) if causal else s2
        ((torch.softmax(s2, -1) * kept.float() / (1 - p)) @ v2).backward(grad.float())
        for got, want in ((q.grad, q2.grad), (k.grad, k2.grad), (v.grad, v2.grad)):
            scale = max(want.abs().max().item(), 1.0)
            torch.testing.assert_close(got.float() / scale, want / scale, rtol=0, atol=3e-2)
        masks.append(kept)
    assert all(not torch.equal(a, b) for a, b in zip(masks, masks[1:]))


@needs_gpu
def test_attention_grads_through_flash_kernels_match_eager(stack):
    torch.manual_seed(0)
    def fn(q, k, v):
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).float()
        return (y * y).sum()
    leaves = [torch.randn(2, 4, 100, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
              for _ in range(3)]
    twins = [t.detach().clone().requires_grad_() for t in leaves]
    fast = kiln.compile(fn, stack=stack)
    fast(*leaves).backward()
    assert not fast.fallback_reasons, fast.fallback_reasons
    fn(*twins).backward()
    for got, want in zip(leaves, twins):
        scale = max(want.grad.float().abs().max().item(), 1.0)
        torch.testing.assert_close(got.grad.float() / scale, want.grad.float() / scale, rtol=0, atol=2e-2)


@needs_gpu
def test_a_cpu_tensor_with_dims_beside_cuda_ones_runs_eagerly(stack):
    def f(x, n):
        return x.view(n.item(), -1) * 2

    fast = kiln.compile(f, stack=stack)
    x, n = torch.randn(4, 6, device="cuda"), torch.tensor([3])
    torch.testing.assert_close(fast(x, n), f(x, n))
    assert any("n is a CPU tensor with dims" in r for r in fast.fallback_reasons), fast.fallback_reasons


def _linear_layer(dtype="bfloat16", approximate="none", activation="gelu"):
    """A linear layer of [4, 256, 96] rows, its activation's float sum the graph's loss; or,
    without an activation, the layer's output itself (its backward takes dy)."""
    g = ir.Graph()
    x = g.placeholder("x", dtype, [4, 256, 96], device="cuda:0", requires_grad=True)
    w = g.placeholder("w", dtype, [80, 96], device="cuda:0", requires_grad=True)
    b = g.placeholder("b", dtype, [80], device="cuda:0", requires_grad=True)
    y = g.call("linear", x, w, b)
    if activation == "none":
        g.set_outputs([y])
        return g
    y = g.call(activation, y, approximate=approximate) if activation == "gelu" else g.call(activation, y, dim=-1)
    g.set_outputs([g.call("sum", g.call("to_dtype", y, "float32"))])
    return g


@pytest.mark.parametrize("activation", ["none", "softmax"])
def test_a_linear_layers_bias_grad_is_its_weight_grads_epilogue(stack, activation):
    # The bias grad sums the rows the weight grad's product dy^T @ x reads: cuBLASLt's
    # epilogue writes it, where a column sum of its own would read dy again: for a dy the
    # backward takes, and for a dy whose kernel a column sum cannot join (softmax's
    # backward: a row kernel).
    for dtype in ("bfloat16", "float16"):
        backward = stack.partition(_linear_layer(dtype, activation=activation), [True] * 3)["backward"]
        bwd = ir.compile(backward, stack, "cuda").explain
        assert re.search(r"extern buf\d+ = mm\([^)]*\) with epilogue bias_grad, and buf\d+\n", bwd), bwd
        assert "sum of [32]" not in bwd and "down the columns" not in bwd, bwd


def test_a_linear_layers_bias_grad_through_a_gelu_is_a_column_sum_of_its_kernel(stack):
    # dy is the GELU backward's: the kernel writing it sums its columns over chunks of 128
    # rows as it goes (4 x 2 partial sums a column), then a small kernel adds those; the
    # weight grad's product is plain. No second read of dy.
    for dtype in ("bfloat16", "float16"):
        backward = stack.partition(_linear_layer(dtype), [True] * 3)["backward"]
        bwd = ir.compile(backward, stack, "cuda").explain
        assert "epilogue" not in bwd, bwd
        assert re.search(r"kernel \d+ over \[4, 256, 80\]: .*\(sum of \[128\] down the columns\)\n", bwd), bwd
        assert re.search(r"kernel \d+ over \[80\]: buf\d+ \(sum of \[4, 2\]\)\n", bwd), bwd


@needs_gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("rows,features", [((4, 256), (96, 80)), ((300,), (0, 24)), ((0,), (48, 40))],
                         ids=["rows", "no-in-features", "no-rows"])
def test_bias_grads_from_the_weight_grads_epilogue_match_eager(stack, dtype, rows, features):
    # No in-features: the product is empty and the bias grad is summed by a product with
    # ones (the epilogue's fallback); no rows: the sums are zeros.
    torch.manual_seed(0)

    def fn(x, w, b):
        return F.linear(x, w, b)

    x = torch.randn(*rows, features[0], device="cuda", dtype=dtype, requires_grad=True)
    w = (torch.randn(features[1], features[0], device="cuda") * 0.1).to(dtype).requires_grad_()
    b = torch.randn(features[1], device="cuda", dtype=dtype, requires_grad=True)
    dy = torch.randn(*rows, features[1], device="cuda", dtype=dtype)
    twins = [t.detach().clone().requires_grad_() for t in (x, w, b)]
    fast = kiln.compile(fn, stack=stack)
    fast(x, w, b).backward(dy)
    assert not fast.fallback_reasons, fast.fallback_reasons
    # fn's code is every case's: its entries are all theirs (as Dynamo's), this case's last.
    runner = fast.cache.entries[-1].value
    assert "with epilogue bias_grad" in runner.explain, runner.explain
    fn(*twins).backward(dy)
    _expect_grads_close((x, w, b), twins)


@needs_gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("rows,features", [((4, 256), (96, 80)), ((300,), (24, 20)), ((1, 2048), (16, 24)),
                                           ((0,), (48, 40))],
                         ids=["vectors", "a-column-a-thread", "one-chunk-dim", "no-rows"])
def test_bias_grads_summed_in_the_gelu_backwards_kernel_match_eager(stack, dtype, rows, features):
    # The bias grad is a column sum of the kernel writing dy (GELU's backward): 16-byte
    # vectors of columns where a row holds whole ones (80 bf16), a column a thread where
    # not (20); rows of one dim of 2048 (a leading 1); no rows: zeros.
    torch.manual_seed(0)

    def fn(x, w, b):
        return F.gelu(F.linear(x, w, b)).float().square().sum()

    x = torch.randn(*rows, features[0], device="cuda", dtype=dtype, requires_grad=True)
    w = (torch.randn(features[1], features[0], device="cuda") * 0.1).to(dtype).requires_grad_()
    b = torch.randn(features[1], device="cuda", dtype=dtype, requires_grad=True)
    twins = [t.detach().clone().requires_grad_() for t in (x, w, b)]
    fast = kiln.compile(fn, stack=stack)
    fast(x, w, b).backward()
    assert not fast.fallback_reasons, fast.fallback_reasons
    runner = fast.cache.entries[-1].value
    assert "down the columns" in runner.explain, runner.explain
    assert "epilogue bias_grad" not in runner.explain, runner.explain
    fn(*twins).backward()
    _expect_grads_close((x, w, b), twins)


def _expect_grads_close(compiled, eager):
    """Each compiled leaf's grad against its eager twin's, relative to eager's largest (or 1)."""
    for mine, theirs in zip(compiled, eager):
        scale = max(theirs.grad.float().abs().amax().item() if theirs.grad.numel() else 0.0, 1.0)
        torch.testing.assert_close(mine.grad.float() / scale, theirs.grad.float() / scale, rtol=0, atol=2e-2)


def test_a_tanh_gelu_of_a_linear_layer_is_its_products_epilogue(stack):
    # cuBLASLt writes the pre-activation (saved for the backward) and its gelu in one call.
    forward = stack.partition(_linear_layer(approximate="tanh"), [True] * 3)["forward"]
    fwd = ir.compile(forward, stack, "cuda").explain
    assert re.search(r"extern buf\d+ = addmm\(b, [^)]*\) with epilogue gelu_tanh_aux, and buf\d+\n", fwd), fwd
    assert "(pointwise [])" not in fwd, fwd  # no kernel reads the product to write the gelu


@needs_gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_tanh_gelu_epilogue_matches_eager(stack, dtype):
    torch.manual_seed(0)

    def mlp():
        return nn.Sequential(nn.Linear(96, 200), nn.GELU(approximate="tanh"), nn.Linear(200, 96)).to("cuda", dtype)

    model, reference = mlp(), mlp()
    reference.load_state_dict(model.state_dict())
    fast = kiln.compile(model, stack=stack)
    x = torch.randn(4, 130, 96, device="cuda", dtype=dtype)
    with torch.no_grad():
        torch.testing.assert_close(fast(x), reference(x), rtol=2e-2, atol=2e-2)
    fast(x).float().square().mean().backward()
    reference(x).float().square().mean().backward()
    runner = training_runner_of(fast)
    assert "with epilogue gelu_tanh_aux" in runner.explain, runner.explain
    for got, want in zip(model.parameters(), reference.parameters()):
        scale = max(want.grad.float().abs().amax().item(), 1e-3)
        torch.testing.assert_close(got.grad.float() / scale, want.grad.float() / scale, rtol=0, atol=2e-2)


def _relu_mlp(dtype="bfloat16", bias=True):
    g = ir.Graph()
    x = g.placeholder("x", dtype, [4, 130, 96], device="cuda:0", requires_grad=True)
    w1 = g.placeholder("w1", dtype, [200, 96], device="cuda:0", requires_grad=True)
    b1 = g.placeholder("b1", dtype, [200], device="cuda:0", requires_grad=True) if bias else None
    w2 = g.placeholder("w2", dtype, [96, 200], device="cuda:0", requires_grad=True)
    hidden = g.call("relu", g.call("linear", x, w1, b1) if bias else g.call("linear", x, w1))
    g.set_outputs([g.call("linear", hidden, w2)])
    return g


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
def test_a_relu_of_a_linear_layer_is_its_products_epilogue(stack, dtype, bias):
    # cuBLASLt applies the ReLU to the product (and bias) it writes: no kernel reads the
    # product to write its relu, in inference and in training's forward (the backward reads
    # the relu's result, which is the call's).
    g = _relu_mlp(dtype, bias)
    explained = [ir.compile(g, stack, "cuda").explain]
    explained.append(ir.compile(stack.partition(g, [True] * (4 if bias else 3))["forward"], stack, "cuda").explain)
    for text in explained:
        op = r"addmm\(b1, " if bias else r"(mm|matmul)\("
        assert re.search(rf"extern buf\d+ = {op}[^)]*\) with epilogue relu\n", text), text
        assert "kernel" not in text.split("with epilogue relu")[1].split("extern")[0], text


def test_a_relu_whose_product_is_read_elsewhere_stays_a_kernel(stack):
    g = ir.Graph()
    x = g.placeholder("x", "bfloat16", [64, 96], device="cuda:0")
    w = g.placeholder("w", "bfloat16", [128, 96], device="cuda:0")
    product = g.call("linear", x, w)
    g.set_outputs([g.call("relu", product), product])  # the pre-activation is an output too
    text = ir.compile(g, stack, "cuda").explain
    assert "with epilogue relu" not in text, text


class _ReluMLP(nn.Module):
    """Its own forward (kiln.compile's entries are per code object, as Dynamo's: an
    nn.Sequential shares its forward's entries with every other test's)."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(96, 200), nn.Linear(200, 96, bias=False), nn.Linear(96, 8)

    def forward(self, x):
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


@needs_gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_a_relu_epilogue_matches_eager(stack, dtype):
    torch.manual_seed(0)

    def mlp():
        return _ReluMLP().to("cuda", dtype)

    model, reference = mlp(), mlp()
    reference.load_state_dict(model.state_dict())
    fast = kiln.compile(model, stack=stack)
    x = torch.randn(4, 130, 96, device="cuda", dtype=dtype)
    tolerance = dict(rtol=2e-2, atol=2e-2) if dtype != torch.float32 else dict(rtol=1e-4, atol=1e-4)
    with torch.no_grad():
        torch.testing.assert_close(fast(x), reference(x), **tolerance)
    fast(x).float().square().mean().backward()
    reference(x).float().square().mean().backward()
    runner = training_runner_of(fast)
    assert runner.explain.count("with epilogue relu") >= 2, runner.explain
    for got, want in zip(model.parameters(), reference.parameters()):
        scale = max(want.grad.float().abs().amax().item(), 1e-3)
        torch.testing.assert_close(got.grad.float() / scale, want.grad.float() / scale, rtol=0,
                                   atol=2e-2 if dtype != torch.float32 else 1e-4)
    # relu keeps NaN (torch's max(x, 0) propagates it): a NaN input row stays NaN through the
    # epilogue, in inference and in training's forward, where a clamp to 0 would hide it
    poisoned = x.clone()
    poisoned[1, 7, 3] = float("nan")
    with torch.no_grad():
        got, want = fast(poisoned), reference(poisoned)
        assert want.isnan().any()
        torch.testing.assert_close(got, want, equal_nan=True, **tolerance)
    torch.testing.assert_close(fast(poisoned).detach(), want, equal_nan=True, **tolerance)


def test_an_item_assignment_compiles_for_the_gpu(stack):
    # x[:, :2] = y as the tracer writes it: where's out= form into the view, under a
    # true 0-d condition (compiled to sm_90 cubin here, run by the GPU test below).
    g = ir.Graph()
    x = g.placeholder("x", "float32", [3, 4], device="cuda:0")
    y = g.placeholder("y", "float32", [3, 2], device="cuda:0")
    view = g.call("slice", x, dim=1, start=0, end=2)
    always = g.call("full", size=[], fill_value=True, dtype="bool", device="cuda:0")
    g.call("where_out", always, y, view, view)
    g.set_outputs([g.call("sum", x)])
    compiled = ir.compile(g, stack, "cuda")
    assert compiled.target == "cuda:sm_90" and "sum of [3, 4]" in compiled.explain, compiled.explain


@needs_gpu
def test_item_assignments_match_eager_on_the_gpu(stack):
    def f(x, y, m):
        z = x * 1
        z[:, :2] = y
        z[0] = 7
        z[m] = -1.0
        x[1:, 3] = y[1:, 0]
        return z

    fast = kiln.compile(f, stack=stack)
    x, y = torch.randn(3, 4, device="cuda"), torch.randn(3, 2, device="cuda")
    m = x > 1
    mine, theirs = x.clone(), x.clone()
    torch.testing.assert_close(fast(mine, y, m), f(theirs, y, m))
    torch.testing.assert_close(mine, theirs)
    assert not fast.fallback_reasons, fast.fallback_reasons


def _vocabulary_head(graph_device="cuda:0"):
    """A language model's last product: 1025 logits a row (no multiple of 8), large enough
    (2^30 multiply-adds) to be padded."""
    g = ir.Graph()
    x = g.placeholder("x", "bfloat16", [1024, 1024], device=graph_device, requires_grad=True)
    w = g.placeholder("w", "bfloat16", [1025, 1024], device=graph_device, requires_grad=True)
    logits = g.call("to_dtype", g.call("linear", x, w), "float32")
    g.set_outputs([g.call("sum", g.call("log_softmax", logits, dim=1))])
    return g


def test_a_vocabulary_head_is_padded_before_the_partition(stack):
    parts = stack.partition(_vocabulary_head(), [True, True])
    forward, backward = parts["forward"], parts["backward"]
    saved = [o.meta for o in forward.outputs[1:]]
    # The logits are saved as a view of the padded product: rows 1032 apart, no copy.
    assert any(m["sizes"] == [1024, 1025] and m["strides"] == [1032, 1] for m in saved), forward
    assert "contiguous" not in str(forward) and "scatter" not in str(backward), backward
    fwd = ir.compile(forward, stack, "cuda").explain
    assert "over [1024, 1025]" not in fwd, fwd  # nothing copies the saved logits
    bwd = ir.compile(backward, stack, "cuda").explain
    assert bwd.count("extern") == 2 and "1032" in bwd, bwd  # both grads' products padded


@needs_gpu
def test_a_backward_writes_the_logits_grad_over_the_saved_logits(stack):
    # Not retained, the graph's saved values are given to the backward: the kernel writing
    # the (padded) logits' grad takes the saved logits' memory, so the backward holds one
    # logits-sized buffer, not two. Retained, nothing is given: a second backward reads them.
    torch.manual_seed(0)

    def fn(x, w, targets):
        return F.cross_entropy(F.linear(x, w).float(), targets)

    rows, vocab = 4096, 8191  # logits padded to 8192 a row: 64 MiB of bf16
    x = torch.randn(rows, 256, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = (torch.randn(vocab, 256, device="cuda") * 0.05).to(torch.bfloat16).requires_grad_()
    targets = torch.randint(0, vocab, (rows,), device="cuda")
    fast = kiln.compile(fn, stack=stack)

    def backward(retain: bool):
        loss = fast(x, w, targets)
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        loss.backward(retain_graph=retain)
        torch.cuda.synchronize()
        grads = (x.grad.clone(), w.grad.clone())
        x.grad = w.grad = None
        return torch.cuda.max_memory_allocated() - before, grads, loss

    backward(False)  # compiles; the allocator's pools settle
    given, grads, _ = backward(False)
    kept, kept_grads, loss = backward(True)
    assert not fast.fallback_reasons, fast.fallback_reasons
    logits = rows * 8192 * 2
    assert given <= kept - logits // 2, (given, kept)
    for mine, retained in zip(grads, kept_grads):
        torch.testing.assert_close(mine, retained, rtol=0, atol=0)
    loss.backward()  # the retained graph's saved logits are intact
    torch.testing.assert_close(x.grad, kept_grads[0], rtol=0, atol=0)


@needs_gpu
def test_grads_through_a_padded_vocabulary_head_match_eager(stack):
    torch.manual_seed(0)

    def fn(x, w, targets):
        return F.cross_entropy(F.linear(x, w).float(), targets)

    x = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = (torch.randn(1025, 1024, device="cuda") * 0.05).to(torch.bfloat16).requires_grad_()
    targets = torch.randint(0, 1025, (1024,), device="cuda")
    twins = [t.detach().clone().requires_grad_() for t in (x, w)]
    fast = kiln.compile(fn, stack=stack)
    got = fast(x, w, targets)
    got.backward()
    assert not fast.fallback_reasons, fast.fallback_reasons
    want = fn(*twins, targets)
    want.backward()
    torch.testing.assert_close(got, want, rtol=1e-2, atol=1e-2)
    for mine, theirs in zip((x, w), twins):
        scale = max(theirs.grad.float().abs().max().item(), 1e-6)
        torch.testing.assert_close(mine.grad.float() / scale, theirs.grad.float() / scale, rtol=0, atol=2e-2)
