"""The tracer: through the service, dynamic dims from the frame state, typed errors."""
import pytest
import torch
import torch.nn.functional as F

import kiln
from kiln import _trace, ir


def frame_with_dynamic(source: str, sizes: list) -> dict:
    return {"inputs": [{"source": source, "isTensor": True,
                        "sizes": [{"dynamic": None} if s is None else {"value": s} for s in sizes]}]}


def f(x, w):
    h = torch.relu(x @ w)
    return h.view(h.shape[0], -1) * (h.shape[1] + 1)


def test_dynamic_batch_is_a_symbol_and_one_artifact_serves_every_batch(stack):
    x, w = torch.randn(8, 4), torch.randn(4, 3)
    traced = _trace.trace(f, (x, w), {}, frame=frame_with_dynamic("L['x']", [None, 4]), stack=stack)
    text = str(traced.graph)
    assert "s0" in text, text
    guards = _trace._kiln.capnp_decode("GuardSet", traced.guards)
    assert guards["symbols"][0]["symbol"] == "s0"
    compiled = ir.compile(traced.graph, stack)
    for batch in (2, 3, 17, 64):
        x = torch.randn(batch, 4)
        (got,) = compiled(x, w)
        torch.testing.assert_close(got, f(x, w))


def test_static_trace_guards_every_size(stack):
    x, w = torch.randn(8, 4), torch.randn(4, 3)
    traced = _trace.trace(f, (x, w), {}, stack=stack)
    assert "s0" not in str(traced.graph)
    guards = _trace._kiln.capnp_decode("GuardSet", traced.guards)
    sizes = guards["nodes"][0]["checks"][0]["tensor"]["sizes"]
    assert sizes == [{"value": 8}, {"value": 4}]


def test_a_branch_on_a_size_becomes_a_shape_guard(stack):
    def g(x):
        if x.shape[0] > 4:
            return x * 2
        return x + 1
    traced = _trace.trace(g, (torch.randn(8, 2),), {}, frame=frame_with_dynamic("L['x']", [None, 2]), stack=stack)
    guards = _trace._kiln.capnp_decode("GuardSet", traced.guards)
    assert len(guards["shapeGuards"]) == 2  # s0 >= 2 (dynamic) and the branch's 5 <= s0
    assert "mul" in str(traced.graph)


def test_unsupported_names_the_line(stack):
    def g(x):
        if x.sum() > 0:
            return x
        return -x
    with pytest.raises(_trace.Unsupported) as e:
        _trace.trace(g, (torch.randn(3),), {}, fullgraph=True, stack=stack)
    assert "branch on a tensor's value" in e.value.reason
    assert e.value.line == g.__code__.co_firstlineno + 1
    brk = _trace.trace(g, (torch.randn(3),), {}, stack=stack).graph_break  # not fullgraph: a graph break
    assert "branch on a tensor's value" in brk["reason"] and brk["line"] == g.__code__.co_firstlineno + 1


def test_a_malformed_request_is_a_typed_error_and_the_service_lives(stack):
    with pytest.raises(kiln.KilnError) as e:
        stack.trace(b"not a message, nor whole words")
    assert e.value.code == "malformed"
    try:  # a segment table promising words that are not there: refused, or read as an empty request
        reply = _trace._kiln.capnp_decode("TraceReply", stack.trace(b"\x00\x00\x00\x00\xff\x00\x00\x00"))
        assert "unsupported" in reply, reply
    except kiln.KilnError as e:
        assert e.code == "malformed"
    empty = _trace._kiln.capnp_decode("TraceReply", stack.trace(_trace._kiln.capnp_encode("TraceRequest", {})))
    assert "unsupported" in empty, empty  # a request with no code is an answer, not a crash
    traced = _trace.trace(f, (torch.randn(2, 4), torch.randn(4, 3)), {}, stack=stack)
    assert traced.graph is not None


def test_objects_are_asked_for_lazily():
    import math

    def g(x):
        return x * math.pi  # math is a global the first request did not describe
    traced = _trace.trace(g, (torch.randn(3),), {})
    assert "mul" in str(traced.graph)


def test_a_dynamic_int_is_a_graph_input(stack):
    def g(x, n):
        return x * n + n, n
    frame = {"inputs": [{"source": "L['n']", "isTensor": False, "value": {"dynamic": None}}]}
    traced = _trace.trace(g, (torch.randn(3), 4), {}, frame=frame, stack=stack)
    assert traced.int_inputs == [False, True]
    compiled = ir.compile(traced.graph, stack)
    x = torch.randn(3)
    for n in (2, 5, -7):
        result = _trace.rebuild(traced.outputs, compiled(*_trace.graph_inputs(traced, g, (x, n), {})))
        torch.testing.assert_close(result[0], x * n + n)
        assert result[1] == n and type(result[1]) is int


