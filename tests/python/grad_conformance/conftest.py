"""The gradient conformance suite's tally: an op conforms when every one of its cases passes.

Each case carries `pytest.mark.grad_op(name)` (grad_harness.cases adds it). At the end the run
prints

    grads: N conform, M fail

then the failing ops with their failed case count, and the differentiable ops no case covers.
"""
import os
import sys

# The op conformance suite's data generators are reused from beside it.
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "conformance"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from op_tally import OpTally  # noqa: E402

_tally = OpTally("grad_op")


def pytest_configure(config):
    config.addinivalue_line("markers", "grad_op(name): the kiln op a gradient case checks")
    # the op conformance suite's marker, met when its generators are imported
    config.addinivalue_line("markers", "op(name): the kiln op a conformance case checks")


def pytest_collection_modifyitems(items):
    _tally.collect(items)


def pytest_runtest_logreport(report):
    _tally.record(report)


def pytest_terminal_summary(terminalreporter):
    if not _tally.case_op:
        return
    from kiln import autograd

    write = terminalreporter.write_line
    _tally.write_summary(write, "grads")
    untested = sorted(set(autograd.differentiable_ops()) - _tally.tested())
    if untested:
        write(f"  differentiable ops without cases ({len(untested)}): {' '.join(untested)}")
