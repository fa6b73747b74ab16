"""Cluster executors for real: submitit's local mode (what ``--executor slurm`` falls back to
without Slurm) and a local Ray cluster run small fault-adapter matrices end to end, through the
CLI and real worker processes. What only a Slurm cluster can show, the sbatch parameters, is
checked in the script submitit itself writes for them."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid

import psutil
import pytest

from adapters import discover
from harness import cli, env, records
from harness.reporting import model, report
from harness.running import clusters, executors
from harness.running.plan import plan
from harness.running.progress import MatrixProgress
from harness.running.sink import RoundSink
from tests.fakes import record as fake_record
from tests.fakes import report_text
from tests.test_faults import FAST, bench, ended

ray = pytest.importorskip("ray")
submitit = pytest.importorskip("submitit")
pytestmark = pytest.mark.workers  # every test runs benches or their workers

MATRIX = ["--framework", "fault-ok,fault-raise", "--rounds", "2", *FAST]
#: fault-lost kills its job's process (the bench itself under the local executor): cluster runs only.
LOST = ["--framework", "fault-ok,fault-raise,fault-lost", "--rounds", "2", *FAST]


@pytest.fixture(scope="module")
def ray_address():
    """One local Ray cluster for the module (about 5 s to start); benches connect to it."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def runs(tmp_path_factory, ray_address):
    """The same small matrix run by each executor (the cluster ones with a lost job too):
    executor -> its run folder."""
    out = tmp_path_factory.mktemp("runs")
    found = {}
    for name, args in [
        ("local", MATRIX),
        ("slurm", LOST),
        ("ray", [*LOST, "--ray-address", ray_address]),
    ]:
        proc = bench(sys.executable, out / name, *args, "--executor", name)
        assert proc.returncode == 0, proc.stderr
        found[name] = out / name / "r"
    return found


def _outline(path) -> list[str]:
    """What a report shows whatever ran its cells: its headings, and each table's rows by their
    first cell (numbers, widths and notes such as a contended cell vary from run to run). "Where
    the run's time went" is left out: it splits this machine's generations into start-ups and
    turns, which a cluster's jobs (side by side on nodes) do not have."""
    lines = []
    text = path.read_text()
    if "## Where the run's time went" in text:
        head, rest = text.split("## Where the run's time went", 1)
        text = head + rest[rest.index("\n## ") + 1 :]
    for line in text.splitlines():
        if line.startswith("#"):
            lines.append(line)
        elif line.startswith("| ") and "fault-lost" not in line.split("|")[1]:
            lines.append(re.sub(r"\d+(\.\d+)?", "#", line.split("|")[1].strip()))
    return lines


def _key(rec) -> tuple:
    return rec["cell_id"], rec["round"], rec["status"], rec["reason"]


@pytest.mark.parametrize("executor", ["slurm", "ray"])
def test_a_cluster_executor_writes_the_run_the_local_executor_writes(runs, executor):
    local = records.load(runs["local"] / records.RESULTS)
    recs = records.load(runs[executor] / records.RESULTS)
    same = [r for r in recs if r["adapter"] != "fault-lost"]
    assert sorted(map(_key, same)) == sorted(map(_key, local))
    assert [r["round"] for r in recs] == sorted(r["round"] for r in recs), "round 1 of every cell first"
    here = env.fingerprint()
    assert all(r["fingerprint"] == here and r["node"] for r in same), "taken on the node that ran the cell"
    assert _outline(runs[executor] / "report.md") == _outline(runs["local"] / "report.md")


@pytest.mark.parametrize("executor", ["slurm", "ray"])
def test_a_job_lost_to_the_scheduler_is_a_failed_record_with_its_reason(runs, executor):
    (lost,) = [r for r in records.load(runs[executor] / records.RESULTS) if r["adapter"] == "fault-lost"]
    assert lost["status"] == "failed" and lost["round"] == 1, lost
    if executor == "ray":
        assert lost["reason"].startswith("job lost: ray task: WorkerCrashedError: The worker died unexpectedly")
    else:
        pattern = r"job lost: slurm \(submitit's local mode: no Slurm here\) job \d+ \(\w+\): ended without a result$"
        assert re.match(pattern, lost["reason"]), lost["reason"]
    assert "fault-lost" in report_text(runs[executor])


