"""Sweeps: series over one spec field and where the faster of two series changes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tabulate import tabulate

from harness.records import Record, overrides_of
from harness.reporting import plots
from harness.reporting.cells import strategy
from harness.reporting.crossover import device_crossovers, speedup_table
from harness.reporting.formatting import DASH, device_label, sig, slug, verdict_text
from harness.reporting.sections import level_text
from harness.stats.verdicts import MIN_GENERATIONS, SAME, SLOWER, UNRESOLVED, levels_of, pair_verdict, same_group


def crossovers(series: Mapping[str, Sequence[Record]]) -> list[dict[str, Any]]:
    """Where the ranking of two series changes along a sweep.

    ``series`` maps a label to records sorted by swept value. At each value both series ran, the
    pair's verdict is the paired ratio of its two cells (verdicts.pair_verdict, at their
    ``verdict_level``; the pair on its own, not family-wise); its order counts only where that ratio
    is separated (values where it is the same speed or unresolved are skipped); a crossover is a
    change of the faster series between two such consecutive values, with the verdict at each
    (``ratios``) as time(slower) / time(faster), as the workload tables print it against the fastest."""
    found = []
    labels = sorted(series)
    for i, a in enumerate(labels):
        for b in labels[i + 1 :]:
            by_value_b = {r["sweep"]["value"]: r for r in series[b]}
            order = []  # (value, the faster label, time(slower) / time(faster)) where separated
            for ra in series[a]:
                rb = by_value_b.get(ra["sweep"]["value"])
                verdict = pair_verdict(ra, rb) if rb is not None else None  # time(b) / time(a)
                if verdict is not None and verdict.separated:
                    assert rb is not None  # a verdict means b ran at this value
                    slower = verdict.outcome == SLOWER  # b is slower: a is the faster
                    order.append(
                        (ra["sweep"]["value"], a if slower else b, verdict if slower else pair_verdict(rb, ra))
                    )
            for (v0, w0, r0), (v1, w1, r1) in zip(order, order[1:], strict=False):
                if w0 != w1:
                    found.append(
                        {"before": v0, "after": v1, "faster_before": w0, "faster_after": w1, "ratios": [r0, r1]}
                    )
    return found


def shown_interval(rec: Record) -> tuple[float, float] | None:
    """The cell's own interval as the sweep draws it: None where it ran in fewer than
    MIN_GENERATIONS processes (an interval on one or two degrees of freedom says nothing)."""
    if len(levels_of(rec)) < MIN_GENERATIONS or "ci_low_s" not in rec:
        return None
    return rec["ci_low_s"], rec["ci_high_s"]


def _varied_settings(cells: Sequence[Record], field: str) -> set[str]:
    """Fields other than the swept one and the strategy whose --set value differs between the
    cells of one sweep (the transformer's attention kernel): they name the series apart."""
    values: dict[str, set[str]] = {}
    for r in cells:
        for key, value in overrides_of(r).items():
            if key not in (field, "strategy"):
                values.setdefault(key, set()).add(value)
    return {k for k, v in values.items() if len(v) > 1}


def _levels(cells: Sequence[Record]) -> str:
    """The confidence levels the cells' intervals use (sections.level_text): ``95%`` or ``95% or 97.06%``."""
    return " or ".join(sorted({level_text([r]) for r in cells}))


def _pairing(cells: Sequence[Record]) -> str:
    """How the pairs at each swept value are judged (verdicts.pair_verdict): paired by generation
    where the two cells ran side by side in one group, else Welch's t on their processes."""
    at: dict[float, list[Record]] = {}
    for r in cells:
        at.setdefault(r["sweep"]["value"], []).append(r)
    if all(same_group(a, b) for rs in at.values() for a in rs for b in rs):
        return "paired generation by generation"
    return "paired generation by generation where the two cells ran side by side in one group, else Welch's t"


def sweep_section(recs: Sequence[Record], plot_dir: Path | None, colors: plots.Colors | None = None) -> list[str]:
    """Step time and throughput against the swept field, with the crossovers marked; lines in
    their adapter's colour (``colors``, the report's palette), one line style per device."""
    swept = [r for r in recs if r.get("sweep") and r["status"] == "ok" and r.get("data", "resident") == "resident"]
    out: list[str] = []
    for workload, field in sorted({(r["workload"], r["sweep"]["field"]) for r in swept}):
        cells = [r for r in swept if r["workload"] == workload and r["sweep"]["field"] == field]
        series: dict[str, list[Record]] = {}
        varied = _varied_settings(cells, field)
        for r in sorted(cells, key=lambda r: r["sweep"]["value"]):
            setting = [value for key, value in overrides_of(r).items() if key in varied]
            label = " / ".join(filter(None, [r["adapter"], strategy(r), *setting, device_label(r)]))
            series.setdefault(label, []).append(r)
        series = dict(sorted(series.items()))  # by adapter (each label starts with it), not in run order
        out += [f"## Sweep: {workload} over {field}", ""]
        if plot_dir is not None:
            points = {
                label: [
                    (
                        r["sweep"]["value"],
                        r["median_s"],
                        *(shown_interval(r) or (r["median_s"], r["median_s"])),
                        r["samples_per_s"],
                    )
                    for r in rs
                ]
                for label, rs in series.items()
            }
            devices = sorted({device_label(r) for r in cells})
            styles = {
                label: {
                    "color": (colors or {}).get(rs[0]["adapter"]),
                    "linestyle": ("-", "--", ":", "-.")[devices.index(device_label(rs[0])) % 4],
                }
                for label, rs in series.items()
            }
            path = plots.sweep(points, field, workload, plot_dir / f"{slug(workload, 'sweep', field)}.png", styles)
            out += [f"![{workload}: sweep over {field}]({path.name})", ""]
            short = sum(shown_interval(r) is None for r in cells)
            bars = f"Error bars: each cell's own interval over its processes ({_levels(cells)})"
            if short:
                bars += f"; {short} of {len(cells)} cells ran fewer than {MIN_GENERATIONS} rounds: no interval"
            out += [bars + ".", ""]
        values = sorted({r["sweep"]["value"] for r in cells})
        header_values = [f"{field}={v:g}" for v in values]
        rows = []
        for label, rs in series.items():
            by_value = {r["sweep"]["value"]: r for r in rs}
            rows.append([label, *(sig(by_value[v]["median_s"] * 1e3) if v in by_value else DASH for v in values)])
        out += [
            "Steady median step time (ms/step):",
            "",
            tabulate(rows, ["series", *header_values], tablefmt="github", disable_numparse=True),
            "",
        ]
        level = _levels(cells) + (" (the stricter of its two cells')" if " or " in _levels(cells) else "")
        rule = (
            f"judged at each {field} by the ratio of the two series' cells there (time of one over the other, "
            f"harness.stats.verdicts: {_pairing(cells)}; each pair on its own, not family-wise), its interval at "
            f"{level}: a value counts where the pair is separated (the interval excludes 1 and reaches past "
            f"[0.952, 1.05]), values where the pair is `{SAME}` or `{UNRESOLVED}` are skipped"
        )
        found = crossovers(series)
        if found:
            out += [
                f"Crossovers, where the faster of two series changes, {rule}. Each row gives the slower's time "
                "over the faster's at the two values:",
                "",
                tabulate(
                    [
                        [
                            f"{field}={c['before']:g} to {c['after']:g}",
                            c["faster_after"],
                            c["faster_before"],
                            f"{verdict_text(c['ratios'][0])} at {c['before']:g}",
                            f"{verdict_text(c['ratios'][1])} at {c['after']:g}",
                        ]
                        for c in found
                    ],
                    ["between", "overtakes", "the faster before", "before", "after"],
                    tablefmt="github",
                    disable_numparse=True,
                ),
            ]
        else:
            out += [f"No crossover: no pair of series changes order within the swept range, {rule}."]
        gpu = device_crossovers(cells)
        if gpu:
            out += [
                "",
                "CPU against GPU, each adapter's own pair at each value (synced steps, judged as above; the "
                "pipelined steps' ratio alone):",
                "",
                speedup_table(gpu),
                "",
                *(f"- {c.sentence()}" for c in gpu),
            ]
        out.append("")
    return out
