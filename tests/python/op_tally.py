"""A per-op tally for the conformance suites: an op conforms when every one of its cases passes.

Each case carries a marker naming its op (`op(name)`, `grad_op(name)`); a suite's conftest
hands pytest's hooks to an OpTally and prints `write_summary`'s lines at the end.
"""
import collections


class OpTally:
    def __init__(self, marker: str):
        self.marker = marker
        self.case_op: dict = {}
        self.failed: collections.Counter = collections.Counter()
        self.passed: collections.Counter = collections.Counter()

    def collect(self, items):
        for item in items:
            marker = item.get_closest_marker(self.marker)
            if marker is not None:
                self.case_op[item.nodeid] = marker.args[0]

    def record(self, report):
        op = self.case_op.get(report.nodeid)
        if op is None:
            return
        if report.failed or hasattr(report, "wasxfail"):  # a known failure is still a failure
            self.failed[op] += 1
        elif report.when == "call" and report.passed:
            self.passed[op] += 1

    def tested(self) -> set:
        return set(self.case_op.values())

    def failing(self) -> list:
        return sorted(op for op in self.tested() if self.failed[op])

    def write_summary(self, write, label: str):
        """`<label>: N conform, M fail`, then each failing op with its failed case count."""
        failing = self.failing()
        conforming = [op for op in self.tested() if not self.failed[op] and self.passed[op]]
        write("")
        write(f"{label}: {len(conforming)} conform, {len(failing)} fail")
        for op in failing:
            write(f"  fails: {op} ({self.failed[op]} of {self.failed[op] + self.passed[op]} cases)")
