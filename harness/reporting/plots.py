"""PNG plots for the report, made from records alone with matplotlib's headless Agg backend.

Every plot of one report takes its colours from one ``palette`` (an adapter has the same colour
everywhere), uses a log axis where its values span more than SPAN, and keeps legends outside
the axes so they never cover data.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.colors  # noqa: E402
import matplotlib.patches  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402

from harness.records import Record  # noqa: E402
from harness.reporting.cells import strategy  # noqa: E402
from harness.reporting.formatting import sig  # noqa: E402
from harness.reporting.overview import Grid, ratio_text  # noqa: E402
from harness.stats import taxonomy  # noqa: E402

Colors = dict[str, Any]
#: Steps shown in the cumulative-time plot: far enough to see late break-evens.
HORIZON = 10_000
#: Values spanning more than this factor get a log axis (a linear one turns the small into slivers).
SPAN = 10.0
#: Overview cells that did not run.
IDLE_COLOR = "#e0e0e0"


def palette(recs: Sequence[Mapping[str, Any]]) -> Colors:
    """One colour per adapter for every plot of a report: each framework a hue (tab20's pairs, in
    the order of the framework names), its static-graph adapter the dark shade and its dynamic one
    the light shade; a second adapter of the same framework and graph takes the next free pair."""
    kinds = sorted({(r.get("framework", ""), r.get("graph") != "static", r["adapter"]) for r in recs})
    frameworks = sorted({f for f, _, _ in kinds})
    cmap = plt.get_cmap("tab20")
    taken: set[int] = set()
    out: Colors = {}
    for framework, dynamic, adapter in kinds:
        slot = 2 * (frameworks.index(framework) % 10) + int(dynamic)
        while slot in taken and len(taken) < 20:
            slot = (slot + 2) % 20
        taken.add(slot)
        out.setdefault(adapter, cmap(slot))
    return out


def _wide(values: list[float]) -> bool:
    positive = [v for v in values if v > 0]
    return bool(positive) and max(positive) / min(positive) > SPAN


def _label(rec: Record) -> str:
    parts = [f"{rec['adapter']} ({rec['graph']})" if rec.get("graph") else rec["adapter"]]
    if strategy(rec):
        parts.append(cast(str, strategy(rec)))
    if rec.get("device"):
        parts.append(rec["device"])
    return " / ".join(parts)


def _save(fig: Any, path: Path) -> Path:
    # bbox "tight" takes in legends placed outside the axes
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def _log_ticks(axis: Any) -> None:
    """Plain numbers on a log axis (0.5, 1, 2, 5, 10), minor ticks at 2 and 5 of each decade
    labelled too, so a reader can read values between decades."""
    plain = matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}")
    axis.set_major_formatter(plain)
    axis.set_minor_locator(matplotlib.ticker.LogLocator(subs=(2.0, 5.0)))
    axis.set_minor_formatter(plain)


def step_times(recs: list[Record], workload: str, path: Path, colors: Colors) -> Path | None:
    """Steady median step time per cell, its interval (at the run's verdict level) as error bars and
    its value at the bar's end; bars in the adapter's colour (the labels name adapter, graph kind and strategy)."""
    ok = sorted((r for r in recs if r["status"] == "ok"), key=lambda r: r["median_s"])
    if not ok:
        return None
    fig, ax = plt.subplots(figsize=(8.5, 0.42 * len(ok) + 1.8))
    medians = [r["median_s"] * 1e3 for r in ok]
    # A percentile bootstrap need not hold its own estimate (a skewed few-sample window): such a
    # bar's error bar stops at the bar; the table prints the interval as it is.
    low = [max(0.0, r["median_s"] - r.get("ci_low_s", r["median_s"])) * 1e3 for r in ok]
    high = [max(0.0, r.get("ci_high_s", r["median_s"]) - r["median_s"]) * 1e3 for r in ok]
    ax.barh(range(len(ok)), medians, xerr=[low, high], color=[colors.get(r["adapter"], "grey") for r in ok], capsize=3)
    ends = [m + h for m, h in zip(medians, high, strict=True)]
    wide = _wide(medians)
    for i, (end, value) in enumerate(zip(ends, medians, strict=True)):
        ax.text(end * (1.06 if wide else 1) + (0 if wide else 0.01 * max(ends)), i, sig(value), va="center", fontsize=8)
    ax.set_yticks(range(len(ok)), [_label(r) for r in ok])
    ax.invert_yaxis()
    if wide:
        ax.set_xscale("log")
        _log_ticks(ax.xaxis)
        ax.set_xlim(min(medians) / 1.5, max(ends) * 2.2)  # room for the value labels
    else:
        ax.set_xlim(0, max(ends) * 1.18)
    ax.set_xlabel(
        "steady step time, median (ms/step" + (", log scale" if wide else "") + "); error bars: the run's interval"
    )
    ax.set_title(f"{workload}: steady step time (lower is better)")
    return _save(fig, path)


def compile_cost(recs: list[Record], workload: str, path: Path, colors: Colors) -> Path | None:
    """First step (trace + compile + run, hatched) against the steady step (solid), log scale."""
    ok = [r for r in recs if r["status"] == "ok"]
    if not ok:
        return None
    fig, ax = plt.subplots(figsize=(7, 0.5 * len(ok) + 1.6))
    y = range(len(ok))
    shade = [colors.get(r["adapter"], "grey") for r in ok]
    ax.barh(
        [i - 0.2 for i in y],
        [r["first_step_s"] * 1e3 for r in ok],
        height=0.4,
        color=shade,
        hatch="///",
        edgecolor="white",
        alpha=0.75,
    )
    ax.barh([i + 0.2 for i in y], [r["median_s"] * 1e3 for r in ok], height=0.4, color=shade)
    ax.set_yticks(list(y), [_label(r) for r in ok])
    ax.invert_yaxis()
    ax.set_xscale("log")
    _log_ticks(ax.xaxis)
    ax.set_xlabel("time (ms, log scale)")
    ax.set_title(f"{workload}: first step vs steady step (the compile cost)")
    handles = [
        matplotlib.patches.Patch(
            facecolor="grey", hatch="///", edgecolor="white", label="first step\n(trace + compile + run)"
        ),
        matplotlib.patches.Patch(facecolor="grey", label="steady step"),
    ]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8, frameon=False)
    return _save(fig, path)


def cumulative(
    recs: list[Record], workload: str, path: Path, cumulative_s: Callable[[Record, int], float], colors: Colors
) -> Path | None:
    """Total time from a cold start against steps trained: where static overtakes dynamic.

    Two panels, one line per adapter in each: its ``exact`` strategy (every caption length
    compiled as it comes) and its best strategy, the one with the least total time at HORIZON
    steps (compiles included)."""
    ok = [r for r in recs if r["status"] == "ok" and "cold_times_s" in r]
    if len(ok) < 2:
        return None
    window = max(len(r["cold_times_s"]) for r in ok)
    steps = sorted({int(round(x)) for x in np.logspace(0, np.log10(HORIZON), 120)})
    adapters = sorted({r["adapter"] for r in ok})
    fig, axes = plt.subplots(1, 2, figsize=(12, 5.2), sharey=True)

    def exact(rs: list[Record]) -> list[Record]:
        return [r for r in rs if strategy(r) in (None, "exact")][:1]

    def best(rs: list[Record]) -> list[Record]:
        return [min(rs, key=lambda one: cumulative_s(one, HORIZON))]

    panels = (
        (axes[0], "exact strategy", exact),
        (axes[1], f"each adapter's best strategy\n(least total time at {HORIZON:,} steps)", best),
    )
    for ax, title, choose in panels:
        for adapter in adapters:
            for r in choose([r for r in ok if r["adapter"] == adapter]):
                style = "-" if r.get("graph") == "static" else "--"
                label = " / ".join(filter(None, [adapter, strategy(r)]))
                ax.plot(steps, [cumulative_s(r, n) for n in steps], style, color=colors.get(adapter), lw=2, label=label)
        ax.axvline(window, color="grey", lw=0.8, ls=":")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("training steps from a cold start")
        ax.set_title(f"{workload}: {title}", fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(
            fontsize=7,
            title="solid: static graph, dashed: dynamic",
            title_fontsize=7,
            loc="upper center",
            bbox_to_anchor=(0.5, -0.14),
            ncol=2,
            frameon=False,
        )
    axes[0].set_ylabel("total time, compiles included (s)")
    fig.suptitle(
        "measured up to the dotted line (the first pass over the data), then extrapolated with the steady median",
        fontsize=8,
        y=0.99,
    )
    return _save(fig, path)


def sweep(
    series: dict[str, list[tuple[float, float, float, float, float]]],
    field: str,
    workload: str,
    path: Path,
    styles: dict[str, dict[str, Any]],
) -> Path:
    """Step time and samples/s against a swept field, one line per adapter/device.

    ``series`` maps a label to (value, median_s, ci_low_s, ci_high_s, samples/s) points sorted by
    value; ``styles`` maps it to its line's colour (its adapter's) and line style."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    for label, points in series.items():
        xs = [p[0] for p in points]
        left.errorbar(
            xs,
            [p[1] * 1e3 for p in points],
            yerr=[[max(0.0, p[1] - p[2]) * 1e3 for p in points], [max(0.0, p[3] - p[1]) * 1e3 for p in points]],
            marker="o",
            capsize=3,
            label=label,
            **styles.get(label, {}),
        )
        right.plot(xs, [p[4] for p in points], marker="o", label=label, **styles.get(label, {}))
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel(field)
        ax.grid(True, which="both", alpha=0.3)
    left.set_ylabel("steady step time (ms/step, median, interval)")
    right.set_ylabel("throughput (samples/s)")
    left.set_title(f"{workload}: step time vs {field}")
    right.set_title(f"{workload}: samples/s vs {field}")
    right.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1), frameon=False)
    return _save(fig, path)


