"""Runs planned cells, each in a fresh worker process, and appends their records."""

from __future__ import annotations

import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from adapters import AdapterInfo, kit
from harness import env as machine_env
from harness import processes, records
from harness.install.environments import family_python
from harness.measuring import limits_cache
from harness.measuring.contention import OtherLoad
from harness.records import Cell
from harness.running import precision
from harness.running.sink import RoundSink
from workloads import SpecError
from workloads.images import has_images


def worker_env(info: AdapterInfo, cell: Mapping[str, Any]) -> dict[str, str]:
    """The worker's environment: this one's, the adapter's ``worker_env`` (with the cell's own
    compiler cache where its run gives it one, ``compile_cache_dir``: harness.running.turns), the
    harness on the path and the shared compute cache (harness.processes.repo_env), and the device
    the cell may see."""
    env = dict(os.environ)
    with kit.compile_cache(cell.get("compile_cache_dir")):
        env.update(info.cls.worker_env(cell["threads"], cell["device_requested"]))
    env = processes.repo_env(env)
    if cell["device_requested"] == "cpu":
        # A CPU cell must not touch (or grab memory on) a GPU, whatever the framework's default.
        env["CUDA_VISIBLE_DEVICES"] = ""
    else:
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # frameworks number GPUs as NVML does (gpu_util)
    return env


def run_worker(
    info: AdapterInfo,
    cell: Mapping[str, Any],
    mode: str,
    out: Path,
    timeout_s: float,
    extra: Sequence[str] = (),
    load: OtherLoad | None = None,
) -> subprocess.CompletedProcess:
    """Run ``python -m harness.running.worker`` for one cell (harness.processes.run: its own
    process group, killed whole on a timeout or an interruption); ``load``, if given, measures
    what other processes used meanwhile. Raises subprocess.TimeoutExpired past ``timeout_s``."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(cell, f)
    first = cell["cells"][0] if "cells" in cell else cell
    # An idiomatic-script cell (harness.checks.fidelity) runs its script, which takes a worker's arguments.
    module = first.get("script") or "harness.running.worker"
    args = [interpreter(info, first), "-m", module, mode, f.name, str(out), *extra]
    try:
        return processes.run(args, worker_env(info, first), timeout_s, load)
    finally:
        os.unlink(f.name)


def interpreter(info: AdapterInfo, cell: Mapping[str, Any]) -> str:
    """The Python a cell's worker runs under: its named environment's (--env), else its framework
    family's environment (a GPU variant's .venv-tf for TensorFlow: one CUDA major per process),
    else this one."""
    return cell.get("python") or family_python(info.environment) or sys.executable


def skip_reason(info: AdapterInfo, cell: Cell) -> str | None:
    """Why the cell will be skipped, known in the parent without starting a framework: the
    framework is not installed, the adapter declines the spec (``supports``), has no native
    input pipeline for ``--data loader``, or the cell's precision is not native on its device
    (harness.running.precision). None if none of these. Raises SpecError."""
    if not info.available and interpreter(info, cell) == sys.executable:  # another environment may have it
        return info.unavailable
    spec = records.spec_of(cell)
    unsupported = info.cls().supports(spec)
    if not unsupported and cell.get("data") == "loader":
        if has_images(spec) and info.cls.image_loader_kind is None:
            unsupported = f"{info.name} has no native image input pipeline"
        elif not has_images(spec) and info.cls.loader_kind is None:
            unsupported = f"{info.name} has no native input pipeline"
    if not unsupported:
        unsupported = info.cls().precision_reason(cell.get("precision", "fp32"))
    return unsupported or precision.skip_reason(cell, spec)


def run_cell(info: AdapterInfo, cell: records.Cell, timeout_s: float) -> records.Record:
    """One cell's record, with the node and machine fingerprint it ran on (the worker's own where
    it wrote one); never raises for anything the cell itself does."""
    record = _run_cell(info, cell, timeout_s)
    record.setdefault("node", platform.node())
    record.setdefault("fingerprint", machine_env.fingerprint())
    return record


def _run_cell(info: AdapterInfo, cell: records.Cell, timeout_s: float) -> records.Record:
    try:
        reason = skip_reason(info, cell)
    except SpecError as exc:
        return records.new_record(cell, "failed", f"SpecError: {exc}")
    if reason:
        return records.new_record(cell, "skipped", reason)
    return _run_once(info, cell, timeout_s)


def _run_once(info: AdapterInfo, cell: records.Cell, timeout_s: float) -> records.Record:
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
                record.setdefault("stderr_tail", processes.tail(proc.stderr))
        elif proc.returncode < 0:
            name = signal.Signals(-proc.returncode).name
            stderr = processes.tail(proc.stderr)
            record = records.new_record(cell, "failed", f"worker killed by {name}", stderr_tail=stderr)
        else:
            reason = f"worker exited with code {proc.returncode} and no record"
            record = records.new_record(cell, "failed", reason, stderr_tail=processes.tail(proc.stderr))
    record["wall_s"] = time.perf_counter() - t0
    if load.cores is not None:
        record["other_cpu_cores"] = load.cores
        record["contended"] = load.cores > records.CONTENDED_CORES
    return record


def run_cells(order: Sequence[tuple[records.Cell, int]], adapters: Mapping[str, AdapterInfo], sink: RoundSink) -> None:
    """Run (cell, round) pairs in order (harness.running.rounds.schedule), one process at a time,
    each round's record to ``sink`` as soon as it exists. A cell that is skipped or fails runs no
    further round.

    An interruption (KeyboardInterrupt) propagates after the running worker is killed; every
    record appended before it stays.
    """
    for cell, k in order:
        if sink.dropped(cell):
            continue
        sink.progress.start(cell, k)
        # The worker sees its round: some measurements (the dispatch floor) are taken in round 1 only.
        sink.finish(run_cell(adapters[records.base_adapter(cell)], {**cell, "round": k}, sink.timeout_s))


def measure_peaks(devices: list[str], threads: int, precision: str = "fp32") -> dict[str, Any]:
    """The measured matmul and copy limits of each device in the run's precision, keyed by
    device (see harness.measuring.peak). A device whose measurement fails maps to {"error": reason}."""
    env = processes.repo_env(dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads)))
    peaks: dict[str, Any] = {}
    for device in devices:
        inputs = {"peak": device, "threads": threads, "precision": precision}
        peaks[device] = limits_cache.cached(
            inputs, cast("Callable[[], dict[str, Any]]", lambda dev=device: _measure_peak(dev, env, precision))
        )
    return peaks


#: Seconds the device peak's process may take.
PEAK_TIMEOUT_S = 600


def _measure_peak(device: str, env: dict[str, str], precision: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "peak.json"
        cmd = [sys.executable, "-m", "harness.measuring.peak", device, str(out), precision]
        try:
            proc = processes.run(cmd, env, PEAK_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return {"error": f"timeout after {PEAK_TIMEOUT_S} s"}
        if proc.returncode == 0 and out.is_file():
            return json.loads(out.read_text())
        return {"error": processes.tail(proc.stderr) or f"exit code {proc.returncode}"}
