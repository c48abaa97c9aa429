"""The program corpus's tally (see harness.py):

    programs: N compiled+correct, F fell back, W wrong
"""
import collections

_outcomes: collections.Counter = collections.Counter()
_unexpected: list[str] = []


def record(name: str, kind: str, detail: str, expected_fallback: bool):
    _outcomes[kind] += 1
    if kind == "wrong" or (kind == "fell back" and not expected_fallback):
        _unexpected.append(f"  {kind}: {name}: {detail}")


def pytest_terminal_summary(terminalreporter):
    if not _outcomes:
        return
    write = terminalreporter.write_line
    write("")
    write(f"programs: {_outcomes['compiled']} compiled+correct, {_outcomes['fell back']} fell back, "
          f"{_outcomes['wrong']} wrong")
    for line in _unexpected:
        write(line)
