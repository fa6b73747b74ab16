"""CPU seconds per test file and per costliest test, printed at the end of a session beside
``--durations``.

On a 2-core machine the suite keeps both cores busy, so a test's wall time mostly says what ran
beside it: the CLI bench took 171 s in the suite and 43 s alone (2026-12-02, AMD EPYC VM). What a
test file costs the suite is its CPU time: the test process's own and that of the processes it
started and waited for (``RUSAGE_CHILDREN``: workers, subprocesses; a conformance worker's counts
go to the test during which it ended, in the same file). Under pytest-xdist each test process
measures its tests and sends the figure with the teardown's report (``user_properties``); the
controller adds them up.
"""

from __future__ import annotations

import collections
import resource
from collections.abc import Iterable

import pytest

KEY = "cpu_s"
#: Files listed in the summary.
SHOWN = 15
#: Tests listed in the summary, by their own CPU seconds (wall durations under two busy cores mostly
#: say what ran beside a test; ``--durations`` lists those).
SHOWN_TESTS = 30


def cpu_s() -> float:
    """User and system seconds of this process and its waited-for children so far."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def by_file(tests: Iterable[tuple[str, float]]) -> list[tuple[str, float, int]]:
    """(file, CPU seconds, tests) from (node id, CPU seconds) pairs, the costliest file first."""
    seconds: collections.Counter[str] = collections.Counter()
    counts: collections.Counter[str] = collections.Counter()
    for node, spent in tests:
        path = node.split("::", 1)[0]
        seconds[path] += spent
        counts[path] += 1
    return [(path, s, counts[path]) for path, s in seconds.most_common()]


def summary(rows: list[tuple[str, float, int]], shown: int = SHOWN) -> list[str]:
    """The summary's lines: the total, then the ``shown`` costliest files with their share."""
    total = sum(s for _, s, _ in rows)
    lines = [f"{total:.0f} CPU seconds in all (tests, their workers and subprocesses)"]
    for path, spent, n in rows[:shown]:
        lines.append(f"{spent:7.1f}s {100 * spent / max(total, 1e-9):4.1f}%  {path} ({n} tests)")
    return lines


def costliest_tests(tests: Iterable[tuple[str, float]], shown: int = SHOWN_TESTS) -> list[str]:
    """The ``shown`` tests that cost the most CPU seconds, one line each, costliest first. A
    conformance worker's seconds count on the test during which it ended, so a conformance row
    there is a worker's total, not one check's."""
    ranked = sorted(tests, key=lambda t: -t[1])[:shown]
    return [f"{spent:7.1f}s  {node}" for node, spent in ranked]


class CpuTime:
    """The plugin: measures each test in the process that runs it, totals in the one that reports."""

    def __init__(self) -> None:
        self.began: dict[str, float] = {}
        self.tests: list[tuple[str, float]] = []

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        self.began[item.nodeid] = cpu_s()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):  # type: ignore[no-untyped-def]
        outcome = yield
        report = outcome.get_result()
        if call.when == "teardown" and item.nodeid in self.began:
            report.user_properties.append((KEY, cpu_s() - self.began.pop(item.nodeid)))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "teardown":
            self.tests += [(report.nodeid, float(v)) for k, v in report.user_properties if k == KEY]

    def pytest_terminal_summary(self, terminalreporter) -> None:  # type: ignore[no-untyped-def]
        if self.tests:
            terminalreporter.section("CPU time by test file")
            for line in summary(by_file(self.tests)):
                terminalreporter.write_line(line)
            terminalreporter.write_line(f"the {SHOWN_TESTS} costliest tests by CPU seconds:")
            for line in costliest_tests(self.tests):
                terminalreporter.write_line(line)
