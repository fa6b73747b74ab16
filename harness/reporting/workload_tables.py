"""The per-workload results: a main table of what a reader decides on, then a details table.

Every column a cell's record yields is in one of the two; the details table is collapsed in a
``<details>`` block (GitHub renders it; so does report.html, harness.reporting.html). Both list the
same rows in the same order: fastest steady step first, cells that did not run last.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from tabulate import tabulate

from harness.records import Record, setting_overrides
from harness.reporting.cells import axes, families, overlap, strategy, synced_step, tokens_per_s, under_load
from harness.reporting.formatting import (
    DASH,
    NOT_REPORTED,
    compiles_text,
    device_label,
    sig,
    status_text,
    verdict_text,
)
from harness.stats.verdicts import Family, PairVerdict, pair_verdict

#: A record (``ordered`` returns what it is given).
_R = TypeVar("_R", bound=Record)

#: The most columns the main table may have; the rest go to the details table.
MAIN_MAX = 10

#: The summary line of the collapsed details table, before its column names.
DETAILS_LEAD = "More columns:"


def table_title(rec: Record) -> str:
    spec = rec.get("spec") or {}
    parts = [f"## {rec['workload']}"]
    detail = []
    if rec.get("param_count"):
        detail.append(f"{rec['param_count']:,} parameters")
    if "batch_size" in spec:
        detail.append(f"batch {spec['batch_size']}")
    if "optimizer" in spec:
        detail.append(f"{spec['optimizer']} lr {spec['learning_rate']:g}")
    overrides = setting_overrides(rec)
    if overrides:
        detail.append("overrides: " + ", ".join(overrides))
    return parts[0] + (f" ({', '.join(detail)})" if detail else "")


def _trains(rec: Record) -> bool:
    """False for inference workloads, whose sync value is a caption length, not a loss."""
    return (rec.get("spec") or {}).get("task", "train") == "train"


def _vs_fastest(rec: Record, fastest: Record | None, found: PairVerdict | None = None, leads: bool = False) -> str:
    """The ratio to the fastest with its interval and verdict (formatting.verdict_text): ``found``,
    the family-wise verdict of the cell's group (cells.families), else the pair's own. The
    fastest reads ``1.00 fastest`` where it ``leads``: separated from every rival (verdicts.family)."""
    loaded = " (under load)" if under_load(rec) or (fastest and under_load(fastest)) else ""  # said on every row
    if rec is fastest:
        return ("1.00 fastest" if leads else "1.00") + loaded
    assert fastest is not None  # a timed row's machine has a fastest cell: at worst the row itself
    if "ci_low_s" not in rec:
        return f"{rec['median_s'] / fastest['median_s']:.2f}" + loaded
    return verdict_text(found or pair_verdict(fastest, rec)) + loaded


def _median_ci(rec: Record) -> str:
    text = sig(rec["median_s"] * 1e3) + (" †" if (rec.get("pass_steps") or 1) > 1 else "")
    if "ci_low_s" in rec:
        text += f" [{sig(rec['ci_low_s'] * 1e3)}, {sig(rec['ci_high_s'] * 1e3)}]"
    return text


def _outcome(rec: Record) -> str:
    """Training: the loss at the first step and the last, with how many steps the process had
    trained by then (cells whose processes ran longer cold windows end lower without computing
    anything differently). Decoding: tokens per caption."""
    if _trains(rec):
        after = f" after {rec['loss_last_step']} steps" if rec.get("loss_last_step") else ""
        return f"{rec['loss_first']:.3f} → {rec['loss_last']:.3f}{after}"
    if rec.get("decode_len_mean") is None:
        return DASH
    return f"{sig(rec['decode_len_mean'])} per caption ({rec['decode_len_min']}..{rec['decode_len_max']})"


def _pipelined(rec: Record) -> str:
    """``0.61 (0.83x of 0.735)``: time per step with one sync per block, its ratio to the synced
    time per step it is set against, and that time (cells.overlap, cells.synced_step; ms/step)."""
    if rec.get("pipelined_s") is None:
        return DASH
    return f"{sig(rec['pipelined_s'] * 1e3)} ({overlap(rec):.2f}x of {sig(synced_step(rec) * 1e3)})"


def floor_text(rec: Record) -> str:
    """``2.1x kernels``: the steady step as a multiple of the larger of its two floors
    (harness.measuring.floors), named: ``kernels`` (compute-bound) or ``dispatch`` (overhead-bound).
    A dash unless both were measured: one floor alone (decoding has no kernel floor) tells no bound."""
    kernels, dispatch = rec.get("kernel_floor_s"), rec.get("dispatch_floor_s")
    if not kernels or not dispatch:
        return DASH
    name, value = ("kernels", kernels) if kernels >= dispatch else ("dispatch", dispatch)
    return f"{rec['median_s'] / value:.1f}x {name}"


def _steps(rec: Record) -> str:
    """``412 (2)``: timed steps in all, and the rounds (fresh processes) they came from."""
    return f"{rec.get('steps', DASH)} ({rec.get('rounds_done') or 1})"


def _iqr(rec: Record) -> str:
    return sig(rec["iqr_s"] * 1e3) + (" noisy" if rec.get("noisy") else "")


@dataclass(frozen=True)
class Column:
    """One column: its header, its cell for a record (given the fastest cell of the record's
    machine), and whether the cell needs a timed record (a dash for cells that did not run)."""

    header: str
    cell: Callable[[Record, Record | None], str]
    timed: bool = True


_ADAPTER = Column("adapter", lambda r, _: r["adapter"], timed=False)
_STRATEGY = Column("strategy", lambda r, _: strategy(r) or DASH, timed=False)
_DEVICE = Column("device", lambda r, _: device_label(r), timed=False)
_GRAPH = Column("graph", lambda r, _: r.get("graph", DASH), timed=False)
_STEADY = Column("steady [CI] (ms/step)", lambda r, _: _median_ci(r))
_VS_FASTEST = Column("time vs fastest", _vs_fastest)
_PIPELINED = Column("pipelined (ms/step)", lambda r, _: _pipelined(r))
_SAMPLES = Column("samples/s", lambda r, _: sig(r["samples_per_s"]))
_TOKENS = Column("tokens/s", lambda r, _: sig(tokens_per_s(r)))
_FIRST = Column("first step (ms)", lambda r, _: sig(r["first_step_s"] * 1e3))
_FLOOR = Column("vs its floor", lambda r, _: floor_text(r))
_STATUS = Column("status", lambda r, _: status_text(r), timed=False)
_IQR = Column("IQR (ms)", lambda r, _: _iqr(r))
_COMPILES = Column("traces / compiles", lambda r, _: compiles_text(r))
_OUTCOME = Column("loss first → last / decoded tokens", lambda r, _: _outcome(r))
_STEPS = Column("timed steps (rounds)", lambda r, _: _steps(r))


def layout(recs: list[Record]) -> tuple[list[Column], list[Column], list[Column]]:
    """The columns of one workload's tables: (key, main, details).

    The key columns tell rows apart and open both tables: the adapter, its loop strategy where the
    workload has them, its device where the cells ran on several. The main table adds what a
    reader picks an adapter by: the steady step and its interval, the ratio to the fastest with
    its interval and verdict, the pipelined step, throughput (tokens/s where the workload counts tokens,
    else samples/s), the first step (what compiling costs), the distance to the floor, and the
    status (why a cell did not run, or was not ranked). The details table holds the rest: graph
    kind, the device where it is one for all, IQR, samples/s where tokens/s is in the main table,
    trace and compile counts, the loss or decoded length (a sanity check, not a choice), and the
    timed steps and rounds. A column no row has a value in is left out where the tables are drawn
    (``live``)."""
    several_devices = len({device_label(r) for r in recs}) > 1
    with_tokens = any(r.get("tokens_per_s") for r in recs)
    key = [_ADAPTER, *([_STRATEGY] if any(strategy(r) for r in recs) else []), *([_DEVICE] if several_devices else [])]
    main = [
        _STEADY,
        _VS_FASTEST,
        _PIPELINED,
        _TOKENS if with_tokens else _SAMPLES,
        _FIRST,
        _FLOOR,
        _STATUS,
    ]
    details = [
        _GRAPH,
        *([] if several_devices else [_DEVICE]),
        _IQR,
        *([_SAMPLES] if with_tokens else []),
        _COMPILES,
        _OUTCOME,
        _STEPS,
    ]
    return key, main, details


def _group(rec: Record) -> tuple:
    """What a table never ranks across: workload, setting, data mode and machine."""
    setting = setting_overrides(rec)
    return (rec["workload"], setting, rec.get("data", "resident"), str(rec.get("machine") or ""))


def ordered(recs: Sequence[_R]) -> list[_R]:
    """Rows in report order, for every table that lists cells: grouped by workload, setting, data
    mode and machine (groups in the order the records first name them); within a group, cells that
    ran by steady time (fastest first), then the cells that did not run; ties broken by adapter,
    strategy and device, so the order is stable."""
    groups: dict[tuple, int] = {}
    for r in recs:
        groups.setdefault(_group(r), len(groups))

    def rank(r: _R) -> tuple:
        ran = r["status"] == "ok"
        median = r["median_s"] if ran else math.inf
        return (groups[_group(r)], not ran, median, r["adapter"], strategy(r) or "", device_label(r))

    return sorted(recs, key=rank)


def _fastest(recs: list[Record]) -> dict[Any, Record]:
    """The fastest cell that ran, per machine: cells of two machines are never compared."""
    fastest: dict[Any, Record] = {}
    for r in recs:
        best = fastest.get(r.get("machine"))
        if r["status"] == "ok" and (best is None or r["median_s"] < best["median_s"]):
            fastest[r.get("machine")] = r
    return fastest


def live(headers: list[str], body: list[list[str]]) -> tuple[list[str], list[list[str]]]:
    """A table without its columns that hold a dash, or "not reported", in every row (a column of
    them says nothing: e.g. trace and compile counts where no cell's adapter reports any)."""
    keep = [i for i in range(len(headers)) if any(row[i] not in (DASH, NOT_REPORTED) for row in body)]
    return [headers[i] for i in keep], [[row[i] for i in keep] for row in body]


def _table(
    rows: list[Record], columns: list[Column], fastest: dict[Any, Record], fams: dict[tuple, Family]
) -> tuple[list[str], str]:
    """One table of ``rows``, its dead columns left out (``live``), and the headers it kept;
    ``fams``: their groups judged together (cells.families), once for both tables."""
    found = {id(r): v for fam in fams.values() for r, v in fam.rivals}
    leads = {id(fam.leader) for fam in fams.values() if fam.fastest}

    def text(c: Column, r: Record) -> str:
        # the fastest of a row's comparable group (its family's leader), else of its machine
        fam = fams.get(axes(r))
        best = fam.leader if fam else fastest.get(r.get("machine"))
        return _vs_fastest(r, best, found.get(id(r)), id(r) in leads) if c is _VS_FASTEST else c.cell(r, best)

    body = [[text(c, r) if r["status"] == "ok" or not c.timed else DASH for c in columns] for r in rows]
    headers, body = live([c.header for c in columns], body)
    return headers, tabulate(body, headers, tablefmt="github", disable_numparse=True)


#: The first page's columns of a workload (``compact``): what a reader picks an adapter by.
COMPACT = (_STEADY, _VS_FASTEST, _FIRST, _STATUS)


def workload_table(recs: list[Record], fams: dict[tuple, Family] | None = None, compact: bool = False) -> str:
    """One workload's markdown: the main table (at most MAIN_MAX columns), then the details table
    in a collapsed ``<details>`` block whose summary names its columns; ``compact``: the first
    page's table alone (the steady step, its ratio to the fastest, the first step, the status;
    the pipelined step where a cell ran on a GPU).
    ``fams``: the report's ``cells.families`` (a group's verdicts depend on its own cells only),
    else computed here."""
    key, main, details = layout(recs)
    rows, fastest, fams = ordered(recs), _fastest(recs), families(recs) if fams is None else fams
    if compact:  # on a GPU the pipelined step too: there a loop that never syncs runs much faster
        shown = (*COMPACT, _PIPELINED) if any(r.get("device") == "cuda" for r in recs) else COMPACT
        return _table(rows, key + [c for c in main if c in shown], fastest, fams)[1]
    _, main_table = _table(rows, key + main, fastest, fams)
    headers, details_table = _table(rows, key + details, fastest, fams)
    summary = f"{DETAILS_LEAD} {', '.join(h for h in headers if h not in {c.header for c in key})}"
    return "\n".join(
        [
            main_table,
            "",
            f"<details><summary>{summary}</summary>",
            "",
            details_table,
            "",
            "</details>",
        ]
    )
