"""Runs every program of the corpus (p_*.py) eagerly and through kiln."""
import importlib
import pathlib

import pytest

import harness
from conftest import record

for path in sorted(pathlib.Path(__file__).parent.glob("p_*.py")):
    importlib.import_module(path.stem)


@pytest.mark.parametrize("p", harness.PROGRAMS, ids=[p.name for p in harness.PROGRAMS])
def test_program(p, stack):
    outcome = harness.run(p, stack)
    record(p.name, outcome.kind, outcome.detail, p.falls_back is not None)
    if outcome.kind == "wrong":
        pytest.fail(outcome.detail)
    if outcome.kind == "fell back":
        assert p.falls_back is not None, f"fell back: {outcome.detail}"
        assert p.falls_back in outcome.detail, f"fell back for another reason: {outcome.detail}"
    else:
        assert p.falls_back is None, f"compiled, but listed as falling back ({p.falls_back})"
