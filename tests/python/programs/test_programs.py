"""Runs every program of the corpus (p_*.py) eagerly and through kiln."""
import pytest

import harness
from conftest import record

harness.load_all()


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
