"""The program corpus's tally (see corpus.py):

    programs: N compiled+correct, F fell back, W wrong, B graph breaks
"""
import corpus


def pytest_terminal_summary(terminalreporter):
    _outcomes, _unexpected = corpus.OUTCOMES, corpus.UNEXPECTED
    if not _outcomes:
        return
    write = terminalreporter.write_line
    write("")
    write(f"programs: {_outcomes['compiled']} compiled+correct, {_outcomes['fell back']} fell back, "
          f"{_outcomes['wrong']} wrong, {_outcomes['breaks']} graph breaks")
    for line in _unexpected:
        write(line)