def test_a_dynamic_size_returned_as_an_int(stack):
    def g(x):
        return x.sum(0), x.shape[0]
    traced = _trace.trace(g, (torch.randn(6, 2),), {}, frame=frame_with_dynamic("L['x']", [None, 2]), stack=stack)
    compiled = ir.compile(traced.graph, stack)
    for batch in (3, 9):
        x = torch.randn(batch, 2)
        total, n = _trace.rebuild(traced.outputs, compiled(*_trace.graph_inputs(traced, g, (x,), {})))
        assert n == batch
        torch.testing.assert_close(total, x.sum(0))


def test_autocast_at_the_call_casts_as_torch_does_per_device(stack, monkeypatch):
    import torch.nn.functional as F

    def g(x, w, b):
        h = F.linear(x, w, b)
        return h.softmax(-1), F.layer_norm(h, (h.shape[-1],)), h.sum(), h * 2

    # A request as kiln sends it for CUDA tensors under torch.autocast("cuda", torch.bfloat16):
    # the tracer needs no GPU to trace it.
    monkeypatch.setattr(_trace, "_device", lambda d: {"type": "cuda", "index": 0})
    state = _trace.global_state()
    state["autocast"] = [{"device": "cpu", "enabled": False, "dtype": "bfloat16"},
                         {"device": "cuda", "enabled": True, "dtype": "bfloat16"}]
    monkeypatch.setattr(_trace, "global_state", lambda: state)
    traced = _trace.trace(g, (torch.randn(4, 8), torch.randn(6, 8), torch.randn(6)), {}, stack=stack)
    text = str(traced.graph)
    softmax, layer_norm, total, doubled = (traced.graph.value(v.id).meta for v in traced.graph.outputs)
    assert "linear(" in text and text.count("to_dtype") >= 4, text  # x, w, b to bf16; h to f32 for layer_norm
    assert softmax["dtype"] == "float32" and layer_norm["dtype"] == "float32" and total["dtype"] == "float32"
    assert doubled["dtype"] == "bfloat16", text  # pointwise ops keep the autocast dtype
    assert all(m["device"].startswith("cuda") for m in (softmax, doubled))
    guards = str(kiln.guards.GuardSet.from_bytes(traced.guards))
    assert "autocast(cuda) == on bfloat16" in guards and "autocast(cpu) == off" in guards, guards


def test_inputs_are_read_through_their_paths_common_prefixes_once(stack):
    class Counted(torch.nn.Module):  # counts the reads of its `inner` attribute
        def __init__(self):
            super().__init__()
            self.reads = 0
            self._inner = torch.nn.ModuleList([torch.nn.Linear(4, 4) for _ in range(3)])

        @property
        def inner(self):
            self.reads += 1
            return self._inner

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.block = Counted()

        def forward(self, x):
            for layer in self.block.inner:
                x = layer(x)
            return x, 2 * x.shape[0]

    model, x = Model(), torch.randn(5, 4)
    traced = _trace.trace(model.forward, (x,), {}, frame=frame_with_dynamic("x", [0]), stack=stack)
    paths = [_trace.path_text(p) for p in traced.inputs]
    assert sum("inner" in p for p in paths) == 6, paths  # three weights and three biases
    read = _trace.inputs_reader(traced)
    fn, args = _trace.normalize(model.forward, (x,))
    model.block.reads = 0
    values = read(fn, args, {})
    assert model.block.reads == 1  # self.block.inner walked once for the six
    expected = [_trace.resolve(p, fn, args, {}) for p in traced.inputs]
    model.block.reads = 0
    for got, want in zip(values, expected):
        if isinstance(want, torch.Tensor):
            assert got is want
        else:  # the dynamic batch: a 0-d int64 tensor
            assert got.dtype == torch.int64 and got.item() == want


def test_dropout_in_training_draws_from_a_seed_input_the_sdk_makes_each_call(stack):
    def g(x):
        return F.dropout(x, 0.5, training=True) + F.dropout(x * 2, 0.25, training=True)

    x = torch.randn(6, 8)
    traced = _trace.trace(g, (x,), {}, stack=stack)
    assert traced.seed_inputs == [False, True]  # x, then the one seed both dropouts share
    assert traced.inputs[1] == [] and _trace.path_text(traced.inputs[1]) == "<dropout seed>"
    nodes = [traced.graph.node(i) for i in range(len(traced.graph))]
    dropouts = [n for n in nodes if n.get("target") == "dropout"]
    assert len(dropouts) == 2
    seeds = {n["inputs"][1] for n in dropouts}
    offsets = {n["inputs"][2] for n in dropouts}
    assert len(seeds) == 1 and len(offsets) == 2  # one seed, a counter window each
    first, second = (_trace.graph_inputs(traced, g, (x,), {}) for _ in range(2))
    assert first[1].dtype == torch.int64 and first[1].dim() == 0
    assert not torch.equal(first[1], second[1])  # fresh at each call
    torch.manual_seed(3)
    a = _trace.graph_inputs(traced, g, (x,), {})[1]
    torch.manual_seed(3)
    assert torch.equal(a, _trace.graph_inputs(traced, g, (x,), {})[1])  # torch's generator's
    (y,) = ir.run(traced.graph, *first)
    # Each element: both dropped, the first kept (x / 0.5), the second (2x / 0.75), or both.
    first_kept, second_kept = 2 * x, 2 * x / 0.75
    choices = torch.stack([torch.zeros_like(x), first_kept, second_kept, first_kept + second_kept])
    assert torch.isclose(y.unsqueeze(0), choices).any(dim=0).all()
    assert (y == 0).any() and (y != 0).any()


