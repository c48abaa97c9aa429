"""bench/e2e_cpu: kiln.compile end to end on the CPU, against eager and torch.compile in the same run.

    PYTHONPATH=build/python KILN_BIN_DIR=build/bin .venv/bin/python bench/e2e_cpu.py

Starts a private stack (its own run dir and artifact cache) and measures:
- per-call overhead: a compiled trivial function (`x + 1` on a 1-element tensor) against
  the same eager call — the guard fast path, the artifact launch and the output wrapping;
- the compile latency of a nanoGPT-style transformer block (LayerNorm, causal attention
  written out, GELU MLP): the first call (trace + codegen, an empty cache) and the first
  call of a second compiled wrapper of the same code (trace again, codegen cache hit),
  beside torch.compile's first call (Inductor's C++/OpenMP CPU backend, its caches off);
- that block's steady-state call time against eager and torch.compile.
The trivial call is timed under torch.compile too.
- a graph break's host cost: the same three ops on 16 elements with and without a call
  the tracer refuses between them (`id(x)`: the code before compiles, the call runs
  eagerly, the rest resumes compiled), beside eager and torch.compile (its own break);
  the break's cost is kiln's extra time less the refused call's eager cost;
- a function kiln runs eagerly whole (a break it cannot take: a range made in the traced
  code live at a branch on data) against the eager call: what the fallback costs;
- the frame hook's cost: such a fallback calling 40 Python functions kiln does not compile
  (20 of the standard library's, 20 of the user's that compute no tensor), per frame.
Prints the numbers and writes bench/results/e2e_cpu-<kind>-<date>.json.
"""
import argparse
import math
import os
import platform
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from bench_common import interleaved, private_stack, torch_compiled, write_report


