"""Runs every program of the corpus (p_*.py) eagerly and through kiln."""
import pytest

import corpus
from corpus import record

corpus.load_all()


@pytest.mark.parametrize("p", corpus.PROGRAMS, ids=[p.name for p in corpus.PROGRAMS])
def test_program(p, stack):
    outcome = corpus.run(p, stack)
    record(p.name, outcome, p)
    if outcome.kind == "wrong":
        pytest.fail(outcome.detail)
    if outcome.kind == "fell back":
        assert p.falls_back is not None, f"fell back: {outcome.detail}"
        assert p.falls_back in outcome.detail, f"fell back for another reason: {outcome.detail}"
        return
    assert p.falls_back is None, f"compiled, but listed as falling back ({p.falls_back})"
    if p.recompiles is not None:
        assert outcome.recompiled, f"no longer recompiles per value ({p.recompiles}): drop the marker"
    if p.breaks is None:
        assert not outcome.breaks, f"compiled around graph breaks: {outcome.breaks}"
    else:
        assert any(p.breaks in b for b in outcome.breaks), f"breaks {outcome.breaks}, expected one at {p.breaks!r}"
