"""What the Python benchmarks share: a private stack, timing, and the results file.

Each benchmark measures in one run against a baseline measured in the same run,
and writes bench/results/<name>-<kind>-<date>.json with the date, the machine
(hostname, nproc, CPU model) and the commit (`dirty` when the tree had changes; $KILN_COMMIT
when set, as the GPU machine's runs pass it).
"""
import contextlib
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN_DIR = Path(os.environ.get("KILN_BIN_DIR", REPO / "build" / "bin"))


@contextlib.contextmanager
def private_stack():
    """A stack of this run's own (run dir and artifact cache), stopped and removed after;
    its services' logs are kept under $KILN_BENCH_LOGS when that is set. Its compiles are
    cold: an empty artifact cache, and NVRTC without the driver's compute cache (which it
    uses where a CUDA driver is installed: an identical program compiled before on the
    machine, by any process, would come from there)."""
    run_dir = tempfile.mkdtemp(prefix="kb", dir="/tmp")
    cache = tempfile.mkdtemp(prefix="kiln-bench-cache-")
    os.environ["KILN_CACHE_DIR"] = cache
    up = subprocess.run([str(BIN_DIR / "kiln"), "--run-dir", run_dir, "up"], capture_output=True, text=True,
                        env={**os.environ, "CUDA_CACHE_DISABLE": "1"})
    if up.returncode != 0:
        sys.exit(f"kiln up failed: {up.stdout}{up.stderr}")
    try:
        import kiln
        yield kiln.connect(run_dir)
    finally:
        if os.environ.get("KILN_BENCH_LOGS"):  # `down` removes the run dir, logs and all
            shutil.copytree(os.path.join(run_dir, "logs"),
                            os.path.join(os.environ["KILN_BENCH_LOGS"], os.path.basename(run_dir)),
                            dirs_exist_ok=True)
        subprocess.run([str(BIN_DIR / "kiln"), "--run-dir", run_dir, "down"], capture_output=True)
        shutil.rmtree(run_dir, ignore_errors=True)
        shutil.rmtree(cache, ignore_errors=True)


def cpu_busy(seconds: float = 0.1) -> float:
    """The fraction of this machine's CPU time (all CPUs) spent busy over `seconds`."""
    def ticks():
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
        return sum(fields), fields[3] + fields[4]  # all, idle + iowait
    total, idle = ticks()
    time.sleep(seconds)
    total2, idle2 = ticks()
    return 1.0 - (idle2 - idle) / max(total2 - total, 1)


def quiet_cpu(below: float = 0.05, timeout_s: float = 5.0) -> None:
    """Waits until the machine's CPUs are idle (or `timeout_s` passed). A cold compile timed
    right after torch.compile's ran beside its leftover work: on an H100 host (16 CPUs,
    2026-11-28) kiln's softmax compiled in 84 ms right after a torch.compile, 58 ms once
    the CPUs were idle. Not before torch.compile's: waited for, its worker pool goes idle
    and its next compile took ~0.7 s more (softmax 0.33 -> 1.23 s)."""
    deadline = time.perf_counter() + timeout_s
    while time.perf_counter() < deadline and cpu_busy() > below:
        pass


def median_seconds(fn, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def interleaved(*fns, rounds: int, blocks: int = 5) -> tuple:
    """Medians of each of `fns` timed in alternating blocks, so load from elsewhere falls on all."""
    times = [[] for _ in fns]
    for _ in range(blocks):
        for fn, t in zip(fns, times):
            t.append(median_seconds(fn, rounds))
    return tuple(statistics.median(t) for t in times)


def torch_compiled(fn, mode=None):
    """torch.compile of `fn` (Inductor: Triton on CUDA, C++/OpenMP on the CPU) with Inductor's
    caches off, so its first call is a cold compile."""
    import torch
    import torch._inductor.config as inductor

    inductor.force_disable_caches = True
    torch._dynamo.reset()
    return torch.compile(fn, mode=mode)


def write_report(name: str, kind: str, out: str | None, config: dict, results: dict, target: dict | None = None):
    # $KILN_COMMIT where git cannot tell: the GPU machine's copy of the tree carries stale git
    # metadata (scripts/device-run)
    pinned = os.environ.get("KILN_COMMIT")
    commit = pinned or subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = not pinned and bool(subprocess.run(
        ["git", "-C", str(REPO), "status", "--porcelain"], capture_output=True, text=True).stdout.strip())
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")),
               platform.processor())
    now = datetime.datetime.now(datetime.timezone.utc)
    report = {
        "benchmark": name,
        "date": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": {"hostname": platform.node(), "nproc": os.cpu_count(), "cpu": cpu},
        "commit": commit,
        "dirty": dirty,
        "config": config,
    }
    if target:
        report["target"] = target
    report["results"] = results
    path = Path(out) if out else REPO / "bench" / "results" / f"{name}-{kind}-{now:%Y-%m-%d}.json"
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {path}")
