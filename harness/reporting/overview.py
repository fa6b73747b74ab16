"""The overview that opens a report: adapter x column (workload, with device and setting where a
run has several), each cell's steady time over the fastest cell of its column: the ratio the
workload's table prints (its verdict's point), never a second computation.

One grid feeds both the picture (plots.overview) and the compact markdown table beneath it, so
the two can never disagree. A column's leader is chosen among cells a verdict may use
(cells.comparable), and judged with its column's cells as one family (verdicts.family): it is
*the fastest* (framed) only where it is separated from every rival; a rival is marked *same speed*
where its ratio's whole interval lies within [0.952, 1.05], *unresolved* where neither it nor a
separation holds; cells that did not run show their status; contended cells show their ratio, marked.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tabulate import tabulate

from harness.records import Record, override_number, setting_overrides
from harness.reporting.cells import axes, best_per_adapter, comparable, families, strategy, under_load, what
from harness.reporting.formatting import device_label, sig
from harness.stats.verdicts import SAME, SAME_BAND, UNRESOLVED, Family


@dataclass(frozen=True)
class Cell:
    """One adapter in one column: ``status`` is ok, contended, skipped or failed."""

    status: str
    ratio: float | None = None
    fastest: bool = False  # the column's leader, separated from every rival (verdicts.Family.fastest)
    same: bool = False  # the same speed as the leader (the whole interval within [0.952, 1.05])
    strategy: str | None = None
    unresolved: bool = False  # neither separated from the leader nor the same speed
    under_load: bool = False  # contended, ranked all the same (cells.under_load: --rank-under-load)


@dataclass
class Grid:
    """Adapters (rows) by columns; ``cells`` holds (column, adapter) pairs that were requested."""

    rows: list[str]
    columns: list[str]
    #: The fastest cell's steady time per column (seconds), None where no cell may be ranked.
    fastest_s: list[float | None]
    cells: dict[tuple[str, str], Cell] = field(default_factory=dict)


def setting_order(rec: Record) -> tuple:
    """Where a record's workload and setting sort: by workload, then a sweep's values as numbers
    (batch 16 before 128), the overview's columns and the report's sections alike."""
    setting = tuple(sorted(setting_overrides(rec)))
    numbers = tuple(override_number(o) or 0.0 for o in setting)
    return rec["workload"], numbers, setting


def _column(rec: Record, devices: int) -> tuple[str, tuple]:
    """A column's label and sort key: workload and setting, with the device where there are several."""
    order = setting_order(rec)
    label = what((rec["workload"], None, order[2], rec.get("precision", "fp32"), None))
    if devices > 1:
        label += f" / {device_label(rec)}"
    return label, (*order, device_label(rec), rec.get("precision", "fp32"))


def _cell(recs: list[Record], fastest: Record | None, fams: dict[tuple, Family]) -> Cell:
    usable = comparable(recs)
    if usable:
        best = best_per_adapter(usable)[0]
        fam = fams.get(axes(best))
        found = None if fam is None else {id(r): v for r, v in fam.rivals}.get(id(best))
        # The ratio the workload's table prints (the verdict's point), not a second computation.
        ratio = found.point if found else best["median_s"] / fastest["median_s"] if fastest else None
        is_fastest = best is fastest and fam is not None and fam.fastest
        same, unresolved = (found.outcome == SAME, found.outcome == UNRESOLVED) if found else (False, False)
        return Cell("ok", ratio, is_fastest, same, strategy(best), unresolved, under_load(best))
    ran = [r for r in recs if r["status"] == "ok"]
    if ran:  # only contended cells: shown, never ranked
        best = min(ran, key=lambda r: r["median_s"])
        return Cell("contended", best["median_s"] / fastest["median_s"] if fastest else None, strategy=strategy(best))
    return Cell("failed" if any(r["status"] == "failed" for r in recs) else "skipped")


