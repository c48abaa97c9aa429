"""bench/cpu_fusion: kiln's compiled CPU kernels against torch eager and torch.compile, in one run.

    PYTHONPATH=build/python KILN_BIN_DIR=build/bin .venv/bin/python bench/cpu_fusion.py

Starts a private stack (its own run dir and artifact cache), compiles four graphs through the
codegen service — a pointwise chain, softmax over the last dim, residual + layer_norm, a
two-layer MLP — and times each compiled call against the same computation in torch eager and
under torch.compile (Inductor's C++/OpenMP CPU backend) on the same tensors (median of
interleaved rounds). Also times compiling: kiln cold (an empty cache, the C++ compiler runs)
and warm (a cache hit through the stack), and torch.compile's cold compile (its caches off).
Prints the ratios and writes bench/results/cpu_fusion-<kind>-<date>.json. Ratios > 1 mean kiln
is faster.
"""
import argparse
import os
import time

import torch

from bench_common import interleaved, private_stack, torch_compiled, write_report


def graphs(batch: int):
    """(name, graph, inputs, eager function) for each workload."""
    from kiln import ir

    out = []
    d = 1024
    g = ir.Graph()
    s0 = g.symbol("s0", hint=batch, min=1)
    x = g.placeholder("x", "float32", [s0, d])
    a = g.placeholder("a", "float32", [d])
    b = g.placeholder("b", "float32", [d])
    y = g.call("gelu", g.call("add", g.call("mul", x, a), b))
    g.set_outputs([g.call("mul", y, g.call("sigmoid", x))])
    tx, ta, tb = torch.randn(batch, d), torch.randn(d), torch.randn(d)
    eager = lambda x, a, b: torch.nn.functional.gelu(x * a + b) * torch.sigmoid(x)
    out.append(("pointwise_chain", g, (tx, ta, tb), eager))

    g = ir.Graph()
    s0 = g.symbol("s0", hint=batch, min=1)
    x = g.placeholder("x", "float32", [s0, d])
    g.set_outputs([g.call("softmax", x, dim=-1)])
    out.append(("softmax", g, (torch.randn(batch, d),), lambda x: torch.softmax(x, -1)))

    g = ir.Graph()
    s0 = g.symbol("s0", hint=batch, min=1)
    x = g.placeholder("x", "float32", [s0, d])
    r = g.placeholder("r", "float32", [s0, d])
    w = g.placeholder("w", "float32", [d])
    bb = g.placeholder("b", "float32", [d])
    g.set_outputs([g.call("layer_norm", g.call("add", x, r), [d], w, bb)])
    ins = (torch.randn(batch, d), torch.randn(batch, d), torch.randn(d), torch.randn(d))
    eager = lambda x, r, w, b: torch.nn.functional.layer_norm(x + r, [d], w, b)
    out.append(("residual_layer_norm", g, ins, eager))

    g = ir.Graph()
    s0 = g.symbol("s0", hint=batch, min=1)
    x = g.placeholder("x", "float32", [s0, 512])
    w1 = g.placeholder("w1", "float32", [2048, 512])
    b1 = g.placeholder("b1", "float32", [2048])
    w2 = g.placeholder("w2", "float32", [512, 2048])
    b2 = g.placeholder("b2", "float32", [512])
    h = g.call("gelu", g.call("linear", x, w1, b1))
    g.set_outputs([g.call("linear", h, w2, b2)])
    ins = (torch.randn(batch, 512), torch.randn(2048, 512) * 0.05, torch.randn(2048),
           torch.randn(512, 2048) * 0.05, torch.randn(512))
    F = torch.nn.functional
    eager = lambda x, w1, b1, w2, b2: F.linear(F.gelu(F.linear(x, w1, b1)), w2, b2)
    out.append(("mlp_forward", g, ins, eager))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--threads", type=int, help="torch.set_num_threads(N) first; kiln's kernels "
                        "share torch's OpenMP runtime, so both run on N threads (default: torch's choice)")
    parser.add_argument("--kind", default=f"{os.cpu_count()}cpu", help="machine kind in the file name")
    parser.add_argument("--out", help="results file (default: bench/results/...)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    results = {}
    with private_stack() as stack:
        from kiln import ir

        for name, graph, inputs, eager in graphs(args.batch):
            start = time.perf_counter()
            compiled = ir.compile(graph, stack)
            cold = time.perf_counter() - start
            start = time.perf_counter()
            warm_compiled = ir.compile(graph, stack)
            warm = time.perf_counter() - start
            assert warm_compiled.cache_hit and not compiled.cache_hit
            expected = eager(*inputs)
            (got,) = compiled(*inputs)
            torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
            inductor = torch_compiled(eager)
            start = time.perf_counter()
            torch.testing.assert_close(inductor(*inputs), expected, rtol=1e-4, atol=1e-4)
            tc_cold = time.perf_counter() - start
            for _ in range(3):  # warm up all three
                compiled(*inputs)
                eager(*inputs)
                inductor(*inputs)
            k, e, t = interleaved(lambda: compiled(*inputs), lambda: eager(*inputs), lambda: inductor(*inputs),
                                  rounds=args.rounds)
            results[name] = {
                "kiln_ms": round(k * 1e3, 4),
                "eager_ms": round(e * 1e3, 4),
                "torch_compile_ms": round(t * 1e3, 4),
                "speedup_vs_eager": round(e / k, 3),
                "speedup_vs_torch_compile": round(t / k, 3),
                "compile_cold_s": round(cold, 3),
                "compile_warm_ms": round(warm * 1e3, 2),
                "torch_compile_cold_s": round(tc_cold, 3),
                "kernels": compiled.explain.count("kernel "),
                "extern_calls": compiled.explain.count("extern "),
            }
            r = results[name]
            print(f"{name:20s} kiln {r['kiln_ms']:8.3f} ms  eager {r['eager_ms']:8.3f} ms (x{r['speedup_vs_eager']:.2f})"
                  f"  torch.compile {r['torch_compile_ms']:8.3f} ms (x{r['speedup_vs_torch_compile']:.2f})"
                  f"  cold kiln {r['compile_cold_s']:.2f} s / torch.compile {r['torch_compile_cold_s']:.2f} s"
                  f"  warm {r['compile_warm_ms']:.1f} ms  ({r['kernels']} kernels, {r['extern_calls']} extern)")
    write_report("cpu_fusion", args.kind, args.out,
                 {"batch": args.batch, "rounds": args.rounds, "dtype": "float32", "torch": torch.__version__,
                  "torch_threads": torch.get_num_threads()},
                 results, target={"speedup_vs_eager_fused": 1.5, "compile_cold_s": 1.5})


if __name__ == "__main__":
    main()