def test_resume_continues_a_run_on_another_executor(runs, tmp_path, ray_address):
    """Records are the same whatever ran them: a run begun on Slurm ends on Ray."""
    run = tmp_path / "r"
    shutil.copytree(runs["slurm"], run, ignore=shutil.ignore_patterns("jobs", ".lock"))
    results = run / records.RESULTS
    kept = [ln for ln in results.read_text().splitlines(keepends=True) if json.loads(ln)["round"] == 1]
    results.write_text("".join(kept))  # as if the run had been stopped after round 1
    resumed = bench(sys.executable, tmp_path, "--resume", str(run), "--executor", "ray", "--ray-address", ray_address)
    assert resumed.returncode == 0, resumed.stderr
    assert "3 cells x 2 rounds, 1 to run on ray" in resumed.stdout
    done = records.load(results)
    assert len(done) == 4 and (done[-1]["adapter"], done[-1]["round"], done[-1]["status"]) == ("fault-ok", 2, "ok")


def _workers(tag: str) -> list[psutil.Process]:
    """Live worker processes started by the bench tagged ``tag`` (wherever the executor ran them)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            cmdline = proc.info["cmdline"] or []
            bench_worker = "harness.running.worker" in cmdline and "bench" in cmdline  # not doctor's probes
            if bench_worker and proc.environ().get("DLCOMPARE_TEST_TAG") == tag:
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


@pytest.mark.parametrize("executor", ["slurm", "ray"])
def test_sigterm_cancels_the_jobs_in_flight_and_their_workers(python, tmp_path, ray_address, executor, monkeypatch):
    tag = uuid.uuid4().hex
    monkeypatch.setenv("DLCOMPARE_TEST_TAG", tag)  # bench passes DLCOMPARE_* on to its jobs
    extra = ["--ray-address", ray_address] if executor == "ray" else []
    args = ["--framework", "fault-hang", "--rounds", "1", *FAST[:-2], "--timeout", "120", "--executor", executor]
    proc = bench(python, tmp_path, *args, *extra, wait=False)
    deadline = time.monotonic() + 90
    while not _workers(tag):
        assert time.monotonic() < deadline and proc.poll() is None, ended(proc, tmp_path)
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    out, err = ended(proc, tmp_path)
    assert proc.returncode == 130, err
    deadline = time.monotonic() + 15
    while _workers(tag):
        assert time.monotonic() < deadline, "a worker outlived its cancelled job"
        time.sleep(0.2)
    assert f"--resume {tmp_path / 'r'}" in out


class _StuckJob:
    """A local submitit job that ignores its cancel (stuck before its signal handler ran)."""

    def __init__(self, process: subprocess.Popen) -> None:
        self._process = process

    def cancel(self, check: bool = True) -> None:
        pass

    def done(self) -> bool:
        return self._process.poll() is not None


def test_a_local_job_that_outlives_its_cancel_is_killed_with_everything_under_it(tmp_path, monkeypatch):
    monkeypatch.setattr(clusters, "CANCEL_GRACE_S", 0.5)
    sleeper = (
        "import subprocess, sys, time; "
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)"
    )
    job = _StuckJob(subprocess.Popen([sys.executable, "-c", sleeper]))
    deadline = time.monotonic() + 30
    while not psutil.Process(job._process.pid).children():
        assert time.monotonic() < deadline, "the job's own child never started"
        time.sleep(0.05)
    (child,) = psutil.Process(job._process.pid).children()
    backend = clusters.SlurmBackend(tmp_path, executors.SlurmOptions())
    assert not backend.on_slurm
    backend.cancel([job])
    assert job._process.wait(timeout=5) == -signal.SIGKILL
    child.wait(timeout=5)  # raises psutil.TimeoutExpired while it lives
    assert not child.is_running()


def test_sbatch_script_asks_for_what_the_cells_need(tmp_path):
    """The sbatch file submitit writes from our parameters (no Slurm needed to write it)."""
    from submitit.slurm.slurm import _make_sbatch_string

    options = executors.SlurmOptions(partition="gpu", max_concurrent=3)
    cuda = clusters.slurm_parameters("cuda", threads=8, timeout_s=600, options=options)
    script = _make_sbatch_string(command="python -m x", folder=tmp_path, map_count=5, **cuda)
    flags = set(re.findall(r"^#SBATCH (\S+)$", script, re.M))
    assert {"--partition=gpu", "--gpus-per-task=1", "--cpus-per-task=8", "--array=0-4%3", "--time=20"} <= flags
    assert "--signal=USR2@90" in flags, "warned 90 s before the limit: the job ends its worker itself"
    assert "--exclusive" not in flags, "GPU cells share a node, one GPU each"
    cpu = clusters.slurm_parameters("cpu", threads=8, timeout_s=600, options=executors.SlurmOptions(time_min=45))
    script = _make_sbatch_string(command="python -m x", folder=tmp_path, map_count=2, **cpu)
    flags = set(re.findall(r"^#SBATCH (\S+)$", script, re.M))
    assert {"--exclusive", "--time=45", "--array=0-1%2", "--cpus-per-task=8"} <= flags
    assert not any(f.startswith(("--gpus", "--partition")) for f in flags)
    shared = clusters.slurm_parameters("cpu", 8, 600, executors.SlurmOptions(share_nodes=True))
    assert "--exclusive" not in _make_sbatch_string(command="x", folder=tmp_path, **shared)


def test_a_job_past_its_time_limit_is_a_failed_record_with_the_reason(tmp_path, monkeypatch):
    """submitit's local mode enforces the time limit as Slurm does: a warning signal (here 57 s
    before a 1-minute limit), then the job ends, its worker's process group with it."""
    monkeypatch.setenv("DLCOMPARE_EXTRA_ADAPTERS", "tests.fault_adapters")
    monkeypatch.setenv("DLCOMPARE_TEST_TAG", tag := uuid.uuid4().hex)
    cells = plan(discover(), "fault-hang", "mlp", "cpu", FAST[1:6:2], "quick", 1, "t")
    backend = clusters.SlurmBackend(tmp_path / "jobs", executors.SlurmOptions(time_min=1, signal_delay_s=57))
    assert not backend.on_slurm
    with MatrixProgress(1, live=False) as progress:
        executors.run_rounds(backend, [(cells[0], 1)], RoundSink(tmp_path / records.RESULTS, 1, 120.0, progress))
    (rec,) = records.load(tmp_path / records.RESULTS)
    assert rec["status"] == "failed"
    assert re.fullmatch(
        r"job lost: slurm \(submitit's local mode: no Slurm here\) job \d+ \(FINISHED\): "
        r"submitit\.core\.utils\.UncompletedJobError: Job not requeued because: timed-out and not checkpointable\.",
        rec["reason"],
    ), rec["reason"]
    assert rec["round"] == 1 and rec["rounds"] == 1
    assert not _workers(tag), "the hung worker ended with its job"


