"""Training with kiln.compile: calls that autograd records run a forward and a backward
artifact (the partitioner service's graphs, compiled by codegen) inside a
torch.autograd.Function; results, grads, input mutations and a whole training run
equal eager's; a failing partitioner makes calls run eagerly, the next call compiles."""
import copy
import gc
import inspect
import math
import os
import signal
import time
import warnings
import weakref

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

import kiln
from kiln import _compile, _train, ir


def trained(fn) -> bool:
    """Whether every entry of a compiled function trains through kiln (none runs eagerly)."""
    from kiln import _train
    cache = fn.cache
    return bool(cache.entries) and all(isinstance(e.value, _train.TrainingRunner) for e in cache.entries)


def grads_of(*tensors):
    return [t.grad.clone() for t in tensors]


# ---- the partitioner service ---------------------------------------------------------

def mlp_graph(requires_grad=True):
    g = ir.Graph()
    x = g.placeholder("x", "float32", [4, 8], requires_grad=requires_grad)
    w1 = g.placeholder("w1", "float32", [8, 16], requires_grad=requires_grad)
    w2 = g.placeholder("w2", "float32", [16, 3], requires_grad=requires_grad)
    g.set_outputs([g.call("matmul", g.call("gelu", g.call("matmul", x, w1)), w2)])
    return g


def test_partition_verb_gives_graphs_that_compute_eager_grads(stack):
    p = stack.partition(mlp_graph(), [True, True, True], memory_budget=0.0)
    assert p["user_outputs"] == 1 and p["mutated_inputs"] == [] and p["tangent_of"] == [0]
    assert p["grad_of"] == [0, 1, 2] and p["saved"] >= 3
    x, w1, w2 = (torch.randn(*s, requires_grad=True) for s in ((4, 8), (8, 16), (16, 3)))
    y = F.gelu(x @ w1) @ w2
    t = torch.randn(4, 3)
    y.backward(t)
    fw = ir.compile(p["forward"], stack)(x.detach(), w1.detach(), w2.detach())
    torch.testing.assert_close(fw[0], y.detach())
    grads = ir.compile(p["backward"], stack)(*fw[1:], t)
    for got, want in zip(grads, (x.grad, w1.grad, w2.grad)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_partition_verb_answers_typed_errors(stack):
    with pytest.raises(kiln.KilnError) as e:
        stack.partition(mlp_graph(), [True, False, False, True])  # a mask of the wrong length
    assert e.value.code == "invalid_argument" and e.value.service == "partitioner"
    with pytest.raises(kiln.KilnError) as e:
        stack.partition(mlp_graph(), [False, False, False])  # nothing to differentiate
    assert e.value.code == "invalid_argument"
    g = ir.Graph()
    i = g.placeholder("i", "int64", [4])
    g.set_outputs([g.call("mul", i, 2)])
    with pytest.raises(kiln.KilnError) as e:
        stack.partition(g, [True])  # an integer input cannot require grad
    assert e.value.code == "invalid_argument"
    assert stack.ping("partitioner", b"alive") == b"alive"  # the worker lives on


# ---- functions and modules -------------------------------------------------------------

def test_a_function_of_inputs_that_require_grad_trains_compiled(stack):
    def f(x, w, b):
        return (F.gelu(x @ w + b) * 2).sum(dim=-1)

    fast = kiln.compile(f, stack=stack)
    args = [torch.randn(5, 8, requires_grad=True), torch.randn(8, 6, requires_grad=True), torch.randn(6)]
    eager_args = [a.detach().clone().requires_grad_(a.requires_grad) for a in args]
    out, want = fast(*args), f(*eager_args)
    torch.testing.assert_close(out, want)
    assert out.requires_grad and out.grad_fn is not None
    t = torch.randn(5)
    out.backward(t)
    want.backward(t)
    torch.testing.assert_close(args[0].grad, eager_args[0].grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(args[1].grad, eager_args[1].grad, rtol=1e-4, atol=1e-5)
    assert args[2].grad is None  # it needs no grad
    assert trained(fast), kiln.explain(fast)


def test_grads_of_dynamic_inputs_reshaped_to_constants(stack):
    """The backward takes an input's symbolic sizes back (the grad of a reshape to constants)
    where no saved tensor has them: the forward saves the symbols themselves."""
    def f(x, w):
        return (x * 2).reshape(3, 4) @ w

    fast = kiln.compile(f, stack=stack)
    for shape, ws in [((12,), (4, 2)), ((2, 6), (4, 3)), ((4, 3), (4, 5)), ((6, 2), (4, 1))]:
        x, w = torch.randn(*shape, requires_grad=True), torch.randn(*ws, requires_grad=True)
        ex, ew = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
        fast(x, w).sin().sum().backward()
        f(ex, ew).sin().sum().backward()
        torch.testing.assert_close(x.grad, ex.grad)
        torch.testing.assert_close(w.grad, ew.grad)
    assert trained(fast), kiln.explain(fast)


def test_a_cnn_trains_compiled_with_eagers_grads(stack):
    """Convolutions, pooling and batch norm in training: the grads of every parameter (max
    pooling's to the first maximum of each window, as torch's)."""
    class SmallCNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([
                nn.Conv2d(3, 6, 3, padding=1), nn.BatchNorm2d(6), nn.ReLU(), nn.MaxPool2d(2),
                nn.Conv2d(6, 8, 3, stride=2, groups=2), nn.ReLU(), nn.AvgPool2d(2, ceil_mode=True),
                nn.ConvTranspose2d(8, 4, 2, stride=2), nn.AdaptiveMaxPool2d(1), nn.Flatten(), nn.Linear(4, 3)])

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return x

    torch.manual_seed(0)
    model = SmallCNN()
    reference = copy.deepcopy(model)
    fast = kiln.compile(model, stack=stack)
    x = torch.randn(4, 3, 14, 14)
    x[:, :, :4] = 0  # ties: zeros after the ReLU share windows
    fast(x).square().mean().backward()
    reference(x).square().mean().backward()
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=name)
    assert trained(fast._compiled_forward), kiln.explain(fast)


def test_cumulative_sums_and_products_train(stack):
    """cumsum and cumprod (a zero among the factors) give eager's values and grads."""
    def f(x):
        return x.cumsum(0).sin().sum() + torch.cumprod(x, dim=1).sum() + x.T.cumsum(-1).square().mean()

    x = torch.randn(4, 5)
    x[1, 2] = 0
    x.requires_grad_()
    ex = x.detach().clone().requires_grad_()
    fast = kiln.compile(f, stack=stack, fullgraph=True)
    fast(x).backward()
    f(ex).backward()
    torch.testing.assert_close(x.grad, ex.grad)
    assert trained(fast), kiln.explain(fast)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 32)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


