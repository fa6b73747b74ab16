"""The suite's CPU-time summary (tests/cpu_time.py): totals by file, costliest first."""

from __future__ import annotations

from tests import cpu_time


def test_tests_are_totalled_by_file_costliest_first_with_their_share():
    rows = cpu_time.by_file(
        [("tests/test_a.py::one", 1.0), ("tests/test_b.py::two[x]", 5.0), ("tests/test_a.py::three", 2.0)]
    )
    assert rows == [("tests/test_b.py", 5.0, 1), ("tests/test_a.py", 3.0, 2)]
    lines = cpu_time.summary(rows, shown=1)
    assert lines[0] == "8 CPU seconds in all (tests, their workers and subprocesses)"
    assert lines[1:] == ["    5.0s 62.5%  tests/test_b.py (1 tests)"]


def test_the_costliest_tests_are_listed_by_their_own_cpu_seconds():
    tests = [("tests/test_a.py::one", 1.0), ("tests/test_b.py::two[x]", 5.0), ("tests/test_a.py::three", 2.0)]
    assert cpu_time.costliest_tests(tests, shown=2) == [
        "    5.0s  tests/test_b.py::two[x]",
        "    2.0s  tests/test_a.py::three",
    ]


def test_a_process_counts_its_own_cpu_seconds():
    before = cpu_time.cpu_s()
    sum(i * i for i in range(200_000))  # some CPU work of this process
    assert cpu_time.cpu_s() > before