class Attention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.heads = heads

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        hd = c // self.heads
        q = q.view(b, t, self.heads, hd).transpose(1, 2)
        k = k.view(b, t, self.heads, hd).transpose(1, 2)
        v = v.view(b, t, self.heads, hd).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        att = att.masked_fill(torch.ones(t, t).tril() == 0, float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        return self.proj(y.transpose(1, 2).contiguous().view(b, t, c))


class Block(nn.Module):
    def __init__(self, d=256, heads=4):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = Attention(d, heads)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--kind", default=f"{os.cpu_count()}cpu", help="machine kind in the file name")
    parser.add_argument("--out", help="results file (default: bench/results/...)")
    args = parser.parse_args()

    results = {}
    with private_stack() as stack:
        import kiln

        # Per-call overhead.
        def trivial(x):
            return x + 1
        fast = kiln.compile(trivial, stack=stack)
        inductor = torch_compiled(trivial)
        x = torch.randn(1)
        torch.testing.assert_close(fast(x), trivial(x))
        torch.testing.assert_close(inductor(x), trivial(x))
        k, e, t = interleaved(lambda: fast(x), lambda: trivial(x), lambda: inductor(x), rounds=args.rounds)
        results["trivial_call"] = {"kiln_us": round(k * 1e6, 2), "eager_us": round(e * 1e6, 2),
                                   "torch_compile_us": round(t * 1e6, 2), "overhead_us": round((k - e) * 1e6, 2)}
        print(f"trivial call           kiln {k * 1e6:8.1f} us  eager {e * 1e6:8.1f} us  "
              f"torch.compile {t * 1e6:8.1f} us  kiln's overhead {(k - e) * 1e6:7.1f} us")

        # A graph break's cost, and a whole-function fallback's.
        def unbroken(x):
            y = x + 1
            return (y * 2) - 1

        def broken(x):
            y = x + 1
            id(x)  # a call the tracer refuses: a graph break
            return (y * 2) - 1

        def falls_back(x):
            steps = range(2)  # made in the traced code and live at the branch: no break there
            if x.sum() > 100:
                return x * len(steps)
            return x + 1

        xs = torch.randn(16)
        whole, split, eager_only = (kiln.compile(f, stack=stack) for f in (unbroken, broken, falls_back))
        broken_tc = torch_compiled(broken)
        for fast_f, f in ((whole, unbroken), (split, broken), (eager_only, falls_back), (broken_tc, broken)):
            torch.testing.assert_close(fast_f(xs), f(xs))
        assert split.graph_breaks and not split.fallback_reasons, kiln.explain(split)
        assert eager_only.fallback_reasons, kiln.explain(eager_only)
        kw, ks, eu, eb, tb, kf, ef = interleaved(
            lambda: whole(xs), lambda: split(xs), lambda: unbroken(xs), lambda: broken(xs), lambda: broken_tc(xs),
            lambda: eager_only(xs), lambda: falls_back(xs), rounds=args.rounds)
        cost = (ks - kw) - (eb - eu)
        results["graph_break"] = {
            "kiln_unbroken_us": round(kw * 1e6, 2), "kiln_broken_us": round(ks * 1e6, 2),
            "eager_unbroken_us": round(eu * 1e6, 2), "eager_broken_us": round(eb * 1e6, 2),
            "torch_compile_broken_us": round(tb * 1e6, 2), "break_cost_us": round(cost * 1e6, 2),
            "kiln_fallback_us": round(kf * 1e6, 2), "eager_of_fallback_us": round(ef * 1e6, 2)}
        print(f"graph break            kiln {ks * 1e6:8.1f} us (unbroken {kw * 1e6:.1f})  eager {eb * 1e6:8.1f} us "
              f"(unbroken {eu * 1e6:.1f})  torch.compile {tb * 1e6:8.1f} us  a break costs {cost * 1e6:7.1f} us\n"
              f"whole fallback         kiln {kf * 1e6:8.1f} us  eager {ef * 1e6:8.1f} us")

        # The frame hook on frames it skips (the standard library's) or cannot compile.
        def no_tensor(v):
            return v

        def falls_back_calling(x):
            steps = range(2)
            if x.sum() > 100:
                return x * len(steps)
            for _ in range(20):
                no_tensor(x)
                os.path.join("a", "b")
            return x + 1

        hooked = kiln.compile(falls_back_calling, stack=stack)
        torch.testing.assert_close(hooked(xs), falls_back_calling(xs))
        assert hooked.fallback_reasons, kiln.explain(hooked)
        kh, eh = interleaved(lambda: hooked(xs), lambda: falls_back_calling(xs), rounds=args.rounds)
        per_frame = ((kh - eh) - (kf - ef)) / 40
        results["frame_hook"] = {"kiln_us": round(kh * 1e6, 2), "eager_us": round(eh * 1e6, 2), "frames": 40,
                                 "per_frame_us": round(per_frame * 1e6, 3)}
        print(f"frame hook (40 frames) kiln {kh * 1e6:8.1f} us  eager {eh * 1e6:8.1f} us  "
              f"{per_frame * 1e9:7.0f} ns a frame beyond the fallback's own cost")

        # The transformer block: compile latency, then steady state.
        torch.manual_seed(0)
        block = Block().eval()
        xb = torch.randn(4, 64, 256)
        with torch.no_grad():
            compiled = kiln.compile(block, stack=stack)
            start = time.perf_counter()
            got = compiled(xb)
            cold = time.perf_counter() - start
            again = kiln.compile(block, stack=stack)
            start = time.perf_counter()
            again(xb)
            warm = time.perf_counter() - start
            expected = block(xb)
            torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
            fallbacks = compiled._compiled_forward.fallback_reasons
            inductor = torch_compiled(block)
            start = time.perf_counter()
            torch.testing.assert_close(inductor(xb), expected, rtol=1e-4, atol=1e-4)
            tc_cold = time.perf_counter() - start
            kb, eb, tb = interleaved(lambda: compiled(xb), lambda: block(xb), lambda: inductor(xb),
                                     rounds=max(args.rounds // 20, 5))
        results["transformer_block"] = {
            "shape": list(xb.shape), "compile_cold_s": round(cold, 3), "compile_warm_s": round(warm, 3),
            "torch_compile_cold_s": round(tc_cold, 3),
            "kiln_ms": round(kb * 1e3, 3), "eager_ms": round(eb * 1e3, 3), "torch_compile_ms": round(tb * 1e3, 3),
            "speedup_vs_eager": round(eb / kb, 3), "speedup_vs_torch_compile": round(tb / kb, 3),
            "fell_back": fallbacks,
        }
        print(f"transformer block      compile cold {cold:6.2f} s  warm {warm:6.2f} s  torch.compile cold "
              f"{tc_cold:6.2f} s\n                       kiln {kb * 1e3:8.3f} ms  eager {eb * 1e3:8.3f} ms (x{eb / kb:.2f})"
              f"  torch.compile {tb * 1e3:8.3f} ms (x{tb / kb:.2f})"
              + (f"  (fell back: {fallbacks})" if fallbacks else ""))
    write_report("e2e_cpu", args.kind, args.out,
                 {"rounds": args.rounds, "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
                  "python": platform.python_version()}, results)


if __name__ == "__main__":
    main()
