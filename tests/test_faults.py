"""Fault isolation, interruption and resume, with fault-injecting adapters in real workers."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time

import pytest

from harness import cli, records
from harness.measuring import contention
from harness.reporting import report
from tests.conftest import REPO
from tests.fakes import report_text

FAST = ["--set", "hidden=8", "--set", "input_shape=4,4", "--set", "num_batches=2", "--timeout", "20"]


def bench_args(tmp_path, *args: str, run_id: str = "r") -> list[str]:
    """The harness's arguments for ``bench`` of the fault adapters with ``args``."""
    cmd = ["bench", "--workload", "mlp", "--device", "cpu", "--out", str(tmp_path)]
    if "--data" not in args:
        cmd += ["--data", "resident"]
    if "--rounds" not in args and "--resume" not in args:  # the quick profile runs 3: these tests need no more than 2
        cmd += ["--rounds", "2"]
    return [*cmd, "--run-id", run_id, *args]


@pytest.fixture
def bench_here(monkeypatch, capsys):
    """``bench`` as ``bench()`` runs it but in this process (``cli.main``), for options rejected, or
    a plan printed, before any worker starts (a subprocess adds only its imports; the tests above
    run the module): (exit code, stdout, stderr)."""
    monkeypatch.setenv("DLCOMPARE_EXTRA_ADAPTERS", "tests.fault_adapters")

    def run(tmp_path, *args: str) -> tuple[int, str, str]:
        try:
            code = cli.main(bench_args(tmp_path, *args))
        except SystemExit as exc:  # argparse rejects its own options this way
            code = exc.code
        out, err = capsys.readouterr()
        return code, out, err

    return run


def bench(python, tmp_path, *args, run_id="r", wait=True, full_turns=False):
    """``python -m harness bench`` of the fault adapters; ``full_turns``: the quick profile's own
    turns (tests/conftest.py shortens them), for a test that reads their CPU ticks."""
    env = dict(os.environ, DLCOMPARE_EXTRA_ADAPTERS="tests.fault_adapters")
    if full_turns:
        env.pop("DLCOMPARE_QUICK_TURNS", None)
    cmd = [python, "-m", "harness", *bench_args(tmp_path, *args, run_id=run_id)]
    if not wait:  # output to files: a process bench leaves behind cannot hold a pipe open for the test
        with open(tmp_path / "bench.out", "w") as out, open(tmp_path / "bench.err", "w") as err:
            return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=err, text=True)
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def ended(proc: subprocess.Popen, tmp_path, timeout: float = 60) -> tuple[str, str]:
    """The output of a ``bench(..., wait=False)`` once its process has exited (within ``timeout``)."""
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out = (tmp_path / "bench.out").read_text()
        raise AssertionError(f"bench still running after {timeout} s:\n{out}") from None
    return (tmp_path / "bench.out").read_text(), (tmp_path / "bench.err").read_text()


def test_every_fault_is_recorded_and_the_run_goes_on(python, tmp_path):
    faults = "fault-ok,fault-raise,fault-abort,fault-kill,fault-hang,fault-exit,fault-nan"
    # The timeout must outlast a healthy cell on a busy machine (a few seconds on a quiet one),
    # since it is the only thing that ends fault-hang.
    proc = bench(python, tmp_path, "--framework", faults, *FAST[:-2], "--timeout", "12")
    assert proc.returncode == 0, proc.stderr
    recs = {r["adapter"]: r for r in records.load(tmp_path / "r" / records.RESULTS)}
    assert set(recs) == {
        "fault-ok",
        "fault-raise",
        "fault-abort",
        "fault-kill",
        "fault-hang",
        "fault-exit",
        "fault-nan",
    }
    assert recs["fault-ok"]["status"] == "ok"
    assert recs["fault-raise"]["reason"] == "RuntimeError: injected failure at step 3"
    assert "injected failure" in recs["fault-raise"]["stderr_tail"]
    assert recs["fault-abort"]["reason"] == "worker killed by SIGABRT"
    assert recs["fault-kill"]["reason"] == "worker killed by SIGKILL"
    assert recs["fault-hang"]["reason"] == "timeout after 12 s"
    assert recs["fault-exit"]["reason"] == "worker exited with code 3 and no record"
    assert recs["fault-nan"]["reason"] == "diverged at step 4 (loss=nan)"
    assert all(r["status"] == "failed" for name, r in recs.items() if name != "fault-ok")
    report = report_text(tmp_path / "r")
    assert "failed: worker killed by SIGABRT" in report
    # one line per finished cell, quiet otherwise (stdout is not a terminal here)
    assert re.search(r"fault-abort\s+mlp .*resident\s+cpu\s+failed: worker killed by SIGABRT", proc.stdout)