def test_parameter_grads_of_a_compiled_module_equal_eagers(stack):
    torch.manual_seed(0)
    model = MLP()
    reference = MLP()
    reference.load_state_dict(model.state_dict())
    fast = kiln.compile(model, stack=stack)
    x = torch.randn(3, 8)
    fast(x).pow(2).mean().backward()
    reference(x).pow(2).mean().backward()
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6, msg=name)
    assert trained(fast._compiled_forward), kiln.explain(fast)
    assert not fast._compiled_forward.fallback_reasons


def test_retain_graph_and_double_backward(stack):
    def f(x):
        return (x.sin() * x).sum()

    fast = kiln.compile(f, stack=stack)
    x = torch.randn(6, requires_grad=True)
    out = fast(x)
    out.backward(retain_graph=True)
    first = x.grad.clone()
    out.backward()  # retained: runs the backward artifact again
    torch.testing.assert_close(x.grad, 2 * first)
    (g,) = torch.autograd.grad(fast(x), x, create_graph=True)
    with pytest.raises(RuntimeError):  # the backward is not differentiable: a clear error
        g.sum().backward()


def test_a_second_backward_without_retain_graph_is_torchs_error(stack):
    def f(x):
        return (x * x).sum()

    fast = kiln.compile(f, stack=stack)
    x = torch.randn(4, requires_grad=True)
    out = fast(x)
    out.backward()
    with pytest.raises(RuntimeError, match="second time|freed"):
        out.backward()


def test_no_grad_calls_still_run_the_inference_entry(stack):
    model = MLP()
    fast = kiln.compile(model, stack=stack)
    x = torch.randn(2, 8)
    with torch.no_grad():
        torch.testing.assert_close(fast(x), model(x))
    out = fast(x)
    assert out.requires_grad
    torch.testing.assert_close(out, model(x))


