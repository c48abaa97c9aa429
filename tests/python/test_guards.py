"""kiln.guards: the guard VM's Python front end against the C++ one, nn.Module paths, globals,
closures, global state, no Python calls and no leaks on the fast path, and FunctionCache
(automatic dynamic, cache limit, KILN_LOG=recompiles, kiln.explain)."""
import math
import sys
import warnings
from collections import OrderedDict

import pytest
import torch

import kiln
from kiln import guards as kg
from kiln.guards import arg, attr, closure, global_, index, int_key, key, kwarg, size, stride

SCALE = 0.5


class Block:
    pass


def plain(*args, **kwargs):
    return args, kwargs


def failure(guards, args, kwargs=None, fn=plain):
    """The failure text of the Python front end; asserts the C++ front end (over the described
    call) says the same, the fast path agrees, and so does the set after a trip through bytes."""
    program = kg.GuardProgram(guards)
    py = program.explain(fn, args, kwargs)
    cpp = program.explain_described(kg.describe_call(fn, args, kwargs))
    assert py == cpp
    assert program.check(fn, args, kwargs) == (py is None)
    wired = kg.GuardProgram(kg.GuardSet.from_bytes(guards.to_bytes()))
    assert wired.explain(fn, args, kwargs) == py
    return py


def one_arg(name="x"):
    s = kg.GuardSet()
    s.expect_call(1)
    return s, s.path(arg(0, name))


def test_call_shape_counts_arguments_and_keywords():
    s = kg.GuardSet()
    s.expect_call(1, ["scale"])
    assert failure(s, (1,), {"scale": 2.0}) is None
    assert failure(s, (1,)) == "call with 1 positional, keywords [scale] failed: got 1 positional, keywords []"
    assert failure(s, (1,), {"other": 2.0}) is not None
    assert failure(s, (1, None), {"scale": 2.0}) is not None


def test_types_and_constants():
    s, n = one_arg("n")
    s.check_type(n, int)
    s.check_equals(n, 3)
    assert failure(s, (3,)) is None
    assert failure(s, (4,)) == "L['n'] == 3 failed: got 4"
    assert failure(s, (3.0,)) == "type(L['n']) is builtins.int failed: got builtins.float"
    assert failure(s, (True,)) == "type(L['n']) is builtins.int failed: got builtins.bool"
    assert failure(s, (2**70,)) == "L['n'] == 3 failed: got a builtins.int"

    t, n = one_arg("t")
    t.check_equals(n, (1, "a", None))
    assert failure(t, ((1, "a", None),)) is None
    assert failure(t, ((1, "b", None),)) == "L['t'] == (1, 'a', None) failed: got (1, 'b', None)"
    assert failure(t, ((True, "a", None),)) is not None  # True is not 1

    b, n = one_arg("flag")
    b.check_equals(n, True)
    assert failure(b, (True,)) is None
    assert failure(b, (1,)) == "L['flag'] == True failed: got 1"

    f, n = one_arg("f")
    f.check_equals(n, math.nan)
    assert failure(f, (math.nan,)) is None
    assert failure(f, (0.0,)) == "L['f'] == nan failed: got 0.0"

    u, n = one_arg("s")
    u.check_equals(n, "héllo")
    assert failure(u, ("h\u00e9llo",)) is None
    assert failure(u, ("hello",)) == "L['s'] == 'héllo' failed: got 'hello'"
    assert failure(u, (None,)) == "L['s'] == 'héllo' failed: got None"


def test_identity_is_this_object_in_this_process():
    s, n = one_arg("m")
    block = Block()
    s.check_identity(n, block, "<Block>")
    assert failure(s, (block,)) is None
    other = Block()
    assert failure(s, (other,)) == (
        f"L['m'] is <Block> (id {id(block):#x}) failed: got another object, a test_guards.Block")
    assert kg.describe_call(None, (block,)).scope == kg.scope() != 0


