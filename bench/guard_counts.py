"""bench/guard_counts: shape guards per compiled entry before and after the shapes
service's `simplify`, over the tracer's program corpus (tests/python/programs), in one run.

    PYTHONPATH=build/python .venv/bin/python bench/guard_counts.py

Every program runs as the corpus test runs it (kiln.compile, then repeat, float64 and
other-size calls: the size-`n` programs get a dynamic entry). Each time kiln.compile
inserts an entry, the traced guard set's shape guards are counted as traced and as
inserted (simplified). Prints the totals, the ratio, the entries with the largest cuts,
and writes bench/results/guard_counts-<kind>-<date>.json. A private stack.
"""
import argparse
import collections
import contextlib
import io
import sys
from pathlib import Path

from bench_common import REPO, private_stack, write_report

sys.path.insert(0, str(REPO / "tests" / "python" / "programs"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", default="2cpu", help="machine kind in the results file name")
    parser.add_argument("--out", help="results file (default bench/results/guard_counts-<kind>-<date>.json)")
    parser.add_argument("--show", type=int, default=8, help="entries with the largest cuts to print")
    options = parser.parse_args()

    import corpus
    from kiln import _compile, _kiln

    def shape_guards(guard_bytes: bytes) -> list:
        """The set's shape guards as text (GuardSet.text() lists them last)."""
        from kiln import guards
        count = len(_kiln.capnp_decode("GuardSet", guard_bytes)["shapeGuards"])
        lines = guards.GuardSet.from_bytes(guard_bytes).text().splitlines()
        return lines[len(lines) - count:] if count else []

    entries = []  # (program, shape guards traced, simplified)
    current = {"name": ""}
    simplified = _compile.CompiledFunction._simplified

    def recording(self, guard_bytes):
        out = simplified(self, guard_bytes)
        entries.append((current["name"], len(shape_guards(guard_bytes)), len(shape_guards(out))))
        return out

    _compile.CompiledFunction._simplified = recording
    corpus.load_all()
    outcomes = collections.Counter()
    dynamic = []  # (program, traced, simplified, texts traced, texts simplified)
    with private_stack() as stack:
        for p in corpus.PROGRAMS:
            current["name"] = p.name
            with contextlib.redirect_stderr(io.StringIO()):
                outcomes[corpus.run(p, stack).kind] += 1
        _compile.CompiledFunction._simplified = simplified
        for p in corpus.PROGRAMS:
            traced = trace_all_dynamic(p, stack)
            if traced is not None:
                out = stack.simplify_guards(traced.guards)
                dynamic.append((p.name, shape_guards(traced.guards), shape_guards(out)))

    with_shapes = [e for e in entries if e[1] > 0]
    before = sum(e[1] for e in entries)
    after = sum(e[2] for e in entries)
    print(f"programs: {dict(outcomes)}; entries inserted: {len(entries)}, with shape guards: {len(with_shapes)}")
    print(f"shape guards: {before} traced -> {after} simplified ({after / max(before, 1):.2f}x)")

    dyn_before = sum(len(e[1]) for e in dynamic)
    dyn_after = sum(len(e[2]) for e in dynamic)
    print(f"every dim of every tensor argument dynamic: {len(dynamic)} programs traced, "
          f"{sum(1 for e in dynamic if e[1])} with shape guards")
    print(f"shape guards: {dyn_before} traced -> {dyn_after} simplified ({dyn_after / max(dyn_before, 1):.2f}x)")
    for name, b, a in sorted(dynamic, key=lambda e: len(e[2]) - len(e[1]))[:options.show]:
        print(f"  {name}: {len(b)} -> {len(a)}")
        print(f"    traced:     {'; '.join(b)}")
        print(f"    simplified: {'; '.join(a)}")
    write_report("guard_counts", options.kind, options.out,
                 {"programs": len(corpus.PROGRAMS)},
                 {"corpus_run": {"entries": len(entries), "entries_with_shape_guards": len(with_shapes),
                                 "shape_guards_traced": before, "shape_guards_simplified": after},
                  "all_dynamic": {"programs_traced": len(dynamic),
                                  "with_shape_guards": sum(1 for e in dynamic if e[1]),
                                  "shape_guards_traced": dyn_before, "shape_guards_simplified": dyn_after,
                                  "ratio": round(dyn_after / max(dyn_before, 1), 3),
                                  "per_program": [{"program": n, "traced": len(b), "simplified": len(a)}
                                                  for n, b, a in dynamic if b]}})


def trace_all_dynamic(p, stack):
    """The program traced with every dim of its tensor arguments marked dynamic (None if it
    does not trace)."""
    import inspect

    import torch
    import corpus
    from kiln import _compile, _trace, guards

    args, kwargs = corpus.arguments(p)
    frame = guards.FrameState()
    try:
        bound = inspect.signature(p.fn).bind(*args, **kwargs)
    except (TypeError, ValueError):
        return None
    for name, value in bound.arguments.items():
        if isinstance(value, torch.Tensor):
            for k in range(value.dim()):
                frame.mark(f"L['{name}'].size()[{k}]", True)
    try:
        return _trace.trace(p.fn, args, kwargs, frame=_compile._frame_dict(frame), stack=stack)
    except _trace.Unsupported:
        return None


if __name__ == "__main__":
    main()