def test_a_killed_partitioner_runs_eagerly_then_the_next_call_compiles(stack):
    def f(x, w):
        return torch.tanh(x @ w).sum()

    pid = next(w["pid"] for s in kiln.status(stack.run_dir)["services"] if s["name"] == "partitioner"
               for w in s["workers"])
    os.kill(pid, signal.SIGKILL)
    fast = kiln.compile(f, stack=stack)
    x, w = torch.randn(3, 4), torch.randn(4, 5, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fast(x, w).backward()  # compiled after a retry, or eager: never an error
        torch.testing.assert_close(w.grad, torch.autograd.grad(f(x, w), w)[0])
        deadline = time.time() + 30
        while not fast.cache.entries and time.time() < deadline:
            time.sleep(0.2)
            fast(x, w)
    assert trained(fast), kiln.explain(fast)
    w.grad = None
    fast(x, w).backward()
    torch.testing.assert_close(w.grad, torch.autograd.grad(f(x, w), w)[0])


# ---- functionalization ---------------------------------------------------------------------

def run_both(stack, f, make):
    """f compiled and eager, each on its own arguments from make()."""
    fast = kiln.compile(f, stack=stack)
    a, b = make(), make()
    got, want = fast(*a), f(*b)
    return fast, a, b, got, want


def test_input_mutations_are_copied_back_as_eager(stack):
    def f(x, w, counter):
        counter.add_(1)            # an input that needs no grad, mutated
        x.mul_(2)                  # mutated, then read by an op whose backward needs it
        return (x @ w).relu().sum() + counter.sum()

    torch.manual_seed(1)
    data = (torch.randn(3, 4), torch.randn(4, 2), torch.zeros(2))
    make = lambda: (data[0].clone(), data[1].clone().requires_grad_(), data[2].clone())
    fast, a, b, got, want = run_both(stack, f, make)
    torch.testing.assert_close(got, want)
    got.backward()
    want.backward()
    torch.testing.assert_close(a[0], b[0])
    torch.testing.assert_close(a[2], b[2])
    torch.testing.assert_close(a[1].grad, b[1].grad)
    assert trained(fast), kiln.explain(fast)


def test_mutations_through_views_of_inputs(stack):
    def f(x, w):
        row = x[1]                 # a view of an input
        row.add_(10)               # writes x
        t = x.t()
        t[0].mul_(3)               # writes x's first column through a transposed view
        return (x @ w).sum(), row * 1

    data = (torch.randn(3, 4), torch.randn(4, 2))
    make = lambda: (data[0].clone(), data[1].clone().requires_grad_())
    fast, a, b, got, want = run_both(stack, f, make)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(a[0], b[0])
    got[0].backward()
    want[0].backward()
    torch.testing.assert_close(a[1].grad, b[1].grad)
    assert trained(fast), kiln.explain(fast)


def test_in_place_ops_on_intermediates(stack):
    def f(x, w):
        h = x @ w
        h.mul_(2)
        h.add_(1)
        t = h.tanh()
        h.sigmoid_()
        return (t * h).sum()

    data = (torch.randn(3, 4), torch.randn(4, 2))
    make = lambda: (data[0].clone().requires_grad_(), data[1].clone().requires_grad_())
    fast, a, b, got, want = run_both(stack, f, make)
    torch.testing.assert_close(got, want)
    got.backward()
    want.backward()
    torch.testing.assert_close(a[0].grad, b[0].grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(a[1].grad, b[1].grad, rtol=1e-4, atol=1e-5)
    assert trained(fast), kiln.explain(fast)


def test_outputs_that_alias_inputs(stack):
    def f(x, w):
        return x.view(2, 6), x @ w

    data = (torch.randn(3, 4), torch.randn(4, 2))
    make = lambda: (data[0].clone(), data[1].clone().requires_grad_())
    fast, a, b, got, want = run_both(stack, f, make)
    torch.testing.assert_close(got, want)
    assert got[0].data_ptr() == a[0].data_ptr()  # a view of the input, as eager's
    got[1].sum().backward()
    want[1].sum().backward()
    torch.testing.assert_close(a[1].grad, b[1].grad)


def test_a_mutated_leaf_that_requires_grad_runs_eagerly(stack):
    def f(x):
        x.add_(1)
        return x.sum()

    fast = kiln.compile(f, stack=stack)
    with pytest.raises(RuntimeError, match="leaf Variable"):  # eager's own error
        fast(torch.randn(3, requires_grad=True))


# ---- training end to end: nanoGPT-style, 2 layers, AdamW ------------------------------------

class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.n_head, self.n_embd = n_head, n_embd
        self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size))
                             .view(1, 1, block_size, block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLPBlock(nn.Module):
    def __init__(self, n_embd):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, n_embd, n_head, block_size, dropout=0.0):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, block_size)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = MLPBlock(n_embd)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        x = x + self.drop(self.attn(self.ln_1(x)))
        return x + self.drop(self.mlp(self.ln_2(x)))


