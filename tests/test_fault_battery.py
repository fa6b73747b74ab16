"""The fault battery: disk and path faults (issue 33), each a clear one-line error (exit 2) or a
failed record, never a traceback, never a finished cell lost. docs/faults.md lists every fault
class with the test that holds it, here or in the files of the earlier classes.

Runs are in-process (``cli.main``) with the fault adapters of tests/fault_adapters.py and tiny
cells; the path checks fail before anything is measured, so most tests start no worker at all.
"""

from __future__ import annotations

import errno
import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from harness import cli, records, session
from harness.reporting import report
from tests.fakes import record, report_text
from tests.test_summary_compare_sweep import ENV, _write_run, timed

CELL = ["--framework", "fault-ok", "--workload", "mlp", "--device", "cpu", "--data", "resident"]
TINY = ["--set", "hidden=8", "--set", "input_shape=4,4", "--set", "num_batches=2", "--timeout", "30"]
ENOSPC = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.fixture
def bench(monkeypatch, capsys):
    """``bench`` in this process: (exit code, stdout, stderr)."""
    monkeypatch.setenv("DLCOMPARE_EXTRA_ADAPTERS", "tests.fault_adapters")

    def run(*args: str) -> tuple[int, str, str]:
        code = cli.main(["bench", *args])
        out, err = capsys.readouterr()
        return code, out, err

    return run


def one_line_error(code: int, err: str) -> str:
    """The error line of a clean exit 2: exactly one ``error:`` line, no traceback."""
    assert code == 2, err
    assert "Traceback" not in err
    (line,) = [ln for ln in err.splitlines() if ln.startswith("error: ")]
    return line


def _mount(target: Path, options: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root here; the simulated variant of this test runs instead")
    target.mkdir(exist_ok=True)
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(target)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"this machine does not allow mounting a tmpfs: {proc.stderr.strip()}")


