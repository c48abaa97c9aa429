"""The gradient conformance suite's tally: an op conforms when every one of its cases passes.

Each case carries `pytest.mark.grad_op(name)` (grad_harness.cases adds it). At the end the run
prints

    grads: N conform, M fail

then the failing ops with their failed case count, and the differentiable ops no case covers.
"""
import collections
import os
import sys

# The op conformance suite's data generators are reused from beside it.
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "conformance"))

_case_op: dict = {}
_failed: collections.Counter = collections.Counter()
_passed: collections.Counter = collections.Counter()


def pytest_configure(config):
    config.addinivalue_line("markers", "grad_op(name): the kiln op a gradient case checks")
    # the op conformance suite's marker, met when its generators are imported
    config.addinivalue_line("markers", "op(name): the kiln op a conformance case checks")


def pytest_collection_modifyitems(items):
    for item in items:
        marker = item.get_closest_marker("grad_op")
        if marker is not None:
            _case_op[item.nodeid] = marker.args[0]


def pytest_runtest_logreport(report):
    op = _case_op.get(report.nodeid)
    if op is None:
        return
    if report.failed or hasattr(report, "wasxfail"):
        _failed[op] += 1
    elif report.when == "call" and report.passed:
        _passed[op] += 1


def pytest_terminal_summary(terminalreporter):
    if not _case_op:
        return
    from kiln import autograd

    tested = set(_case_op.values())
    failing = sorted(op for op in tested if _failed[op])
    conforming = sorted(op for op in tested if not _failed[op] and _passed[op])
    write = terminalreporter.write_line
    write("")
    write(f"grads: {len(conforming)} conform, {len(failing)} fail")
    for op in failing:
        write(f"  fails: {op} ({_failed[op]} of {_failed[op] + _passed[op]} cases)")
    untested = sorted(set(autograd.differentiable_ops()) - tested)
    if untested:
        write(f"  differentiable ops without cases ({len(untested)}): {' '.join(untested)}")