def _stacked(column: str) -> str:
    """A column title one setting per line (``transformer (attention=fused, max_len=32)``), so the
    titles of a wide grid do not run into each other."""
    if " (" not in column or ")" not in column:
        return column
    name, rest = column.split(" (", 1)
    inner, tail = rest.rsplit(")", 1)
    return "\n".join([name, *inner.split(", ")]) + tail


def overview(g: Grid, path: Path) -> Path:
    """The overview grid as a heatmap: colour is time over the
    column's fastest on a log scale, the number written in; the fastest framed, same speed dashed,
    cells that did not run grey and named."""
    rows, cols = len(g.rows), len(g.columns)
    ratios = np.full((rows, cols), np.nan)
    for (column, adapter), cell in g.cells.items():
        if cell.ratio is not None and cell.status in ("ok", "contended"):
            ratios[g.rows.index(adapter), g.columns.index(column)] = cell.ratio
    top = max(10.0, float(np.nanmax(ratios)) if np.isfinite(ratios).any() else 10.0)
    norm = matplotlib.colors.LogNorm(vmin=1, vmax=top)
    cmap = plt.get_cmap("YlOrRd").with_extremes(bad=IDLE_COLOR)
    fig, ax = plt.subplots(figsize=(1.45 * cols + 3.2, 0.55 * rows + 2.0))
    image = ax.imshow(np.ma.masked_invalid(ratios), cmap=cmap, norm=norm, aspect="auto")
    for (column, adapter), cell in g.cells.items():
        i, j = g.rows.index(adapter), g.columns.index(column)
        if cell.status in ("skipped", "failed"):
            ax.add_patch(
                matplotlib.patches.Rectangle(
                    (j - 0.5, i - 0.5), 1, 1, fill=False, hatch="////", edgecolor="#9e9e9e", lw=0
                )
            )
            ax.text(j, i, cell.status, ha="center", va="center", fontsize=8, color="#424242", style="italic")
            continue
        text = ratio_text(cell.ratio)
        if cell.same:
            text += " same"
        if cell.unresolved:
            text += " unres."
        if cell.status == "contended":
            text += "\ncontended"
        elif cell.under_load:
            text += "\nunder load"
        elif cell.strategy:
            text += f"\n{cell.strategy}"
        dark = cell.ratio is not None and norm(cell.ratio) > 0.6
        ax.text(
            j,
            i,
            text,
            ha="center",
            va="center",
            fontsize=8,
            color="white" if dark else "black",
            weight="bold" if cell.fastest else "normal",
        )
        if cell.fastest or cell.same:
            ax.add_patch(
                matplotlib.patches.Rectangle(
                    (j - 0.46, i - 0.44),
                    0.92,
                    0.88,
                    fill=False,
                    lw=1.8,
                    edgecolor="black",
                    ls="-" if cell.fastest else "--",
                )
            )
    labels = [
        f"{_stacked(c)}\nfastest {sig(s * 1e3)} ms/step" if s else _stacked(c)
        for c, s in zip(g.columns, g.fastest_s, strict=True)
    ]
    ax.set_xticks(range(cols), labels, fontsize=8)
    ax.xaxis.tick_top()
    ax.set_yticks(range(rows), g.rows, fontsize=9)
    ax.tick_params(length=0)
    for edge in ax.spines.values():
        edge.set_visible(False)
    bar = fig.colorbar(image, ax=ax, fraction=0.04, pad=0.02)
    ticks = [t for t in (1, 1.5, 2, 3, 5, 10, 20, 50, 100, 200, 500, 1000) if t <= top]
    bar.set_ticks(ticks, labels=[f"{t:g}x" for t in ticks])
    bar.ax.minorticks_off()
    bar.set_label("steady step time / fastest of the column (log scale)", fontsize=8)
    ax.set_title("Steady step time over the fastest of each column (lower is better)", fontsize=10, pad=8)
    legend = (
        "1.00 framed: fastest (separated from every other); dashed frame: same speed (interval within [0.952, 1.05])"
    )
    if any(cell.unresolved for cell in g.cells.values()):
        legend += "; unres.: unresolved (could not tell)"
    ax.set_xlabel(legend, fontsize=8)
    return _save(fig, path)