class GPT(nn.Module):
    def __init__(self, vocab_size=65, block_size=16, n_layer=2, n_head=4, n_embd=32, dropout=0.0):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.drop = nn.Dropout(dropout)
        self.h = nn.ModuleList([Block(n_embd, n_head, block_size, dropout) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.wte.weight = self.lm_head.weight  # weight tying, as nanoGPT
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, idx, targets):
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss


def train(model, forward, idx, targets, steps=20):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    losses, first_grads = [], None
    for step in range(steps):
        opt.zero_grad(set_to_none=True)
        _, loss = forward(idx, targets)
        loss.backward()
        if step == 0:
            first_grads = {n: p.grad.clone() for n, p in model.named_parameters()}
        opt.step()
        losses.append(loss.item())
    return losses, first_grads


def test_nanogpt_trains_as_eager(stack):
    torch.manual_seed(0)
    eager_model = GPT()
    kiln_model = GPT()
    kiln_model.load_state_dict(eager_model.state_dict())
    idx = torch.randint(0, 65, (4, 16))
    targets = torch.randint(0, 65, (4, 16))
    fast = kiln.compile(kiln_model, stack=stack)
    eager_losses, eager_grads = train(eager_model, eager_model, idx, targets)
    kiln_losses, kiln_grads = train(kiln_model, fast, idx, targets)
    print("step  eager      kiln")
    for step, (e, k) in enumerate(zip(eager_losses, kiln_losses)):
        print(f"{step:4d}  {e:.6f}  {k:.6f}")
    assert not fast._compiled_forward.fallback_reasons, fast._compiled_forward.fallback_reasons
    assert trained(fast._compiled_forward), kiln.explain(fast)
    for name, g in eager_grads.items():
        torch.testing.assert_close(kiln_grads[name], g, rtol=1e-3, atol=1e-5, msg=name)
    torch.testing.assert_close(torch.tensor(kiln_losses), torch.tensor(eager_losses), rtol=1e-3, atol=1e-4)
    assert kiln_losses[-1] < kiln_losses[0] - 1.0  # it learned the batch


# A Parameter reached by two paths (nanoGPT's tied wte and lm_head weights) is one input of
# the traced graph, each path guarded to be that object: one grad, its two parts summed in
# the backward graph. Untying the weights traces again: two inputs, a grad each, as eager.
def test_tied_weights_are_one_input_and_untying_traces_again(stack):
    torch.manual_seed(0)
    model, reference = GPT(), GPT()
    reference.load_state_dict(model.state_dict())
    idx, targets = torch.randint(0, 65, (4, 16)), torch.randint(0, 65, (4, 16))
    fast = kiln.compile(model, stack=stack)

    def grads_match() -> int:
        model.zero_grad(set_to_none=True)
        reference.zero_grad(set_to_none=True)
        fast(idx, targets)[1].backward()
        reference(idx, targets)[1].backward()
        cache = fast._compiled_forward.cache  # GPT.forward's: other tests' entries too
        runner = cache.entries[-1].value
        assert isinstance(runner, _train.TrainingRunner), kiln.explain(fast)
        assert len(runner.grad_of) == len(list(model.parameters())), runner.grad_of  # one per Parameter
        for (name, p), (_, r) in zip(model.named_parameters(), reference.named_parameters()):
            torch.testing.assert_close(p.grad, r.grad, rtol=1e-3, atol=1e-5, msg=name)
        return len(cache.entries)

    from kiln import _train
    tied = grads_match()
    assert model.wte.weight is model.lm_head.weight
    assert grads_match() == tied  # the same entry
    for m in (model, reference):
        m.lm_head.weight = nn.Parameter(m.lm_head.weight.detach().clone())
    assert len(list(model.parameters())) == len(list(reference.parameters()))
    assert grads_match() == tied + 1  # an identity guard failed: traced again, untied


def test_nanogpt_with_dropout_trains_compiled_and_evaluates_as_eager(stack):
    torch.manual_seed(0)
    model = GPT(dropout=0.2)
    reference = GPT(dropout=0.2)
    reference.load_state_dict(model.state_dict())
    idx = torch.randint(0, 65, (4, 16))
    targets = torch.randint(0, 65, (4, 16))
    fast = kiln.compile(model, stack=stack)
    losses, _ = train(model, fast, idx, targets, steps=15)
    assert not fast._compiled_forward.fallback_reasons, fast._compiled_forward.fallback_reasons
    from kiln import _train  # the latest entry: GPT.forward's code has the other tests' entries too
    assert isinstance(fast._compiled_forward.cache.entries[-1].value, _train.TrainingRunner), kiln.explain(fast)
    assert losses[-1] < losses[0] - 1.0, losses  # it learned the batch through its masks
    torch.manual_seed(1)  # the masks: fresh each step, repeated under the same seed
    first = fast(idx, targets)[1].item()
    torch.manual_seed(1)
    assert fast(idx, targets)[1].item() == first != fast(idx, targets)[1].item()
    model.eval()  # no dropout: as eager, with the trained weights
    reference.load_state_dict(model.state_dict())
    reference.eval()
    torch.testing.assert_close(fast(idx, targets)[1], reference(idx, targets)[1], rtol=1e-4, atol=1e-5)


def test_detach_and_no_grad_regions_stop_grads_as_eager(stack):
    def f(x, w, v):
        h = x @ w
        centered = h - h.detach().mean(dim=0)  # the mean is a constant to autograd
        with torch.no_grad():
            scale = (v * 2).abs().max() + 1  # reads v, which requires grad: no grad through it
        target = (h * 3).detach()
        return ((centered / scale) - target * 0.1).square().sum() + (v * v).sum()

    fast = kiln.compile(f, stack=stack)
    args = [torch.randn(6, 4), torch.randn(4, 5, requires_grad=True), torch.randn(5, requires_grad=True)]
    eager_args = [a.detach().clone().requires_grad_(a.requires_grad) for a in args]
    out, want = fast(*args), f(*eager_args)
    torch.testing.assert_close(out, want)
    out.backward()
    want.backward()
    for got, expected in zip(args[1:], eager_args[1:]):
        torch.testing.assert_close(got.grad, expected.grad, rtol=1e-4, atol=1e-5)
    assert trained(fast) and not fast.fallback_reasons, kiln.explain(fast)
    # what eager says of requires_grad, the compiled call says too; .data is detach()'s
    g = kiln.compile(lambda w: (w.detach() * 2, w * 2, w.data + 1, w.is_nested), stack=stack)
    a, b, c, nested = g(args[1])
    assert not a.requires_grad and b.requires_grad and not c.requires_grad and nested is False
    torch.testing.assert_close(c, args[1].detach() + 1)


class Checkpointed(nn.Module):
    """Two blocks, each run through torch.utils.checkpoint (activation checkpointing)."""

    def __init__(self, use_reentrant):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 8))
                                     for _ in range(2)])
        self.use_reentrant = use_reentrant

    def forward(self, x):
        for block in self.blocks:
            x = x + checkpoint(block, x, use_reentrant=self.use_reentrant)
        return x.square().mean()


@pytest.mark.parametrize("use_reentrant", [False, True])
def test_checkpointed_blocks_train_compiled_with_eagers_grads(stack, use_reentrant):
    torch.manual_seed(0)
    model, reference = Checkpointed(use_reentrant), Checkpointed(use_reentrant)
    reference.load_state_dict(model.state_dict())
    fast = kiln.compile(model, stack=stack)
    x = torch.randn(4, 8, requires_grad=True)
    x_eager = x.detach().clone().requires_grad_()
    fast(x).backward()
    reference(x_eager).backward()
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6, msg=name)
    torch.testing.assert_close(x.grad, x_eager.grad, rtol=1e-4, atol=1e-6)
    assert not fast._compiled_forward.fallback_reasons, fast._compiled_forward.fallback_reasons


