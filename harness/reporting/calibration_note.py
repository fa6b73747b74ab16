"""The Method's calibration lines: what the committed calibrations (``make calibrate``, harness.calibrate)
measured of the verdict rules on the machine type and device a run used, quoted from their JSON.

A run's verdicts claim a false-separation rate and a power; a calibration measured both on a
machine with identical twins and known slow-downs. The Method quotes each committed calibration
of the same CPU model and device, with its own level, generations and repeats, so a reader sees
how far the claim was checked where the run ran (and that it was not, where none matches).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.records import Record
from harness.stats.inference import wilson

REPORTS = Path(__file__).resolve().parents[2] / "reports"


def committed(folder: Path = REPORTS) -> list[tuple[Path, dict[str, Any]]]:
    """Every ``calibration-<K>-generations.json`` under ``folder``, with its path."""
    out = []
    for path in sorted(folder.glob("*/calibration-*-generations.json")):
        try:
            out.append((path, json.loads(path.read_text())))
        except (OSError, ValueError):
            continue
    return out


def _rate(hits: int, n: int, noun: str) -> str:
    """``2 of 540 pairs (0.4% [0.1, 1.3])``: one decimal below 10%, where a whole percent would read 0."""
    low, high = wilson(hits, n)
    digits = 1 if hits / n < 0.1 else 0
    return f"{hits} of {n} {noun} ({100 * hits / n:.{digits}f}% [{100 * low:.{digits}f}, {100 * high:.{digits}f}])"


def quote(path: Path, data: dict[str, Any]) -> str:
    """One calibration as a Method line: its setting, false separations per pair and per group
    (family-wise), and power at each known slow-down, each over the pairs it judged, with its
    Wilson interval (as its own page counts them, harness.calibrate)."""
    meta = data["meta"]
    judged = [p for p in data["pairs"] if p.get("high") is not None and math.isfinite(p["high"])]
    null = [p for p in judged if not p["effect"]]
    fam = [g for g in data["groups"] if g.get("judged") and g.get("leader_twins")]
    parts = []  # a calibration of slowed twins only judged no identical pair, and says nothing of them
    if null:
        parts.append(
            f"identical cells called different in {_rate(sum(p['different'] for p in null), len(null), 'pairs')}"
        )
    if fam:
        false_groups = _rate(sum(g["family_false"] for g in fam), len(fam), "groups")
        parts.append(f"a cell identical to the leader marked different in {false_groups} (family-wise)")
    for effect in sorted({p["effect"] for p in judged if p["effect"]}):
        hit = [p for p in judged if p["effect"] == effect]
        measured = sorted(p["ratio"] for p in hit)[len(hit) // 2]  # a busy-wait twin runs slower than it names
        parts.append(
            f"a {effect:.0%} slow-down (measured {measured:.2f}x, median) detected in "
            f"{_rate(sum(p['right_way'] for p in hit), len(hit), 'pairs')}"
        )
    return (
        f"- Calibration (`reports/{path.parent.name}`, {meta['machine']}, {meta['device']}, {meta['adapter']} on "
        f"{meta['workload']} beside twins {meta['twins']}, {_generations(meta)}, "
        f"{100 * meta['level']:.4g}%, {meta['repeats']} repeats): " + "; ".join(parts) + "."
    )


def _looked(meta: dict[str, Any]) -> bool:
    """Whether a calibration page was judged where a budgeted bench stops (``--looks``: its first
    look, and one more per look while the group is unsettled), not at a fixed number of generations."""
    return meta.get("first_look", meta["rounds"]) < meta["rounds"]


def _generations(meta: dict[str, Any]) -> str:
    """How many generations a calibration page judged."""
    if _looked(meta):
        first, last = meta["first_look"], meta["rounds"]
        return f"{first} generations, up to {last} where the group was unsettled (a budgeted run's looks)"
    return f"{meta['rounds']} generations"


def _fixed_rounds(meta: dict[str, Any]) -> int:
    """A page's generations judged, a ``--looks`` page's counted below every fixed one's."""
    return 0 if _looked(meta) else meta["rounds"]


def _judged(data: dict[str, Any]) -> bool:
    return any(p.get("high") is not None and math.isfinite(p["high"]) for p in data["pairs"])


