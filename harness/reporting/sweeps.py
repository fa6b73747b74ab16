"""Sweeps: series over one spec field and where the faster of two series changes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tabulate import tabulate

from harness.reporting import plots
from harness.reporting.cells import strategy
from harness.reporting.formatting import DASH, device_label, sig, slug
from harness.stats.verdicts import separated


def crossovers(series: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Where the ranking of two series changes along a sweep.

    ``series`` maps a label to records sorted by swept value. A pair's order counts only at
    values where both medians' CIs separate (ties are skipped); a crossover is a change of the
    faster series between two such consecutive values."""
    found = []
    labels = sorted(series)
    for i, a in enumerate(labels):
        for b in labels[i + 1 :]:
            by_value_b = {r["sweep"]["value"]: r for r in series[b]}
            order = []
            for ra in series[a]:
                rb = by_value_b.get(ra["sweep"]["value"])
                if rb is not None and separated(ra, rb):
                    order.append((ra["sweep"]["value"], a if ra["median_s"] < rb["median_s"] else b))
            for (v0, w0), (v1, w1) in zip(order, order[1:], strict=False):
                if w0 != w1:
                    found.append({"before": v0, "after": v1, "faster_before": w0, "faster_after": w1})
    return found


def _varied_settings(cells: list[dict[str, Any]], field: str) -> set[str]:
    """Fields other than the swept one and the strategy whose --set value differs between the
    cells of one sweep (the transformer's attention kernel): they name the series apart."""
    values: dict[str, set[str]] = {}
    for r in cells:
        for o in r.get("overrides", []):
            key, _, value = o.partition("=")
            if key not in (field, "strategy"):
                values.setdefault(key, set()).add(value)
    return {k for k, v in values.items() if len(v) > 1}


def sweep_section(recs: list[dict[str, Any]], plot_dir: Path | None, colors: plots.Colors | None = None) -> list[str]:
    """Step time and throughput against the swept field, with the crossovers marked; lines in
    their adapter's colour (``colors``, the report's palette), one line style per device."""
    swept = [r for r in recs if r.get("sweep") and r["status"] == "ok" and r.get("data", "resident") == "resident"]
    out: list[str] = []
    for workload in sorted({r["workload"] for r in swept}):
        cells = [r for r in swept if r["workload"] == workload]
        field = cells[0]["sweep"]["field"]
        series: dict[str, list[dict[str, Any]]] = {}
        varied = _varied_settings(cells, field)
        for r in sorted(cells, key=lambda r: r["sweep"]["value"]):
            setting = [o.split("=", 1)[1] for o in r.get("overrides", []) if o.split("=")[0] in varied]
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
                        r.get("ci_low_s", r["median_s"]),
                        r.get("ci_high_s", r["median_s"]),
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
        found = crossovers(series)
        if found:
            out += ["Crossovers (where the faster of two series changes; ties are not counted):", ""]
            out += [
                f"- between {field}={c['before']:g} and {c['after']:g}: {c['faster_after']} overtakes "
                f"{c['faster_before']}"
                for c in found
            ]
        else:
            out += ["No crossover: no pair of series changes order within the swept range (ties not counted)."]
        out.append("")
    return out
