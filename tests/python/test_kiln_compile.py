"""kiln.compile end to end: the same results as eager, one compile per distinct call,
recompiles only where the guards say, fallbacks that never raise into user code."""
import os
import signal
import time
import types
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import kiln


def assert_calls_match(fast, eager, *args, calls: int):
    """`calls` calls of the compiled function, each as eager's on the same arguments."""
    for _ in range(calls):
        torch.testing.assert_close(fast(*args), eager(*args))


def entries(fn):
    return len(fn.cache.entries)


def test_square_is_a_product_with_itself(stack):
    def f(x, n):
        return x.square() + torch.square(n)

    fast = kiln.compile(f, stack=stack)
    x, n = torch.randn(8, 4), torch.arange(4)
    torch.testing.assert_close(fast(x, n), f(x, n))
    assert not fast.fallback_reasons, fast.fallback_reasons


def test_compiles_once_and_matches_eager(stack):
    def f(x, w):
        return F.gelu(x @ w) * 2 + 1

    fast = kiln.compile(f, stack=stack)
    x, w = torch.randn(8, 4), torch.randn(4, 6)
    assert_calls_match(fast, f, x, w, calls=3)
    assert entries(fast) == 1


# options={"emulate_precision_casts": True} (Inductor's option of that name): a fused chain of
# bfloat16 ops rounds each op's result as eager does, so the result is eager's bit for bit;
# by default the chain keeps its intermediates in float32 (one rounding, at the store).
def test_emulate_precision_casts_rounds_between_fused_ops_as_eager(stack):
    def f(x, y, z):
        return ((x + y) * z - x) * y

    torch.manual_seed(0)
    x, y, z = (torch.randn(4096, dtype=torch.bfloat16) for _ in range(3))
    rounded = kiln.compile(f, stack=stack, options={"emulate_precision_casts": True})
    fused = kiln.compile(f, stack=stack)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # kiln's "runs eagerly" warnings: compiled or failed
        assert torch.equal(rounded(x, y, z), f(x, y, z))
        assert not torch.equal(fused(x, y, z), f(x, y, z))  # intermediates in f32: one rounding
    assert entries(rounded) == entries(fused) == 1
    assert not rounded.fallback_reasons and not fused.fallback_reasons
    with pytest.raises(ValueError, match="emulate_precision_casts"):
        kiln.compile(f, stack=stack, options={"emulate_precision_casts": 1})


def test_a_dtype_change_recompiles_once(stack):
    def f(x):
        return x.sin() + x

    fast = kiln.compile(f, stack=stack)
    fast(torch.randn(4, 4))
    fast(torch.randn(4, 4, dtype=torch.float64))
    fast(torch.randn(4, 4, dtype=torch.float64))
    torch.testing.assert_close(fast(torch.ones(4, 4, dtype=torch.float64)), f(torch.ones(4, 4, dtype=torch.float64)))
    assert entries(fast) == 2


def test_automatic_dynamic_one_recompile_then_none(stack):
    def f(x):
        return x.view(x.shape[0], -1).softmax(dim=-1)

    fast = kiln.compile(f, stack=stack)
    fast(torch.randn(4, 3, 5))
    fast(torch.randn(6, 3, 5))  # the batch changed: now symbolic
    for batch in (2, 9, 31, 100):
        x = torch.randn(batch, 3, 5)
        torch.testing.assert_close(fast(x), f(x))
    assert entries(fast) == 2, kiln.explain(fast)


def test_dynamic_false_keeps_sizes_static(stack):
    def f(x):
        return x * 3

    fast = kiln.compile(f, dynamic=False, stack=stack)
    for batch in (2, 3, 4):
        fast(torch.randn(batch))
    assert entries(fast) == 3