def test_reentrant_checkpoint_of_inputs_that_need_no_grad_gives_no_grad_as_eager(stack):
    w = torch.randn(8, 8, requires_grad=True)

    def f(x):
        return checkpoint(lambda t: t @ w, x, use_reentrant=True) + checkpoint(lambda t: t @ w, x,
                                                                               use_reentrant=False)

    fast = kiln.compile(f, stack=stack)
    x = torch.randn(3, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's own: no input of the reentrant one requires grad
        got, want = fast(x), f(x)
    torch.testing.assert_close(got, want)
    got.sum().backward()
    torch.testing.assert_close(w.grad, x.t() @ torch.ones(3, 8))  # the non-reentrant one's alone
    assert not fast.fallback_reasons, fast.fallback_reasons


def test_an_in_place_write_under_no_grad_into_a_tensor_that_requires_grad_runs_eagerly(stack):
    def f(x, w):
        y = (x @ w).sum()
        with torch.no_grad():
            w.mul_(0.5)
        return y

    fast = kiln.compile(f, stack=stack)
    w = torch.randn(4, 3, requires_grad=True)
    before = w.detach().clone()
    fast(torch.randn(2, 4), w).backward()
    torch.testing.assert_close(w.detach(), before * 0.5)
    assert any("in-place write under torch.no_grad()" in r for r in fast.fallback_reasons), fast.fallback_reasons


def test_dropout_in_training_draws_a_fresh_mask_each_call_and_its_backward_replays_it(stack):
    def f(x, w):
        return F.dropout(x @ w, p=0.25, training=True)

    fast = kiln.compile(f, stack=stack)
    x, w = torch.randn(64, 32), torch.randn(32, 48, requires_grad=True)
    y = fast(x, w)
    h, kept = (x @ w).detach(), y.detach() != 0
    torch.testing.assert_close(y.detach()[kept], h[kept] / 0.75)  # kept: scaled by 1 / (1 - p)
    assert 0.18 < 1 - kept.float().mean().item() < 0.32  # about p of them dropped
    t = torch.randn_like(y)
    y.backward(t)
    torch.testing.assert_close(w.grad, x.t() @ (t * kept / 0.75), rtol=1e-4, atol=1e-5)  # the same mask
    assert trained(fast), kiln.explain(fast)
    with torch.no_grad():  # the inference entry draws too
        torch.manual_seed(5)
        a = fast(x, w)
        torch.manual_seed(5)
        b = fast(x, w)
        c = fast(x, w)
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert len(fast.cache.entries) == 2  # one training entry, one inference entry: no recompiles


def test_an_input_saved_for_a_recompute_keeps_its_value_when_mutated(stack):
    def f(x, w):
        h = x.sin()                # the partition may save x and recompute sin(x) in the backward
        x.add_(1)
        return (h * w).sum()

    data = (torch.randn(5), torch.randn(5))
    make = lambda: (data[0].clone(), data[1].clone().requires_grad_())
    fast, a, b, got, want = run_both(stack, f, make)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(a[0], b[0])
    got.backward()
    want.backward()
    torch.testing.assert_close(a[1].grad, b[1].grad)
    assert trained(fast), kiln.explain(fast)


def test_saved_values_stay_the_backwards_inputs_and_autograd_holds_their_memory(stack):
    def f(x, w):
        return ((x @ w).tanh() * x.sum()).sum()  # saves the inputs and a computed value

    fast = kiln.compile(f, stack=stack)
    x, w = torch.randn(4, 3, requires_grad=True), torch.randn(3, 5, requires_grad=True)
    out = fast(x, w)
    node = out.grad_fn
    kept = node.kept.inputs  # what the backward reads: never made torch tensors
    saved = node.saved_tensors  # autograd holds the memory: the run's bytes and the inputs
    inputs = {ir.storage_address(x), ir.storage_address(w)}
    assert len(kept) >= 3 and saved
    runs = [t for t in saved if ir.storage_address(t) not in inputs]  # the run's own memory
    assert runs and len(runs) < len(saved), saved
    allocations = [weakref.ref(t) for t in runs]
    del saved, runs
    out.backward()
    torch.testing.assert_close(x.grad, torch.autograd.grad(f(x, w), x)[0])
    with pytest.raises(RuntimeError, match="freed|second time"):  # released after the backward
        node.saved_tensors
    gc.collect()  # `out` and its node live on (a kept loss), the saved memory does not
    assert all(a() is None for a in allocations)

    out = fast(x, w)
    with torch.no_grad():
        w.mul_(2)  # an input the backward reads, changed in place: torch's error, as eager's
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.backward()


def test_the_memory_budget_option_trades_saved_values_for_recompute(stack):
    def f(x, w1, w2):
        return (F.gelu(torch.tanh(x @ w1) * 2) @ w2).sum()

    saved = {}
    for budget in (0.0, 1.0):
        fast = kiln.compile(f, options={"memory_budget": budget}, stack=stack)
        x, w1, w2 = (torch.randn(*s, requires_grad=True) for s in ((4, 8), (8, 16), (16, 3)))
        fast(x, w1, w2).backward()
        want = torch.autograd.grad(f(x, w1, w2), (x, w1, w2))
        for got, expected in zip((x.grad, w1.grad, w2.grad), want):
            torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
        (entry,) = fast.cache.entries
        saved[budget] = (entry.value.parts["saved"], entry.value.parts["recomputed"])
    assert saved[0.0][0] < saved[1.0][0] and saved[0.0][1] > saved[1.0][1] == 0, saved
    with pytest.raises(ValueError, match="memory_budget"):
        kiln.compile(f, options={"memory_budget": 2})
    with pytest.raises(ValueError, match="unknown option"):
        kiln.compile(f, options={"triton.cudagraphs": True})


def test_indexing_by_an_int_tensor_trains_as_eager(stack):
    # w[idx]: index_select with negative indices wrapped; repeated rows add up their grads
    def f(w, idx):
        return (w[idx] * 2).sum(0)

    fast = kiln.compile(f, stack=stack)
    w = torch.randn(6, 4, requires_grad=True)
    ref = w.detach().clone().requires_grad_()
    idx = torch.tensor([0, 5, -1, 5])
    got, want = fast(w, idx), f(ref, idx)
    torch.testing.assert_close(got, want)
    got.square().sum().backward()
    want.square().sum().backward()
    torch.testing.assert_close(w.grad, ref.grad)
    assert not fast.fallback_reasons, fast.fallback_reasons
    with pytest.raises(kiln.KilnError, match="out of range"):  # eager: IndexError
        fast(w, torch.tensor([0, 6, 1, 2]))


def test_an_item_assignment_trains_as_eager(stack):
    # y[:, 0] = 0 cuts column 0's grad; z[1:] = y[:-1] * 3 routes rows
    def f(x):
        y = x * 2
        y[:, 0] = 0
        z = torch.zeros_like(y)
        z[1:] = y[:-1] * 3
        return (z * y).sum()

    fast = kiln.compile(f, stack=stack)
    x = torch.randn(4, 3, requires_grad=True)
    ref = x.detach().clone().requires_grad_()
    fast(x).backward()
    f(ref).backward()
    torch.testing.assert_close(x.grad, ref.grad)
    assert not fast.fallback_reasons, fast.fallback_reasons


# ---- nn.MultiheadAttention and the Transformer layers built on it ----------------------------

def _twins(make):
    torch.manual_seed(0)
    model = make()
    reference = make()
    reference.load_state_dict(model.state_dict())
    return model, reference


def _assert_same_grads(model, reference):
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=name)


