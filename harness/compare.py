"""Run-to-run comparison: matching cells, ratio of medians with a bootstrap CI, verdict.

The use: before/after a framework upgrade, or the same matrix on two machines. Cells match by
``cell_id`` (adapter, workload, device, overrides, data mode, precision), never by run id.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from tabulate import tabulate

from harness import records, report, summary
from harness.stats import BOOTSTRAP_SAMPLES

Record = dict[str, Any]


def ratio_ci(a: list[float], b: list[float], level: float = 0.95, seed: int = 0) -> tuple[float, float, float]:
    """median(b) / median(a) and a percentile-bootstrap CI (both samples resampled)."""
    rng = np.random.default_rng(seed)
    ta, tb = np.asarray(a, float), np.asarray(b, float)
    ma = np.median(rng.choice(ta, size=(BOOTSTRAP_SAMPLES, len(ta))), axis=1)
    mb = np.median(rng.choice(tb, size=(BOOTSTRAP_SAMPLES, len(tb))), axis=1)
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(mb / ma, [tail, 100 - tail])
    return float(np.median(tb) / np.median(ta)), float(low), float(high)


def verdict(low: float, high: float) -> str:
    """B against A: ``faster`` when the whole CI of time(B)/time(A) is below 1."""
    if high < 1:
        return "faster"
    if low > 1:
        return "slower"
    return "no change"


def match(recs_a: list[Record], recs_b: list[Record]) -> tuple[list[tuple[Record, Record]], list[Record]]:
    by_id = {r.get("cell_id"): r for r in recs_a}
    pairs, unmatched = [], []
    for r in recs_b:
        other = by_id.pop(r.get("cell_id"), None)
        (pairs.append((other, r)) if other else unmatched.append(r))
    return pairs, unmatched + list(by_id.values())


def build(run_a: Path, run_b: Path) -> str:
    recs_a, recs_b = records.load(run_a / records.RESULTS), records.load(run_b / records.RESULTS)
    env_a, env_b = report.load_env(run_a), report.load_env(run_b)
    pairs, unmatched = match(recs_a, recs_b)
    rows = []
    counts = {"faster": 0, "slower": 0, "no change": 0}
    for a, b in pairs:
        label = [
            b["adapter"],
            b["workload"],
            summary.strategy(b) or "—",
            b.get("data", "resident"),
            b["device_requested"],
        ]
        if a["status"] != "ok" or b["status"] != "ok":
            rows.append([*label, report.status_text(a), report.status_text(b), "—", "not comparable"])
            continue
        ratio, low, high = ratio_ci(a["step_times_s"], b["step_times_s"])
        word = verdict(low, high)
        counts[word] += 1
        rows.append(
            [
                *label,
                report.sig(a["median_s"] * 1e3),
                report.sig(b["median_s"] * 1e3),
                f"{ratio:.3f} [{low:.3f}, {high:.3f}]",
                word,
            ]
        )
    headers = ["adapter", "workload", "strategy", "data", "device", "A (ms/step)", "B (ms/step)", "B / A [95% CI]"]
    headers.append("B vs A")
    out = [
        f"# dlcompare comparison: {run_b.name} (B) against {run_a.name} (A)",
        "",
        f"- A: `{run_a}`, {report.machine_name(env_a)}, git {env_a.get('git_sha')}, {_versions(env_a)}",
        f"- B: `{run_b}`, {report.machine_name(env_b)}, git {env_b.get('git_sha')}, {_versions(env_b)}",
        "",
        f"{len(pairs)} matching cells: {counts['faster']} faster, {counts['slower']} slower, "
        f"{counts['no change']} without a significant change.",
        "",
        "B / A is the ratio of steady median step times (below 1: B is faster), with a 95% "
        "percentile-bootstrap interval that resamples both runs' raw step times. The verdict is "
        "`faster` or `slower` only when the whole interval lies on one side of 1. The interval covers "
        "the noise within each run only: on a shared or busy machine, two runs of the same code can "
        "differ by more (the `full` profile pools several fresh processes per cell to include some of it).",
        "",
        tabulate(rows, headers, tablefmt="github", disable_numparse=True),
        "",
    ]
    if unmatched:
        out += ["Cells in only one of the runs:", ""]
        out += [f"- {r['adapter']} / {r['workload']} / {r['device_requested']} ({r.get('run_id')})" for r in unmatched]
        out.append("")
    return "\n".join(out)


def _versions(env: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted((env.get("packages") or {}).items())) or "versions unknown"
