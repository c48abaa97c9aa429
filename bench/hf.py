"""bench/hf: Hugging Face GPT-2 training, BERT inference and Llama-style training under eager,
torch.compile and kiln.compile, in one process.

    PYTHONPATH=build/python KILN_BIN_DIR=build/bin python3 bench/hf.py --kind h200

Random weights (transformers 5.17 configs, attention through SDPA), bf16 autocast on the GPU:
- GPT-2 training: GPT2LMHeadModel(GPT2Config()), batch 8 x 1024, loss.backward();
- BERT inference: BertModel(BertConfig()), batch 32 x 512, no_grad;
- Llama-style training: LlamaForCausalLM (hidden 1024, MLP 2816, 8 layers, 16 heads, 4 KV
  heads), batch 4 x 1024, loss.backward().
Each contender runs the same module (same weights) on the same batch: its first call (cold:
tracing and compiling, caches empty), then `--steps` timed steps (median), alternating in
blocks so load falls on all. kiln runs in default mode (graph breaks allowed; `--fullgraph`
adds a fullgraph=True contender). Reported per model: ms a step, the ratio to eager and to
torch.compile (> 1: kiln faster), the cold first call, the largest relative difference of the
loss (or output) from eager's, and what kiln made of it: graphs, graph breaks and frames that
run eagerly, each break with its reason. `--tiny --device cpu` checks the script anywhere.
Writes bench/results/hf-<kind>-<date>.json.
"""
import argparse
import contextlib
import statistics
import time

import torch

from bench_common import private_stack, torch_compiled, write_report


def models(tiny: bool):
    import transformers as tf
    if tiny:
        small = dict(n_embd=64, n_layer=2, n_head=4, n_positions=128, vocab_size=512)
        return {
            "gpt2_train": (lambda: tf.GPT2LMHeadModel(tf.GPT2Config(**small)), (2, 64), 512, True),
            "bert_infer": (lambda: tf.BertModel(tf.BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                                              intermediate_size=128, vocab_size=512)), (2, 64), 512, False),
            "llama_train": (lambda: tf.LlamaForCausalLM(tf.LlamaConfig(
                hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, vocab_size=512, max_position_embeddings=128)), (2, 64), 512, True),
        }
    return {
        "gpt2_train": (lambda: tf.GPT2LMHeadModel(tf.GPT2Config()), (8, 1024), 50257, True),
        "bert_infer": (lambda: tf.BertModel(tf.BertConfig()), (32, 512), 30522, False),
        "llama_train": (lambda: tf.LlamaForCausalLM(tf.LlamaConfig(
            hidden_size=1024, intermediate_size=2816, num_hidden_layers=8, num_attention_heads=16,
            num_key_value_heads=4)), (4, 1024), 32000, True),
    }


def step_fn(module, ids, train: bool, device: str):
    """One step: training (forward with labels, backward, grads cleared) or inference."""
    autocast = torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda")

    def train_step():
        with autocast:
            loss = module(input_ids=ids, labels=ids).loss
        loss.backward()
        return loss.detach()

    def infer_step():
        with torch.no_grad(), autocast:
            return module(input_ids=ids).last_hidden_state

    return train_step if train else infer_step


def sync(device: str):
    if device == "cuda":
        torch.cuda.synchronize()


def kiln_summary(compiled) -> dict:
    """What kiln made of the model: its frames' graphs, breaks and eager entries."""
    import kiln
    from kiln import _compile
    forward = compiled._compiled_forward
    frames = _compile.frames(forward)
    graphs, breaks = _compile._tally(forward)
    eager = sorted({e.value.reason for f in frames if f.cache is not None for e in f.cache.entries
                    if isinstance(e.value, _compile._Eager)})
    root_eager = forward.cache is not None and all(isinstance(e.value, _compile._Eager) for e in forward.cache.entries)
    return {"graphs": graphs, "breaks": breaks, "frames": len(frames), "root_falls_back": root_eager,
            "break_reasons": sorted({b.rsplit("/", 1)[-1] for f in frames for b in f.graph_breaks}),
            "eager_reasons": eager[:40], "explain_lines": len(kiln.explain(compiled).splitlines())}


