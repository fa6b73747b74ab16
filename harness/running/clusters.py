"""Cluster backends of the ``slurm`` and ``ray`` executors (harness.running.executors): submit a
(cell, round) as a job that runs ``harness.running.cluster_job.run_job`` on a node, poll, cancel,
and turn a job the scheduler lost (killed, cancelled, past its time limit, its node gone) into a
``failed`` record with the scheduler's reason.

Timing cells never share a node with another timing cell unless the user asks: on Slurm a CPU
cell's job is ``--exclusive``; on Ray it asks for every CPU of the largest node; a GPU cell asks
for one GPU (GPU cells share a node, one GPU each). Slurm's local fallback (no ``sbatch`` here)
and a Ray cluster of one machine therefore run one CPU cell at a time, as the local executor does.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import processes, records
from harness.records import Cell, Record
from harness.running.cluster_job import run_job

EXECUTORS = ("local", "slurm", "ray")
#: Extra minutes a Slurm job gets beyond the worker's own timeout: start-up, imports, the report back.
SLURM_SLACK_MIN = 10
#: Seconds between polls for finished jobs: Slurm's (sacct, which submitit rate-limits itself),
#: and submitit's local mode and Ray's, where a poll is cheap and every wait adds to each cell.
POLL_S = 0.5
LOCAL_POLL_S = 0.05


class ExecutorError(RuntimeError):
    """An executor that cannot start here (its package missing, no cluster at the address)."""


def _need(module: str, extra: str):
    """Import an optional dependency, or fail with the command that installs it."""
    try:
        return __import__(module)
    except ImportError:
        raise ExecutorError(
            f"--executor {extra} needs the {module} package: pip install -e '.[{extra}]' (or make install)"
        ) from None


#: Seconds a cancelled job has to end its worker itself before a local one is killed outright.
CANCEL_GRACE_S = 10.0


def _job_env() -> dict[str, str]:
    """Environment a job needs on its node: this repository importable, the harness's own
    settings (DLCOMPARE_*: extra adapters, the limits cache) as here."""
    found = {k: v for k, v in os.environ.items() if k.startswith("DLCOMPARE_")}
    found["PYTHONPATH"] = processes.repo_env()["PYTHONPATH"]
    return found


@contextlib.contextmanager
def _exported(env: dict[str, str]) -> Iterator[None]:
    """``env`` in this process's environment for the duration, as it was afterwards."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def lost(cell: Cell, reason: str, what: str = "job lost") -> Record:
    """The record of a job that ended without one (the scheduler's reason, in one line)."""
    line = " ".join(str(reason).split())
    return records.new_record(cell, "failed", f"{what}: {line[:400]}")


# --- Slurm (submitit) --------------------------------------------------------------------------


@dataclass(frozen=True)
class SlurmOptions:
    """What ``--slurm-*`` sets: partition, GPUs per GPU cell, time limit in minutes (default: the
    cell timeout plus SLURM_SLACK_MIN), the cap on tasks of a job array running at once, and
    whether CPU cells may share a node."""

    partition: str | None = None
    gpus_per_task: int = 1
    time_min: int | None = None
    max_concurrent: int = 64
    share_nodes: bool = False
    #: Seconds before the time limit that the job is warned (submitit's USR2; it then ends the
    #: job: a cell cannot be checkpointed). submitit's default; the tests shorten it.
    signal_delay_s: int = 90


def slurm_parameters(device: str, threads: int, timeout_s: float, options: SlurmOptions) -> dict[str, Any]:
    """The sbatch parameters (submitit's ``SlurmExecutor`` names) of the job array of one
    device's cells: one task per cell, ``threads`` CPUs each; a CPU cell gets its node to itself
    (``--exclusive``) unless ``share_nodes``; a GPU cell gets ``gpus_per_task`` GPUs."""
    params: dict[str, Any] = {
        "job_name": "dlcompare",
        "time": options.time_min or math.ceil(timeout_s / 60) + SLURM_SLACK_MIN,
        "nodes": 1,
        "ntasks_per_node": 1,
        "cpus_per_task": threads,
        "array_parallelism": options.max_concurrent,
        "signal_delay_s": options.signal_delay_s,
    }
    if options.partition:
        params["partition"] = options.partition
    if device == "cuda":
        params["gpus_per_task"] = options.gpus_per_task
    elif not options.share_nodes:
        params["exclusive"] = True
    return params


