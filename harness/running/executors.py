"""Where the cells of a run execute: on this machine (``local``: resident workers taking turns,
harness.running.turns), on a Slurm cluster through submitit (``slurm``), or on a Ray cluster (``ray``).

Every executor is an ``Executor``: ``run(todo, run, results, progress)`` runs a run's (cell, round)
pairs and appends their records, ``close()`` releases what it holds; ``executor()`` makes the one
``--executor`` names. ``LocalExecutor`` applies the run's time budget; ``ClusterExecutor`` wraps a
cluster *backend* (``SlurmBackend``, ``RayBackend``: submit, poll, cancel jobs) around ``run_rounds``.

An executor has one job: hand a (cell, round) to somewhere that runs ``python -m
harness.running.worker`` and bring its record back. On a cluster the job is
``harness.running.cluster_job.run_job`` (the backends are harness.running.clusters'). ``run_rounds``
keeps the run's contract whatever the executor: round r of every cell is submitted and finished
before round r + 1 of any; each record is appended to results.jsonl as its job ends; a cell that is
not ``ok`` runs no further round; Ctrl-C (KeyboardInterrupt) cancels every job in flight; a job the
scheduler lost (killed, cancelled, past its time limit, its node gone) becomes a ``failed`` record
with the scheduler's reason.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from itertools import groupby
from pathlib import Path
from typing import Any, Protocol

from adapters import AdapterInfo
from harness import records
from harness.records import Cell
from harness.running import budget
from harness.running.clusters import EXECUTORS, ExecutorError, SlurmOptions, first_line, lost, make
from harness.running.progress import MatrixProgress
from harness.running.rounds import Run
from harness.running.sink import RoundSink

__all__ = ["EXECUTORS", "ExecutorError", "Executor", "SlurmOptions", "executor", "run_rounds"]


def _rounds(order: Sequence[tuple[Cell, int]]) -> Iterator[tuple[int, list[Cell]]]:
    for k, pairs in groupby(order, key=lambda pair: pair[1]):
        yield k, [cell for cell, _ in pairs]


def run_rounds(backend: Any, order: Sequence[tuple[Cell, int]], sink: RoundSink) -> None:
    """Run (cell, round) pairs (harness.running.rounds.schedule) as jobs of ``backend``, a round at a
    time, each record to ``sink`` as its job ends.

    A KeyboardInterrupt cancels the jobs in flight, then propagates; records appended before it stay.
    """
    for k, cells in _rounds(order):
        queue: list[Cell] = [
            {**cell, "round": k} for cell in cells if not sink.dropped(cell)
        ]  # the worker sees its round
        running: list[tuple[Any, Cell]] = []
        try:
            while queue or running:
                free = len(queue) if backend.capacity is None else backend.capacity - len(running)
                if free > 0 and queue:
                    batch, queue = queue[:free], queue[free:]
                    try:
                        handles = backend.submit([(c, sink.timeout_s) for c in batch])
                    except Exception as exc:  # noqa: BLE001 - sbatch refused (a bad partition): data, not a crash
                        for cell in batch:
                            sink.finish(lost(cell, first_line(exc), "job not submitted"))
                        continue
                    for handle, cell in zip(handles, batch, strict=True):
                        sink.progress.start(cell, k)
                        running.append((handle, cell))
                done = backend.finished([h for h, _ in running])
                for handle, cell in [(h, c) for h, c in running if h in done]:
                    running = [(h, c) for h, c in running if h is not handle]
                    sink.finish(backend.result(handle, cell))
        except BaseException:
            backend.cancel([h for h, _ in running])
            raise


# --- the executors a run uses ------------------------------------------------------------------


class Executor(Protocol):
    """Where a run's rounds execute. ``where``: the run line's `` on <executor>`` ('' on this machine)."""

    where: str

    def run(self, todo: Sequence[tuple[Cell, int]], run: Run, results: Path, progress: MatrixProgress) -> None:
        """Run the (cell, round) pairs ``todo`` of ``run``, appending each record to ``results``; a
        KeyboardInterrupt stops every worker or job, then propagates (records appended stay)."""
        ...

    def close(self) -> None: ...


class LocalExecutor:
    """This machine: each round of a group of cells as one generation of resident workers taking
    turns (harness.running.turns), with the run's time budget if it has one (harness.running.budget)."""

    where = ""

    def __init__(self, adapters: Mapping[str, AdapterInfo]) -> None:
        self.adapters = adapters

    def run(self, todo: Sequence[tuple[Cell, int]], run: Run, results: Path, progress: MatrixProgress) -> None:
        # A resumed run's budget counts afresh: what it had spent is not known.
        left = budget.Budget(run.budget_s)
        left.keep_back_for_closing(records.load_env(results.parent).get("phases_s", {}).get("device peaks"))
        progress.budget = left if run.budget_s is not None else None
        if run.budget_s is not None:  # a budget adds generations, each cell up to MAX_GENERATIONS processes
            progress.most = len({cell["cell_id"] for cell, _ in todo}) * budget.MAX_GENERATIONS
        budget.run(todo, self.adapters, RoundSink(results, run.rounds, run.timeout_s, progress), left)

    def close(self) -> None:
        """Nothing held: every worker ends with its generation."""


class ClusterExecutor:
    """A cluster backend's jobs, a round at a time (``run_rounds``); the planned rounds run (a
    time budget applies on this machine only)."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.where = f" on {backend.name}"

    def run(self, todo: Sequence[tuple[Cell, int]], run: Run, results: Path, progress: MatrixProgress) -> None:
        run_rounds(self.backend, todo, RoundSink(results, run.rounds, run.timeout_s, progress))

    def close(self) -> None:
        self.backend.close()


def executor(
    name: str,
    run_dir: Path,
    adapters: Mapping[str, AdapterInfo],
    slurm: SlurmOptions,
    ray_address: str | None,
    ray_cpus: int | None,
) -> Executor:
    """The executor of ``--executor name``; raises ExecutorError (a missing extra, no cluster there)."""
    if name == "local":
        return LocalExecutor(adapters)
    return ClusterExecutor(make(name, run_dir, slurm, ray_address, ray_cpus))