def test_strict_exits_nonzero_only_when_a_cell_failed(python, tmp_path):
    assert bench(python, tmp_path, "--framework", "fault-raise", "--strict", *FAST).returncode == 1
    assert bench(python, tmp_path, "--framework", "fault-ok", "--strict", *FAST, run_id="ok").returncode == 0


def test_dry_run_plans_without_running_or_writing(bench_here, tmp_path):
    code, stdout, _ = bench_here(tmp_path, "--framework", "fault-ok,fault-nan", "--dry-run", *FAST)
    assert code == 0
    assert "fault-nan" in stdout and "2 cells planned (0 will be skipped), 2 rounds each; nothing was run." in stdout
    assert not list(tmp_path.iterdir())


def test_sigterm_keeps_finished_cells_and_resume_runs_only_the_missing(python, tmp_path):
    args = ["--framework", "fault-ok,fault-raise", "--workload", "mlp,mlp-wide", "--data", "resident,host", *FAST]
    proc = bench(python, tmp_path, *args, wait=False)
    results = tmp_path / "r" / records.RESULTS
    deadline = time.monotonic() + 120
    while not (results.exists() and results.read_text().count("\n") >= 1):
        assert time.monotonic() < deadline and proc.poll() is None, ended(proc, tmp_path)
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out, err = ended(proc, tmp_path)
    assert proc.returncode == 130, err
    assert f"--resume {tmp_path / 'r'}" in out
    done_first = [(r["cell_id"], r["round"]) for r in records.load(results)]
    assert 1 <= len(done_first) < 12
    assert (tmp_path / "r" / "report.md").exists(), "a report is written for what finished"

    resumed = bench(python, tmp_path, "--resume", str(tmp_path / "r"), run_id="ignored")
    assert resumed.returncode == 0, resumed.stderr
    done = records.load(results)
    keys = [(r["cell_id"], r["round"]) for r in done]
    # 4 fault-ok cells x 2 rounds; the 4 fault-raise cells fail in round 1 and run no round 2
    assert len(keys) == len(set(keys)) == 12, "no duplicate and no lost round"
    assert sorted(r["round"] for r in done if r["adapter"] == "fault-raise") == [1] * 4
    assert keys[: len(done_first)] == done_first
    rounds = [k for _, k in keys]
    assert rounds == sorted(rounds), "round 1 of every cell runs before round 2 of any"
    again = bench(python, tmp_path, "--resume", str(tmp_path / "r"))
    assert "cells x 2 rounds, 0 to run" in again.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["--resume", "/nonexistent"], "is not a run folder (no plan.json)"),
        (["--framework", "fault-ok", "--timeout", "0"], "--timeout must be > 0 seconds"),
    ],
)
def test_bad_run_options(bench_here, tmp_path, args, message):
    code, _, stderr = bench_here(tmp_path, *args)
    assert code == 2 and message in stderr and "Traceback" not in stderr


def test_existing_run_id_is_refused_with_the_resume_hint(python, tmp_path):
    assert bench(python, tmp_path, "--framework", "fault-ok", *FAST).returncode == 0
    proc = bench(python, tmp_path, "--framework", "fault-ok", *FAST)
    assert proc.returncode == 2 and "already holds results; resume it with --resume" in proc.stderr


def test_physics_check_catches_a_missing_sync(python, tmp_path):
    proc = bench(python, tmp_path, "--framework", "fault-ok,fault-nosync", "--strict", *FAST[4:])
    assert proc.returncode == 1, proc.stderr
    assert "warning: fault-nosync / mlp / cpu: a step ran at" in proc.stderr
    assert "fault-ok /" not in proc.stderr
    report = report_text(tmp_path / "r")
    assert "**Physics check failed** (timing suspect):" in report


