"""kiln.export: programs with a symbolic input spec and runtime asserts, saved as .kiln files,
run from Python and from C++ (kiln-run-program) against eager PyTorch."""
import os
import subprocess
from pathlib import Path

import pytest
import torch

import kiln
from kiln import _kiln


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32)
        self.fc2 = torch.nn.Linear(32, 8)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x))).softmax(-1)


def run_program_binary() -> str:
    return str(Path(os.environ.get("KILN_BIN_DIR", "build/bin")) / "kiln-run-program")


def write_tensor(path, t: torch.Tensor):
    t = t.detach().cpu().contiguous()
    data = t.view(-1).view(torch.uint8).numpy().tobytes()
    Path(path).write_bytes(_kiln.capnp_encode("TensorData", {"dtype": kiln.ir.dtype_name(t.dtype),
                                                             "sizes": list(t.shape), "data": data}))


def read_tensor(path) -> torch.Tensor:
    d = _kiln.capnp_decode("TensorData", Path(path).read_bytes())
    flat = torch.frombuffer(bytearray(d["data"]), dtype=torch.uint8)
    return flat.view(kiln.ir.torch_dtype(d["dtype"])).reshape(d["sizes"])


def run_cpp(run_dir, program, inputs, tmp_path, outputs=1, extra=()):
    ins = []
    for k, t in enumerate(inputs):
        ins += ["--input", str(tmp_path / f"in{k}.bin")]
        write_tensor(tmp_path / f"in{k}.bin", t)
    outs = []
    for k in range(outputs):
        outs += ["--output", str(tmp_path / f"out{k}.bin")]
    done = subprocess.run([run_program_binary(), str(program), "--run-dir", run_dir, *ins, *outs, *extra],
                          capture_output=True, text=True, timeout=300)
    return done, [tmp_path / f"out{k}.bin" for k in range(outputs)]


def test_mlp_with_a_dynamic_batch_from_python_and_cpp(stack, run_dir, tmp_path):
    torch.manual_seed(0)
    model = MLP().eval()
    prog = kiln.export(model, (torch.randn(4, 16),), dynamic_shapes={"x": {0: kiln.Dim("batch", max=1024)}},
                       stack=stack)
    assert prog.input_spec == [{"name": "x", "dtype": "float32", "device": "cpu", "sizes": ["s0", 16]}]
    assert prog.symbols == [{"name": "s0", "dim": "batch", "source": "x.size(0)", "min": 2, "max": 1024}]
    assert prog.runtime_asserts == []
    assert len(prog.stored_inputs) == 4  # the module's weights travel in the file
    assert "Dim('batch') in [2, 1024]" in str(prog)
    path = tmp_path / "mlp.kiln"
    prog.save(path)
    loaded = kiln.load_program(path, stack=stack)
    for batch in (3, 37):
        x = torch.randn(batch, 16)
        with torch.no_grad():
            expected = model(x)
        torch.testing.assert_close(prog(x), expected)
        torch.testing.assert_close(loaded(x), expected)
        done, (out,) = run_cpp(run_dir, path, [x], tmp_path)
        assert done.returncode == 0, done.stderr
        torch.testing.assert_close(read_tensor(out), expected)
    with pytest.raises(kiln.KilnError, match=r"x.size\(0\) \(batch\) is 2000, outside batch's range \[2, 1024\]"):
        loaded(torch.randn(2000, 16))
    with pytest.raises(kiln.KilnError, match=r"x.size\(1\) must be 16 \(static\), got 15"):
        loaded(torch.randn(4, 15))
    with pytest.raises(kiln.KilnError, match="input x must be float32, got float64"):
        loaded(torch.randn(4, 16, dtype=torch.float64))
    done, _ = run_cpp(run_dir, path, [torch.randn(4, 15)], tmp_path)
    assert done.returncode == 1 and "x.size(1) must be 16 (static), got 15" in done.stderr


def reshape_when_sizes_agree(x, y):
    # Seed 000's `x.reshape([-1]) + y` (x: [s0, s1], y: [s2]) with its guard spelled out.
    if x.shape[0] * x.shape[1] == y.shape[0]:
        return x.reshape(-1) * 2.0, y + 1.0
    return x, y


SEED_DIMS = {"x": {0: kiln.Dim("a"), 1: kiln.Dim("b")}, "y": {0: kiln.Dim("n")}}