def test_unsupported_code_runs_eagerly_once_traced(stack):
    calls = []

    def f(x):
        calls.append(1)
        steps = range(2)  # a range made in the traced code, live at the branch: not rebuilt
        if x.sum() > 0:  # a branch on a tensor's value, where no graph break can be
            return x * len(steps) / 2
        calls.append(2)
        return -x * len(steps) / 2

    fast = kiln.compile(f, stack=stack)
    x = torch.ones(3)
    torch.testing.assert_close(fast(x), x)
    torch.testing.assert_close(fast(-x), x)
    assert calls == [1, 1, 2]
    assert entries(fast) == 1  # the eager decision is cached with the call's guards
    assert any("branch on a tensor" in r and "range made in the traced code live" in r for r in fast.fallback_reasons)
    assert "runs eagerly" in kiln.explain(fast)


def test_fullgraph_raises_unsupported(stack):
    def f(x):
        if x.sum() > 0:
            return x
        return -x

    fast = kiln.compile(f, fullgraph=True, stack=stack)
    with pytest.raises(kiln.Unsupported) as e:
        fast(torch.ones(3))
    assert "branch on a tensor's value" in str(e.value) and "test_kiln_compile.py" in str(e.value)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 32)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, d=16, heads=2):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.heads = heads

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / (c // self.heads) ** 0.5
        att = att.masked_fill(torch.ones(t, t).tril() == 0, float("-inf")).softmax(dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.ln2(x))


@pytest.mark.parametrize("make", [
    lambda: (MLP(), torch.randn(5, 8)),
    pytest.param(lambda: (Block().eval(), torch.randn(2, 6, 16)), id="block"),
])
def test_modules_compile_and_keep_their_state(stack, make):
    model, x = make()
    fast = kiln.compile(model, stack=stack)
    with torch.no_grad():
        torch.testing.assert_close(fast(x), model(x), rtol=1e-4, atol=1e-4)
    assert not fast._compiled_forward.fallback_reasons, fast._compiled_forward.fallback_reasons
    assert [k.replace("_orig_mod.", "") for k in fast.state_dict()] == list(model.state_dict())
    assert list(fast.parameters()) == list(model.parameters())
    fast.train()
    assert model.training
    fast.eval()
    assert not model.training


class WithAHelper(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def activate(self, x):
        return torch.relu(self.fc(x))

    def forward(self, x):
        return self.activate(x) * 2


def test_a_forward_calling_its_own_method_compiles_once(stack):
    # self.activate is a new bound method at each read: its function is what is guarded
    model = WithAHelper()
    fast = kiln.compile(model, stack=stack)
    x = torch.randn(3, 8)
    with torch.no_grad():
        assert_calls_match(fast, model, x, calls=3)
    assert entries(fast._compiled_forward) == 1, kiln.explain(fast)
    assert not fast._compiled_forward.fallback_reasons


def test_new_weights_are_read_not_baked_in(stack):
    model = MLP()
    fast = kiln.compile(model, stack=stack)
    x = torch.randn(3, 8)
    with torch.no_grad():
        fast(x)
        before = entries(fast._compiled_forward)  # MLP.forward's entries are shared through the guards service
        model.fc1.weight.mul_(2)
        torch.testing.assert_close(fast(x), model(x))
    assert entries(fast._compiled_forward) == before


def test_inputs_that_require_grad_train_compiled(stack):
    model = MLP()
    reference = MLP()
    reference.load_state_dict(model.state_dict())
    fast = kiln.compile(model, stack=stack)
    x = torch.randn(3, 8)
    out = fast(x)  # grad mode with parameters that require grad: forward and backward artifacts
    out.sum().backward()
    reference(x).sum().backward()
    torch.testing.assert_close(model.fc1.weight.grad, reference.fc1.weight.grad, rtol=1e-4, atol=1e-6)
    assert not fast._compiled_forward.fallback_reasons, fast._compiled_forward.fallback_reasons
    assert "trains" in kiln.explain(fast)


def test_a_failing_stack_runs_eagerly_with_one_warning():
    def f(x):
        return x * 5

    dead = kiln.compile(f, stack=_DeadStack())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            torch.testing.assert_close(dead(torch.ones(2)), torch.ones(2) * 5)
    assert sum("runs eagerly" in str(w.message) for w in caught) == 1


class _DeadStack:
    """A stack whose every call fails as an unreachable one does."""

    def __getattr__(self, name):
        def fail(*args, **kwargs):
            raise kiln.KilnError("unavailable", "the stack is gone")
        return fail


def test_a_service_killed_mid_compile_still_returns_the_result(stack):
    def f(x):
        return torch.tanh(x) * 7

    pid = next(w["pid"] for s in kiln.status(stack.run_dir)["services"] if s["name"] == "tracer" for w in s["workers"])
    os.kill(pid, signal.SIGKILL)  # the next trace meets a dead worker: the launcher restarts it
    fast = kiln.compile(f, stack=stack)
    x = torch.randn(3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.testing.assert_close(fast(x), f(x))  # compiled after a retry, or eager: never an error
    deadline = time.time() + 20
    while entries(fast) == 0 and time.time() < deadline:
        time.sleep(0.2)
        fast(x)
    torch.testing.assert_close(fast(x), f(x))
    assert entries(fast) >= 1


def test_a_tensors_type_questions_are_answered_from_its_dtype(stack):
    # torch.is_floating_point / is_complex / is_tensor and x.is_floating_point() read the
    # traced value's dtype (guarded): nn.MultiheadAttention's forward asks them on torch 2.x.
    def fn(x, y):
        a = x * 2 if torch.is_floating_point(x) else x + 1
        b = y if y.is_floating_point() else y.float()
        c = 1 if torch.is_tensor(x) and not torch.is_complex(x) and not torch.is_tensor(3) else 0
        return a + b + c

    fast = kiln.compile(fn, stack=stack)
    for x, y in ((torch.ones(3), torch.arange(3)), (torch.arange(3), torch.ones(3))):
        torch.testing.assert_close(fast(x, y), fn(x, y))
    assert not fast.fallback_reasons, fast.fallback_reasons
    assert len(fast.cache.entries) == 2  # one per dtype of x: the answer is guarded


def test_private_helpers_of_torch_nn_functional_are_inlined(stack):
    # torch 2.x's module forwards call F's private Python helpers (_canonical_mask,
    # _none_or_dtype): they are plain Python, traced through rather than called.
    def fn(x, w, b):
        q, k, v = F._in_projection_packed(x, x, x, w, b)
        batched = F._mha_shape_check(x, x, x, None, None, 2)
        return (q * k + v) if batched else q

    fast = kiln.compile(fn, stack=stack)
    x, w, b = torch.randn(2, 3, 4), torch.randn(12, 4), torch.randn(12)
    torch.testing.assert_close(fast(x, w, b), fn(x, w, b))
    assert not fast.fallback_reasons, fast.fallback_reasons


def test_masked_fill_in_place_writes_the_tensor(stack):
    # F._canonical_mask turns a bool mask into zeros.masked_fill_(mask, -inf); an input's
    # masked_fill_ is seen by the caller, as in eager.
    def fn(x, m, scores):
        additive = torch.zeros_like(m, dtype=x.dtype).masked_fill_(m, float("-inf"))
        scores.masked_fill_(~m, 0.5)
        return x + additive, scores.masked_fill(m, -1)

    fast = kiln.compile(fn, stack=stack)
    x, m, scores = torch.randn(3, 4), torch.rand(3, 4) > 0.5, torch.randn(3, 4)
    mine, theirs = scores.clone(), scores.clone()
    torch.testing.assert_close(fast(x, m, mine), fn(x, m, theirs))
    torch.testing.assert_close(mine, theirs)
    assert not fast.fallback_reasons, fast.fallback_reasons

    def into_ints(t, m):  # torch casts the float to the tensor's dtype: a graph break
        return t.masked_fill(m, 2.7)

    fast = kiln.compile(into_ints, stack=stack)
    t = torch.arange(12).view(3, 4)
    torch.testing.assert_close(fast(t, m), into_ints(t, m))
    assert [r.split(": ", 1)[1] for r in fast.graph_breaks] == ["masked_fill of a float value into a tensor of i64"]


class _ModuleSubclass(types.ModuleType):
    """What torch 2.x puts in sys.modules for torch.backends: an instance of a ModuleType
    subclass (GenericModule) standing for the module."""

    def __init__(self, name, flag):
        super().__init__(name)
        self.flag = flag


def test_a_module_that_is_an_instance_of_a_module_subclass_is_guarded_by_its_type(stack):
    wrapped = _ModuleSubclass("kiln_test_wrapped", True)

    def fn(x):
        return x * 2 if wrapped.flag else x - 1

    fast = kiln.compile(fn, stack=stack)
    x = torch.randn(3)
    torch.testing.assert_close(fast(x), x * 2)
    # the guards hold at the next call: no trace again (a `type is module` guard failed here)
    assert fast.cache.lookup((x,), {}) is not None, kiln.explain(fast)
    wrapped.flag = False
    torch.testing.assert_close(fast(x), x - 1)
    assert len(fast.cache.entries) == 2


def _local_object(scale):
    class Local:  # no import finds it: the guards check its type by module and qualname
        def __init__(self):
            self.scale = scale
    return Local()


def test_an_object_of_a_class_local_to_a_function_hits_the_cache(stack):
    def fn(x, o):
        return x * o.scale

    fast = kiln.compile(fn, stack=stack)
    x, o = torch.ones(3), _local_object(3.0)
    torch.testing.assert_close(fast(x, o), x * 3)
    # a guard of its type by a failed import missed at every call (a guards service round trip)
    assert fast.cache.lookup((x, o), {}) is not None, kiln.explain(fast)

    class Other:  # another qualname: its type guard fails
        scale = 3.0
    assert fast.cache.lookup((x, Other()), {}) is None


class _CountingReads:
    """An attribute whose value changes at each read (a property with a side effect)."""

    def __init__(self):
        self.reads = 0

    @property
    def n(self):
        self.reads += 1
        return self.reads


def test_guards_that_fail_on_the_call_that_compiled_them_are_warned_of(stack):
    def fn(x, c):
        return x * c.n

    fast = kiln.compile(fn, stack=stack)
    with pytest.warns(RuntimeWarning, match=r"fail on the call that compiled it \(L\['c'\]\.n == 1 failed"):
        fast(torch.ones(3), _CountingReads())


def test_inputs_are_read_by_a_walk_specialized_to_the_first_calls_layout(stack):
    # After the first call, a module's parameters are read by straight-line code from the
    # tables they were found in; a call laid out otherwise reads them the generic way.
    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = nn.Linear(3, 2)
            self.layers = nn.ModuleList([nn.Linear(2, 2), nn.Linear(2, 2)])
            self.register_buffer("shift", torch.ones(2))

        def forward(self, x):
            return self.layers[1](self.layers[0](self.inner(x))) + self.shift

    model = Outer()
    fast = kiln.compile(model, stack=stack)
    x = torch.randn(4, 3)
    with torch.no_grad():
        assert_calls_match(fast, model, x, calls=2)
        # `inner` now lives behind a class property, not in _modules: guards still hold
        # (the same object at the same path), the specialized walk's table misses
        inner = model.inner
        del model.inner
        object.__setattr__(model, "_hidden", inner)
        Outer.inner = property(lambda self: self._hidden)
        model.inner.weight.mul_(2)
        torch.testing.assert_close(fast(x), model(x))
    assert len(fast._compiled_forward.cache.entries) == 1


def test_is_autocast_enabled_reads_the_traced_state(stack):
    def f(x):  # torch.is_autocast_enabled() is CUDA's autocast, as in eager
        return x * 2 if torch.is_autocast_enabled() else x - 1

    fast = kiln.compile(f, fullgraph=True, stack=stack)
    x = torch.randn(3)
    torch.testing.assert_close(fast(x), f(x))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        torch.testing.assert_close(fast(x), f(x))


def test_cpu_autocast_casts_what_torchs_cpu_lists_cast(stack):
    # torch's CPU autocast: attention runs in the lower precision, prod and cross_entropy
    # in f32; the rest (softmax, exp) keeps its input's dtype.
    def f(q, h, target):
        a = F.scaled_dot_product_attention(q, q, q)
        return a, h.prod(0), F.cross_entropy(h, target), torch.softmax(h, -1).exp()

    fast = kiln.compile(f, fullgraph=True, stack=stack)
    torch.manual_seed(0)
    q, h = torch.randn(1, 2, 4, 8), (torch.rand(4, 5) + 0.5).to(torch.bfloat16)
    target = torch.tensor([0, 1, 2, 3])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got, want = fast(q, h, target), f(q, h, target)
    assert [t.dtype for t in got] == [t.dtype for t in want] == [torch.bfloat16, torch.float32,
                                                                 torch.float32, torch.bfloat16]
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=2e-2, atol=2e-2)


def test_autocast_around_the_call_is_traced_and_guarded(stack):
    def f(x, w):
        return F.relu(x @ w) * 2

    fast = kiln.compile(f, stack=stack)
    torch.manual_seed(0)  # fixed inputs: bf16 sums of random ones differed from eager's past 2e-2 at times
    x, w = torch.randn(4, 8), torch.randn(8, 3)
    assert fast(x, w).dtype == torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = fast(x, w)
        assert out.dtype == torch.bfloat16  # as eager: the product runs in bf16
        # bf16 products may round differently in the last place (torch's CPU kernel sums in its own order)
        torch.testing.assert_close(out, f(x, w), rtol=2e-2, atol=2e-2)
    assert fast(x, w).dtype == torch.float32
    assert entries(fast) == 2, kiln.explain(fast)


def test_attention_of_a_fully_masked_row_is_zero_as_torchs(stack):
    q, k, v = torch.randn(3, 1, 2, 3, 4).unbind(0)
    masks = {"bool": torch.tensor([[False] * 3, [True, True, False], [True] * 3]),
             "float": torch.tensor([[float("-inf")] * 3, [0.0, 0.0, float("-inf")], [0.0] * 3])}
    fn = lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m)  # noqa: E731
    for name, m in masks.items():
        got = kiln.compile(fn, stack=stack)(q, k, v, m)
        torch.testing.assert_close(got, fn(q, k, v, m), msg=name)
        assert not got.isnan().any(), name


def test_a_failure_of_kilns_own_code_runs_the_function_eagerly_with_a_warning(stack, monkeypatch):
    def f(x):
        return x.sin() + 1

    def broken_runner(self, traced, args, kwargs):
        raise KeyError("sizes")  # as a missing key in kiln's own metadata would

    monkeypatch.setattr(kiln._compile.CompiledFunction, "_runner", broken_runner)
    fast = kiln.compile(f, stack=stack)
    with pytest.warns(RuntimeWarning, match="runs eagerly: kiln failed .KeyError"):
        torch.testing.assert_close(fast(torch.ones(3)), f(torch.ones(3)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once
        torch.testing.assert_close(fast(torch.zeros(3)), f(torch.zeros(3)))
    assert "kiln failed (KeyError" in fast.fallback_reasons[0]


class Options:  # at module level: a type the guards find by name
    pass


def test_an_attributes_absence_is_guarded(stack):
    options = Options()

    def f(x):
        scale = getattr(options, "scale", 3.0)
        return x * scale if hasattr(options, "flag") else x + scale

    fast = kiln.compile(f, stack=stack)
    x = torch.ones(3)
    torch.testing.assert_close(fast(x), f(x))
    torch.testing.assert_close(fast(x), f(x))
    assert len(fast.cache.entries) == 1 and not fast.fallback_reasons
    assert "hasattr(C['options'], 'flag') == False" in kiln.explain(fast)
    options.flag, options.scale = True, 5.0
    torch.testing.assert_close(fast(x), f(x))  # the absence guards fail: traced again
    assert len(fast.cache.entries) == 2


def test_a_torch_callable_passed_in_is_guarded_by_identity(stack):
    """An activation passed as an argument (act=F.relu, then F.gelu) is that callable:
    another one recompiles rather than reusing the first one's graph."""
    def act_fn(x, act):
        return act(x) * 2.0

    fast = kiln.compile(act_fn, stack=stack)
    x = torch.tensor([-1.0, 0.5, 2.0])
    for act in (F.relu, F.gelu, torch.tanh, F.relu):
        torch.testing.assert_close(fast(x, act), act_fn(x, act))
    assert len(fast.cache.entries) == 3 and not fast.fallback_reasons


def test_aten_overloads_bind_by_their_schema(stack):
    """torch.ops.aten calls map to the graph ops of their torch forms: an overload's
    arguments bound by its schema, a packet's as its torch form binds them; an out=
    overload or an argument of the wrong type is a graph break, never a wrong result."""
    aten = torch.ops.aten

    def f(x, y):
        h = aten.add.Tensor(x, y, alpha=2)
        h = aten.sum.dim_IntList(aten.view.default(h, [6, 2]), [1], True)
        values, indices = aten.max.dim(x, 1)
        return aten.relu(h), aten.clamp.default(x, max=0.5), values, indices, aten.mm(x, y.t())

    fast = kiln.compile(f, stack=stack)
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    got, expected = fast(x, y), f(x, y)
    assert type(got[2:4]) is type(expected[2:4])
    torch.testing.assert_close(got, expected)
    assert not kiln._compile.frames(fast)[0].graph_breaks and not fast.fallback_reasons

    def refused(x):
        return aten.add.Tensor(x, "two")

    fast = kiln.compile(refused, stack=stack)
    with pytest.raises(Exception) as eager_error:
        refused(x)
    with pytest.raises(type(eager_error.value)):
        fast(x)


def test_expanded_inputs_turn_dynamic_like_contiguous_ones(stack):
    """An input made by expand (stride 0 in a dim, the rest contiguous: HF's position_ids)
    takes symbolic sizes as a contiguous one does: one recompile, then none per length."""
    def f(q, position_ids):
        return q * position_ids[..., None], position_ids * 2 + 1

    def g(x):  # expanded in front of a dynamic dim: strides [0, n, 1]
        return x.sum(0) + x[1]

    fast_f, fast_g = kiln.compile(f, stack=stack), kiln.compile(g, stack=stack)
    for n in (5, 7, 11, 23):
        q, ids = torch.randn(2, n, 3), torch.arange(n)[None].expand(2, -1)
        torch.testing.assert_close(fast_f(q, ids), f(q, ids))
        x = torch.randn(1, 4, n).expand(3, -1, -1)
        torch.testing.assert_close(fast_g(x), g(x))
    assert len(fast_f.cache.entries) == 2 and len(fast_g.cache.entries) == 2
    assert not fast_f.fallback_reasons and not fast_g.fallback_reasons


def test_dtype_and_device_arguments_are_guarded(stack):
    """A dtype or device passed in is part of what an entry serves: another one recompiles
    (an entry made for float32 gave float32 results to a float64 call)."""
    def f(x, dtype, device):
        return torch.ones(3, dtype=dtype, device=device) + x.to(dtype)

    fast = kiln.compile(f, stack=stack)
    for dtype in (torch.float32, torch.float64, torch.float32, torch.int64):
        for device in ("cpu", torch.device("cpu")):
            got, expected = fast(torch.ones(3), dtype, device), f(torch.ones(3), dtype, device)
            assert got.dtype == expected.dtype
            torch.testing.assert_close(got, expected)
    assert len(fast.cache.entries) == 6 and not fast.fallback_reasons
