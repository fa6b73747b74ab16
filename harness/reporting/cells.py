"""What a combined record is, for every report page: its loop strategy, its name, the axes it is
compared along, which cells may enter a verdict, and which requested cells produced nothing.

Pure record logic: no formatting and no page layout, so every other reporting module (the
summary, tables, plots, comparisons) can import it without importing each other.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from harness.records import STEAL_SHARE, Record, setting_overrides
from harness.stats.steps import tokens_per_step
from harness.stats.verdicts import SAME, UNRESOLVED, Family, PairVerdict, family, family_pair, level_of


def strategy(rec: Record) -> str | None:
    """The loop strategy of a training cell whose workload has them, else None."""
    spec = rec.get("spec") or {}
    return spec.get("strategy") if spec.get("task") == "train" else None


def name(rec: Record) -> str:
    """``jax-jit`` or ``jax-jit (exact)``: the adapter and, where it has one, its loop strategy."""
    loop = strategy(rec)
    return f"{rec['adapter']} ({loop})" if loop else rec["adapter"]


def unranked(rec: Record) -> bool:
    """A cell that ran beside other CPU load (``contended``) and enters no verdict: every one,
    unless its run asked for a ranking under load (``ranked_under_load``: ``--rank-under-load``,
    harness.reporting.model.load_runs), whose verdicts then state that load."""
    return bool(rec.get("contended")) and not rec.get("ranked_under_load")


def under_load(rec: Record) -> bool:
    """A contended cell ranked all the same, at the run's request (``unranked``)."""
    return bool(rec.get("contended")) and bool(rec.get("ranked_under_load"))


def stolen(rec: Record) -> bool:
    """Whether the hypervisor took more than STEAL_SHARE of the CPU through the cell's turns."""
    return (rec.get("steal_share") or 0.0) > STEAL_SHARE


def _span(values: list[str]) -> str:
    low, high = values[0], values[-1]
    return low if low == high else f"{low}-{high}"


def load_span(recs: Sequence[Record]) -> str:
    """``1.02`` or ``1.02-1.35``: the other cores busy through the turns of the cells ranked under load."""
    return _span([f"{c:.2f}" for c in sorted(r.get("other_cpu_cores") or 0.0 for r in recs if under_load(r))])


def steal_said(recs: Sequence[Record]) -> str:
    """``, the hypervisor taking 5.9-7.0% of the CPU``: the steal through the turns of the cells
    ranked under load that it slowed (``stolen``), which the VM's process counts do not show;
    empty where it slowed none."""
    shares = sorted(float(r["steal_share"]) for r in recs if under_load(r) and stolen(r))
    return f", the hypervisor taking {_span([f'{100 * s:.1f}' for s in shares])}% of the CPU" if shares else ""


def comparable(recs: list[Record]) -> list[Record]:
    """Cells a verdict may use: ran, on resident data, not beside other CPU load (``unranked``)."""
    return [r for r in recs if r["status"] == "ok" and r.get("data", "resident") == "resident" and not unranked(r)]


def best_per_adapter(recs: list[Record]) -> list[Record]:
    """Each adapter's fastest cell (its best loop strategy: the fastest steady step), fastest first."""
    best: dict[str, Record] = {}
    for r in recs:
        if r["adapter"] not in best or r["median_s"] < best[r["adapter"]]["median_s"]:
            best[r["adapter"]] = r
    return sorted(best.values(), key=lambda r: r["median_s"])


def requested_device(rec: Record) -> str:
    return rec.get("device") or rec.get("device_requested") or "?"


def axes(rec: Record) -> tuple:
    """Every axis of the plan but the adapter and its loop strategy, and the machine: cells that
    differ in any of these (batch size, precision, data mode, machine, ...) are never compared in
    one sentence."""
    setting = tuple(sorted(setting_overrides(rec)))
    return (
        rec["workload"],
        rec.get("device"),
        setting,
        rec.get("precision", "fp32"),
        rec.get("data", "resident"),
        rec.get("machine"),
    )


def what(key: tuple) -> str:
    """``mlp`` or ``mlp (batch_size=16, tf32)``: the workload and what sets it apart."""
    workload, _, setting, precision, *_ = key
    extra = [*setting, *([precision] if precision != "fp32" else [])]
    return f"{workload} ({', '.join(extra)})" if extra else workload


def families(recs: list[Record]) -> dict[tuple, Family]:
    """For every group of comparable cells (``axes``) with two adapters or more: each adapter's
    best cell (its fastest loop strategy) judged together against the fastest (``verdicts.family``:
    Holm over their pairs). "The fastest" is a claim against every other adapter."""
    groups: dict[tuple, list[Record]] = {}
    for r in comparable(recs):
        groups.setdefault(axes(r), []).append(r)
    best = {key: best_per_adapter(cells) for key, cells in groups.items()}
    return {key: family(cells) for key, cells in best.items() if len(cells) >= 2}


def family_pairs(fam: Family) -> list[PairVerdict]:
    """Every pair of a family's cells judged alone, as ``verdicts.family`` judges them before Holm
    (``verdicts.family_pair``, at the family's level): what the run settled pair by pair."""
    level = level_of(*fam.members)
    return [family_pair(a, b, level) for a, b in itertools.combinations(fam.members, 2)]


def top(fam: Family) -> tuple[str, list[Record]]:
    """A group without a fastest: the cells at its top that could not be told from the leader
    (the leader first), and the word for them: ``same speed`` where every one is within 5%, else
    ``unresolved``."""
    close = [(r, v) for r, v in fam.rivals if v.outcome in (SAME, UNRESOLVED)]
    word = SAME if close and all(v.outcome == SAME for _, v in close) else UNRESOLVED
    return word, [fam.leader, *(r for r, _ in close)]


def missing_pairs(recs: Sequence[Record]) -> list[tuple[str, list[str], str]]:
    """Requested adapter x device pairs with no ``ok`` cell at all, grouped by reason:
    (device, adapters, the reason of their first cell that did not run)."""
    ran = {(r["adapter"], r.get("device")) for r in recs if r["status"] == "ok"}
    reasons: dict[tuple[str, str], str] = {}
    for r in recs:
        key = (r["adapter"], requested_device(r))
        if key not in ran and key not in reasons:
            reasons[key] = f"{r['status']}: {r.get('reason') or 'no reason recorded'}"
    grouped: dict[tuple[str, str], list[str]] = {}
    for (adapter, device), reason in reasons.items():
        grouped.setdefault((device, reason), []).append(adapter)
    return [(device, sorted(adapters), reason) for (device, reason), adapters in grouped.items()]


def synced_step(rec: Record) -> float:
    """The synced time per step a pipelined time is set against: the synced steps cut into windows
    of a pipelined block's length, mean per step, median over windows (like a block, it holds the
    occasional slow step that the steady median leaves out); the steady median where the record
    has no windows."""
    return rec.get("synced_block_s") or rec["median_s"]


def overlap(rec: Record) -> float:
    """Pipelined time per step over ``synced_step``: below 1, the loop gains from overlap."""
    return rec["pipelined_s"] / synced_step(rec)


def tokens_per_s(rec: Record) -> float | None:
    """Tokens per second at the steady step time the tables print (``median_s``): the record's
    tokens per step (harness.stats.steps.tokens_per_step) over it; None where it counts no tokens."""
    per_step = tokens_per_step(rec)
    return None if per_step is None else per_step / rec["median_s"]