def test_lengths_dict_keys_and_items():
    s, n = one_arg("xs")
    s.check_type(n, list)
    s.check_length(n, 2)
    s.check_equals(s.path(arg(0, "xs"), index(1)), "b")
    assert failure(s, (["a", "b"],)) is None
    assert failure(s, (["a"],)) == "len(L['xs']) == 2 failed: got 1"
    assert failure(s, (("a", "b"),)) == "type(L['xs']) is builtins.list failed: got builtins.tuple"
    neg, n = one_arg("xs")
    neg.check_equals(neg.path(arg(0, "xs"), index(-1)), "z")
    assert failure(neg, (["a", "z"],)) is None
    assert failure(neg, (["z", "a"],)) == "L['xs'][-1] == 'z' failed: got 'a'"

    k, n = one_arg("d")
    k.check_dict_keys(n, ["a", "b"])
    assert failure(k, ({"a": 1, "b": 2},)) is None
    assert failure(k, ({"b": 2, "a": 1},)) is None  # order not guarded
    assert failure(k, ({"a": 1, "c": 2},)) == "set(L['d'].keys()) == {'a', 'b'} failed: got ['a', 'c']"
    o, n = one_arg("d")
    o.check_dict_keys(n, ["a", "b"], ordered=True)
    assert failure(o, (OrderedDict(a=1, b=2),)) is None
    assert failure(o, ({"b": 2, "a": 1},)) == "list(L['d'].keys()) == ['a', 'b'] failed: got ['b', 'a']"

    v, n = one_arg("d")
    v.check_equals(v.path(arg(0, "d"), key("a")), 1)
    v.check_equals(v.path(arg(0, "d"), key("m"), int_key(3)), "three")
    assert failure(v, ({"a": 1, "m": {3: "three"}},)) is None
    assert failure(v, ({"b": 2},)) == "L['d']['a'] could not be read (L['d'] is builtins.dict of length 1)"
    assert failure(v, ({"a": 1, "m": {3: "four"}},)) == "L['d']['m'][3] == 'three' failed: got 'four'"


def tensor_guard(name="x", sizes=(8, 4), strides=(4, 1), **kw):
    s, n = one_arg(name)
    s.check_type(n, torch.Tensor)
    s.check_tensor(n, torch.float32, list(sizes), list(strides), **kw)
    return s


def test_tensor_match_names_the_property():
    s = tensor_guard()
    assert failure(s, (torch.zeros(8, 4),)) is None
    assert failure(s, (torch.zeros(16, 4),)) == "L['x'].size()[0] == 8 failed: got 16"
    assert failure(s, (torch.zeros(8, 4, dtype=torch.float16),)) == (
        "L['x'].dtype == torch.float32 failed: got torch.float16")
    assert failure(s, (torch.zeros(8, 4, requires_grad=True),)) == (
        "L['x'].requires_grad == False failed: got True")
    assert failure(s, (torch.zeros(8, 4, 1),)) == "L['x'].dim() == 2 failed: got 3"
    assert failure(s, (torch.zeros(4, 8).t(),)) == "L['x'].stride()[0] == 4 failed: got 1"
    assert failure(s, (torch.zeros(9 * 4)[4:].view(8, 4),)) == "L['x'].storage_offset() == 0 failed: got 4"
    assert failure(s, (3,)) == "type(L['x']) is torch.Tensor failed: got builtins.int"
    p = torch.nn.Parameter(torch.zeros(8, 4), requires_grad=False)
    assert failure(s, (p,)) == "type(L['x']) is torch.Tensor failed: got torch.nn.parameter.Parameter"

    any_batch = tensor_guard(sizes=(None, 4), strides=(4, 1))
    assert failure(any_batch, (torch.zeros(3, 4),)) is None
    assert failure(any_batch, (torch.zeros(3, 5),)) == "L['x'].size()[1] == 4 failed: got 5"

    untyped = kg.GuardSet()
    untyped.expect_call(1)
    untyped.check_tensor(untyped.path(arg(0, "x")), torch.float32, [8], [1])
    assert failure(untyped, ([1, 2],)) == "L['x'] is a tensor failed: got builtins.list"


