"""A real stack for the SDK tests: `kiln up` in a fresh run dir, `kiln down` at the end."""
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from kiln_cli import kiln_cli


@pytest.fixture(scope="session")
def run_dir():
    """The run dir of a stack that lives for the whole session (short: unix socket paths < 100)."""
    run_dir = tempfile.mkdtemp(prefix="kt", dir="/tmp")
    # A cache of the session's own: the stack's codegen and kiln.ir.compile read
    # KILN_CACHE_DIR, so tests neither see nor leave artifacts elsewhere.
    cache_dir = tempfile.mkdtemp(prefix="kiln-cache-")
    os.environ["KILN_CACHE_DIR"] = cache_dir
    try:
        up = kiln_cli(run_dir, "up")
        if up.returncode != 0:
            pytest.fail(f"kiln up failed ({up.returncode}):\n{up.stdout}{up.stderr}")
        yield run_dir
    finally:
        kiln_cli(run_dir, "down")
        shutil.rmtree(run_dir, ignore_errors=True)
        shutil.rmtree(cache_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def stack(run_dir):
    import kiln

    return kiln.connect(run_dir)