def grid(recs: list[Record], fams: dict[tuple, Family] | None = None) -> Grid | None:
    """The overview of a report's cells on resident data (other data modes have their own
    section), or None where nothing ran. ``fams``: ``cells.families(recs)`` where the caller has
    them (the report model): a column's marks are its group's family verdicts, judged once."""
    resident = [r for r in recs if r.get("data", "resident") == "resident"]
    if not any(r["status"] == "ok" for r in resident):
        return None
    devices = len({device_label(r) for r in resident if r["status"] == "ok"})
    columns: dict[str, tuple] = {}
    members: dict[tuple[str, str], list[Record]] = {}
    for r in resident:
        label, key = _column(r, devices)
        columns.setdefault(label, key)
        members.setdefault((label, r["adapter"]), []).append(r)
    order = sorted(columns, key=lambda c: columns[c])
    kinds = {r["adapter"]: (r.get("framework", ""), r.get("graph") != "dynamic") for r in resident}
    rows = sorted(kinds, key=lambda a: (*kinds[a], a))  # each framework's dynamic mode above its static one
    out = Grid(rows, order, [])
    fams = families(recs) if fams is None else fams
    for column in order:
        usable = [r for a in rows for r in comparable(members.get((column, a), []))]
        fastest = min(usable, key=lambda r: r["median_s"], default=None)
        out.fastest_s.append(fastest["median_s"] if fastest else None)
        for adapter in rows:
            if (column, adapter) in members:
                out.cells[(column, adapter)] = _cell(members[(column, adapter)], fastest, fams)
    return out


def ratio_text(ratio: float | None) -> str:
    """``1.04``, ``39.4``, ``112``: two decimals where a tie or a small gap matters, fewer above."""
    if ratio is None:
        return "—"
    return f"{ratio:.2f}" if ratio < 10 else f"{ratio:.1f}" if ratio < 100 else f"{ratio:.0f}"


def cell_text(cell: Cell) -> str:
    """``1.00``, ``1.02 same``, ``1.17 unresolved``, ``2.15``, ``3.10 contended``, ``skipped``: a cell
    in words (bold: the fastest, separated from every rival)."""
    if cell.status in ("skipped", "failed"):
        return cell.status
    text = ratio_text(cell.ratio)
    if cell.fastest:
        text = f"**{text}**"
    if cell.same:
        text += " same"
    if cell.unresolved:
        text += " unresolved"
    if cell.status == "contended":
        text += " contended"
    if cell.under_load:
        text += " under load"
    return text + (f" ({cell.strategy})" if cell.strategy else "")


def table(g: Grid) -> str:
    """The overview as a compact markdown table: a row of the fastest times, then one per adapter."""
    rows = [["fastest (ms/step)", *(sig(s * 1e3) if s else "—" for s in g.fastest_s)]]
    for adapter in g.rows:
        rows.append(
            [adapter, *(cell_text(g.cells[(c, adapter)]) if (c, adapter) in g.cells else "" for c in g.columns)]
        )
    return tabulate(rows, ["time / fastest", *g.columns], tablefmt="github", disable_numparse=True)


def caption(g: Grid, has_data_modes: bool) -> str:
    """What the picture and the table show, in a few lines (the answer's first screen)."""
    text = (
        "Each cell: the adapter's steady step over the column's fastest (its best loop strategy in brackets), "
        "the ratio its workload's table prints; **bold**: the fastest, separated from every other by 5% or more; "
        f"`same`: the same speed as the fastest (interval within {SAME_BAND}); `unresolved`: the run could not tell"
    )
    if any(c.status == "contended" for c in g.cells.values()):
        text += "; `contended`: ran beside other CPU load, not ranked"
    if any(c.under_load for c in g.cells.values()):
        text += "; `under load`: ran beside other CPU load, ranked all the same as the run asked (`--rank-under-load`)"
    if has_data_modes:
        text += "; data already on the device (other data modes: details, Input pipeline)"
    return text + "."