def _served_by_training(compiled_module, *args, **kwargs) -> bool:
    """Whether kiln's training entry (not eager: a fallback, a full cache) serves this call."""
    entry = compiled_module._compiled_forward.cache.lookup((compiled_module._orig_mod,) + args, kwargs)
    return entry is not None and isinstance(entry.value, _train.TrainingRunner)


# Each case is an entry of MultiheadAttention.forward's cache (8 at most, shared by the cases):
# (batch_first, kdim, query's sizes, key's, the call's keywords).
MHA_CASES = {
    "self": (True, None, (3, 5), (3, 5), {}),
    "sequence_first": (False, None, (5, 3), (5, 3), {}),
    "bool_causal_mask": (True, None, (3, 5), (3, 5), {"attn_mask": "bool"}),
    "float_mask_per_head": (True, None, (3, 5), (3, 5), {"attn_mask": "float3d"}),
    "padding_no_weights": (True, None, (3, 5), (3, 5), {"key_padding_mask": "bool", "need_weights": False}),
    "unbatched_per_head_weights": (True, None, (5,), (5,), {"average_attn_weights": False}),
    "cross_kdim": (True, 12, (3, 5), (3, 7), {}),
    # is_causal hints that the mask is causal; without weights or a padding mask torch applies
    # the causal mask in its place, so a hint that lies (a mask of zeros) still masks causally
    "causal_hint_over_the_mask": (True, None, (3, 5), (3, 5),
                                  {"attn_mask": "zeros", "is_causal": True, "need_weights": False}),
}


@pytest.mark.parametrize("case", MHA_CASES)
def test_multihead_attention_trains_as_eager(stack, case):
    batch_first, kdim, q_sizes, k_sizes, keywords = MHA_CASES[case]
    model, reference = _twins(lambda: nn.MultiheadAttention(16, 4, batch_first=batch_first, kdim=kdim, vdim=kdim))
    fast = kiln.compile(model, stack=stack)
    q = torch.randn(*q_sizes, 16)
    k = torch.randn(*k_sizes, kdim or 16) if kdim or k_sizes != q_sizes else q
    sequence_dim = 0 if q.dim() == 2 or not batch_first else 1
    length, source = q.shape[sequence_dim], k.shape[sequence_dim]
    kwargs = {}
    for name, kind in keywords.items():
        if kind == "bool":
            kwargs[name] = (torch.triu(torch.ones(length, source, dtype=torch.bool), 1) if name == "attn_mask" else
                            torch.tensor([[False] * source, [False] * (source - 2) + [True] * 2,
                                          [True] + [False] * (source - 1)]))
        elif kind == "float3d":
            kwargs[name] = torch.randn(3 * 4, length, source)
        elif kind == "zeros":
            kwargs[name] = torch.zeros(length, source)
        else:
            kwargs[name] = kind
    out, weights = fast(q, k, k, **kwargs)
    assert _served_by_training(fast, q, k, k, **kwargs), kiln.explain(fast)
    want, want_weights = reference(q, k, k, **kwargs)
    torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-5)
    assert (weights is None) == (want_weights is None)
    if weights is not None:
        torch.testing.assert_close(weights, want_weights, rtol=1e-4, atol=1e-5)
    (out.square().sum() + (weights.sum() if weights is not None else 0)).backward()
    (want.square().sum() + (want_weights.sum() if want_weights is not None else 0)).backward()
    _assert_same_grads(model, reference)