class Attention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = 8
        self.proj = torch.nn.Linear(4, 4)
        self.register_buffer("mask", torch.ones(4))


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([Attention() for _ in range(3)])
        self.seq = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
        self.heads = torch.nn.ModuleDict({"a": torch.nn.Linear(4, 2)})
        self.scale = 0.5

    def forward(self, x):
        return self.layers[0].proj(x) * self.scale


def test_module_attribute_paths():
    model = Model()
    s = kg.GuardSet()
    s.expect_call(2)
    root = arg(0, "self")
    weight = s.path(root, attr("layers"), index(2), attr("proj"), attr("weight"))
    kg.check_tensor_like(s, weight, model.layers[2].proj.weight)
    s.check_type(weight, torch.nn.Parameter)
    s.check_equals(s.path(root, attr("layers"), index(1), attr("heads")), 8)
    s.check_length(s.path(root, attr("layers")), 3)
    s.check_type(s.path(root, attr("layers"), index(-1)), Attention)
    kg.check_tensor_like(s, s.path(root, attr("layers"), index(0), attr("mask")), model.layers[0].mask)
    s.check_type(s.path(root, attr("seq"), index(1)), torch.nn.ReLU)
    s.check_dict_keys(s.path(root, attr("heads")), ["a"])
    s.check_equals(s.path(root, attr("heads"), key("a"), attr("out_features")), 2)
    s.check_equals(s.path(root, attr("scale")), 0.5)
    s.check_equals(s.path(root, attr("training")), True)
    x = torch.zeros(2, 4)
    assert failure(s, (model, x), fn=Model.forward) is None

    model.layers[1].heads = 4
    assert failure(s, (model, x), fn=Model.forward) == "L['self'].layers[1].heads == 8 failed: got 4"
    model.layers[1].heads = 8
    model.eval()
    assert failure(s, (model, x), fn=Model.forward) == "L['self'].training == True failed: got False"
    model.train()
    model.layers[2].proj = torch.nn.Linear(4, 3)
    assert failure(s, (model, x), fn=Model.forward) == (
        "L['self'].layers[2].proj.weight.size()[0] == 4 failed: got 3")
    model.layers.append(Attention())
    assert failure(s, (model, x), fn=Model.forward) is not None


def test_globals_and_closure_cells():
    global SCALE
    eps = 1e-5

    def fn(x):
        return x * SCALE + eps + len(x)

    s = kg.GuardSet()
    s.expect_call(1)
    s.check_equals(s.path(global_("SCALE")), 0.5)
    s.check_equals(s.path(closure(0, "eps")), 1e-5)
    s.check_identity(s.path(global_("len")), len, "<len>")
    assert fn.__code__.co_freevars == ("eps",)
    assert failure(s, ([1],), fn=fn) is None
    SCALE = 0.25
    try:
        assert failure(s, ([1],), fn=fn) == "G['SCALE'] == 0.5 failed: got 0.25"
    finally:
        SCALE = 0.5
    eps = 1e-6  # the cell changes
    assert failure(s, ([1],), fn=fn) == "C['eps'] == 1.0000000000000001e-05 failed: got 9.9999999999999995e-07"


def test_defaults():
    def fn(x, scale=2, *, mode="fast"):
        return x

    s = kg.GuardSet()
    s.expect_call(1)
    s.check_equals(s.path(kg.default(0)), 2)
    s.check_equals(s.path(kg.kw_default("mode")), "fast")
    assert failure(s, (1,), fn=fn) is None
    fn.__defaults__ = (3,)
    assert failure(s, (1,), fn=fn) == "F.__defaults__[0] == 2 failed: got 3"
    fn.__defaults__ = (2,)
    fn.__kwdefaults__ = {"mode": "slow"}
    assert failure(s, (1,), fn=fn) == "F.__kwdefaults__['mode'] == 'fast' failed: got 'slow'"


