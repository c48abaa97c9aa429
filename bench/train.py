"""bench/train: a GPT-2 small training step with kiln.compile, eager PyTorch and torch.compile.

    PYTHONPATH=build/python KILN_BIN_DIR=build/bin python3 bench/train.py --kind h100

GPT-2 small (12 layers, 12 heads, 768 wide, 50257 tokens, 124M parameters), batch 8 x 1024
tokens, bf16 autocast, fused AdamW, on the GPU (scripts/device-run runs it; `--tiny --device
cpu` checks the script anywhere). Each contender trains the same initial weights on the same
batch in this process: its first step (cold: tracing and compiling with empty caches), then
`--steps` timed steps. Reported: ms/step, tokens/s, peak memory (torch's allocator), cold
compile seconds (first step minus a warm one), and the largest relative difference of its
losses from eager's. Ratios > 1 mean kiln is better. Writes bench/results/train-<kind>-<date>.json.
"""
import argparse
import gc
import math
import time

import torch
import torch.nn as nn

from bench_common import private_stack, torch_compiled, write_report

F = nn.functional


class Attention(nn.Module):
    def __init__(self, width, heads, dropout=0.0):
        super().__init__()
        self.c_attn = nn.Linear(width, 3 * width)
        self.c_proj = nn.Linear(width, width)
        self.heads, self.width, self.dropout = heads, width, dropout
        self.sdpa = hasattr(F, "scaled_dot_product_attention")  # torch 2.x; 1.13 (the CPU check) spells it out

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.width, dim=2)
        q = q.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        k = k.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        v = v.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                               dropout_p=self.dropout if self.training else 0.0)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            mask = torch.ones(T, T, device=x.device).tril()
            y = F.dropout(F.softmax(att.masked_fill(mask == 0, float("-inf")), dim=-1), self.dropout,
                          self.training) @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(self, width, heads, dropout):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.attn = Attention(width, heads, dropout)
        self.c_fc, self.c_proj = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)
        # nanoGPT's residual dropout (--dropout; none by default, as GPT-2 small is benchmarked)
        self.drop = nn.Dropout(dropout) if dropout > 0 else nn.Identity()

    def forward(self, x):
        x = x + self.drop(self.attn(self.ln_1(x)))
        return x + self.drop(self.c_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh")))


class GPT(nn.Module):
    def __init__(self, vocab, context, layers, heads, width, dropout=0.0):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, width), nn.Embedding(context, width)
        self.drop = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.h = nn.ModuleList([Block(width, heads, dropout) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(width)
        self.lm_head = nn.Linear(width, vocab, bias=False)
        self.wte.weight = self.lm_head.weight
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

    def forward(self, idx, targets):
        T = idx.size(1)
        x = self.drop(self.wte(idx) + self.wpe(torch.arange(0, T, dtype=torch.long, device=idx.device)))
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def run(name, make_forward, model, idx, targets, steps, autocast, profile=False, launches=None, host=None,
        trace=None):
    """Trains `model` through make_forward(model); returns timings, memory and losses.
    `host`: kiln's host-side counters (_host_counters), reset before the timed steps.
    `trace`: with `profile`, the profiled step's host and GPU timeline goes to TRACE.<name>.json.gz."""
    device = idx.device
    cuda = device.type == "cuda"
    forward = make_forward(model)
    fused = {"fused": True} if cuda else {}  # torch 1.13 (the CPU check) has no fused AdamW
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, **fused)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
            loss = forward(idx, targets)
        loss.backward()
        opt.step()
        return loss

    def sync():
        if cuda:
            torch.cuda.synchronize()

    if cuda:
        torch.cuda.reset_peak_memory_stats()
    losses = []
    start = time.perf_counter()
    losses.append(step().item())
    first = time.perf_counter() - start
    losses.append(step().item())  # the second call may still settle (a recompile, lazy loads)
    sync()
    times, queued = [], []
    if host is not None:
        host.clear()
    for _ in range(steps):
        start = time.perf_counter()
        loss = step()
        queued.append(time.perf_counter() - start)  # the host's part: the GPU may still be busy
        sync()
        times.append(time.perf_counter() - start)
        losses.append(loss.item())
    host = dict(host) if host is not None else None  # the timed steps' only, not the profiled one
    if profile and cuda:  # where a step's GPU time goes, by kernel
        from torch.profiler import ProfilerActivity, profile as profiler
        activities = [ProfilerActivity.CUDA] + ([ProfilerActivity.CPU] if trace else [])
        with profiler(activities=activities) as prof:
            step()
            sync()
        if trace:  # where the GPU waits, and what the host does meanwhile (chrome://tracing, Perfetto)
            import gzip
            import os
            import tempfile
            with tempfile.TemporaryDirectory() as tmp:
                prof.export_chrome_trace(os.path.join(tmp, "trace.json"))
                with open(os.path.join(tmp, "trace.json"), "rb") as f, gzip.open(f"{trace}.{name}.json.gz", "wb") as g:
                    g.write(f.read())
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=60, max_name_column_width=60),
              flush=True)
        if launches:  # every kernel of the step in the GPU's order, to set beside kiln.explain's kernel lists
            kernels = sorted((e for e in prof.events() if e.device_type.name == "CUDA"),
                             key=lambda e: e.time_range.start)
            with open(f"{launches}.{name}.tsv", "w") as f:
                f.writelines(f"{e.time_range.elapsed_us():.1f}\t{e.name}\n" for e in kernels)
    times.sort()
    queued.sort()
    per_step = times[len(times) // 2]
    tokens = idx.numel()
    r = {"ms_per_step": round(per_step * 1e3, 2), "tokens_per_s": round(tokens / per_step),
         "host_ms_per_step": round(queued[len(queued) // 2] * 1e3, 2),
         "cold_compile_s": round(max(first - per_step, 0.0), 2), "losses": [round(x, 5) for x in losses]}
    if cuda:  # reserved: what the allocator holds, CUDA graphs' private pools included
        r["peak_memory_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
        r["peak_reserved_gib"] = round(torch.cuda.max_memory_reserved() / 2**30, 2)
    print(f"{name:14s} {r['ms_per_step']:9.2f} ms/step  {r['tokens_per_s']:8d} tok/s  "
          f"peak {r.get('peak_memory_gib', '-')} GiB  cold {r['cold_compile_s']} s  loss {losses[0]:.4f} -> {losses[-1]:.4f}",
          flush=True)
    if host:
        r["host_ms_per_step_by_part"] = {k: round(v * 1e3 / steps, 2) if isinstance(v, float) else v // steps
                                         for k, v in sorted(host.items())}
        print(f"{name:14s} host ms a step: {r['host_ms_per_step']} ({r['host_ms_per_step_by_part']})", flush=True)
    else:
        print(f"{name:14s} host ms a step: {r['host_ms_per_step']}", flush=True)
    return r


def _host_counters() -> dict:
    """Host seconds of kiln's artifact calls a step: the SDK's whole call (`call`), the C++
    run inside it (`run`, which includes its allocations from torch's allocator, made in
    C++), and how many calls (an int), summed over calls (ir.Compiled, wrapped)."""
    from kiln import ir
    counters = {}

    def add(key, value):
        counters[key] = counters.get(key, 0) + value

    class Timed:
        def __init__(self, artifact):
            self._inner = artifact

        def __getattr__(self, name):
            return getattr(self._inner, name)

        def run(self, *args):
            start = time.perf_counter()
            try:
                return self._inner.run(*args)
            finally:
                add("run", time.perf_counter() - start)

    init = ir.Compiled.__init__

    def timed_init(self, *a, **k):
        init(self, *a, **k)
        self._artifact = Timed(self._artifact)

    def timed(call):
        def timed_call(self, *a, **k):
            start = time.perf_counter()
            try:
                return call(self, *a, **k)
            finally:
                add("call", time.perf_counter() - start)
                add("calls", 1)
        return timed_call
    ir.Compiled.__init__ = timed_init
    for name in ("__call__", "run_keeping", "run_after"):  # inference; a training forward, backward
        setattr(ir.Compiled, name, timed(getattr(ir.Compiled, name)))
    return counters


def _timed_phases() -> dict:
    """Seconds kiln.compile spends tracing, partitioning (with codegen of both graphs) and in
    codegen alone, summed over calls (the SDK's module functions, wrapped)."""
    from kiln import _trace, _train, ir
    phases = {}

    def wrap(module, name, phase):
        inner = getattr(module, name)

        def timed(*a, **k):
            start = time.perf_counter()
            try:
                return inner(*a, **k)
            finally:
                phases[phase] = phases.get(phase, 0.0) + time.perf_counter() - start
        setattr(module, name, timed)

    wrap(_trace, "trace", "trace")
    wrap(_train, "compile_training", "partition_and_codegen")
    wrap(ir, "compile", "codegen")
    return phases


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", default="gpu", help="machine kind in the file name")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--tiny", action="store_true", help="2 layers, 64 wide, batch 2 x 64: checks the script")
    parser.add_argument("--only", help="comma-separated contenders, run in that order: eager, torch_compile, "
                                       "kiln, torch_compile_reduce_overhead, kiln_reduce_overhead (all by "
                                       "default, in this order; a later contender shares the process with "
                                       "what ran before it, torch.compile's worker threads included)")
    parser.add_argument("--profile", help="comma-separated contenders to profile one step of")
    parser.add_argument("--out", help="results file (default: bench/results/...)")
    parser.add_argument("--explain", help="write kiln.explain of the compiled model (graphs, kernels) here")
    parser.add_argument("--launches", help="with --profile: write each profiled step's kernels in order to "
                                           "LAUNCHES.<contender>.tsv (microseconds, name)")
    parser.add_argument("--trace", help="with --profile: write each profiled step's timeline (host and GPU) to "
                                         "TRACE.<contender>.json.gz")
    parser.add_argument("--host", action="store_true", help="split kiln's host time a step by part (wraps the SDK)")
    parser.add_argument("--memory-budget", type=float, help="kiln.compile's memory_budget (default: its own)")
    parser.add_argument("--dropout", type=float, default=0.0,
                        help="nanoGPT's dropout after the embeddings, on each residual branch and on the attention "
                             "weights (losses then differ from eager's: each compiler draws its own masks)")
    args = parser.parse_args()
    profiled = set(args.profile.split(",")) if args.profile else set()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("bench/train needs a GPU (or --device cpu --tiny)")
    config = (dict(vocab=50257, context=1024, layers=12, heads=12, width=768, batch=8) if not args.tiny else
              dict(vocab=512, context=64, layers=2, heads=4, width=64, batch=2))
    autocast = device.type == "cuda"
    torch.manual_seed(0)
    idx = torch.randint(0, config["vocab"], (config["batch"], config["context"]), device=device)
    targets = torch.randint(0, config["vocab"], (config["batch"], config["context"]), device=device)
    shape = (config["vocab"], config["context"], config["layers"], config["heads"], config["width"], args.dropout)
    initial = GPT(*shape).state_dict()

    def fresh():
        model = GPT(*shape).to(device)
        model.load_state_dict(initial)
        return model

    order = ["eager", "torch_compile", "kiln", "torch_compile_reduce_overhead", "kiln_reduce_overhead"]
    only = list(dict.fromkeys(args.only.split(","))) if args.only else order
    if set(only) - set(order):
        parser.error(f"--only: unknown contenders {sorted(set(only) - set(order))} (have: {', '.join(order)})")
    results = {}
    kiln_options = {} if args.memory_budget is None else {"memory_budget": args.memory_budget}
    with private_stack() as stack:
        import kiln

        # reduce-overhead: both compilers replay CUDA graphs (torch's cudagraph trees, kiln._cudagraph)
        contenders = {"eager": lambda m: m, "torch_compile": torch_compiled,
                      "kiln": lambda m: kiln.compile(m, stack=stack, options=kiln_options),
                      "torch_compile_reduce_overhead": lambda m: torch_compiled(m, "reduce-overhead"),
                      "kiln_reduce_overhead": lambda m: kiln.compile(m, stack=stack, options=kiln_options,
                                                                      mode="reduce-overhead")}
        for name in only:
            make = contenders[name]
            model = fresh()
            made = []
            kiln_run = name.startswith("kiln")
            phases = _timed_phases() if kiln_run else None
            host = _host_counters() if kiln_run and args.host else None
            results[name] = run(name, lambda m: made.append(make(m)) or made[-1], model, idx, targets,
                                args.steps, autocast, name in profiled, args.launches, host, args.trace)
            if phases:
                results[name]["cold_phases_s"] = {k: round(v, 2) for k, v in phases.items()}
                print("kiln cold compile by phase (s):", results[name]["cold_phases_s"], flush=True)
            if kiln_run:  # numbers of a run that fell back to eager would say nothing of kiln
                compiled = made[0]._compiled_forward
                results[name]["entries"] = len(compiled.cache.entries)
                results[name]["fell_back"] = compiled.fallback_reasons
                if compiled.fallback_reasons:
                    print("kiln FELL BACK to eager:", compiled.fallback_reasons, flush=True)
                for entry in compiled.cache.entries:  # reduce-overhead: how many calls replayed graphs
                    runner = entry.value
                    for part in ("forward", "backward"):
                        replayed = getattr(getattr(runner, part, None), "replays", None)
                        if replayed is not None:
                            results[name][f"{part}_replays"] = replayed
                            results[name][f"{part}_uncaptured_because"] = getattr(runner, part).reasons
                            print(f"{name} {part}: {replayed} replays; uncaptured because "
                                  f"{getattr(runner, part).reasons}", flush=True)
                if args.explain:
                    with open(args.explain, "w") as f:
                        f.write(kiln.explain(made[0]))
            del model, made
            if name.startswith("torch_compile"):  # its CUDA graphs' memory goes with its caches
                torch._dynamo.reset()
            gc.collect()
            if device.type == "cuda":
                torch.cuda.empty_cache()

    eager = results.get("eager")
    for name, r in results.items():
        if eager and name != "eager":
            r["max_rel_loss_diff_vs_eager"] = max(abs(a - b) / abs(b) for a, b in zip(r["losses"], eager["losses"]))
    summary = {}
    for mode in ("", "_reduce_overhead"):  # kiln against torch.compile in the same mode
        k, t = results.get("kiln" + mode), results.get("torch_compile" + mode)
        if not k or not t:
            continue
        summary.update({
            f"tokens_per_s_vs_torch_compile{mode}": round(k["tokens_per_s"] / t["tokens_per_s"], 3),
            f"cold_compile_fraction_of_torch_compile{mode}": round(k["cold_compile_s"] / max(t["cold_compile_s"], 1e-9), 3)})
        if "peak_memory_gib" in k:
            summary[f"peak_memory_vs_torch_compile{mode}"] = round(k["peak_memory_gib"] / t["peak_memory_gib"], 3)
            summary[f"peak_reserved_vs_torch_compile{mode}"] = round(k["peak_reserved_gib"] / t["peak_reserved_gib"], 3)
    if summary:
        print("summary", summary, flush=True)
    results["summary"] = summary
    write_report("train", args.kind, args.out,
                 {**config, "dropout": args.dropout, "steps": args.steps, "order": only, "autocast": "bf16" if autocast else None, "torch": torch.__version__,
                  "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu"},
                 results, target={"tokens_per_s_vs_torch_compile": 1.0, "peak_memory_vs_torch_compile": 1.0,
                                  "cold_compile_fraction_of_torch_compile": 0.2})


if __name__ == "__main__":
    main()