class Attend(nn.Module):
    """nn.MultiheadAttention called by a model's forward (the tracer's own nn module path)."""

    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(16, 4, batch_first=True)
        self.norm = nn.LayerNorm(16)

    def forward(self, x, padding):
        y, weights = self.attn(x, x, x, key_padding_mask=padding)
        return self.norm(x + y), weights


def test_multihead_attention_inside_a_model_trains_as_eager(stack):
    model, reference = _twins(Attend)
    fast = kiln.compile(model, stack=stack)
    x = torch.randn(2, 6, 16)
    padding = torch.zeros(2, 6)
    padding[1, 4:] = float("-inf")  # a float mask: added to the scores
    (out, weights), (want, want_weights) = fast(x, padding), reference(x, padding)
    assert _served_by_training(fast, x, padding), kiln.explain(fast)
    torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(weights, want_weights, rtol=1e-4, atol=1e-5)
    (out.square().sum() + weights.sum()).backward()
    (want.square().sum() + want_weights.sum()).backward()
    _assert_same_grads(model, reference)


def test_transformer_encoder_layers_train_compiled(stack):
    def make(dropout):
        return nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 4, dim_feedforward=32, dropout=dropout,
                                                                batch_first=True), num_layers=2)
    model, reference = _twins(lambda: make(0.0))
    fast = kiln.compile(model, stack=stack)
    x = torch.randn(3, 6, 16)
    causal = torch.triu(torch.full((6, 6), float("-inf")), 1)
    # torch 2.x's TransformerEncoder compares a mask given without an is_causal hint with the
    # causal mask: a branch on the mask's values, a graph break
    hinted = "is_causal" in inspect.signature(nn.TransformerEncoder.forward).parameters
    masks = {"mask": causal, "is_causal": True} if hinted else {"mask": causal}
    torch.testing.assert_close(fast(x, **masks), reference(x, **masks), rtol=1e-4, atol=1e-5)
    fast(x, **masks).square().sum().backward()
    assert _served_by_training(fast, x, **masks), kiln.explain(fast)
    reference(x, **masks).square().sum().backward()
    _assert_same_grads(model, reference)
    if hinted:
        torch.testing.assert_close(fast(x, mask=causal), reference(x, mask=causal), rtol=1e-4, atol=1e-5)
        reasons = fast._compiled_forward.graph_breaks
        assert any("a branch on a tensor's value" in r for r in reasons), reasons
    # with dropout, each step draws new masks: it trains through them, compiled
    noisy = make(0.1)
    fast = kiln.compile(noisy, stack=stack)
    opt = torch.optim.SGD(noisy.parameters(), lr=0.05)
    target = torch.randn(3, 6, 16)
    losses = []
    for _ in range(10):
        opt.zero_grad()
        loss = (fast(x) - target).square().mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0], losses
    assert _served_by_training(fast, x), kiln.explain(fast)


# ---- batch and group norm --------------------------------------------------------------------

class Layers(nn.Module):
    """Layers in order (nn.Sequential's forward, but a code object of its own: the guards'
    cache of nn.Sequential.forward is shared by every test that compiles one)."""

    def __init__(self, *layers):
        super().__init__()
        self.layers = nn.ModuleList(layers)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


@pytest.mark.parametrize("make,shape", [
    (lambda: Layers(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 4)), (12, 8)),
    (lambda: Layers(nn.BatchNorm2d(3, momentum=0.3), nn.Tanh()), (4, 3, 5, 6)),
    (lambda: Layers(nn.Linear(6, 8), nn.GroupNorm(4, 8), nn.SiLU()), (5, 6)),
    (lambda: Layers(nn.Linear(7, 7), nn.GroupNorm(2, 6, affine=False)), (3, 6, 7)),
], ids=["batch_norm_1d", "batch_norm_2d", "group_norm", "group_norm_no_affine"])
def test_batch_and_group_norm_train_and_evaluate_as_eager(stack, make, shape):
    model, reference = _twins(make)
    fast = kiln.compile(model, stack=stack)
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, reference)]
    for step in range(3):
        x = torch.randn(*shape)
        for m, f, opt in zip((model, reference), (fast, reference), optimizers):
            opt.zero_grad()
            f(x).square().mean().backward()
            opt.step()
        assert _served_by_training(fast, x), kiln.explain(fast)
        for (name, p), q in zip(model.named_parameters(), reference.parameters()):
            torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5, msg=name)
        for (name, b), c in zip(model.named_buffers(), reference.buffers()):  # running stats, batch count
            torch.testing.assert_close(b, c, rtol=1e-4, atol=1e-5, msg=name)
    assert not fast._compiled_forward.fallback_reasons, fast._compiled_forward.fallback_reasons
    if not any(isinstance(layer, nn.BatchNorm1d | nn.BatchNorm2d) for layer in model.layers):
        return  # group norm computes the same in eval (and Layers' cache keeps its 8 entries for the rest)
    model.eval()
    reference.eval()
    x = torch.randn(*shape)
    with torch.no_grad():  # the running stats normalise, compiled
        torch.testing.assert_close(fast(x), reference(x), rtol=1e-4, atol=1e-5)
        entry = fast._compiled_forward.cache.lookup((model, x), {})
    assert entry is not None and isinstance(entry.value, _compile._Runner), kiln.explain(fast)