class SlurmBackend:
    """Jobs through submitit's AutoExecutor: a job array per round and device on Slurm; where
    there is no Slurm, submitit's local executor, one job at a time (this machine is one node)."""

    def __init__(self, folder: Path, options: SlurmOptions) -> None:
        self.submitit = _need("submitit", "slurm")
        self.folder, self.options = folder, options
        self.on_slurm = self.submitit.AutoExecutor(folder=folder).cluster == "slurm"
        self.capacity = None if self.on_slurm else 1
        self.poll_s = POLL_S if self.on_slurm else LOCAL_POLL_S
        self.name = "slurm" if self.on_slurm else "slurm (submitit's local mode: no Slurm here)"

    def _executor(self, params: dict[str, Any]) -> Any:
        """A fresh executor per job array: parameters of one device's array never leak into the next."""
        if self.on_slurm:
            executor = self.submitit.SlurmExecutor(folder=self.folder)
            executor.update_parameters(**params)
        else:
            executor = self.submitit.LocalExecutor(folder=self.folder)
            executor.update_parameters(
                timeout_min=params["time"],
                gpus_per_node=params.get("gpus_per_task", 0),
                signal_delay_s=params["signal_delay_s"],
            )
        return executor

    def submit(self, jobs: list[tuple[Cell, float]]) -> list[Any]:
        with _exported(_job_env()):  # jobs inherit it: sbatch's default --export=ALL, the local mode's Popen
            return self._submit(jobs)

    def _submit(self, jobs: list[tuple[Cell, float]]) -> list[Any]:
        handles: dict[int, Any] = {}
        for device in ("cpu", "cuda"):
            mine = [(i, job) for i, job in enumerate(jobs) if job[0]["device_requested"] == device]
            if not mine:
                continue
            timeout_s = max(t for _, (_, t) in mine)
            executor = self._executor(slurm_parameters(device, mine[0][1][0]["threads"], timeout_s, self.options))
            if self.on_slurm:
                with executor.batch():  # one job array: the scheduler caps how many run at once
                    submitted = [executor.submit(run_job, cell, t) for _, (cell, t) in mine]
            else:
                submitted = [executor.submit(run_job, cell, t) for _, (cell, t) in mine]
            handles.update({i: job for (i, _), job in zip(mine, submitted, strict=True)})
        return [handles[i] for i in range(len(jobs))]

    def finished(self, handles: list[Any]) -> list[Any]:
        done = [h for h in handles if h.done()]
        if not done:
            time.sleep(self.poll_s)
        return done

    def result(self, handle: Any, cell: Cell) -> Record:
        if not self.on_slurm and not handle.paths.result_pickle.exists():
            # Here the job's files are on a local disk: no point in submitit's 15 s wait for a
            # result pickle that a slow shared filesystem might still deliver.
            return lost(cell, f"{self.name} job {handle.job_id} ({handle.state}): ended without a result")
        try:
            return handle.result()
        except self.submitit.core.utils.UncompletedJobError as exc:  # FailedJobError too
            try:
                state = handle.state  # Slurm's word for it: TIMEOUT, NODE_FAIL, PREEMPTED, CANCELLED ...
            except Exception:  # noqa: BLE001 - sacct unreachable: the exception still says what happened
                state = "state unknown"
            return lost(cell, f"{self.name} job {handle.job_id} ({state}): {first_line(exc)}")

    def cancel(self, handles: list[Any]) -> None:
        for h in handles:
            h.cancel(check=False)
        deadline = time.monotonic() + CANCEL_GRACE_S  # the job ends its worker's process group first
        while time.monotonic() < deadline and not all(h.done() for h in handles):
            time.sleep(0.1)
        if not self.on_slurm:  # a local job that did not end: its controller, task and worker go with bench
            for h in handles:
                if not h.done() and getattr(h, "_process", None) is not None:
                    processes.kill_tree(h._process.pid)

    def close(self) -> None:
        pass