def test_global_state():
    s = kg.GuardSet()
    s.guard_current_globals()
    assert failure(s, ()) is None
    with torch.no_grad():
        assert failure(s, ()) == "torch.is_grad_enabled() == True failed: got False"
    torch.set_default_dtype(torch.float64)
    try:
        assert failure(s, ()) == "torch.get_default_dtype() == torch.float32 failed: got torch.float64"
    finally:
        torch.set_default_dtype(torch.float32)
    torch.use_deterministic_algorithms(True)
    try:
        assert failure(s, ()) == "torch.are_deterministic_algorithms_enabled() == False failed: got True"
    finally:
        torch.use_deterministic_algorithms(False)
    with torch.autocast("cpu"):
        assert failure(s, ()) == "autocast(cpu) == off failed: got on bfloat16"
    torch.set_autocast_dtype("cuda", torch.bfloat16)
    try:
        assert failure(s, ()) is None  # autocast is off: its dtype is not guarded
    finally:
        torch.set_autocast_dtype("cuda", torch.float16)
    on = kg.GuardSet()
    on.guard_globals(autocast=[("cuda", True, torch.float16)])
    torch.set_autocast_enabled("cuda", True)  # only a thread-local: no GPU needed
    try:
        assert failure(on, ()) is None
        torch.set_autocast_dtype("cuda", torch.bfloat16)
        assert failure(on, ()) == "autocast(cuda) == on float16 failed: got on bfloat16"
    finally:
        torch.set_autocast_enabled("cuda", False)
        torch.set_autocast_dtype("cuda", torch.float16)
    only_grad = kg.GuardSet()
    only_grad.guard_globals(grad_enabled=False)
    with torch.no_grad():
        assert failure(only_grad, ()) is None
        torch.set_default_dtype(torch.float64)
        try:
            assert failure(only_grad, ()) is None  # not guarded
        finally:
            torch.set_default_dtype(torch.float32)