#: The profiler's own cost in the breakdown bars (harness.reporting.ops.split_seconds): hatched grey.
PROFILER_COLOUR = "#bbbbbb"


def ops_breakdown(split: list[tuple[Record, dict[str, float]]], path: Path) -> Path | None:
    """A stacked bar per adapter: its profiled step (ms) split by op category (harness.stats.taxonomy),
    each category in its one colour, ``uncovered`` then the profiler's own cost (hatched) last;
    ``split``: each profiled record with its seconds per category (harness.reporting.ops); None if empty."""
    if not split:
        return None
    ok = [r for r, _ in split]
    fig, ax = plt.subplots(figsize=(8.5, 0.42 * len(ok) + 2.0))
    left = [0.0] * len(ok)
    for category in [*taxonomy.CATEGORIES, *[c for c in split[0][1] if c not in taxonomy.COLOURS]]:
        widths = [seconds.get(category, 0.0) * 1e3 for _, seconds in split]
        if not any(widths):
            continue
        colour, hatch = taxonomy.COLOURS.get(category, PROFILER_COLOUR), "" if category in taxonomy.COLOURS else "//"
        ax.barh(range(len(ok)), widths, left=left, color=colour, hatch=hatch, label=category)
        left = [a + b for a, b in zip(left, widths, strict=True)]
    ax.set_yticks(range(len(ok)), [_label(r) for r in ok])
    ax.invert_yaxis()
    ax.set_xlabel("profiled step time (ms/step), by op category")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=5, fontsize=8, frameon=False)
    ax.set_title("where the step's time goes (profiled pass)")
    return _save(fig, path)


