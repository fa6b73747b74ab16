"""Where a run's rounds end: one object every runner hands its records to (the local generations
of harness.running.turns and budget, cells run alone by harness.running.runner, a cluster's jobs
by harness.running.executors), instead of each passing the same parameters along."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from harness import records
from harness.records import Cell, Record
from harness.running.progress import MatrixProgress


@dataclass
class RoundSink:
    """A run's rounds, as they end: each record appended to ``results`` as soon as it exists, with
    the run's planned ``rounds``, and counted on ``progress``; a cell whose round is not ``ok`` is
    ``ended`` and runs no further round. ``timeout_s``: what each worker process may take."""

    results: Path
    rounds: int
    timeout_s: float
    progress: MatrixProgress
    ended: set[str] = field(default_factory=set)

    def finish(self, record: Mapping[str, Any]) -> None:
        """Append a round's record (with the run's ``rounds``) and count it."""
        rec = cast(Record, {**record, "rounds": self.rounds})  # a worker's record, as JSON wrote it
        records.append(self.results, rec)
        self.progress.finish(rec)
        if rec["status"] != "ok":
            self.ended.add(rec["cell_id"])

    def generation_ended(self) -> None:
        """Every process of a generation has handed in its record (``MatrixProgress.generation_ended``)."""
        self.progress.generation_ended()

    def dropped(self, cell: Cell) -> bool:
        """Whether ``cell`` has ended (a round of it was not ``ok``): then its round is counted as
        dropped and not run."""
        if cell["cell_id"] in self.ended:
            self.progress.drop()
            return True
        return False
