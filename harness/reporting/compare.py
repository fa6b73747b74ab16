"""Run-to-run comparison: matching cells, ratio of geometric means with Welch's interval, verdict.

The use: before/after a framework upgrade, or the same matrix on two machines. Cells match by
``cell_id`` (adapter, workload, device, overrides, data mode, precision), never by run id.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from tabulate import tabulate

from harness import records
from harness.records import Record, is_idiomatic
from harness.reporting import cells
from harness.reporting.formatting import fingerprint_name, machine_name, sig, status_text
from harness.stats.cells import combine_all, fingerprint_key
from harness.stats.verdicts import (
    FASTER,
    SAME,
    SETTLE_MARGIN,
    SLOWER,
    UNRESOLVED,
    Family,
    RunChange,
    change,
    separated,
)


def geometric_mean_s(rec: Record) -> float:
    """A cell's steady time as the comparison reads it: the geometric mean of its processes'."""
    levels = rec.get("process_levels") or {}
    return math.exp(sum(levels.values()) / len(levels)) if levels else rec["median_s"]


def detectable_text(found: RunChange) -> str:
    return "—" if found.detectable is None else f"{found.detectable:.0%}"


def match(recs_a: list[Record], recs_b: list[Record]) -> tuple[list[tuple[Record, Record]], list[Record]]:
    by_id = {r.get("cell_id"): r for r in recs_a}
    pairs, unmatched = [], []
    for r in recs_b:
        other = by_id.pop(r.get("cell_id"), None)
        (pairs.append((other, r)) if other else unmatched.append(r))
    return pairs, unmatched + list(by_id.values())


def build(run_a: Path, run_b: Path) -> str:
    # Idiomatic scripts of a fidelity run are not cells of the matrix (harness.checks.fidelity).
    recs_a = combine_all([r for r in records.load(run_a / records.RESULTS) if not is_idiomatic(r)])
    recs_b = combine_all([r for r in records.load(run_b / records.RESULTS) if not is_idiomatic(r)])
    for recs in (recs_a, recs_b):  # a run over unlike cluster nodes: its verdicts stay within a machine
        if len({fingerprint_key(r) for r in recs if r.get("fingerprint")}) > 1:
            for r in recs:
                r["machine"] = fingerprint_name(r["fingerprint"]) if r.get("fingerprint") else None
    env_a, env_b = records.load_env(run_a), records.load_env(run_b)
    pairs, unmatched = match(recs_a, recs_b)
    rows = []
    counts = {FASTER: 0, SLOWER: 0, SAME: 0, UNRESOLVED: 0}
    for a, b in pairs:
        label = [
            b["adapter"],
            b["workload"],
            cells.strategy(b) or "—",
            b.get("data", "resident"),
            b["device_requested"],
        ]
        if a["status"] != "ok" or b["status"] != "ok":
            rows.append([*label, status_text(a), status_text(b), "—", "—", "not comparable"])
            continue
        found = change(a, b)
        counts[found.outcome] += 1
        interval = f"[{found.low:.3f}, {found.high:.3f}]" if math.isfinite(found.high) else "(one process)"
        rows.append(
            [
                *label,
                sig(geometric_mean_s(a) * 1e3),
                sig(geometric_mean_s(b) * 1e3),
                f"{found.point:.3f} {interval}",
                detectable_text(found),
                found.outcome,
            ]
        )
    headers = ["adapter", "workload", "strategy", "data", "device", "A (ms/step)", "B (ms/step)", "B / A [CI]"]
    headers += ["detectable change", "B vs A"]
    out = [
        f"# dlcompare comparison: {run_b.name} (B) against {run_a.name} (A)",
        "",
        f"- A: `{run_a}`, {machine_name(env_a)}, git {env_a.get('git_sha')}, {_versions(env_a)}",
        f"- B: `{run_b}`, {machine_name(env_b)}, git {env_b.get('git_sha')}, {_versions(env_b)}",
        "",
        f"{len(pairs)} matching cells: {counts[FASTER]} faster, {counts[SLOWER]} slower, "
        f"{counts[SAME]} the same speed within {SETTLE_MARGIN:.0%}, {counts[UNRESOLVED]} unresolved.",
        "",
        "A and B are a cell's steady step times, the geometric mean over its processes (fresh worker "
        "processes, one per generation) of each one's step time. B / A is their ratio (below 1: B is faster), "
        "with an interval at the runs' verdict level (95%, or a budgeted run's 97.06%) from Welch's t on the "
        "logarithms of the process step times: nothing pairs two "
        "runs' processes, and the t quantile accounts for how few of them there are (two processes a side "
        "say little). The verdict has a report's three words: `same speed` where the whole interval lies "
        f"within 1 ± {SETTLE_MARGIN:.0%} (whether or not it excludes 1: a change under {SETTLE_MARGIN:.0%} is "
        "not claimed), else `faster` or `slower` where it lies on one side of 1, else `unresolved`. "
        "Detectable change: the smallest slow-down this comparison detects with 80% power, "
        "exp((t_0.025 + t_0.2) se) - 1 (how wide an `unresolved` interval is in these terms). A cell run "
        "in one process a side is `unresolved`: one process says nothing about a rerun.",
        *_few_rounds(recs_a + recs_b),
        "",
        *_verdicts(recs_a, recs_b),
        tabulate(rows, headers, tablefmt="github", disable_numparse=True),
        "",
    ]
    if unmatched:
        out += ["Cells in only one of the runs:", ""]
        out += [f"- {r['adapter']} / {r['workload']} / {r['device_requested']} ({r.get('run_id')})" for r in unmatched]
        out.append("")
    return "\n".join(out)


#: Fewer rounds than this (``full``'s count) leave a cell's interval built from few processes.
ENOUGH_ROUNDS = 5


def _few_rounds(recs: list[Record]) -> list[str]:
    ran = [r.get("rounds_done") or 1 for r in recs if r["status"] == "ok"]
    if not ran or min(ran) >= ENOUGH_ROUNDS:
        return []
    return [
        "",
        f"Some cells ran in only {min(ran)} round(s): their intervals have seen few processes, so a "
        "cell marked faster or slower may be the machine drifting rather than the code. For a "
        f"before/after verdict use `--rounds {ENOUGH_ROUNDS}` or more (`PROFILE=full`), and rerun a cell "
        "that comes out changed.",
    ]


def _verdicts(recs_a: list[Record], recs_b: list[Record]) -> list[str]:
    """Each run's "fastest" verdicts side by side: which hold in both, which the other run contradicts."""
    lead_a, lead_b = cells.families(recs_a), cells.families(recs_b)
    rows, contradicted, named = [], 0, 0
    for key in [k for k in lead_a if k in lead_b]:
        fam_a, fam_b = lead_a[key], lead_b[key]
        apart_a, apart_b = fam_a.fastest, fam_b.fastest
        named += apart_a or apart_b
        word = cells.name(fam_a.leader) if apart_a else _unnamed(fam_a)
        other = cells.name(fam_b.leader) if apart_b else _unnamed(fam_b)
        fa, fb = fam_a.leader, fam_b.leader
        clash = apart_a and apart_b and cells.name(fa) != cells.name(fb)
        contradicted += clash
        rows.append([cells.what(key), key[1], word, other, "contradicted" if clash else "consistent"])
    lines = [_resolution("A", recs_a), _resolution("B", recs_b), ""]
    if not rows:
        return lines
    return [
        *lines,
        f"Fastest verdicts: {len(rows)} groups in both runs, {named} with a named fastest in at least one, "
        f"{contradicted} contradicted (each run names a different fastest).",
        "",
        tabulate(rows, ["workload", "device", "A: fastest", "B: fastest", ""], tablefmt="github"),
        "",
    ]


