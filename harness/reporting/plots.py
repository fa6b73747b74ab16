"""PNG plots for the report, made from records alone with matplotlib's headless Agg backend."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.patches  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402

from harness.reporting.summary import strategy

Record = dict[str, Any]
#: Steps shown in the cumulative-time plot: far enough to see late break-evens.
HORIZON = 10_000


COLORS = {"static": "#dd8452", "dynamic": "#4c72b0"}


def _label(rec: Record) -> str:
    parts = [f"{rec['adapter']} ({rec['graph']})" if rec.get("graph") else rec["adapter"]]
    if strategy(rec):
        parts.append(strategy(rec))
    if rec.get("device"):
        parts.append(rec["device"])
    return " / ".join(parts)


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def step_times(recs: list[Record], workload: str, path: Path) -> Path | None:
    """Steady median step time per cell with its 95% CI as error bars, coloured by graph kind."""
    ok = sorted((r for r in recs if r["status"] == "ok"), key=lambda r: r["median_s"])
    if not ok:
        return None
    fig, ax = plt.subplots(figsize=(8.5, 0.42 * len(ok) + 1.8))
    medians = [r["median_s"] * 1e3 for r in ok]
    low = [(r["median_s"] - r.get("ci_low_s", r["median_s"])) * 1e3 for r in ok]
    high = [(r.get("ci_high_s", r["median_s"]) - r["median_s"]) * 1e3 for r in ok]
    colors = [COLORS.get(r.get("graph"), "grey") for r in ok]
    ax.barh(range(len(ok)), medians, xerr=[low, high], color=colors, capsize=3)
    ax.set_yticks(range(len(ok)), [_label(r) for r in ok])
    ax.invert_yaxis()
    wide = max(medians) / min(medians) > 30
    if wide:
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(matplotlib.ticker.LogFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.4)))
    ax.set_xlabel("steady step time, median (ms/step" + (", log scale" if wide else "") + "); error bars: 95% CI")
    handles = [matplotlib.patches.Patch(color=c, label=f"{k} graph") for k, c in COLORS.items()]
    ax.legend(handles=handles, loc="lower right", fontsize=8)
    ax.set_title(f"{workload}: steady step time (lower is better)")
    return _save(fig, path)


def compile_cost(recs: list[Record], workload: str, path: Path) -> Path | None:
    """First step (trace + compile + run) against the steady step, log scale."""
    ok = [r for r in recs if r["status"] == "ok"]
    if not ok:
        return None
    fig, ax = plt.subplots(figsize=(7, 0.5 * len(ok) + 1.6))
    y = range(len(ok))
    ax.barh(
        [i - 0.2 for i in y],
        [r["first_step_s"] * 1e3 for r in ok],
        height=0.4,
        label="first step (trace + compile + run)",
        color="#dd8452",
    )
    ax.barh([i + 0.2 for i in y], [r["median_s"] * 1e3 for r in ok], height=0.4, label="steady step", color="#4c72b0")
    ax.set_yticks(list(y), [_label(r) for r in ok])
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("time (ms, log scale)")
    ax.set_title(f"{workload}: first step vs steady step (the compile cost)")
    ax.legend(loc="lower right")
    return _save(fig, path)


def cumulative(recs: list[Record], workload: str, path: Path, cumulative_s) -> Path | None:
    """Total time from a cold start against steps trained: where static overtakes dynamic.

    Two panels, one line per adapter in each: its ``exact`` strategy (every caption length
    compiled as it comes) and its best strategy (least total time at the horizon)."""
    ok = [r for r in recs if r["status"] == "ok" and "cold_times_s" in r]
    if len(ok) < 2:
        return None
    window = max(len(r["cold_times_s"]) for r in ok)
    steps = sorted({int(round(x)) for x in np.logspace(0, np.log10(HORIZON), 120)})
    adapters = sorted({r["adapter"] for r in ok})
    colors = {a: plt.get_cmap("tab10")(i % 10) for i, a in enumerate(adapters)}
    fig, axes = plt.subplots(1, 2, figsize=(12, 5), sharey=True)

    def exact(rs: list[Record]) -> list[Record]:
        return [r for r in rs if strategy(r) in (None, "exact")][:1]

    def best(rs: list[Record]) -> list[Record]:
        return [min(rs, key=lambda one: cumulative_s(one, HORIZON))]

    for ax, title, choose in ((axes[0], "exact strategy", exact), (axes[1], "each adapter's best strategy", best)):
        for adapter in adapters:
            for r in choose([r for r in ok if r["adapter"] == adapter]):
                style = "-" if r.get("graph") == "static" else "--"
                label = " / ".join(filter(None, [adapter, strategy(r)]))
                ax.plot(steps, [cumulative_s(r, n) for n in steps], style, color=colors[adapter], label=label)
        ax.axvline(window, color="grey", lw=0.8, ls=":")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("training steps from a cold start")
        ax.set_title(f"{workload}: {title}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, title="solid: static graph, dashed: dynamic", title_fontsize=7)
    axes[0].set_ylabel("total time, compiles included (s)")
    fig.text(
        0.5,
        0.005,
        "measured up to the dotted line (the first pass over the data), then extrapolated with the steady median",
        ha="center",
        fontsize=8,
    )
    fig.subplots_adjust(bottom=0.14)
    return _save(fig, path)


def sweep(series: dict[str, list[tuple[float, float, float, float]]], field: str, workload: str, path: Path) -> Path:
    """Step time and samples/s against a swept field, one line per adapter/device.

    ``series`` maps a label to (value, median_s, ci_low_s, ci_high_s, ...) points sorted by value."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    for label, points in series.items():
        xs = [p[0] for p in points]
        left.errorbar(
            xs,
            [p[1] * 1e3 for p in points],
            yerr=[[(p[1] - p[2]) * 1e3 for p in points], [(p[3] - p[1]) * 1e3 for p in points]],
            marker="o",
            capsize=3,
            label=label,
        )
        right.plot(xs, [p[4] for p in points], marker="o", label=label)
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel(field)
        ax.grid(True, which="both", alpha=0.3)
    left.set_ylabel("steady step time (ms/step, median, 95% CI)")
    right.set_ylabel("throughput (samples/s)")
    left.set_title(f"{workload}: step time vs {field}")
    right.set_title(f"{workload}: samples/s vs {field}")
    right.legend(fontsize=8)
    return _save(fig, path)