def test_reshape_guard_becomes_a_runtime_assert(stack, run_dir, tmp_path):
    prog = kiln.export(reshape_when_sizes_agree, (torch.randn(3, 4), torch.randn(12)), dynamic_shapes=SEED_DIMS,
                       stack=stack)
    (condition, message), = prog.runtime_asserts
    s0, s1, s2 = (s["name"] for s in prog.symbols)
    assert condition == f"{s0}*{s1} == {s2}"
    assert message == "the traced code needs a*b == n"
    x, y = torch.randn(5, 2), torch.randn(10)
    for got, want in zip(prog(x, y), reshape_when_sizes_agree(x, y)):
        torch.testing.assert_close(got, want)
    with pytest.raises(kiln.KilnError, match=rf"runtime assert {s0}\*{s1} == {s2} failed: {s0}=3, {s1}=4, {s2}=13"):
        prog(torch.randn(3, 4), torch.randn(13))
    path = tmp_path / "reshape.kiln"
    prog.save(path)
    done, outs = run_cpp(run_dir, path, [x, y], tmp_path, outputs=2)
    assert done.returncode == 0, done.stderr
    for out, want in zip(outs, reshape_when_sizes_agree(x, y)):
        torch.testing.assert_close(read_tensor(out), want)
    done, _ = run_cpp(run_dir, path, [torch.randn(3, 4), torch.randn(13)], tmp_path, outputs=2)
    assert done.returncode == 1
    assert f"runtime assert {s0}*{s1} == {s2} failed: {s0}=3, {s1}=4, {s2}=13" in done.stderr


def test_seed_reshape_add_implicit_guard(stack):
    """Seed 000's own form: the broadcast needs s0*s1 == s2, which the tracer guards with the
    example's sizes; export turns it into the program's runtime assert."""
    def f(x, y):
        return x.reshape(-1) + y
    prog = kiln.export(f, (torch.randn(3, 4), torch.randn(12)), dynamic_shapes=SEED_DIMS, stack=stack)
    (condition, _), = prog.runtime_asserts
    s0, s1, s2 = (s["name"] for s in prog.symbols)
    assert condition == f"{s0}*{s1} == {s2}"
    x, y = torch.randn(5, 2), torch.randn(10)
    torch.testing.assert_close(prog(x, y), f(x, y))
    with pytest.raises(kiln.KilnError, match=rf"runtime assert {s0}\*{s1} == {s2} failed"):
        prog(torch.randn(3, 4), torch.randn(13))


def three_branches(x, y):
    if x.shape[0] == y.shape[0]:
        return x + y
    elif x.shape[0] == y.shape[0] ** 3:
        return x + 2, y + 3
    elif x.shape[0] ** 2 == y.shape[0] * 3:
        return x * 2.0, y * 3.0


