"""A report that fills in while the run goes (issue 71): after each generation the bench rewrites
report.md from the records so far, marked provisional; the final report replaces it; the progress
line counts what the run may still start and the budget it has left."""

from __future__ import annotations

import json

import pytest

from harness import records
from harness.reporting import report
from harness.running import budget, turns
from harness.running.progress import MatrixProgress
from harness.running.sink import RoundSink
from tests.fakes import as_rounds, record


def _run(tmp_path, recs):
    for r in recs:
        records.append(tmp_path / records.RESULTS, r)
    (tmp_path / records.ENV).write_text(json.dumps({"cpu": "Test CPU", "threads": 2}))
    return tmp_path


def test_a_provisional_page_says_so_and_the_final_one_replaces_it(tmp_path):
    run = _run(tmp_path, [r for a in ("torch-eager", "jax-jit") for r in as_rounds(record(a))[:1]])
    report.write(run, provisional="2 of 6 planned processes have run. This page is replaced by the final report.")
    page = (run / "report.md").read_text()
    assert page.splitlines()[2].startswith("> **Provisional**: 2 of 6 planned processes have run")
    assert (run / "report.html").is_file() and not list(run.glob("*.png")), "no pictures between generations"
    report.write(run)
    final = (run / "report.md").read_text()
    assert "Provisional" not in final and (run / "overview.png").is_file()


def test_the_hook_runs_after_every_generation_and_a_failing_one_costs_nothing(tmp_path, monkeypatch, capsys):
    cells = [{**record(a, cell_id=f"c-{a}", group="g"), "device_requested": "cpu"} for a in ("a1", "a2")]
    monkeypatch.setattr(turns, "servable", lambda cell: True)
    monkeypatch.setattr(budget, "generation_s", lambda results, cells: 1.0)
    monkeypatch.setattr(budget, "turn_seconds", lambda cells: 1.0)
    monkeypatch.setattr(budget, "servable", lambda cell: True)
    ran: list[int] = []

    def generation(part, k, adapters, sink, plan, turn, extra, group, floors):
        ran.append(k)
        return turn + 1

    monkeypatch.setattr(turns, "run_generation", generation)
    progress = MatrixProgress(6, live=False)
    calls: list[int] = []
    progress.on_generation = lambda: calls.append(len(ran))
    sink = RoundSink(tmp_path / records.RESULTS, 3, 60.0, progress)
    budget.run([(c, k) for k in (1, 2, 3) for c in cells], {}, sink)
    assert ran == [1, 2, 3] and calls == [1, 2, 3], "one provisional page after each generation"

    def broken() -> None:
        raise ValueError("boom")

    progress.on_generation = broken
    budget.run([(c, 4) for c in cells], {}, sink)
    assert "provisional report not written (ValueError: boom)" in capsys.readouterr().err


@pytest.mark.parametrize(("most", "expected"), [(0, "[1/99]"), (165, "[1/99, up to 165]")])
def test_the_progress_line_counts_what_the_run_may_still_start(most, expected):
    progress = MatrixProgress(99, live=False)
    progress.most = most
    progress.done = 1
    assert f"[{progress.count()}]" == expected
    progress.budget = budget.Budget(1800.0)
    assert "; budget left " in progress.count()


def test_the_run_says_at_its_start_how_busy_the_machine_is_and_what_that_costs():
    """Issue 71: a user whose machine is never idle learns it at the start, and on the first screen."""
    from harness import session

    quiet = session.load_note({"other_cores": 0.05, "steal": 0.0})
    assert quiet == "machine load at the start: 0.05 other cores busy"
    busy = session.load_note({"other_cores": 1.4, "steal": 0.02})
    assert busy.startswith("machine load at the start: 1.40 other cores busy, hypervisor steal 2.0%")
    assert "marked contended: the turns wait for quiet and a machine that never quiets leaves its cells" in busy
    found = session.load_at_start(0.05)
    assert set(found) == {"other_cores", "steal"} and found["other_cores"] >= 0


def test_the_first_screen_quotes_the_load_at_the_start(tmp_path):
    run = _run(tmp_path, [r for a in ("torch-eager", "jax-jit") for r in as_rounds(record(a))[:1]])
    (run / records.ENV).write_text(json.dumps({"cpu": "Test CPU", "load_at_start": {"other_cores": 1.2, "steal": 0}}))
    report.write(run)
    machine = next(line for line in (run / "report.md").read_text().splitlines() if line.startswith("Machine: "))
    assert "at the start other processes kept 1.20 cores busy" in machine