def test_channel_dropout_and_in_place_dropout_in_training_fall_back_with_a_reason(stack):
    for g, reason in ((lambda x: F.dropout2d(x, 0.5, training=True), "dropout2d in training mode"),
                      (lambda x: F.dropout(x, 0.5, training=True, inplace=True), "inplace=True")):
        with pytest.raises(_trace.Unsupported, match=reason):
            _trace.trace(g, (torch.randn(2, 3, 4, 4),), {}, fullgraph=True, stack=stack)


def _objects_of(modules):
    """Every attribute of each module, and the attributes of those that are modules,
    torch.backends' objects (torch.backends.cuda.matmul) or torch.Tensor."""
    import types
    for m in modules:
        for name in dir(m):
            try:
                obj = getattr(m, name)
            except Exception:
                continue
            yield f"{m.__name__}.{name}", obj
            if isinstance(obj, types.ModuleType) or obj is torch.Tensor or \
                    type(obj).__module__.startswith("torch.backends"):
                for inner in dir(obj):
                    try:
                        yield f"{m.__name__}.{name}.{inner}", getattr(obj, inner)
                    except Exception:
                        continue


def test_describing_objects_of_every_kind_never_raises():
    """What the SDK sends the tracer about an object: a description, or `unsupported` with
    a reason, never an exception (objects whose attributes raise, functions whose closure
    holds themselves, dtypes kiln has no name for)."""
    import builtins
    import collections
    import functools
    import types
    import warnings

    import numpy
    import torch.backends

    modules = [builtins, collections, functools, numpy, torch, torch.nn, torch.backends]
    modules += [getattr(torch.backends, n) for n in dir(torch.backends)
                if isinstance(getattr(torch.backends, n, None), types.ModuleType)]
    described = 0
    with warnings.catch_warnings():  # reading deprecated attributes warns
        warnings.simplefilter("ignore")
        for where, obj in _objects_of(modules):
            d = _trace.describe(obj, [{"global": None, "name": "x"}], 0, [])
            assert "path" in d and "type" in d, where
            described += 1
    assert described > 10000

    def outer():
        def itself(n):
            return n if n <= 0 else itself(n - 1)
        return itself
    d = _trace.describe(outer(), [{"global": None, "name": "itself"}], 0, [])
    assert "function" in d
    assert _trace.describe(torch.uint16, [{"global": None, "name": "u"}])["unsupported"] == "the dtype torch.uint16"


def test_kilns_own_failures_are_refusals_never_the_users_exceptions(stack):
    """Reading torch.backends' flags (whose module objects raise for attributes they lack)
    compiles; a function whose closure holds itself is refused with a reason (its
    description nests without end). Both run as eager does, and the stack never fails."""
    import warnings

    def reads_a_backend_flag(x):
        return x + 1 if torch.backends.cuda.matmul.allow_tf32 else x * 2

    def make():
        def countdown(n):
            return n if n <= 0 else countdown(n - 1)
        return countdown
    countdown = make()

    def calls_a_recursive_closure(x):
        return x * countdown(2)

    for fn in (reads_a_backend_flag, calls_a_recursive_closure):
        fast = kiln.compile(fn, stack=stack)
        x = torch.randn(3)
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # "the stack failed": a message too deep
            torch.testing.assert_close(fast(x), fn(x))
        if fn is reads_a_backend_flag:
            assert not fast.fallback_reasons, fast.fallback_reasons
        else:  # TODO(issue 45): a description that names an enclosing one, so recursive closures trace
            assert len(fast.fallback_reasons) == 1 and "nested more than" in fast.fallback_reasons[0]


# ---- kept traces: the tracer keeps a trace between rounds ----------------------------------

class _Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(3))
        self.scale = 0.5

    def forward(self, x):
        for block in self.blocks:
            x = _scaled_by_config(torch.tanh(block(x))) * self.scale
        return x


class _Config:
    def __init__(self, scale):
        self.scale = scale


_config = _Config(2.0)