def test_three_branch_condition_asserts(stack):
    prog = kiln.export(three_branches, (torch.randn(6), torch.randn(12)),
                       dynamic_shapes={"x": {0: kiln.Dim("a")}, "y": {0: kiln.Dim("b")}}, stack=stack)
    conditions = [c for c, _ in prog.runtime_asserts]
    # The negation of the first branch and the third as it is; the second's negation
    # (s0 != s1^3) follows from the third (s1^5 == 3 has no integer root), so Z3 drops it.
    assert conditions[0] == "s0 != s1" and conditions[-1] == "s0^2 == 3*s1", conditions
    assert all("the traced code needs" in m for _, m in prog.runtime_asserts)
    for n in (6, 12, 30):  # n^2 == 3*(n^2/3)
        x, y = torch.randn(n), torch.randn(n * n // 3)
        for got, want in zip(prog(x, y), three_branches(x, y)):
            torch.testing.assert_close(got, want)
    with pytest.raises(kiln.KilnError, match="runtime assert s0 != s1 failed: s0=3, s1=3"):
        prog(torch.randn(3), torch.randn(3))  # the first branch's input: 9 == 3*3, yet s0 == s1
    with pytest.raises(kiln.KilnError, match=r"runtime assert s0\^2 == 3\*s1 failed: s0=4, s1=5"):
        prog(torch.randn(4), torch.randn(5))


def test_dims_the_code_makes_equal_violate_the_spec(stack):
    def f(x, y):
        return x * 2 if x.shape[0] == y.shape[0] else y * 2
    args = (torch.randn(4, 8), torch.randn(4, 8))
    with pytest.raises(kiln.ConstraintViolation) as e:
        kiln.export(f, args, dynamic_shapes={"x": {0: kiln.Dim("batch")}, "y": {0: kiln.Dim("seq")}}, stack=stack)
    assert "x.size(0) (batch) and y.size(0) (seq) must be equal" in str(e.value)
    assert "Suggested fixes:\n  seq = batch" in str(e.value)
    assert [v["kind"] for v in e.value.violations] == ["equal"] and e.value.code == "invalid_argument"
    batch = kiln.Dim("batch")  # the fix: one Dim for both
    prog = kiln.export(f, args, dynamic_shapes={"x": {0: batch}, "y": {0: batch}}, stack=stack)
    torch.testing.assert_close(prog(torch.ones(6, 8), torch.ones(6, 8)), torch.full((6, 8), 2.0))
    with pytest.raises(kiln.KilnError, match=r"x.size\(0\) and y.size\(0\) are both Dim batch, but they are 6 and 7"):
        prog(torch.ones(6, 8), torch.ones(7, 8))


def test_dims_made_equal_by_a_broadcast(stack):
    with pytest.raises(kiln.ConstraintViolation) as e:
        kiln.export(lambda x, y: x + y, (torch.randn(4, 8), torch.randn(4, 8)),
                    dynamic_shapes={"x": {0: kiln.Dim("batch")}, "y": {0: kiln.Dim("seq")}}, stack=stack)
    assert "x.size(0) (batch) and y.size(0) (seq) must be equal" in str(e.value)
    assert "seq = batch" in str(e.value)


def test_a_dim_the_code_specializes(stack):
    def f(x):
        return x * 2 if x.shape[0] == 4 else x
    with pytest.raises(kiln.ConstraintViolation, match=r"x.size\(0\) \(batch\) was specialized to 4") as e:
        kiln.export(f, (torch.randn(4, 3),), dynamic_shapes={"x": {0: kiln.Dim("batch")}}, stack=stack)
    assert "batch = None  # static: x.size(0) is always 4" in str(e.value)
    with pytest.raises(kiln.ConstraintViolation, match=r"x.size\(0\) \(batch\) was specialized to 1"):
        kiln.export(lambda x: x * 2, (torch.randn(1, 3),), dynamic_shapes={"x": {0: kiln.Dim("batch")}}, stack=stack)


def test_a_range_narrower_than_declared(stack):
    def f(x):
        return x * 2 if x.shape[0] < 100 else x
    with pytest.raises(kiln.ConstraintViolation, match=r"batch = Dim\('batch', max=99\)"):
        kiln.export(f, (torch.randn(4),), dynamic_shapes={"x": {0: kiln.Dim("batch")}}, stack=stack)
    prog = kiln.export(f, (torch.randn(4),), dynamic_shapes={"x": {0: kiln.Dim("batch", max=99)}}, stack=stack)
    torch.testing.assert_close(prog(torch.ones(50)), torch.full((50,), 2.0))


def test_unsupported_code_raises_with_the_tracers_reason(stack):
    def f(x):
        if x.sum() > 0:  # a branch on a tensor's value
            return x
        return -x
    with pytest.raises(kiln.Unsupported, match="a branch on a tensor's value"):
        kiln.export(f, (torch.randn(4),), stack=stack)


def test_bad_files_give_typed_errors(tmp_path):
    path = tmp_path / "bad.kiln"
    path.write_bytes(b"\x00" * 7)
    with pytest.raises(kiln.KilnError) as e:
        kiln.load_program(path)
    assert e.value.code == "malformed"
    with pytest.raises(kiln.KilnError) as e:
        kiln.load_program(tmp_path / "missing.kiln")
    assert e.value.code == "not_found"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_mlp_on_cuda_from_python_and_cpp(stack, run_dir, tmp_path):
    torch.manual_seed(0)
    model = MLP().eval().cuda()
    prog = kiln.export(model, (torch.randn(4, 16, device="cuda"),), dynamic_shapes={"x": {0: kiln.Dim("batch")}},
                       stack=stack)
    path = tmp_path / "mlp-cuda.kiln"
    prog.save(path)
    x = torch.randn(9, 16, device="cuda")
    with torch.no_grad():
        expected = model(x)
    torch.testing.assert_close(kiln.load_program(path, stack=stack)(x), expected)
    done, (out,) = run_cpp(run_dir, path, [x], tmp_path)  # device memory through the CUDA executor
    assert done.returncode == 0, done.stderr
    assert "on cuda:sm_" in done.stderr
    torch.testing.assert_close(read_tensor(out), expected.cpu())


def test_decide_from_python(stack):
    from kiln import guards as kg
    s = kg.GuardSet()
    x = s.symbol("s0", s.path(kg.arg(0, "x"), kg.size(0)))
    y = s.symbol("s1", s.path(kg.arg(1, "y"), kg.size(0)))
    assert stack.decide(x > 5, [x > 7])[0] is True
    assert stack.decide(x > 5, [x < 3])[0] is False
    answer, how = stack.decide(x == y, [x >= 2])
    assert answer is None and how
    assert stack.decide(x * y >= 4, [x >= 2, y >= 2])[0] is True