def first_line(exc: BaseException) -> str:
    """An exception in one line: its first, or for submitit's FailedJobError (the job's own
    traceback between dashed lines) the exception the job ended with, the trace's last line."""
    parts = str(exc).split("-" * 22)
    if type(exc).__name__ == "FailedJobError" and len(parts) >= 3:
        trace = [ln.strip() for ln in parts[1].splitlines() if ln.strip()]
        if trace:
            return trace[-1]
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


# --- Ray ----------------------------------------------------------------------------------------


class RayBackend:
    """Tasks on the Ray cluster at ``address`` (None: start a local one, stopped at the end). A
    GPU cell asks for one GPU; a CPU cell for ``cpus_per_cell`` CPUs (default: every CPU of the
    largest node, so no other cell runs beside it; with ``share_nodes``, its thread count). Tasks
    are never retried: a lost one is a failed record."""

    def __init__(self, address: str | None, cpus_per_cell: int | None = None, share_nodes: bool = False) -> None:
        self.ray = _need("ray", "ray")
        runtime_env = {"env_vars": _job_env()}
        try:
            if address:
                self.ray.init(address=address, runtime_env=runtime_env, log_to_driver=False)
            else:
                self.ray.init(include_dashboard=False, runtime_env=runtime_env, log_to_driver=False)
        except (ConnectionError, RuntimeError) as exc:
            raise ExecutorError(f"no Ray cluster at {address!r}: {exc}") from None
        cpus = [int(n["Resources"].get("CPU", 0)) for n in self.ray.nodes() if n.get("Alive")]
        self.largest, self.cpus, self.share = max(cpus, default=1), cpus_per_cell, share_nodes
        # A GPU cell on a cluster without GPUs would wait forever for one; it runs as it would on
        # a machine without a GPU instead (its worker records why it was skipped).
        self.gpus = self.ray.cluster_resources().get("GPU", 0) > 0
        self.task = self.ray.remote(max_retries=0)(run_job)
        self.capacity = None
        self.name = f"ray ({address or 'a local cluster'})"

    def submit(self, jobs: list[tuple[Cell, float]]) -> list[Any]:
        refs = []
        for cell, timeout_s in jobs:
            gpu = cell["device_requested"] == "cuda"
            cpus = self.cpus or (min(cell["threads"], self.largest) if self.share else self.largest)
            options = {"num_gpus": int(self.gpus), "num_cpus": 1} if gpu else {"num_cpus": cpus}
            refs.append(self.task.options(**options).remote(cell, timeout_s))
        return refs

    def finished(self, handles: list[Any]) -> list[Any]:
        done, _ = self.ray.wait(handles, num_returns=1, timeout=POLL_S)  # returns as soon as one is
        return done

    def result(self, handle: Any, cell: Cell) -> Record:
        try:
            return self.ray.get(handle)
        except self.ray.exceptions.RayError as exc:
            return lost(cell, f"ray task: {first_line(exc)}")

    def cancel(self, handles: list[Any]) -> None:
        for ref in handles:
            self.ray.cancel(ref)  # not force: KeyboardInterrupt in the task ends its worker group
        try:
            self.ray.wait(handles, num_returns=len(handles), timeout=10)
        except self.ray.exceptions.RayError:
            pass

    def close(self) -> None:
        self.ray.shutdown()


def make(name: str, run_dir: Path, slurm: SlurmOptions, ray_address: str | None, ray_cpus: int | None):
    """The backend of ``--executor name`` (not ``local``); raises ExecutorError."""
    if name == "slurm":
        return SlurmBackend(run_dir / "jobs", slurm)
    if name == "ray":
        return RayBackend(ray_address, ray_cpus, slurm.share_nodes)
    raise ExecutorError(f"unknown executor {name!r}; valid: {', '.join(EXECUTORS)}")