def _machines(recs: Sequence[Record]) -> set[tuple[Any, Any]]:
    """The (CPU model, device) pairs the run's ok cells ran on: what a calibration must match."""
    return {((r.get("fingerprint") or {}).get("cpu"), r.get("device")) for r in recs if r["status"] == "ok"}


def lines(recs: Sequence[Record], folder: Path = REPORTS) -> list[str]:
    """The calibrations of the runs' CPU models and devices, or one line saying none matches."""
    machines = _machines(recs)
    found = [
        (p, d)
        for p, d in committed(folder)
        if (d["meta"].get("machine"), d["meta"].get("device")) in machines and _judged(d)
    ]
    # per calibration folder, the judging that matches the run: a run that looked again at an unsettled
    # group (a budgeted run before 2026-11-27, at Pocock's level) the one judged where such a run
    # stopped, else the closest to its own generations
    ok = [r for r in recs if r["status"] == "ok"]
    gens = sorted(r.get("rounds_done") or 1 for r in ok)
    typical = gens[len(gens) // 2] if gens else 1
    looked = any((r.get("verdict_level") or 0.95) > 0.95 for r in ok)

    def mismatch(meta: dict[str, Any]) -> tuple[bool, int]:
        return _looked(meta) != looked, abs(meta["rounds"] - typical)

    best: dict[Path, tuple[Path, dict[str, Any]]] = {}
    for p, d in found:
        mine = best.get(p.parent)
        if mine is None or mismatch(d["meta"]) < mismatch(mine[1]["meta"]):
            best[p.parent] = (p, d)
    found = [best[k] for k in sorted(best)]
    if not found:
        return [
            "- Calibration: no committed calibration was measured on this CPU model and device; `make calibrate` "
            "measures how often the rules call identical code different here (docs/measurement.md, Calibration)."
        ]
    return [quote(p, d) for p, d in found]


def across(recs: Sequence[Record], folder: Path = REPORTS) -> str:
    """What the committed calibrations of the runs' CPU models and devices measured of the verdict
    between two groups (Welch's t on process levels, harness.calibrate.between: every cell of one
    fresh run against every cell of its adapter in the next), over all of them together; "" where
    none measured it."""
    machines = _machines(recs)
    # one page per calibration folder: its judgings of 2, 3 or 4 generations pair the same repeats
    # again, so counting each would count those pairs more than once (the most generations judged)
    pages: dict[Path, dict[str, Any]] = {}
    for path, data in committed(folder):
        meta = data["meta"]
        if "between" in data and (meta.get("machine"), meta.get("device")) in machines:
            if path.parent not in pages or _fixed_rounds(meta) > _fixed_rounds(pages[path.parent]["meta"]):
                pages[path.parent] = data
    pairs, runs, names = [], [], []
    for parent in sorted(pages):
        judged = pages[parent]["between"]["pairs"]
        pairs += [p for p in judged if p.get("high") is not None and math.isfinite(p["high"])]
        runs += [g for g in pages[parent]["between"]["groups"] if g.get("judged")]
        names.append(f"`reports/{parent.name}`")
    if not pairs:
        return ""
    null = [p for p in pairs if not p["effect"]]
    false_runs = _rate(sum(g["any_pair_false"] for g in runs), len(runs), "pairs of runs")
    parts = [
        f"identical cells called different in {_rate(sum(p['different'] for p in null), len(null), 'pairs')}, "
        f"in {false_runs}"
    ]
    for effect in sorted({p["effect"] for p in pairs if p["effect"]}):
        hit = [p for p in pairs if p["effect"] == effect]
        parts.append(f"a {effect:.0%} slow-down found in {_rate(sum(p['right_way'] for p in hit), len(hit), 'pairs')}")
    drift = max((max(p["ratio"], 1 / p["ratio"]) for p in null), default=1.0)
    return (
        "Between two groups (`steady vs its exact`: Welch's t, nothing pairs their generations), calibrated "
        f"between two fresh runs on this CPU model ({', '.join(names)}): " + "; ".join(parts) + ". "
        f"Identical code ran up to {drift:.2f}x slower in one run than in the other: the machine's speed drifts "
        "between groups, which this verdict does not model, so it separates only large differences, and a run "
        "whose speed shifted between its groups can separate identical code."
    )
