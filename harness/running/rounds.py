"""Rounds: each cell runs in several fresh processes, interleaved with every other cell's.

A round is one worker process of one cell (one record in ``results.jsonl`` with ``round``).
Round r of every cell runs before round r + 1 of any, in a shuffled order, so the machine's
drift over the run lands on every adapter alike. What the rounds give a cell's numbers and its
verdicts is statistics (harness.stats).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

from harness import records
from harness.records import Cell, Record, round_of


def schedule(cells: Sequence[Cell], rounds: int, run_id: str, done: Iterable[Record] = ()) -> list[tuple[Cell, int]]:
    """(cell, round) pairs still to run, round by round, each round in its own shuffled order
    (seeded by the run id and round, so a resumed run keeps its order). A cell with a record
    that is not ``ok`` (skipped, failed) runs no further round; an ``ok`` round is not rerun."""
    finished = {(r.get("cell_id"), round_of(r)) for r in done if r["status"] == "ok"}
    ended = {r.get("cell_id") for r in done if r["status"] != "ok"}
    order = []
    for k in range(1, rounds + 1):
        shuffled = list(cells)
        random.Random(f"{run_id}:{k}").shuffle(shuffled)
        order += [(c, k) for c in shuffled if c["cell_id"] not in ended and (c["cell_id"], k) not in finished]
    return order


class Run(NamedTuple):
    """A planned run (as plan.json keeps it): its cells, rounds per cell, seconds per worker, and
    its time budget (seconds, or None: fixed rounds)."""

    cells: list[Cell]
    rounds: int
    timeout_s: float
    budget_s: float | None = None

    def todo(self, results: Path) -> list[tuple[Cell, int]]:
        """(cell, round) pairs without a record in ``results`` yet, in running order."""
        done = records.load(results) if results.exists() else []
        return schedule(self.cells, self.rounds, self.cells[0]["run_id"] if self.cells else "", done)
