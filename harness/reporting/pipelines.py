"""The "Native loaders" section of an image-pipeline run (``--data loader`` on image workloads):
step time, wait and utilisation against a pipeline setting (workers, prefetch), per adapter,
and where each series stops being input-bound. (The "Input pipeline" section,
harness.reporting.sections, compares the data modes instead.)"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from tabulate import tabulate

from harness.records import Record
from harness.reporting import plots
from harness.reporting.formatting import DASH, device_label, sig, slug
from workloads.images import AUTOTUNE, PIPELINE_FIELDS

#: A step is input-bound while waiting for its batch takes at least this share of it: past it
#: the wait is no longer small against the step, and more workers or prefetch could still buy
#: time. A definition, not a tuned threshold (at 50% a step waiting 40% of its time would read
#: "compute-bound").
INPUT_BOUND = 0.1
#: The section's heading: distinct from the data modes' "Input pipeline" (harness.reporting.sections).
HEADING = "## Native loaders: wait and utilisation"
#: A loader whose ``loader_kind`` names this runs the shared per-sample Python function under the GIL.
NUMPY_FUNCTION = "tf.numpy_function"


def pipeline_records(recs: list[Record]) -> list[Record]:
    """The ``ok`` cells fed by an image pipeline (those carrying a measured wait)."""
    return [r for r in recs if r["status"] == "ok" and r.get("input_bound_share") is not None]


def _x(r: Record, field: str) -> float:
    sweep = r.get("sweep") or {}
    if sweep.get("field") == field:
        return float(sweep["value"])
    return float((r.get("pipeline") or {}).get(field, 0))


def _field(cells: list[Record]) -> str:
    fields = {(r.get("sweep") or {}).get("field") for r in cells}
    swept = [f for f in fields if f in PIPELINE_FIELDS]
    return swept[0] if len(swept) == 1 else "workers"


def _value(v: float) -> str:
    return "autotune" if v == AUTOTUNE else f"{v:g}"


def crossover(series: list[Record], field: str) -> str:
    """Where the series (sorted by ``field``) stops being input-bound, in words."""
    bound = [(_x(r, field), r["input_bound_share"] >= INPUT_BOUND, r["input_bound_share"]) for r in series]
    if len(bound) == 1:
        v, bound_here, share = bound[0]
        state = "input-bound" if bound_here else "compute-bound"
        return f"{state} at {field}={_value(v)} (waits {share:.0%} of the step), the only {field} value tried"
    if all(b for _, b, _ in bound):
        return f"input-bound at every {field} value tried"
    if not bound[0][1]:
        return f"compute-bound already at {field}={_value(bound[0][0])} (waits {bound[0][2]:.0%} of the step)"
    for (v0, b0, s0), (v1, b1, s1) in zip(bound, bound[1:], strict=False):
        if b0 and not b1:
            return (
                f"stops being input-bound between {field}={_value(v0)} (waits {s0:.0%} of the step) "
                f"and {field}={_value(v1)} ({s1:.0%})"
            )
    return "no single crossover"


def _rates(rs: list[Record]) -> str:
    """The pipeline-alone rates of ``rs`` as a range."""
    low, high = sig(min(r["pipeline_batches_per_s"] for r in rs)), sig(max(r["pipeline_batches_per_s"] for r in rs))
    return low if low == high else f"{low}-{high}"


def numpy_function_note(series: dict[str, list[Record]], field: str) -> list[str]:
    """What the figures of loaders through ``tf.numpy_function`` measure (this project's loader,
    not tf.data's native ops), with their pipeline-alone rate beside the others' at each value."""
    wrapped = [a for a, rs in series.items() if NUMPY_FUNCTION in str(rs[0].get("loader_kind"))]
    if not wrapped:
        return []
    rates = []
    for v in sorted({_x(r, field) for a in wrapped for r in series[a]}):
        mine = [r for a in wrapped for r in series[a] if _x(r, field) == v]
        others = [r for a, rs in series.items() if a not in wrapped for r in rs if _x(r, field) == v]
        rates.append(
            f"{_rates(mine)} batches/s at {field}={_value(v)}"
            + (f" against {_rates(others)} for the others" if others else "")
        )
    names = " and ".join(wrapped)
    return [
        f"{names} {'draws' if len(wrapped) == 1 else 'draw'} batches through tf.data calling this project's "
        "per-sample Python function (the decode and augmentation every loader here runs) wrapped in "
        "`tf.numpy_function`, which holds Python's GIL while the function's Python code runs: tf.data's "
        "parallel calls are threads of one process and contend for it, where the other loaders' workers, "
        f"when there are any, are processes of their own. Alone (no training), that pipeline delivers "
        f"{'; '.join(rates)}. So the figures of {names} measure this project's loader through "
        "`tf.numpy_function`, not the speed of a tf.data pipeline built from TensorFlow's own ops "
        "(`tf.io.decode_jpeg`, `tf.image`), which run without the GIL.",
        "",
    ]


def _plot(groups: dict[str, list[Record]], field: str, title: str, path: Path, colors: plots.Colors) -> Path:
    fig, (left, right) = plots.plt.subplots(1, 2, figsize=(11, 4.5))
    for label, rs in groups.items():
        xs = [_x(r, field) for r in rs]
        color = colors.get(rs[0]["adapter"])
        left.plot(xs, [r["median_s"] * 1e3 for r in rs], marker="o", color=color, label=f"{label}: step")
        left.plot(xs, [(r.get("compute_median_s") or float("nan")) * 1e3 for r in rs], ":", color=color)
        left.plot(xs, [r["pipeline_ceiling_s"] * 1e3 for r in rs], "--", color=color, alpha=0.6)
        right.plot(xs, [r["cpu_cores_busy"] for r in rs], marker="o", color=color, label=f"{label}: CPU cores")
        if any(r.get("gpu_util_mean") is not None for r in rs):
            gpu = [(r.get("gpu_util_mean") or float("nan")) / 100 * rs[0]["cpu_count"] for r in rs]
            right.plot(xs, gpu, "s-.", color=color, label=f"{label}: GPU util (scaled)")
    left.set_yscale("log")
    plots._log_ticks(left.yaxis)
    left.set_ylabel("ms per batch")
    kinds: list[tuple[Literal["-", ":", "--"], str]] = [
        ("-", "step"),
        (":", "step less its wait"),
        ("--", "pipeline alone (no training)"),
    ]
    left.legend(
        [plots.plt.Line2D([], [], color="grey", linestyle=ls) for ls, _ in kinds],
        [text for _, text in kinds],
        fontsize=8,
        loc="lower left",
        bbox_to_anchor=(0, 1.08),
        frameon=False,
        ncol=3,
    )
    right.set_ylabel("CPU cores busy (training process + workers)")
    cores = max(r.get("cpu_count") or 0 for rs in groups.values() for r in rs)
    if cores:
        right.axhline(cores, color="grey", linewidth=0.8)
        right.set_ylim(0, cores * 1.1)
    values = sorted({_x(r, field) for rs in groups.values() for r in rs})
    for ax in (left, right):
        ax.set_xticks(values, [_value(v) for v in values])
        ax.set_xlabel(field)
        ax.grid(True, which="both", alpha=0.3)
    left.set_title(f"{title}: step time vs {field}")
    right.set_title(f"{title}: utilisation vs {field}")
    right.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1), frameon=False)
    return plots._save(fig, path)


def section(recs: list[Record], plot_dir: Path | None, colors: plots.Colors | None = None) -> list[str]:
    """Per workload and device: the plot, one row per cell, and each adapter's crossover."""
    cells = pipeline_records(recs)
    if not cells:
        return []
    out = [HEADING, ""]
    for key in sorted({(r["workload"], device_label(r)) for r in cells}):
        group = [r for r in cells if (r["workload"], device_label(r)) == key]
        workload, device = key
        field = _field(group)
        series: dict[str, list[Record]] = {}
        for r in sorted(group, key=lambda r: (r["adapter"], _x(r, field))):  # rows by adapter, not run order
            series.setdefault(r["adapter"], []).append(r)
        first = group[0]
        out += [f"### {workload} on {device}: {field}", ""]
        data = first.get("pipeline_data") or {}
        out.append(
            f"Each step draws its next batch from the framework's own pipeline ({data.get('samples', '?')} "
            f"encoded images, {data.get('stored', '')}; per sample: {data.get('per_sample', '')}), then "
            "trains on it, synced. *wait* is the time the loop waited for the batch (the previous "
            "step was synced before the draw, so it is waiting alone); the input-bound share is the "
            "waits over the step times of the steady window. *CPU cores* is the CPU time of the cell's "
            "process and its worker processes over the steady window, per second. *Pipeline alone* "
            "is the batches/s it delivers with no training, after the steps: the ceiling it sets on "
            f"the step rate. A step counts as input-bound while it waits {INPUT_BOUND:.0%} of it or more. "
            "tf.data's parallel calls are threads of the training process, so its workers' share reads 0."
        )
        out.append("")
        if first.get("device", "cpu") == "cpu":
            out += [
                f"On this CPU the pipeline's workers and the training step share the same "
                f"{first.get('cpu_count', '?')} logical CPUs: a worker that decodes takes a core from the "
                "step's math, so more workers can shorten the wait and lengthen the step at once.",
                "",
            ]
        if plot_dir is not None:
            assert colors is not None  # _plot colours each adapter's lines
            path = _plot(series, field, workload, plot_dir / f"{slug(workload, device, 'pipeline', field)}.png", colors)
            out += [f"![{workload}: input pipeline vs {field}]({path.name})", ""]
        rows = []
        for adapter, rs in series.items():
            for r in rs:
                rows.append(
                    [
                        adapter,
                        _value(_x(r, field)),
                        sig(r["median_s"] * 1e3),
                        sig(r["wait_median_s"] * 1e3),
                        f"{r['input_bound_share']:.0%}",
                        sig((r.get("compute_median_s") or 0) * 1e3) if r.get("compute_median_s") else DASH,
                        sig(r["cpu_cores_busy"]),
                        sig(r["cpu_worker_cores_busy"]),
                        DASH if r.get("gpu_util_mean") is None else f"{r['gpu_util_mean']:.0f}%",
                        sig(r["pipeline_batches_per_s"]),
                    ]
                )
        headers = [
            "adapter",
            field,
            "step (ms)",
            "wait (ms)",
            "input-bound share",
            "step less wait (ms)",
            "CPU cores busy",
            "of which workers",
            "GPU util",
            "pipeline alone (batches/s)",
        ]
        out += [tabulate(rows, headers, tablefmt="github", disable_numparse=True), ""]
        out += numpy_function_note(series, field)
        out += ["Pipelines:", ""]
        out += [f"- {adapter}: {rs[0].get('loader_kind')}; {crossover(rs, field)}." for adapter, rs in series.items()]
        out.append("")
    return out