def test_shape_guards_over_symbols():
    s = kg.GuardSet()
    s.expect_call(2)
    x, y = s.path(arg(0, "x")), s.path(arg(1, "y"))
    s.check_tensor(x, torch.float32, [None, 4], [4, 1])
    s.check_tensor(y, torch.float32, [None, 4], [4, 1])
    s0 = s.symbol("s0", s.path(arg(0, "x"), size(0)))
    s1 = s.symbol("s1", s.path(arg(1, "y"), size(0)))
    s.shape_guard(s0 == s1)
    s.shape_guard(s0 >= 2)
    s.shape_guard(s0 % 8 == 0)

    def call(a, b):
        return (torch.zeros(a, 4), torch.zeros(b, 4))

    assert failure(s, call(16, 16)) is None
    assert failure(s, call(64, 64)) is None
    assert failure(s, call(16, 24)) == "s0 == s1 failed: got s0 = 16 (L['x'].size()[0]), s1 = 24 (L['y'].size()[0])"
    assert failure(s, call(12, 12)) is not None

    n = kg.GuardSet()
    n.expect_call(1)
    node = n.path(arg(0, "n"))
    n.check_type(node, int)
    sn = n.symbol("s0", node)
    n.shape_guard(sn * 3 // 2 < 100)
    assert failure(n, (10,)) is None
    assert failure(n, (70,)) is not None
    assert failure(n, (2**62,)) is not None  # overflow fails

    st = kg.GuardSet()
    st.expect_call(1)
    z = st.symbol("s0", st.path(arg(0, "x"), stride(0)))
    st.shape_guard(z == 4)
    assert failure(st, (torch.zeros(3, 4),)) is None
    assert failure(st, (torch.zeros(3, 5),)) is not None


def test_local_types_are_checked_by_module_and_qualname():
    # No import finds a class local to a function: its instances pass by the type's
    # __module__ and __qualname__ (as the guards service compares a described value's).
    class Local:
        pass

    class Other:
        pass

    s, n = one_arg("v")
    s.check_type(n, Local)
    program = kg.GuardProgram(s)
    assert program.check(plain, (Local(),))
    assert not program.check(plain, (Other(),))
    assert not program.check(plain, (3,))
    assert program.explain(plain, (Other(),)).startswith(
        "type(L['v']) is test_guards.test_local_types_are_checked_by_module_and_qualname.<locals>.Local failed")


class Recorder:
    calls = []

    def __init__(self):
        self.weight = 3

    def __getattr__(self, name):
        Recorder.calls.append(name)
        raise AttributeError(name)

    @property
    def computed(self):
        Recorder.calls.append("computed")
        return 7


class Key(str):
    pass


def test_fast_path_calls_no_python():
    r = Recorder()
    s, n = one_arg("r")
    s.check_equals(s.path(arg(0, "r"), attr("weight")), 3)
    program = kg.GuardProgram(s)
    Recorder.calls.clear()
    for _ in range(100):
        assert program.check(plain, (r,))
    r.weight = 4
    assert not program.check(plain, (r,))
    assert Recorder.calls == []

    # The last resort: attributes that only Python can find (documented).
    p, n = one_arg("r")
    p.check_equals(p.path(arg(0, "r"), attr("computed")), 7)
    assert kg.GuardProgram(p).check(plain, (r,))
    assert Recorder.calls == ["computed"]


def test_no_reference_leaks():
    model = Model()
    x = torch.zeros(2, 4)
    weight = model.layers[0].proj.weight
    s = kg.GuardSet()
    s.expect_call(2)
    kg.check_tensor_like(s, s.path(arg(0, "self"), attr("layers"), index(0), attr("proj"), attr("weight")), weight)
    s.check_equals(s.path(arg(0, "self"), attr("forward"), attr("__name__")), "forward")  # a bound method, made per call
    kg.check_tensor_like(s, s.path(arg(1, "x")), x)
    program = kg.GuardProgram(s)
    miss = (model, torch.zeros(3, 4))
    args = (model, x)
    before = [sys.getrefcount(o) for o in (model, x, weight, model.layers, Model.forward)]
    for _ in range(10000):
        assert program.check(Model.forward, args)
        assert not program.check(Model.forward, miss)
    for _ in range(100):
        program.explain(Model.forward, miss)
    after = [sys.getrefcount(o) for o in (model, x, weight, model.layers, Model.forward)]
    assert before == after


def test_guard_sets_round_trip_and_read():
    s = tensor_guard()
    s.check_equals(s.path(arg(0, "x"), size(1)), 4)
    again = kg.GuardSet.from_bytes(s.to_bytes())
    assert again.text() == s.text()
    assert "L['x'] is a tensor float32 cpu size [8, 4] stride [4, 1] offset 0" in s.text()
    assert s.source(s.path(arg(0, "x"), size(1))) == "L['x'].size()[1]"


def test_guards_for_call_and_frame_state():
    frame = kg.FrameState()
    assert not frame.observe((torch.zeros(8, 4), 3), None, ["x", "n"])
    assert frame.observe((torch.zeros(16, 4), 3), None, ["x", "n"])
    assert frame.dynamic_dim("L['x']", 0) and not frame.dynamic_dim("L['x']", 1)
    frame.mark("L['n']", True)
    assert frame.dynamic_int("L['n']")
    assert kg.FrameState.from_bytes(frame.to_bytes()).text() == frame.text()
    s = kg.guards_for_call((torch.zeros(32, 4), 5), {"flag": True}, ["x", "n"], frame)
    text = s.text()
    assert "s0 = L['x'].size()[0]" in text and "s1 = L['n']" in text
    program = kg.GuardProgram(s)
    assert program.check(plain, (torch.zeros(7, 4), 9), {"flag": True})
    assert failure(s, (torch.zeros(7, 4), 9), {"flag": False}) == "L['flag'] == True failed: got False"
    assert failure(s, (torch.zeros(1, 4), 9), {"flag": True}).startswith("2 <= s0 failed: got s0 = 1")


def function_key_sample(x):
    return x + 1


def test_function_key():
    k = kg.function_key(function_key_sample)
    assert k.module == "test_guards" and k.qualname == "function_key_sample"
    assert k == kg.function_key(function_key_sample)

    def other(x):
        return x + 2

    assert kg.function_key(other).code_hash != k.code_hash


def toy_compile(fn, limit=8):
    """A stand-in compiler: on a miss, guards_for_call over the frame state, 'compiled' = fn."""
    cache = kg.FunctionCache(fn, limit=limit)
    compiles = []

    def call(*args, **kwargs):
        entry = cache.lookup(args, kwargs)
        if entry is None:
            miss = cache.miss(args, kwargs)
            if miss.eager:
                return fn(*args, **kwargs)
            guards = kg.guards_for_call(args, kwargs, cache.arg_names, miss.frame)
            compiles.append(guards)
            entry = cache.insert(guards, fn)
        return entry.value(*args, **kwargs)

    call.__wrapped__ = fn
    return call, cache, compiles


def test_automatic_dynamic_recompiles_once():
    def double(x, n):
        return x * n

    call, cache, compiles = toy_compile(double)
    for batch in (8, 8, 16, 32, 5, 64):
        torch.testing.assert_close(call(torch.ones(batch, 4), 2), torch.full((batch, 4), 2.0))
    assert len(compiles) == 2 and cache.recompiles == 1
    assert "L['x'] is a tensor float32 cpu size [8, 4]" in compiles[0].text()
    assert "s0 = L['x'].size()[0]" in compiles[1].text()
    assert cache.last_reasons == [(1, "L['x'].size()[0] == 8 failed: got 16")]
    call(torch.ones(2, 4), 3)  # an int change: dynamic next
    assert len(compiles) == 3
    call(torch.ones(2, 4), 4)
    assert len(compiles) == 3

    text = kiln.explain(call)
    assert "entry 1:" in text and "entry 3:" in text and "last miss:" in text
    assert "L['n'] == 2 failed: got 3" in text
    assert "this call" in kiln.explain(call, torch.ones(3, 5), 2)


def test_cache_limit_runs_eagerly_with_one_warning():
    def scaled(x, k):
        return x * k

    call, cache, compiles = toy_compile(scaled, limit=2)
    cache.mark("L['k']", False)  # every k recompiles
    call(torch.ones(2), 1)
    call(torch.ones(2), 2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for k in range(3, 8):
            torch.testing.assert_close(call(torch.ones(2), k), torch.full((2,), float(k)))
    assert len(compiles) == 2
    limit = [w for w in caught if "cache limit" in str(w.message)]
    assert len(limit) == 1 and "reached its cache limit of 2" in str(limit[0].message)
    assert call(torch.ones(2), 2).tolist() == [2.0, 2.0]  # entries still serve


def test_kiln_log_recompiles(monkeypatch, capsys):
    def add(x, y):
        return x + y

    monkeypatch.setenv("KILN_LOG", "recompiles")
    call, cache, _ = toy_compile(add)
    call(torch.ones(3), torch.ones(3))
    assert capsys.readouterr().err == ""
    call(torch.ones(3, dtype=torch.float64), torch.ones(3))
    err = capsys.readouterr().err
    assert "kiln: recompiling test_guards.test_kiln_log_recompiles.<locals>.add" in err
    assert "entry 1: L['x'].dtype == torch.float32 failed: got torch.float64" in err


def test_lookup_checks_entries_in_order_with_one_reason_each():
    def f(x):
        return x

    cache = kg.FunctionCache(f)
    frame = kg.FrameState()
    for n in (1, 2, 3):
        cache.insert(kg.guards_for_call((n,), None, ["x"], frame), f"entry{n}")
    assert cache.lookup((2,)).value == "entry2"
    assert cache.lookup((2,), {}).value == "entry2"
    assert cache.lookup((4,)) is None
    assert [why for _, why in cache._native.last_reasons] == [
        "L['x'] == 1 failed: got 4", "L['x'] == 2 failed: got 4", "L['x'] == 3 failed: got 4"]
    with pytest.raises(TypeError):
        cache.lookup([2])


_SCALE = 2


def scaled(x):
    return x * _SCALE


def test_lookup_reads_the_global_state_once_for_every_entry():
    global _SCALE
    cache = kg.FunctionCache(scaled)
    builds = {"no_grad": lambda s: s.guard_globals(grad_enabled=False),
              "autocast": lambda s: s.guard_globals(autocast=[("cuda", True, torch.float16)]),
              "scale 2": lambda s: s.check_equals(s.path(kg.global_("_SCALE")), 2),
              "plain": lambda s: s.guard_current_globals()}
    for name, build in builds.items():
        s = kg.GuardSet()
        s.expect_call(1)
        build(s)
        cache.insert(s, name)
    assert cache.lookup((1,)).value == "scale 2"
    with torch.no_grad():
        assert cache.lookup((1,)).value == "no_grad"
    torch.set_autocast_enabled("cuda", True)  # only a thread-local: no GPU needed
    try:
        assert cache.lookup((1,)).value == "autocast"
    finally:
        torch.set_autocast_enabled("cuda", False)
    _SCALE = 3
    try:
        assert cache.lookup((1,)).value == "plain"
        with torch.autocast("cpu"), torch.no_grad():
            assert cache.lookup((1,), {}).value == "no_grad"
            with torch.enable_grad():
                assert cache.lookup((1,)) is None
                assert [why for _, why in cache._native.last_reasons] == [
                    "torch.is_grad_enabled() == False failed: got True",
                    "autocast(cuda) == on float16 failed: got off",
                    "G['_SCALE'] == 2 failed: got 3",
                    "autocast(cpu) == off failed: got on bfloat16"]
    finally:
        _SCALE = 2


def test_function_cache_through_the_guards_service(stack):
    def through_service(x, n):
        return x * n

    def compiled(cache):
        compiles = []

        def call(*args, **kwargs):
            entry = cache.lookup(args, kwargs)
            if entry is None:
                miss = cache.miss(args, kwargs)
                assert not miss.eager
                entry = miss.entry
                if entry is None:
                    guards = kg.guards_for_call(args, kwargs, cache.arg_names, miss.frame)
                    compiles.append(guards)
                    entry = cache.insert(guards, through_service, artifacts=[f"artifact{len(compiles)}"])
            return (entry.value or through_service)(*args, **kwargs)

        return call, compiles

    cache = kg.FunctionCache(through_service, stack=stack)
    call, compiles = compiled(cache)
    for batch in (8, 8, 16, 32, 5):
        torch.testing.assert_close(call(torch.ones(batch, 4), 2), torch.full((batch, 4), 2.0))
    assert len(compiles) == 2 and cache.recompiles == 1  # automatic dynamic, decided by the service
    first = cache.entries[0].id
    assert cache.last_reasons == [(first, "L['x'].size()[0] == 8 failed: got 16")]
    assert cache.frame.dynamic_dim("L['x']", 0)

    # Another cache of the same code (as another process would make) starts with the service's
    # entries: the fast path serves it without asking the service.
    other = kg.FunctionCache(through_service, stack=stack)
    assert [e.artifacts for e in other.entries] == [["artifact1"], ["artifact2"]]
    assert other.lookup((torch.ones(64, 4), 2)).artifacts == ["artifact2"]
    assert other.frame.dynamic_dim("L['x']", 0)

    # An entry of the service is this process's own once its value is made here.
    hit = other.lookup((torch.ones(7, 4), 2))
    assert hit.value is None
    miss = other.miss((torch.ones(7, 4), 2), None)
    assert miss.entry is hit
    hit.value = through_service
    assert other.lookup((torch.ones(9, 4), 2)).value is through_service

    # mark_static through the service.
    cache.mark("L['n']", False)
    assert "mark_static L['n']" in cache.frame.text()


def test_a_dict_keyed_by_enum_members_compiles_and_its_keys_are_guarded(stack):
    """The frame state takes a dict whose keys are not constants (enum members) by its type;
    the trace guards what it reads of it. No stack failure, no stale entry."""
    import enum

    class Layer(enum.IntEnum):
        EMB = 0
        HEAD = 1

    def f(x, d):
        return x * len(d)

    fast = kiln.compile(f, stack=stack)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # kiln's "the stack failed" warning would raise here
        for d in ({Layer.EMB: 1}, {Layer.EMB: 1, Layer.HEAD: 2}, {Layer.HEAD: 3}):
            x = torch.randn(3)
            torch.testing.assert_close(fast(x, d), f(x, d))
