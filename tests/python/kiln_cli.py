"""Runs the `kiln` CLI of this build (tests of the SDK start and stop stacks with it)."""
import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BIN_DIR = Path(os.environ.get("KILN_BIN_DIR", REPO / "build" / "bin"))


def kiln_cli(run_dir: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN_DIR / "kiln"), "--run-dir", run_dir, *args],
        capture_output=True, text=True, timeout=120,
    )
