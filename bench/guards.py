"""bench/guards: the per-call cost of the guard fast path, next to a bare Python call, in one run.

    PYTHONPATH=build/python .venv/bin/python bench/guards.py

Three workloads, each a function with one compiled entry whose guards pass: (a) one tensor
argument, (b) four tensors and two ints, (c) an nn.Module-like object holding 200 parameter
tensors (each guarded through its attribute path, L['model'].layers[i].weight) and one tensor.
For each it times `FunctionCache.lookup(args, kwargs)` (what the SDK runs on every call: every
entry's guard program in one call into C++) and `GuardProgram.check(fn, args, kwargs)`, and a
bare call of a Python function with the same arguments, `f(*same)`, in interleaved blocks.
Per-call times have the empty loop's cost taken off; ratios are against the bare call.
Targets: (a) lookup <= 2x the bare call, (c) lookup <= 20 us. Writes
bench/results/guards-<kind>-<date>.json. Needs no stack.
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import timeit
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]


class Layer:
    """An nn.Module-like holder of two parameters (a plain object: attributes in __dict__)."""

    def __init__(self, n):
        self.weight = torch.nn.Parameter(torch.randn(n, n))
        self.bias = torch.nn.Parameter(torch.randn(n))


class ModelLike:
    def __init__(self, layers, n):
        self.layers = [Layer(n) for _ in range(layers)]


class Model(torch.nn.Module):
    """The same as a real nn.Module (parameters found in _parameters, layers in _modules)."""

    def __init__(self, layers, n):
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Linear(n, n) for _ in range(layers)])


def one(x):
    return x


def six(a, b, c, d, n, m):
    return a


def model_call(model, x):
    return x


def workloads():
    from kiln import guards as kg

    out = []
    x = torch.randn(8, 16)
    out.append(("a_one_tensor", one, (x,)))
    ts = [torch.randn(8, 16) for _ in range(4)]
    out.append(("b_four_tensors_two_ints", six, (*ts, 3, 5)))
    for name, model in (("c_module_like_200_params", ModelLike(100, 16)),
                        ("c_nn_module_200_params", Model(100, 16))):
        out.append((name, model_call, (model, x)))

    def guards(name, fn, args):
        frame = kg.FrameState()
        s = kg.guards_for_call(args, None, kg.arg_names(fn), frame)
        if name.startswith("c_"):
            model = args[0]
            for i, layer in enumerate(model.layers):
                for p in ("weight", "bias"):
                    node = s.path(kg.arg(0, "model"), kg.attr("layers"), kg.index(i), kg.attr(p))
                    s.check_type(node, torch.nn.Parameter)
                    kg.check_tensor_like(s, node, getattr(layer, p))
        return s

    return [(name, fn, args, guards(name, fn, args)) for name, fn, args in out]


def per_call_ns(stmt, env, number):
    return timeit.Timer(stmt, globals=env).timeit(number) / number * 1e9


def breakdown(number, blocks):
    """What the parts of (a) cost: the call shape alone, each global, the tensor check."""
    from kiln import guards as kg

    x = torch.randn(8, 16)
    parts = {}

    def part(name, build):
        s = kg.GuardSet()
        s.expect_call(1)
        build(s)
        parts[name] = kg.GuardProgram(s).check

    part("call_shape", lambda s: None)
    part("grad_mode", lambda s: s.guard_globals(grad_enabled=True))
    part("default_dtype", lambda s: s.guard_globals(default_dtype=torch.float32))
    part("deterministic", lambda s: s.guard_globals(deterministic=False))
    part("autocast_cpu_cuda", lambda s: s.guard_globals(
        autocast=[("cpu", False, torch.bfloat16), ("cuda", False, torch.float16)]))
    part("all_globals", lambda s: s.guard_current_globals())
    part("type", lambda s: s.check_type(s.path(kg.arg(0, "x")), torch.Tensor))
    part("tensor", lambda s: kg.check_tensor_like(s, s.path(kg.arg(0, "x")), x))
    env = {"one": one, "args": (x,), "x": x, **parts}
    stmts = {"empty": "pass", "bare": "one(x)", **{k: f"{k}(one, args, None)" for k in parts}}
    times = {k: [] for k in stmts}
    for _ in range(blocks):
        for k, stmt in stmts.items():
            times[k].append(per_call_ns(stmt, env, number))
    med = {k: statistics.median(v) for k, v in times.items()}
    out = {k: round(med[k] - med["empty"], 1) for k in stmts if k != "empty"}
    print("breakdown (ns, loop taken off): " + ", ".join(f"{k} {v}" for k, v in out.items()))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=200_000, help="calls per block (c: /100)")
    parser.add_argument("--blocks", type=int, default=9)
    parser.add_argument("--kind", default=f"{os.cpu_count()}cpu", help="machine kind in the file name")
    parser.add_argument("--out", help="results file (default: bench/results/...)")
    parser.add_argument("--breakdown", action="store_true", help="also time the parts of (a)")
    args = parser.parse_args()

    from kiln import guards as kg

    results = {}
    for name, fn, call_args, guard_set in workloads():
        cache = kg.FunctionCache(fn)
        cache.insert(guard_set, fn)
        program = kg.GuardProgram(guard_set)
        assert cache.lookup(call_args, None) is not None, program.explain(fn, call_args)
        assert program.check(fn, call_args, None)
        env = {"lookup": cache.lookup, "check": program.check, "fn": fn, "args": call_args,
               **{f"a{k}": v for k, v in enumerate(call_args)}}
        same = ", ".join(f"a{k}" for k in range(len(call_args)))
        stmts = {"empty": "pass", "bare": f"fn({same})", "lookup": "lookup(args, None)",
                 "check": "check(fn, args, None)"}
        number = args.number // 100 if name.startswith("c_") else args.number
        times = {k: [] for k in stmts}
        for _ in range(args.blocks):  # interleaved: load from elsewhere falls on all alike
            for k, stmt in stmts.items():
                times[k].append(per_call_ns(stmt, env, number))
        med = {k: statistics.median(v) for k, v in times.items()}
        net = {k: max(med[k] - med["empty"], 0.0) for k in ("bare", "lookup", "check")}
        r = {
            "bare_ns": round(net["bare"], 1),
            "lookup_ns": round(net["lookup"], 1),
            "check_ns": round(net["check"], 1),
            "loop_ns": round(med["empty"], 1),
            "lookup_vs_bare": round(net["lookup"] / net["bare"], 2),
            "check_vs_bare": round(net["check"] / net["bare"], 2),
            "instructions": program._native.instructions,
        }
        results[name] = r
        print(f"{name:26s} bare {r['bare_ns']:8.1f} ns  lookup {r['lookup_ns']:8.1f} ns "
              f"(x{r['lookup_vs_bare']:.2f})  check {r['check_ns']:8.1f} ns (x{r['check_vs_bare']:.2f})  "
              f"[{r['instructions']} instructions; loop {r['loop_ns']:.1f} ns]")

    parts = breakdown(args.number, args.blocks) if args.breakdown else None
    a, c = results["a_one_tensor"], results["c_nn_module_200_params"]
    met = {"a_lookup_le_2x_bare": a["lookup_vs_bare"] <= 2.0,
           "c_lookup_le_20us": max(c["lookup_ns"], results["c_module_like_200_params"]["lookup_ns"]) <= 20_000}
    print("targets:", ", ".join(f"{k} {'met' if v else 'MISSED'}" for k, v in met.items()))

    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "-C", str(REPO), "status", "--porcelain"], capture_output=True, text=True).stdout.strip())
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
    now = datetime.datetime.now(datetime.timezone.utc)
    report = {
        "benchmark": "guards",
        "date": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": {"hostname": platform.node(), "nproc": os.cpu_count(), "cpu": cpu},
        "commit": commit,
        "dirty": dirty,
        "config": {"number": args.number, "blocks": args.blocks, "python": sys.version.split()[0],
                   "torch": torch.__version__},
        "target": {"a_lookup_vs_bare": 2.0, "c_lookup_us": 20},
        "met": met,
        "results": results,
        "breakdown_ns": parts,
    }
    out = Path(args.out) if args.out else REPO / "bench" / "results" / f"guards-{args.kind}-{now:%Y-%m-%d}.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