def test_the_slurm_backend_hands_submitit_those_parameters(tmp_path, monkeypatch):
    """As on a cluster: submitit picks Slurm where ``srun`` exists (this stand-in is never run:
    nothing is submitted), and the sbatch text of the backend's executor carries our parameters."""
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "srun").write_text("#!/bin/sh\nexit 1\n")
    (tmp_path / "bin" / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    backend = clusters.SlurmBackend(tmp_path / "jobs", executors.SlurmOptions(partition="cpu-long"))
    assert backend.on_slurm and backend.capacity is None
    params = clusters.slurm_parameters("cpu", threads=4, timeout_s=60, options=backend.options)
    text = backend._executor(params)._make_submission_file_text("python -m x", "uid")
    flags = set(re.findall(r"^#SBATCH (\S+)$", text, re.M))
    assert {"--partition=cpu-long", "--exclusive", "--cpus-per-task=4", "--time=11", "--job-name=dlcompare"} <= flags


def test_a_missing_extra_is_a_clear_error_with_the_install_command(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # as if not installed
    with pytest.raises(executors.ExecutorError, match=r"needs the ray package: pip install -e '\.\[ray\]'"):
        clusters.make("ray", tmp_path, executors.SlurmOptions(), None, None)
    monkeypatch.setenv("DLCOMPARE_EXTRA_ADAPTERS", "tests.fault_adapters")
    argv = ["bench", "--framework", "fault-ok", "--workload", "mlp", "--device", "cpu", "--out", str(tmp_path)]
    assert cli.main([*argv, "--run-id", "r", "--executor", "ray"]) == 2
    assert "error: --executor ray needs the ray package" in capsys.readouterr().err
    assert not (tmp_path / "r" / records.ENV).exists(), "it fails before anything is measured"


def test_a_submission_the_scheduler_refuses_fails_its_cells_and_the_run_goes_on(tmp_path):
    class Refusing:  # as sbatch answers an unknown partition
        capacity = None

        def submit(self, jobs):
            raise RuntimeError("sbatch: error: invalid partition specified: nope")

    cells = [{"cell_id": c, "adapter": c, "workload": "mlp", "device_requested": "cpu"} for c in ("a", "b")]
    order = [(c, k) for k in (1, 2) for c in cells]
    with MatrixProgress(len(order), live=False) as progress:
        executors.run_rounds(Refusing(), order, RoundSink(tmp_path / records.RESULTS, 2, 10.0, progress))
    recs = records.load(tmp_path / records.RESULTS)
    assert [(r["cell_id"], r["round"]) for r in recs] == [("a", 1), ("b", 1)], "no round 2 after a failed round"
    assert recs[0]["reason"] == "job not submitted: RuntimeError: sbatch: error: invalid partition specified: nope"


def test_cells_of_unlike_machines_are_never_compared_and_the_report_groups_by_machine(tmp_path):
    """A cluster run over two kinds of node: each cell's rounds stay with their machine, and
    fastest / tie verdicts are made within one machine only."""
    a = {"cpu": "Xeon A", "cores": 64, "gpus": [], "driver": None}
    b = {"cpu": "EPYC B", "cores": 16, "gpus": ["NVIDIA H100"], "driver": "580.1"}

    def record(adapter, median_ms=1.0, **extra):  # a 1% interval: every pair here is separated
        ci = {"ci_low_s": median_ms * 0.99e-3, "ci_high_s": median_ms * 1.01e-3} if "status" not in extra else {}
        return fake_record(adapter, median_ms=median_ms, **ci, **extra)

    recs = [
        record("torch-eager", median_ms=1.0, fingerprint=a, cell_id="t", round=1),
        record("jax-jit", median_ms=3.0, fingerprint=a, cell_id="j", round=1),
        record("torch-eager", median_ms=9.0, fingerprint=b, cell_id="t", round=2, node="n2"),
        record("jax-jit", median_ms=2.0, fingerprint=b, cell_id="j", round=2),
        record("tf-eager", status="failed", reason="job lost: NODE_FAIL", cell_id="x", round=1),
        record("tf-eager", median_ms=5.0, fingerprint=b, cell_id="x", round=2),
    ]
    run = tmp_path / "r"
    run.mkdir()
    (run / records.ENV).write_text(json.dumps({"hostname": "login", "cpu": "Xeon A", "fingerprint": a}))
    for r in recs:
        records.append(run / records.RESULTS, r)
    combined, _ = model.load_runs([run])
    machines = {(r["adapter"], r["machine"]) for r in combined}
    assert machines == {
        ("torch-eager", "Xeon A, 64 cores"),
        ("jax-jit", "Xeon A, 64 cores"),
        ("torch-eager", "EPYC B, 16 cores, 1x NVIDIA H100 (driver 580.1)"),
        ("jax-jit", "EPYC B, 16 cores, 1x NVIDIA H100 (driver 580.1)"),
        ("tf-eager", "EPYC B, 16 cores, 1x NVIDIA H100 (driver 580.1)"),
    }, "rounds on unlike machines are not pooled; a lost round joins its cell's machine"
    lost = next(r for r in combined if r["adapter"] == "tf-eager")
    assert lost["status"] == "failed", "the lost round decides its cell, on its cell's machine"
    text = report.build(run)
    assert "## Machines" in text and "| EPYC B, 16 cores, 1x NVIDIA H100 (driver 580.1) | n2      |" in text
    assert "- **mlp on Xeon A, 64 cores: cpu**: torch-eager " in text, "the answer names the machine of each line"
    line = "- **mlp on EPYC B, 16 cores, 1x NVIDIA H100 (driver 580.1): cpu**: jax-jit is the fastest at 2 ms/step"
    assert line in text and "the nearest, torch-eager, takes 4.50x" in text
