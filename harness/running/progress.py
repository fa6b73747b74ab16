"""Progress over the matrix: a live bar on a terminal, one line per finished cell always."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from harness.records import Cell, Record, round_of


def cell_line(rec: Record) -> str:
    """The one-line summary of a finished cell."""
    variant = " ".join(filter(None, [rec["workload"], *rec.get("overrides", []), rec.get("data", "")]))
    name = rec["adapter"] + (" (script)" if rec.get("script") else "")  # an idiomatic script (harness.checks.fidelity)
    what = f"{name:<12} {variant:<36} {rec['device_requested']:<5}"
    planned = rec.get("rounds") or 1
    if round_of(rec) > planned:  # a generation the budget added to settle a verdict (harness.running.budget)
        what = f"round {rec['round']} (extra) {what}"
    elif planned > 1:
        what = f"round {rec['round']}/{planned} {what}"
    if rec["status"] == "ok":
        first = f" (first step {rec['first_step_s'] * 1e3:.1f} ms)" if "first_step_s" in rec else ""
        return f"{what} ok      {rec['median_s'] * 1e3:9.3f} ms/step{first}"
    return f"{what} {rec['status']}: {rec['reason']}"


class MatrixProgress:
    """Use as a context manager; ``start(cell, round)`` before a round of a cell runs,
    ``finish(record)`` after; ``drop()`` for a planned round that will not run; ``say(line)`` for
    a line of the run's own."""

    def __init__(self, total: int, live: bool | None = None) -> None:
        self.total, self.done = total, 0
        self.budget: Any = None  # a harness.running.budget.Budget, shown while it runs
        #: The most processes the run may start (a budget adds generations up to a limit); 0: ``total``.
        self.most = 0
        #: Called after each generation ends (the bench rewrites its provisional report there).
        self.on_generation: Callable[[], None] | None = None
        self.live = sys.stdout.isatty() if live is None else live
        self.console = Console(highlight=False, soft_wrap=True)
        self._bar = (
            Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                console=self.console,
                transient=True,
            )
            if self.live
            else None
        )

    def __enter__(self) -> MatrixProgress:
        if self._bar:
            self._bar.start()
            self._task = self._bar.add_task("starting", total=self.total)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar:
            self._bar.stop()

    def start(self, cell: Cell, round_: int = 1) -> None:
        if self._bar:
            what = f"round {round_}: {cell['adapter']} {cell['workload']} {cell['device_requested']}"
            if self.budget is not None:
                left = max(self.budget.left(), 0)
                what += f" | budget left {int(left // 60)}:{int(left % 60):02d}"
            self._bar.update(self._task, description=what)

    def add(self, n: int) -> None:
        """``n`` more rounds planned (a budget adds generations where its time holds them)."""
        self.total += n
        if self._bar:
            self._bar.update(self._task, total=self.total)

    def drop(self) -> None:
        self.total -= 1
        if self._bar:
            self._bar.update(self._task, total=self.total)

    def say(self, line: str) -> None:
        """A line of the run's own (a decision of its budget), among the cells' lines."""
        if self._bar:
            self._bar.console.print(line, markup=False)
        else:
            print(line, flush=True)

    def generation_ended(self) -> None:
        """A generation's processes have all ended: the hook runs (a failing hook is reported, never
        fatal: a provisional page must not cost the run its measurements)."""
        if self.on_generation is not None:
            try:
                self.on_generation()
            except Exception as exc:  # noqa: BLE001 - see above
                print(f"provisional report not written ({type(exc).__name__}: {exc})", file=sys.stderr, flush=True)

    def count(self) -> str:
        """``44/99``, or ``44/99, up to 165`` where a budget may add generations; with a budget, the
        time it has left."""
        text = f"{self.done}/{self.total}" + (f", up to {self.most}" if self.most > self.total else "")
        if self.budget is not None and self.budget.total_s is not None:
            left = max(self.budget.left(), 0)
            text += f"; budget left {int(left // 60)}:{int(left % 60):02d}"
        return text

    def finish(self, rec: Record) -> None:
        self.done += 1
        line = f"[{self.count()}] {cell_line(rec)}"
        self.say(line)
        if self._bar:
            self._bar.advance(self._task)
