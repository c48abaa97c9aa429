"""The op conformance suite's tally: an op conforms when every one of its cases passes.

Each case carries `pytest.mark.op(name)` (harness.cases adds it). At the end the run prints

    ops: N conform, M fail

then the failing ops with their failed case count, and the registered ops no case covers.
"""
import collections

import pytest

_case_op: dict[str, str] = {}
_failed: collections.Counter = collections.Counter()
_passed: collections.Counter = collections.Counter()


@pytest.fixture(autouse=True)
def _compiled_mode(request):
    """In compiled mode, the session's stack compiles each case (see harness.COMPILED)."""
    import harness

    if harness.COMPILED != "off" and harness.stack is None:
        harness.stack = request.getfixturevalue("stack")
    yield


def pytest_configure(config):
    config.addinivalue_line("markers", "op(name): the kiln op a conformance case checks")


def pytest_collection_modifyitems(items):
    for item in items:
        marker = item.get_closest_marker("op")
        if marker is not None:
            _case_op[item.nodeid] = marker.args[0]


def pytest_runtest_logreport(report):
    op = _case_op.get(report.nodeid)
    if op is None:
        return
    if report.failed or hasattr(report, "wasxfail"):  # a known failure is still a failure
        _failed[op] += 1
    elif report.when == "call" and report.passed:
        _passed[op] += 1


def pytest_terminal_summary(terminalreporter):
    if not _case_op:
        return
    from kiln import ir

    tested = set(_case_op.values())
    failing = sorted(op for op in tested if _failed[op])
    conforming = sorted(op for op in tested if not _failed[op] and _passed[op])
    write = terminalreporter.write_line
    write("")
    write(f"ops: {len(conforming)} conform, {len(failing)} fail")
    for op in failing:
        write(f"  fails: {op} ({_failed[op]} of {_failed[op] + _passed[op]} cases)")
    import harness

    if harness.COMPILED != "off":
        ok = {op for (op, how) in harness.compiled_tally if how == "ok"}
        unsupported = {op for (op, how) in harness.compiled_tally if how == "unsupported"}
        compiled_failing = sorted(op for op in failing)
        not_lowered = f": {' '.join(sorted(unsupported))}" if unsupported else ""
        write(f"compiled: {len(ok - set(compiled_failing))} ops ran compiled, "
              f"{len(unsupported)} not lowered yet{not_lowered}")
        cubin = {op for (op, how) in harness.cuda_tally if how == "cubin"}
        ran = {op for (op, how) in harness.cuda_tally if how == "ran"}
        cuda_unsupported = {op for (op, how) in harness.cuda_tally if how == "unsupported"}
        write(f"cuda: {len(cubin)} ops compiled to sm_90 cubin, {len(ran)} ran on a GPU, "
              f"{len(cuda_unsupported)} not lowered{': ' + ' '.join(sorted(cuda_unsupported)) if cuda_unsupported else ''}")
        unchecked = sorted(tested - ok - unsupported)
        if unchecked:
            write(f"  not run compiled by any case ({len(unchecked)}): {' '.join(unchecked)}")
    untested = sorted(set(ir.op_names()) - tested)
    if untested:
        write(f"  no cases yet ({len(untested)}): {' '.join(untested)}")