def serve_latency(
    rows: Sequence[tuple[str, Mapping[str, Any]]], workload: str, path: Path, colors: Colors
) -> Path | None:
    """Batch-1 latency of each served or in-process forward (export task): the bar the median
    (p50), the whisker up to p99, the p50 written at the bar's end; bars in the adapter's colour,
    labelled by row (``rows``: (label, record) of the ok cells, in the table's order)."""
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(8.5, 0.42 * len(rows) + 1.8))
    p50 = [r["p50_s"] * 1e3 for _, r in rows]
    p99 = [r["p99_s"] * 1e3 for _, r in rows]
    tails = [max(0.0, hi - lo) for lo, hi in zip(p50, p99, strict=True)]
    colours = [colors.get(r["adapter"], "grey") for _, r in rows]
    hatches = ["" if r.get("export_path") == "in-process" else "//" for _, r in rows]
    bars = ax.barh(range(len(rows)), p50, xerr=[[0] * len(rows), tails], color=colours, capsize=3)
    for bar, hatch in zip(bars, hatches, strict=True):
        bar.set_hatch(hatch)
    wide = _wide(p50 + p99)
    for i, (end, value) in enumerate(zip(p99, p50, strict=True)):
        ax.text(end * (1.06 if wide else 1) + (0 if wide else 0.01 * max(p99)), i, sig(value), va="center", fontsize=8)
    ax.set_yticks(range(len(rows)), [label for label, _ in rows])
    ax.invert_yaxis()
    if wide:
        ax.set_xscale("log")
        _log_ticks(ax.xaxis)
        ax.set_xlim(min(p50) / 1.5, max(p99) * 2.2)
    else:
        ax.set_xlim(0, max(p99) * 1.18)
    ax.set_xlabel("batch-1 latency, p50 (ms" + (", log scale" if wide else "") + "); whisker to p99; hatched: served")
    ax.set_title(f"{workload}: one request, answer in host memory (lower is better)")
    return _save(fig, path)