def _unnamed(fam: Family) -> str:
    """``same speed (a, b)`` or ``unresolved (a, b, c)``: a group without a fastest, and the adapters
    at its top that could not be told apart (cells.top)."""
    word, at_top = cells.top(fam)
    return f"{word} ({', '.join(cells.name(r) for r in at_top)})"


#: Pairs of cells this far apart must come out separated, or the intervals are too wide to use.
CLEAR_RATIO = 1.5


def _resolution(label: str, recs: list[Record]) -> str:
    """How many pairs of comparable cells of one run differ by CLEAR_RATIO or more, and how many
    of those its intervals separate (wide intervals that leave everything unresolved are no answer)."""
    groups: dict[tuple, list[Record]] = {}
    for r in recs:
        if r["status"] == "ok" and not r.get("contended"):
            groups.setdefault(cells.axes(r), []).append(r)
    clear = [
        (a, b)
        for cells in groups.values()
        for i, a in enumerate(cells)
        for b in cells[i + 1 :]
        if max(a["median_s"], b["median_s"]) >= CLEAR_RATIO * min(a["median_s"], b["median_s"])
    ]
    apart = sum(separated(a, b) for a, b in clear)
    return (
        f"- Within {label}: {len(clear)} pairs of cells differ by {CLEAR_RATIO}x or more; "
        f"its intervals separate {apart} of them."
    )


def _versions(env: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted((env.get("packages") or {}).items())) or "versions unknown"
