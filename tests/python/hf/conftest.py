"""The Hugging Face models' tally (see test_models.py), one line a model:

    hf: gpt2 training: fell back (<the tracer's reason>)
"""
import test_models


def pytest_terminal_summary(terminalreporter):
    if not test_models.OUTCOMES:
        return
    write = terminalreporter.write_line
    write("")
    for name, outcome in test_models.OUTCOMES.items():
        write(f"hf: {name}: {outcome}")