def fill(folder: Path) -> Path:
    """Fill the file system of ``folder`` to the last byte; returns the ballast file."""
    ballast = folder / "ballast"
    with ballast.open("wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    return ballast


def results_fd(fd: int) -> bool:
    try:
        return os.readlink(f"/proc/self/fd/{fd}").endswith(records.RESULTS)
    except OSError:
        return False


# --- records: whole or absent ---------------------------------------------------------------


def test_a_failed_append_leaves_the_file_as_it_was_and_names_path_and_cause(tmp_path, monkeypatch):
    path = tmp_path / records.RESULTS
    records.append(path, record("a"))
    before = path.read_bytes()
    real_write = os.write
    calls = []

    def short_then_full(fd, data):  # a full disk: part of the bytes land, then ENOSPC
        calls.append(len(data))
        if len(calls) == 1:
            return real_write(fd, bytes(data[: len(data) // 2]))
        raise ENOSPC

    monkeypatch.setattr(os, "write", short_then_full)
    with pytest.raises(records.RecordWriteError) as info:
        records.append(path, record("b"))
    monkeypatch.undo()
    assert len(calls) == 2, "a short write is continued, not taken for the whole record"
    assert path.read_bytes() == before, "the half record is truncated away"
    exc = info.value
    assert isinstance(exc, OSError) and exc.errno == errno.ENOSPC and exc.filename == str(path)
    assert str(exc) == f"cannot write a record to {path}: No space left on device (ENOSPC)"
    records.append(path, record("c"))
    assert [r["adapter"] for r in records.load(path)] == ["a", "c"]


def test_an_fsync_error_takes_the_record_back(tmp_path, monkeypatch):
    path = tmp_path / records.RESULTS
    records.append(path, record("a"))
    monkeypatch.setattr(os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(errno.EIO, "Input/output error")))
    with pytest.raises(records.RecordWriteError, match=r"Input/output error \(EIO\)"):
        records.append(path, record("b"))
    monkeypatch.undo()
    assert [r["adapter"] for r in records.load(path)] == ["a"]


def test_a_results_file_that_cannot_be_opened_is_a_record_write_error(tmp_path):
    with pytest.raises(records.RecordWriteError, match="cannot write a record to .*: No such file or directory"):
        records.append(tmp_path / "gone" / records.RESULTS, record("a"))


def test_a_torn_last_line_is_skipped_with_a_warning_and_every_whole_record_kept(tmp_path, capsys):
    path = tmp_path / records.RESULTS
    records.append(path, record("a"))
    records.append(path, record("b"))
    with path.open("ab") as f:
        f.write(json.dumps(record("c")).encode()[:100])  # cut mid-JSON, no newline
    assert [r["adapter"] for r in records.load(path)] == ["a", "b"]
    assert f"warning: {path}:3: torn last line (100 bytes, no newline) skipped; 2 whole records kept" in (
        capsys.readouterr().err
    )


def test_a_damaged_line_that_is_not_the_torn_last_one_stays_an_error(tmp_path):
    path = tmp_path / records.RESULTS
    records.append(path, record("a"))
    with path.open("ab") as f:
        f.write(b'{"schema_version": 1, "adap\n')  # ends in a newline: written whole, so damaged
    with pytest.raises(records.RecordError, match=r"results.jsonl:2: not a JSON record"):
        records.load(path)
    with path.open("ab") as f:
        f.write(json.dumps(record("b")).encode() + b"\n")
    with pytest.raises(records.RecordError, match=r"results.jsonl:2: not a JSON record"):
        records.load(path)


def test_an_append_after_a_torn_line_mends_it_first(tmp_path, capsys):
    """A torn tail (an older writer, a crash) is cut away before the next record, so the two
    never share a line; a whole record that only lacks its newline is kept."""
    path = tmp_path / records.RESULTS
    records.append(path, record("a"))
    with path.open("ab") as f:
        f.write(json.dumps(record("torn")).encode()[:60])
    records.append(path, record("b"))
    assert "torn last line (60 bytes, no newline) cut away before appending" in capsys.readouterr().err
    with path.open("ab") as f:
        f.write(json.dumps(record("whole")).encode())
    records.append(path, record("c"))
    assert [r["adapter"] for r in records.load(path)] == ["a", "b", "whole", "c"]


# --- torn last line read by report, compare and resume ---------------------------------------


def _torn_run(folder: Path, medians) -> Path:
    recs = [timed(a, m, seed=i, cell_id=f"{a}|mlp|cpu") for i, (a, m) in enumerate(medians)]
    run = _write_run(folder, recs, ENV)
    with (run / records.RESULTS).open("ab") as f:
        f.write(b'{"schema_version": 1, "adapter": "tf-eager", "step_ti')
    return run


def test_report_and_compare_read_a_run_with_a_torn_last_line(tmp_path, capsys):
    a = _torn_run(tmp_path / "a", [("torch-eager", 1.0), ("jax-jit", 2.0)])
    b = _torn_run(tmp_path / "b", [("torch-eager", 1.0), ("jax-jit", 2.0)])
    assert cli.main(["report", str(a)]) == 0
    err = capsys.readouterr().err
    assert f"warning: {a / records.RESULTS}:3: torn last line" in err and "Traceback" not in err
    md = report_text(a)
    assert "| torch-eager " in md and "| jax-jit " in md and "tf-eager" not in md
    assert cli.main(["compare", str(a), str(b)]) == 0
    assert f"{b / records.RESULTS}:3: torn last line" in capsys.readouterr().err, "(a's was said once already)"
    assert "2 matching cells" in (b / "compare-a.md").read_text()


# --- disk full mid-run: one line, exit 2, finished cells kept, resume finishes ----------------


def _disk_full_after(monkeypatch, kind: str, fs: Path | None, whole: int):
    """From record ``whole`` + 1 on, the disk is full: a real full tmpfs (``tmpfs``: the kernel
    takes part of the record, then says ENOSPC, and the append truncates it away), or
    ``os.write`` on results.jsonl taking half the record, then ENOSPC, and the truncate failing
    too (``simulated``: the half record stays, as after a crash, and readers must skip it)."""
    state = {"records": 0, "full": False, "ballast": None}
    real_append, real_write, real_truncate = records.append, os.write, os.ftruncate

    def append(path, rec):
        state["records"] += 1
        if state["records"] > whole and not state["full"]:
            state["full"] = True
            if kind == "tmpfs":
                state["ballast"] = fill(fs)
        return real_append(path, rec)

    def write(fd, data):
        if state["full"] and kind != "tmpfs" and results_fd(fd):
            if not state.get("short"):  # part of the record lands, as on a real full disk
                state["short"] = True
                return real_write(fd, bytes(data[: len(data) // 2]))
            raise ENOSPC
        return real_write(fd, data)

    def ftruncate(fd, size):
        if state["full"] and kind == "simulated" and results_fd(fd):
            raise OSError(errno.EIO, "Input/output error")
        return real_truncate(fd, size)

    monkeypatch.setattr(records, "append", append)
    monkeypatch.setattr(os, "write", write)
    monkeypatch.setattr(os, "ftruncate", ftruncate)
    return state


@pytest.mark.parametrize("kind", ["simulated", "tmpfs"])
@pytest.mark.workers
def test_disk_full_mid_run_stops_with_one_line_keeps_whole_records_and_resumes(
    kind, bench, tmp_path, monkeypatch, capsys
):
    out = tmp_path / "out"
    if kind == "tmpfs":
        out = tmp_path / "fs"
        _mount(out, "size=1m")
    try:
        state = _disk_full_after(monkeypatch, kind, out, whole=1)
        code, stdout, err = bench(*CELL, *TINY, "--rounds", "2", "--out", str(out), "--run-id", "full")
        results = out / "full" / records.RESULTS
        line = one_line_error(code, err)
        assert line.startswith(f"error: cannot write a record to {results}: No space left on device (ENOSPC); ")
        assert line.endswith(
            f"finished cells are kept; free space, then: python -m harness bench --resume {out / 'full'}"
        )
        if state["ballast"] is not None:
            state["ballast"].unlink()  # space is back
        monkeypatch.undo()
        monkeypatch.setenv("DLCOMPARE_EXTRA_ADAPTERS", "tests.fault_adapters")
        assert results.read_bytes().endswith(b"\n") == (kind == "tmpfs"), "truncated back, or torn (simulated)"
        assert [r["round"] for r in records.load(results)] == [1], "the whole record is readable"
        if kind == "simulated":
            assert f"{results}:2: torn last line" in capsys.readouterr().err
        code, stdout, err = bench("--resume", str(out / "full"))
        assert code == 0, err
        assert "1 cells x 2 rounds, 1 to run" in stdout
        done = records.load(results)
        assert [(r["round"], r["status"]) for r in done] == [(1, "ok"), (2, "ok")]
        assert (out / "full" / "report.md").is_file()
    finally:
        if kind == "tmpfs":
            subprocess.run(["umount", "-l", str(out)], check=False)


@pytest.mark.workers
def test_disk_full_while_writing_the_report_is_one_line_and_the_records_stay(bench, tmp_path, monkeypatch):
    def no_space(run_dir, *args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(run_dir / "report.html"))

    monkeypatch.setattr(report, "write", no_space)
    code, _, err = bench(*CELL, *TINY, "--rounds", "1", "--out", str(tmp_path), "--run-id", "r")
    line = one_line_error(code, err)
    assert line.startswith(f"error: cannot write {tmp_path / 'r' / 'report.html'}: No space left on device; ")
    assert line.endswith(f"--resume {tmp_path / 'r'}")
    assert [r["status"] for r in records.load(tmp_path / "r" / records.RESULTS)] == ["ok"]


@pytest.mark.workers
def test_a_report_that_fails_to_build_is_one_line_exit_1_and_the_records_stay(bench, tmp_path, monkeypatch):
    # A reporting bug (a plot refusing a value, say) must not end the run in a traceback that
    # hides where its records are and how to rebuild the report.
    def broken(run_dir, *args, **kwargs):
        raise ValueError("'xerr' must not contain negative values")

    monkeypatch.setattr(report, "write", broken)
    code, _, err = bench(*CELL, *TINY, "--rounds", "1", "--out", str(tmp_path), "--run-id", "r")
    assert code == 1 and "Traceback" not in err
    assert (
        f"report: not written (ValueError: 'xerr' must not contain negative values); every record is kept in "
        f"{tmp_path / 'r' / records.RESULTS}; rebuild it with: python -m harness report {tmp_path / 'r'}"
    ) in err
    assert [r["status"] for r in records.load(tmp_path / "r" / records.RESULTS)] == ["ok"]


# --- paths checked before any work ------------------------------------------------------------


def _nothing_ran(out: str) -> None:
    assert "asking each framework" not in out and "measuring" not in out, "it fails before anything is measured"


def test_an_output_folder_that_cannot_be_created_is_refused_before_any_work(bench, tmp_path):
    code, out, err = bench(*CELL, "--out", "/proc/nope", "--run-id", "r")
    line = one_line_error(code, err)
    assert line == "error: --out: cannot write to /proc/nope/r: No such file or directory (/proc/nope)"
    _nothing_ran(out)
    (tmp_path / "file").write_text("not a folder")
    code, out, err = bench(*CELL, "--out", str(tmp_path / "file"), "--run-id", "r")
    assert one_line_error(code, err).startswith(f"error: --out: cannot write to {tmp_path / 'file' / 'r'}: ")
    _nothing_ran(out)


@pytest.fixture
def read_only(tmp_path):
    """A read-only folder: a read-only tmpfs as root (permissions do not stop root), a folder
    without write permission otherwise. ``prepare(path)`` writes files into it first."""
    folder = tmp_path / "ro"

    def make(prepare=lambda path: None) -> Path:
        if os.geteuid() == 0:
            _mount(folder, "size=64k")
            prepare(folder)
            subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
        else:
            folder.mkdir()
            prepare(folder)
            folder.chmod(0o555)
            for sub in folder.iterdir():
                sub.chmod(0o555)
        return folder

    yield make
    if os.path.ismount(folder):
        subprocess.run(["umount", "-l", str(folder)], check=False)
    elif folder.exists():
        for sub in [folder, *folder.iterdir()]:
            sub.chmod(0o755)


@pytest.mark.workers
def test_an_unwritable_output_folder_is_refused_before_any_work(bench, read_only):
    folder = read_only()
    code, out, err = bench(*CELL, "--out", str(folder), "--run-id", "r")
    line = one_line_error(code, err)
    assert re.fullmatch(
        rf"error: --out: cannot write to {folder / 'r'}: (Read-only file system|Permission denied)", line
    )
    _nothing_ran(out)


@pytest.mark.workers
def test_resume_of_an_unwritable_run_folder_is_refused_before_any_work(bench, read_only):
    def a_run(folder):
        (folder / "r").mkdir()
        (folder / "r" / session.PLAN).write_text(json.dumps({"cells": [], "rounds": 1, "timeout_s": 10}))

    folder = read_only(a_run)
    code, out, err = bench("--resume", str(folder / "r"))
    line = one_line_error(code, err)
    assert re.fullmatch(
        rf"error: --resume: cannot write to {folder / 'r'}: (Read-only file system|Permission denied)", line
    )
    _nothing_ran(out)


@pytest.mark.parametrize("kind", ["simulated", "tmpfs"])
@pytest.mark.workers
def test_a_full_disk_before_the_run_is_refused_before_any_work(kind, bench, tmp_path, monkeypatch):
    if kind == "tmpfs":
        out = tmp_path / "fs"
        _mount(out, "size=64k")
        fill(out)
    else:
        out = tmp_path
        real_write = os.write

        def write(fd, data):
            if ".write-test" in os.readlink(f"/proc/self/fd/{fd}"):
                raise ENOSPC
            return real_write(fd, data)

        monkeypatch.setattr(os, "write", write)
    try:
        code, out_text, err = bench(*CELL, "--out", str(out), "--run-id", "r")
        assert one_line_error(code, err) == f"error: --out: cannot write to {out / 'r'}: No space left on device"
        _nothing_ran(out_text)
        assert not [p for p in (out / "r").iterdir()], "the test write leaves nothing behind"
    finally:
        if kind == "tmpfs":
            subprocess.run(["umount", "-l", str(out)], check=False)


@pytest.mark.parametrize("run_id", ["../../escaped", "a/b", "/abs", ".", "..", "", "a b", "semi;colon", "..\\up"])
def test_a_run_id_is_a_name(run_id, bench, tmp_path):
    out = tmp_path / "deep" / "out"
    code, _, err = bench(*CELL, "--out", str(out), "--run-id", run_id)
    line = one_line_error(code, err)
    assert line == (
        f"error: --run-id {run_id!r} is not a name: letters, digits and - _ . only (no path separator), and not . or .."
    )
    assert not [p for p in tmp_path.rglob("*")], "nothing is written anywhere"


def test_a_run_id_of_letters_digits_and_dots_is_accepted(bench, tmp_path):
    code, out, err = bench(*CELL, "--out", str(tmp_path), "--run-id", "v1.2_run-A", "--dry-run")
    assert code == 0, err


def test_threads_above_the_logical_cores_are_refused_with_the_count(bench, tmp_path):
    cores = os.cpu_count()
    code, out, err = bench(*CELL, "--out", str(tmp_path), "--threads", "100000")
    assert (
        one_line_error(code, err) == f"error: --threads 100000 is more than the {cores} logical cores of this machine"
    )
    _nothing_ran(out)
    code, _, err = bench(*CELL, "--out", str(tmp_path), "--threads", str(cores), "--dry-run")
    assert code == 0, err
    # the same rule whatever the executor: it is checked while planning, before one is chosen
    code, _, err = bench(*CELL, "--out", str(tmp_path), "--threads", str(cores + 1), "--executor", "ray")
    assert one_line_error(code, err).startswith(f"error: --threads {cores + 1} is more than")


@pytest.mark.parametrize(
    "plan_text, message",
    [('{"cells": [', "JSONDecodeError"), ("{}", "KeyError: 'cells'"), ("[1]", "TypeError")],
)
def test_a_damaged_plan_is_refused_on_resume(plan_text, message, bench, tmp_path):
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / session.PLAN).write_text(plan_text)
    code, _, err = bench("--resume", str(tmp_path / "r"))
    line = one_line_error(code, err)
    damaged = f"error: {tmp_path / 'r' / session.PLAN} is damaged ({message}"
    assert line.startswith(damaged) and "start the run again" in line


# --- docs/faults.md stays true ----------------------------------------------------------------

FAULTS_DOC = Path(__file__).resolve().parent.parent / "docs" / "faults.md"
ROWS = [ln for ln in FAULTS_DOC.read_text().splitlines() if ln.startswith("| ") and not ln.startswith("| Class ")]


def test_the_fault_table_has_sixty_classes_each_named_once():
    classes = [row.split(" | ")[0].lstrip("| ") for row in ROWS]
    assert len(classes) >= 60 and len(set(classes)) == len(classes)


def test_every_test_the_fault_table_names_exists():
    missing = []
    for row in ROWS:
        names = re.findall(r"`(tests/test_\w+\.py)::(test_\w+)`\s*\|\s*$", row)
        path, test = names[0] if names else (row, "")
        source = FAULTS_DOC.parent.parent / path
        if not (names and source.is_file() and re.search(rf"^def {test}\(", source.read_text(), re.M)):
            missing.append(f"{path}::{test}")
    assert not missing, f"docs/faults.md names tests that do not exist: {missing}"