def test_data_modes_host_runs_and_a_missing_loader_is_skipped(python, tmp_path):
    proc = bench(python, tmp_path, "--framework", "fault-ok", "--data", "all", *FAST)
    assert proc.returncode == 0, proc.stderr
    recs = {r["data"]: r for r in records.load(tmp_path / "r" / records.RESULTS)}
    assert recs["resident"]["status"] == recs["host"]["status"] == "ok"
    assert recs["loader"]["status"] == "skipped"
    assert recs["loader"]["reason"] == "fault-ok has no native image input pipeline"
    assert "## Input pipeline" in report_text(tmp_path / "r")


@pytest.mark.parametrize(
    "args, message",
    [
        (["--data", "disk"], "unknown data mode 'disk'; valid: all, resident, host, loader"),
        (["--precision", "fp16"], "invalid choice: 'fp16'"),
        (["--strategy", "paded"], "unknown strategy 'paded' (did you mean 'padded'?)"),
    ],
)
def test_bad_axis_values(bench_here, tmp_path, args, message):
    code, _, stderr = bench_here(tmp_path, "--framework", "fault-ok", *args)
    assert code == 2 and message in stderr


def test_a_run_folder_in_use_is_refused_and_nothing_is_written(python, tmp_path):
    """Two benches into one folder would time each other: the second waits for nothing, exits 2."""
    import fcntl

    run = tmp_path / "r"
    run.mkdir()
    with (run / ".lock").open("a") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        proc = bench(python, tmp_path, "--framework", "fault-ok", *FAST)
    assert proc.returncode == 2
    assert f"{run} is in use by another bench" in proc.stderr
    assert sorted(p.name for p in run.iterdir()) == [".lock"]


def test_a_machine_that_never_quiets_still_ends_with_an_answer_and_its_load(python, tmp_path):
    """Issue 71, item 5: beside a CPU-bound neighbour through the whole run, ``--rank-under-load``
    ranks the contended cells (identical twins here) and says the load at the start, beside the
    verdict and in the table; without it, the same records' contended cells are flagged and ranked in
    nothing. Words only: no time is asserted."""
    with contention.busy_cores(1):
        time.sleep(0.5)
        args = ["--framework", "fault-ok", "--twins", "0", "--rounds", "3", "--rank-under-load", *FAST]
        proc = bench(python, tmp_path, *args, full_turns=True)
    assert proc.returncode == 0, proc.stderr
    assert "has its cells ranked all the same (--rank-under-load)" in proc.stdout, "said at the start"
    recs = [r for r in records.load(tmp_path / "r" / records.RESULTS) if r["status"] == "ok"]
    assert len(recs) == 6 and any(r["contended"] for r in recs)
    page = (tmp_path / "r" / "report.md").read_text()
    assert re.search(r"Ranked under load: [12] of its 2 cells ran beside [0-9.-]+ other busy cores", page), page
    assert "ranked all the same, as the run asked (`--rank-under-load`)" in page
    answer = page[page.index("## The answer") :]
    overview = answer[answer.index("| time / fastest") :].split("\n\n")[0].splitlines()
    rows = [ln for ln in overview if ln.startswith("| fault-ok")]
    assert len(rows) == 2 and any("under load" in ln for ln in rows), overview
    # The same records from a bench that did not ask: its contended cells are flagged and ranked in nothing
    # (one bench beside the neighbour serves both readings: each such bench keeps a core spinning).
    env = json.loads((tmp_path / "r" / records.ENV).read_text())
    (tmp_path / "r" / records.ENV).write_text(json.dumps({k: v for k, v in env.items() if k != "rank_under_load"}))
    report.write(tmp_path / "r")
    unasked = report_text(tmp_path / "r")
    assert any(r["contended"] and r["other_cpu_cores"] > 0.5 for r in recs)
    assert "ok, contended (" in unasked and "not ranked" in unasked
    assert "under load" not in unasked[unasked.index("## The answer") : unasked.index("## Method")]
    assert "cells ran while other processes kept the CPU busy and are left out of every verdict" in unasked