@contextlib.contextmanager
def phases():
    """Seconds kiln spends inside, by phase: trace, training_compile (partition and codegen
    of a training graph) and codegen (its artifacts, or an inference graph's)."""
    from kiln import _trace, _train, ir
    spent = {"trace": 0.0, "training_compile": 0.0, "codegen": 0.0}
    wrapped = [(_trace, "trace", "trace"), (_train, "compile_training", "training_compile"),
               (_train, "_compile_both", "codegen"), (ir, "compile", "codegen")]
    originals = [getattr(module, name) for module, name, _ in wrapped]

    def timed(fn, key):
        def wrapper(*a, **k):
            start = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent[key] += time.perf_counter() - start
        return wrapper
    for (module, name, key), fn in zip(wrapped, originals):
        setattr(module, name, timed(fn, key))
    try:
        yield spent
    finally:
        for (module, name, _), fn in zip(wrapped, originals):
            setattr(module, name, fn)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--blocks", type=int, default=3)
    parser.add_argument("--tiny", action="store_true", help="small configs (a check of the script)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--only", default="", help="comma-separated model names")
    parser.add_argument("--no-torch-compile", action="store_true")
    parser.add_argument("--fullgraph", action="store_true", help="also kiln.compile(fullgraph=True)")
    parser.add_argument("--kind", default="gpu")
    parser.add_argument("--out")
    args = parser.parse_args()
    device = args.device
    results = {}
    with private_stack() as stack:
        import kiln
        for name, (make, (batch, seq), vocab, train) in models(args.tiny).items():
            if args.only and name not in args.only.split(","):
                continue
            torch.manual_seed(0)
            module = make().to(device)
            module.train(train)
            if train:  # dropout off: every contender computes the same function
                for m in module.modules():
                    if isinstance(m, torch.nn.Dropout):
                        m.p = 0.0
            ids = torch.randint(0, vocab, (batch, seq), device=device, generator=torch.Generator().manual_seed(1)
                                if device == "cpu" else None)
            contenders = {"eager": module, "kiln": kiln.compile(module, stack=stack)}
            if args.fullgraph:
                contenders["kiln_fullgraph"] = kiln.compile(module, stack=stack, fullgraph=True)
            if not args.no_torch_compile:
                contenders["torch_compile"] = torch_compiled(module)
            steps, first, first_phases, outputs, failed = {}, {}, {}, {}, {}
            for who, fn in contenders.items():
                step = step_fn(fn, ids, train, device)
                try:
                    sync(device)
                    with phases() as spent:
                        start = time.perf_counter()
                        outputs[who] = step().float()
                        sync(device)
                        first[who] = time.perf_counter() - start
                    if who.startswith("kiln"):
                        first_phases[who] = {k: round(v, 3) for k, v in spent.items()}
                    steps[who] = step
                except Exception as e:  # a contender that cannot run this model is reported, not fatal
                    failed[who] = f"{type(e).__name__}: {e}"[:400]
                module.zero_grad(set_to_none=True)
            times = {who: [] for who in steps}
            for _ in range(args.blocks):
                for who, step in steps.items():
                    sync(device)
                    for _ in range(args.steps):
                        start = time.perf_counter()
                        step()
                        sync(device)
                        times[who].append(time.perf_counter() - start)
                    module.zero_grad(set_to_none=True)
            ms = {who: statistics.median(t) * 1e3 for who, t in times.items()}
            ref = outputs["eager"]
            row = {"ms": {k: round(v, 3) for k, v in ms.items()},
                   "first_call_s": {k: round(v, 3) for k, v in first.items()},
                   "first_call_phases_s": first_phases,
                   "max_rel_diff_vs_eager": {k: float(((o - ref).abs().max() / ref.abs().max().clamp_min(1e-12)).item())
                                             for k, o in outputs.items() if k != "eager"},
                   "failed": failed, "kiln": kiln_summary(contenders["kiln"])}
            if "kiln" in ms:
                row["kiln_vs_eager"] = round(ms["eager"] / ms["kiln"], 3)
                if "torch_compile" in ms:
                    row["kiln_vs_torch_compile"] = round(ms["torch_compile"] / ms["kiln"], 3)
            results[name] = row
            summary = "  ".join(f"{k} {v:8.2f} ms" for k, v in ms.items())
            print(f"{name:12s} {summary}  kiln/eager x{row.get('kiln_vs_eager', 0):.2f}"
                  f"  kiln/torch.compile x{row.get('kiln_vs_torch_compile', 0):.2f}")
            k = row["kiln"]
            print(f"{'':12s} kiln: {k['graphs']} graphs, {k['breaks']} breaks, {k['frames']} frames, "
                  f"root falls back: {k['root_falls_back']}; first calls (s): {row['first_call_s']}; "
                  f"kiln's phases (s): {first_phases}; "
                  f"diff vs eager: {row['max_rel_diff_vs_eager']}" + (f"; failed: {failed}" if failed else ""))
            del contenders, module
            if device == "cuda":
                torch.cuda.empty_cache()
    config = {"steps": args.steps, "blocks": args.blocks, "tiny": args.tiny, "device": device,
              "torch": torch.__version__}
    write_report("hf", args.kind, args.out, config, results)


if __name__ == "__main__":
    main()