def _scaled_by_config(x):
    return x * _config.scale  # an attribute of a global object: asked for in a round of its own


class _Rounds:
    """A stack's trace, each request and reply kept; `rewrite(k, request)` may change request k."""

    def __init__(self, stack, rewrite=None):
        self.stack, self.rewrite, self.requests, self.replies = stack, rewrite, [], []

    def trace(self, request: bytes) -> bytes:
        if self.rewrite is not None:
            request = self.rewrite(len(self.requests), request)
        self.requests.append(_trace._kiln.capnp_decode("TraceRequest", request))
        reply = self.stack.trace(request) if self.stack is not None else _trace._kiln.trace(request)
        self.replies.append(_trace._kiln.capnp_decode("TraceReply", reply))
        return reply


def test_a_kept_trace_answers_as_one_whole_round_does(stack):
    module, x = _Scaled(), torch.randn(2, 4)
    whole = []
    rounds = _Rounds(stack)
    kept = _trace.trace(module.forward, (x,), {}, stack=rounds, record=whole.append)
    assert len(rounds.requests) >= 3
    # after the first request, each round sends only the descriptions asked for
    assert all(r["session"] and not r["code"]["instructions"] and not r["args"] for r in rounds.requests[1:])
    sent = [len(r.get("objectMessages", [])) for r in rounds.requests]
    assert sum(sent) == len(whole and _trace._kiln.capnp_decode("TraceRequest", whole[0])["objectMessages"])
    one = _trace._kiln.capnp_decode("TraceReply", stack.trace(whole[0]))  # the request whole: one round
    assert "traced" in one
    assert str(_trace.Traced(one).graph) == str(kept.graph)
    assert _trace.Traced(one).guards == kept.guards
    (got,) = ir.compile(kept.graph, stack)(*_trace.graph_inputs(kept, module.forward.__func__, (module, x), {}))
    torch.testing.assert_close(got, module(x))


def test_a_lost_session_is_said_and_the_sdk_starts_over(stack):
    lost = _trace._kiln.capnp_decode("TraceReply", stack.trace(_trace._kiln.capnp_encode("TraceRequest", {"session": 12345})))
    assert "no kept trace 12345" in lost["sessionLost"]

    def forget(k, request):  # the second round names a session this worker does not hold
        if k != 1:
            return request
        r = _trace._kiln.capnp_decode("TraceRequest", request)
        return _trace._kiln.capnp_encode("TraceRequest", {**r, "session": r["session"] ^ 1})
    rounds = _Rounds(stack, forget)
    traced = _trace.trace(_scaled_by_config, (torch.randn(3),), {}, stack=rounds)
    assert "sessionLost" in rounds.replies[1] and rounds.requests[2]["code"]["instructions"]  # started over whole
    assert "mul" in str(traced.graph)


def test_a_malformed_description_ends_the_kept_trace_with_a_typed_error(stack):
    def garble(k, request):
        if k != 1:
            return request
        r = _trace._kiln.capnp_decode("TraceRequest", request)
        return _trace._kiln.capnp_encode("TraceRequest", {"session": r["session"], "objectMessages": [b"not whole words"]})
    rounds = _Rounds(stack, garble)
    with pytest.raises(kiln.KilnError) as e:
        _trace.trace(_scaled_by_config, (torch.randn(3),), {}, stack=rounds)
    assert e.value.code == "malformed"
    again = {"session": rounds.requests[0] and rounds.replies[0]["session"], "objectMessages": []}
    reply = _trace._kiln.capnp_decode("TraceReply", stack.trace(_trace._kiln.capnp_encode("TraceRequest", again)))
    assert "sessionLost" in reply  # the session ended with its error
    assert "mul" in str(_trace.trace(_scaled_by_config, (torch.randn(3),), {}, stack=stack).graph)


def test_sessions_waiting_for_their_caller_are_bounded():
    """In-process (one tracer for the test): the 17th session waiting ends the most idle."""
    class FirstRoundOnly(_Rounds):
        def trace(self, request: bytes) -> bytes:
            super().trace(request)
            raise RuntimeError("the caller goes silent")
    ids = []
    for _ in range(17):
        rounds = FirstRoundOnly(None)
        with pytest.raises(_trace.Unsupported):
            _trace.trace(_scaled_by_config, (torch.randn(3),), {}, stack=rounds, fullgraph=True)
        ids.append(rounds.replies[0]["session"])
    assert all(ids) and len(set(ids)) == 17

    def go_on(session):  # no description: the one still waiting ends refusing the trace
        return _trace._kiln.capnp_decode("TraceReply", _trace._kiln.trace(_trace._kiln.capnp_encode(
            "TraceRequest", {"session": session, "objectMessages": []})))
    assert "sessionLost" in go_on(ids[0])
    for session in ids[1:]:
        assert "the SDK did not describe" in go_on(session)["unsupported"]["reason"]
