"""The op conformance suite's tally: an op conforms when every one of its cases passes.

Each case carries `pytest.mark.op(name)` (harness.cases adds it). At the end the run prints

    ops: N conform, M fail

then the failing ops with their failed case count, and the registered ops no case covers.
"""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from op_tally import OpTally  # noqa: E402

_tally = OpTally("op")


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
    _tally.collect(items)


def pytest_runtest_logreport(report):
    _tally.record(report)


def pytest_terminal_summary(terminalreporter):
    if not _tally.case_op:
        return
    from kiln import ir

    tested, failing = _tally.tested(), _tally.failing()
    write = terminalreporter.write_line
    _tally.write_summary(write, "ops")
    import harness

    if harness.COMPILED != "off":
        ok = {op for (op, how) in harness.compiled_tally if how == "ok"}
        unsupported = {op for (op, how) in harness.compiled_tally if how == "unsupported"}
        not_lowered = f": {' '.join(sorted(unsupported))}" if unsupported else ""
        write(f"compiled: {len(ok - set(failing))} ops ran compiled, "
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