def _sdpa_math(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None):
    """F.scaled_dot_product_attention as its math path."""
    scores = query @ key.transpose(-2, -1) * (scale or query.size(-1) ** -0.5)
    if is_causal:
        scores = scores.masked_fill(torch.ones(scores.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    weights = F.dropout(torch.softmax(scores, dim=-1), dropout_p)
    return weights @ value


@pytest.mark.parametrize("is_causal", [False, True])
def test_attention_with_dropout_trains_through_its_math(stack, monkeypatch, is_causal):
    if not hasattr(F, "scaled_dot_product_attention"):
        monkeypatch.setattr(F, "scaled_dot_product_attention", _sdpa_math, raising=False)
    p = 0.3

    def f(q, k, v):  # nanoGPT's call in training
        return F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=is_causal)

    fast = kiln.compile(f, stack=stack)
    q, k = torch.randn(2, 3, 6, 8, requires_grad=True), torch.randn(2, 3, 6, 8, requires_grad=True)
    v = torch.eye(6).expand(2, 3, 6, 6).contiguous().requires_grad_()  # the output is the dropped weights
    out = fast(q, k, v)
    scores = q.detach() @ k.detach().transpose(-2, -1) / 8 ** 0.5
    if is_causal:
        scores = scores.masked_fill(torch.ones(6, 6, dtype=torch.bool).triu(1), float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    kept = out.detach() != 0
    torch.testing.assert_close(out.detach()[kept], weights[kept] / (1 - p))  # kept: scaled by 1 / (1 - p)
    dropped = 1 - kept[weights > 0].float().mean().item()
    assert 0.15 < dropped < 0.45, dropped
    out.sum().backward()
    entry = fast.cache.lookup((q, k, v), {})  # the cache is f's code's: the other case's entry is there too
    assert isinstance(entry.value, _train.TrainingRunner) and not fast.fallback_reasons, kiln.explain(fast)
    # the backward replays the mask: v's grad is the dropped weights summed over rows
    torch.testing.assert_close(v.grad, (out.detach().transpose(-2, -1) @ torch.ones(2, 3, 6, 6)), rtol=1e-5,
                               atol=1e-6)


@pytest.mark.parametrize("mask_kind", ["bool", "float"])
def test_masked_attention_trains_through_flash_attentions_rule(stack, monkeypatch, mask_kind):
    # A mask that needs no grad (a key padding mask): attention stays whole and its grads come
    # from the pieces of flash attention's backward, given the mask too; equal to eager's.
    if not hasattr(F, "scaled_dot_product_attention"):
        monkeypatch.setattr(F, "scaled_dot_product_attention", _sdpa_masked_math, raising=False)

    def f(q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 5, 8, dtype=torch.float64, requires_grad=True) for _ in range(3))
    if mask_kind == "bool":
        mask = torch.ones(2, 1, 1, 5, dtype=torch.bool)
        mask[0, ..., 3:] = False
    else:
        mask = torch.randn(5, 5, dtype=torch.float64)
    fast = kiln.compile(f, stack=stack)
    out = fast(q, k, v, mask)
    twins = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    want = _sdpa_masked_math(*twins, attn_mask=mask)
    torch.testing.assert_close(out, want)
    grad = torch.randn_like(out)
    out.backward(grad)
    want.backward(grad)
    for got, ref in zip((q, k, v), twins):
        torch.testing.assert_close(got.grad, ref.grad)
    assert (k.grad[0, :, 3:] == 0).all() if mask_kind == "bool" else True
    entry = fast.cache.lookup((q, k, v, mask), {})
    assert isinstance(entry.value, _train.TrainingRunner) and not fast.fallback_reasons, kiln.explain(fast)
    assert "attention_grad_query" in kiln.explain(fast), kiln.explain(fast)  # the rule, not the math


def _sdpa_masked_math(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None):
    scores = query @ key.transpose(-2, -1) * (scale or query.size(-1) ** -0.5)
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool \
            else scores + attn_mask
    return torch.softmax(scores, dim=-1) @ value


class PaddedEmbedding(nn.Module):  # a class of its own: nn.Sequential's cache is every test's
    def __init__(self):
        super().__init__()
        self.embed, self.proj = nn.Embedding(10, 4, padding_idx=0), nn.Linear(4, 2)

    def forward(self, idx):
        return self.proj(self.embed(idx))


def test_an_embeddings_padding_row_gets_no_grad_as_eager(stack):
    model, reference = _twins(PaddedEmbedding)
    fast = kiln.compile(model, stack=stack)
    idx = torch.tensor([[0, 1, 2], [0, 3, 0]])
    fast(idx).square().sum().backward()
    reference(idx).square().sum().backward()
    assert _served_by_training(fast, idx), kiln.explain(fast)
    assert not model.embed.weight.grad[0].any()
    _assert_same_grads(model, reference)

    def f(idx, w):  # the functional form, a negative index counting from the end
        return F.embedding(idx, w, padding_idx=-1).sum()

    w = torch.randn(10, 4, requires_grad=True)
    idx = torch.tensor([9, 1, 9, 2])
    kiln.compile(f, stack=stack)(idx, w).backward()
    want, = torch.autograd.grad(f(idx, w), w)
    torch.testing.assert_close(w.grad, want)
    assert not w.grad[9].any()
    g = kiln.compile(lambda idx, w: F.embedding(idx, w, max_norm=1.0).sum(), stack=stack)
    g(idx, w).backward()
    assert any("max_norm" in r for r in g.graph_breaks), g.graph_breaks
