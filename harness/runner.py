"""Runs planned cells, each in a fresh worker process, and appends their records."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from adapters import AdapterInfo
from harness import records, timing
from harness.contention import CONTENDED_CORES, OtherLoad
from harness.progress import MatrixProgress
from harness.stats import summarize
from workloads import SpecError, get_workload, override

REPO = Path(__file__).resolve().parent.parent
STDERR_TAIL_LINES = 20


def worker_env(info: AdapterInfo, cell: dict[str, Any]) -> dict[str, str]:
    env = dict(os.environ)
    env.update(info.cls.worker_env(cell["threads"], cell["device_requested"]))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    if cell["device_requested"] == "cpu":
        # A CPU cell must not touch (or grab memory on) a GPU, whatever the framework's default.
        env["CUDA_VISIBLE_DEVICES"] = ""
    else:
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # frameworks number GPUs as NVML does (gpu_util)
    return env


def _tail(text: str) -> str:
    return "\n".join(text.strip().splitlines()[-STDERR_TAIL_LINES:])


def run_worker(
    info: AdapterInfo,
    cell: dict[str, Any],
    mode: str,
    out: Path,
    timeout_s: float,
    extra: list[str] = (),
    load: OtherLoad | None = None,
) -> subprocess.CompletedProcess:
    """Run ``python -m harness.worker`` for one cell in its own process group (and session);
    ``load``, if given, measures what other processes used meanwhile.

    Raises subprocess.TimeoutExpired past ``timeout_s``. On a timeout or any interruption
    (Ctrl-C, SIGTERM) the whole group is killed, so no worker or helper process outlives it.
    """
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(cell, f)
    first = cell["cells"][0] if "cells" in cell else cell
    # A cell of a named environment (--env) runs under that environment's interpreter.
    args = [first.get("python") or sys.executable, "-m", "harness.worker", mode, f.name, str(out), *extra]
    if load is not None:
        load.start()
    try:
        proc = subprocess.Popen(
            args,
            env=worker_env(info, first),
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            stdout, stderr = proc.communicate(timeout=timeout_s)
        except BaseException:
            _kill_group(proc)
            raise
        if load is not None:
            load.stop(proc.pid)
        return subprocess.CompletedProcess(args, proc.returncode, stdout, stderr)
    finally:
        os.unlink(f.name)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.communicate()


def run_cell(info: AdapterInfo, cell: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """One cell's record; never raises for anything the cell itself does."""
    if not info.available and not cell.get("python"):  # another environment may have it
        return records.new_record(cell, "skipped", info.unavailable)
    try:
        unsupported = info.cls().supports(override(get_workload(cell["workload"]), cell["overrides"]))
    except SpecError as exc:
        return records.new_record(cell, "failed", f"SpecError: {exc}")
    if not unsupported and cell.get("data") == "loader" and info.cls.loader_kind is None:
        unsupported = f"{info.name} has no native input pipeline"
    if unsupported:
        return records.new_record(cell, "skipped", unsupported)
    repeats = timing.PROFILES[cell["profile"]].repeats
    runs = []
    for _ in range(repeats):
        record = _run_once(info, cell, timeout_s)
        if record["status"] != "ok":
            return record
        runs.append(record)
    return pool(runs)


def pool(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One record from repeats of a cell in fresh processes: steady windows pooled, the cold
    window and first step of the first process, per-process medians kept."""
    if len(runs) == 1:
        return runs[0]
    record = dict(runs[0])
    times = [t for r in runs for t in r["step_times_s"]]
    record.update(summarize(times, record["batch_size"]))
    record.update(
        step_times_s=times,
        steps=len(times),
        repeats=len(runs),
        repeat_medians_s=[r["median_s"] for r in runs],
        repeat_cold_s=[r["cold_s"] for r in runs],
        host_peak_rss_bytes=max(r["host_peak_rss_bytes"] for r in runs),
        wall_s=sum(r.get("wall_s", 0.0) for r in runs),
        other_cpu_cores=max(r.get("other_cpu_cores", 0.0) for r in runs),
        contended=any(r.get("contended") for r in runs),
        steady_recompiles=sum(r.get("steady_recompiles") or 0 for r in runs),
        recompile_times_s=[t for r in runs for t in r.get("recompile_times_s") or []],
        cold_settled=None if runs[0].get("cold_settled") is None else all(r.get("cold_settled") for r in runs),
    )
    if record.get("gflops") is not None:
        record["gflops"] = sum(r["gflops"] for r in runs) / len(runs)
        record["gflops_max_step"] = max(r["gflops_max_step"] for r in runs)
    return record


def _run_once(info: AdapterInfo, cell: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    t0 = time.perf_counter()
    load = OtherLoad()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "record.json"
        try:
            proc = run_worker(info, cell, "bench", out, timeout_s, load=load)
        except subprocess.TimeoutExpired:
            return records.new_record(cell, "failed", f"timeout after {timeout_s:g} s")
        if out.is_file():
            record = json.loads(out.read_text())
            if record["status"] == "failed" and proc.stderr.strip():
                # The framework's own log (TF's dlopen warnings, JAX's plugin errors) explains it.
                record.setdefault("stderr_tail", _tail(proc.stderr))
        elif proc.returncode < 0:
            name = signal.Signals(-proc.returncode).name
            record = records.new_record(cell, "failed", f"worker killed by {name}", stderr_tail=_tail(proc.stderr))
        else:
            reason = f"worker exited with code {proc.returncode} and no record"
            record = records.new_record(cell, "failed", reason, stderr_tail=_tail(proc.stderr))
    record["wall_s"] = time.perf_counter() - t0
    if load.cores is not None:
        record["other_cpu_cores"] = load.cores
        record["contended"] = load.cores > CONTENDED_CORES
    return record


def run_cells(
    cells: list[dict[str, Any]],
    adapters: Mapping[str, AdapterInfo],
    results: Path,
    timeout_s: float,
    progress: MatrixProgress,
) -> None:
    """Run cells in order, appending each record to ``results`` as soon as it exists.

    An interruption (KeyboardInterrupt) propagates after the running worker is killed; every
    record appended before it stays.
    """
    for cell in cells:
        progress.start(cell)
        record = run_cell(adapters[records.base_adapter(cell)], cell, timeout_s)
        records.append(results, record)
        progress.finish(record)


def measure_peaks(devices: list[str], threads: int, precision: str = "fp32") -> dict[str, Any]:
    """The measured matmul and copy limits of each device in the run's precision, keyed by
    device (see harness.peak). A device whose measurement fails maps to {"error": reason}."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    peaks: dict[str, Any] = {}
    for device in devices:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "peak.json"
            cmd = [sys.executable, "-m", "harness.peak", device, str(out), precision]
            proc = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=600)
            if proc.returncode == 0 and out.is_file():
                peaks[device] = json.loads(out.read_text())
            else:
                peaks[device] = {"error": _tail(proc.stderr) or f"exit code {proc.returncode}"}
    return peaks
