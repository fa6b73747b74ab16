"""The export task's report (harness.export): report.md and report.html of an export run,
from its records alone. An "Export and serve" section per workload and device: a table (one row
per in-process forward or served artifact, ok rows fastest first) and a latency plot, then one
sentence per workload and device: ONNX Runtime against the fastest in-process forward, the
exporters and other served paths as detail."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TypeGuard

from harness import records
from harness.records import ExportRecord, Record
from harness.reporting import html, plots
from harness.reporting.formatting import DASH, load_text, machine_name, sig, slug

IN_PROCESS = "in-process"  # adapters.exporting.IN_PROCESS; the report reads records, not adapters
COLUMNS = [
    "row",
    "export s",
    "size",
    "cold load s",
    "p50 ms (batch 1)",
    "p99 ms (batch 1)",
    "samples/s",
    "parity error / allowed",
    "status",
]


def is_export(rec: Record) -> TypeGuard[ExportRecord]:
    return rec.get("kind") == "export"


def row_label(rec: ExportRecord) -> str:
    """``jax-jit in-process`` for an adapter's own forward, ``onnx (torch-eager)`` for a path."""
    if rec["export_path"] == IN_PROCESS:
        return f"{rec['adapter']} in-process"
    return f"{rec['export_path']} ({rec['adapter']})"


def size_text(n: int | None) -> str:
    if n is None:
        return DASH
    for unit, scale in (("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{sig(n / scale)} {unit}"
    return f"{n} B"


def ordered(recs: list[ExportRecord]) -> list[ExportRecord]:
    """ok rows by batch-1 p50, then failed, then skipped, each by label."""
    rank = {"ok": 0, "failed": 1, "skipped": 2}
    return sorted(recs, key=lambda r: (rank[r["status"]], r.get("p50_s") or 0.0, row_label(r)))


def table(recs: list[ExportRecord]) -> list[str]:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in ordered(recs):
        ok = r["status"] == "ok"
        parity = f"{sig(r['parity_error'], 2)} / {sig(r['parity_allowed'], 2)}" if "parity_error" in r else DASH
        throughput = f"{sig(r['throughput_per_s'])} (batch {r['throughput_batch']})" if ok else DASH
        status = r["status"] if ok else f"{r['status']} (below)"
        if ok and r.get("contended"):
            status = f"ok, contended ({load_text(r)})"
        cells = [
            row_label(r),
            sig(r.get("export_s")) if r["export_path"] != IN_PROCESS else "none",
            size_text(r.get("artifact_bytes")),
            sig(r.get("cold_load_s")),
            sig(r["p50_s"] * 1e3) if ok else DASH,
            sig(r["p99_s"] * 1e3) if ok else DASH,
            throughput,
            parity,
            status,
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


#: Rows whose batch-1 p50 is within this share of the lowest are unresolved against it (one process
#: per row: closer than this is within run-to-run drift here, docs/measurement.md).
DRIFT_SHARE = 0.10


ONNX = "onnx"  # one runtime (ONNX Runtime) whichever framework exported the graph


def _ms(rec: ExportRecord) -> str:
    return f"{sig(rec['p50_s'] * 1e3)} ms"


def _within_drift(best: ExportRecord, rows: list[ExportRecord]) -> list[ExportRecord]:
    return [r for r in rows if r is not best and r["p50_s"] <= best["p50_s"] * (1 + DRIFT_SHARE)]


def fastest_sentence(workload: str, device: str, recs: list[ExportRecord]) -> str:
    """The headline of one workload and device: ONNX Runtime's best batch-1 p50 against the fastest
    in-process forward (the question export answers: serve from a runtime, or from the framework?),
    then the exporters as detail (one runtime: their graphs serve alike), then the lowest other
    served path. One process per row and no interval: rows within DRIFT_SHARE are unresolved
    against each other, and none is named alone."""
    ok = [r for r in recs if r["status"] == "ok"]
    served = sorted((r for r in ok if r["export_path"] != IN_PROCESS), key=lambda r: r["p50_s"])
    inproc = sorted((r for r in ok if r["export_path"] == IN_PROCESS), key=lambda r: r["p50_s"])
    onnx = [r for r in served if r["export_path"] == ONNX]
    if not served:
        return f"`{workload}` on {device}: no served path ran to the end (see the table for why)."
    head = f"`{workload}` on {device}: "
    if onnx:
        best = onnx[0]
        text = head + f"ONNX Runtime serves one request in {_ms(best)} p50 ({sig(best['p99_s'] * 1e3)} ms p99)"
    else:
        best = served[0]
        text = head + f"the lowest served p50 is {row_label(best)}'s, {_ms(best)} ({sig(best['p99_s'] * 1e3)} ms p99)"
    if inproc:
        fast = inproc[0]
        ratio = fast["p50_s"] / best["p50_s"]
        # The two p50s, both in the table, rather than a ratio no table prints.
        if abs(ratio - 1) <= DRIFT_SHARE:
            text += f", unresolved against the fastest in-process forward, {row_label(fast)} ({_ms(fast)})"
        else:
            word = "slower" if ratio > 1 else "faster"
            text += f"; the fastest in-process forward, {row_label(fast)}, is {word} at {_ms(fast)}"
    text += "."
    if len(onnx) > 1:
        lo, hi = onnx[0]["p50_s"] * 1e3, onnx[-1]["p50_s"] * 1e3
        exporters = ", ".join(r["adapter"] for r in onnx)
        text += f" Its graphs from {len(onnx)} exporters ({exporters}) serve in {sig(lo)}-{sig(hi)} ms"
        close = _within_drift(onnx[0], onnx)
        if len(close) == len(onnx) - 1:
            text += f", unresolved against each other (within {DRIFT_SHARE:.0%}, one process each)."
        else:
            text += "."
    others = [r for r in served if r["export_path"] != ONNX]
    if onnx and others:
        other = others[0]
        text += f" The lowest other served path: {row_label(other)}, {_ms(other)}."
    elif not onnx:
        close = _within_drift(best, served)
        if close:
            text += (
                f" Unresolved against it (within {DRIFT_SHARE:.0%}, what this machine drifts between processes, "
                f"one process each): {', '.join(row_label(r) for r in close)}."
            )
    return text


def section(workload: str, device: str, recs: list[ExportRecord], plot_dir: Path, colors: plots.Colors) -> list[str]:
    out = [f"## Export and serve: {workload} ({device})", "", *table(recs), ""]
    ok = [(row_label(r), r) for r in ordered(recs) if r["status"] == "ok"]
    png = plots.serve_latency(ok, workload, plot_dir / f"export-{slug(workload, device)}.png", colors)
    if png is not None:
        out += [f"![{workload} on {device}: batch-1 latency per row]({png.name})", ""]
    rest = [r for r in ordered(recs) if r["status"] != "ok"]
    if rest:
        out += ["Not run to the end:", ""]
        out += [f"- {row_label(r)}: {r['status']}: {' '.join(str(r['reason']).split())}" for r in rest]
        out.append("")
    return out


METHOD = (
    "Every row starts from the workload's canonical initial parameters, the same NumPy arrays for "
    "every framework. A served row's artifact is written by one fresh process (**export s**: importing "
    "the framework, building the model and writing it; **size**: its bytes on disk) and loaded by "
    "another that has imported nothing of a framework (**cold load s**: import + load + first call, "
    "one request). An in-process "
    "row builds the adapter's own forward in a fresh process instead (cold: import + build + first "
    "call, compiles included). Then batch-1 requests, each timed alone with its answer copied to host "
    "memory (the sync), for the run's budget: **p50** and **p99**; and blocks of requests at the "
    "throughput batch (**samples/s**, median block). **Parity**: the logits of 16 inputs against the "
    "float64 reference forward, relative L2 error, allowed 10x the float32 reference's own rounding "
    "error (at least 256 ulps); a row over it is failed. One process per row: rows closer than about "
    "10% are within this machine's run-to-run drift (docs/measurement.md); a row marked contended ran "
    "while other processes used more than a quarter of a core. docs/export.md has the details."
)


def build(run_dir: Path, plot_dir: Path, raw: Sequence[Record] | None = None) -> str:
    """An export run's markdown from its records (``raw``: as loaded, else read from the run)."""
    loaded: Sequence[Record] = records.load(run_dir / records.RESULTS) if raw is None else raw
    recs: list[ExportRecord] = [r for r in loaded if is_export(r)]
    env = records.load_env(run_dir)
    colors = plots.palette(recs)
    keys = list(dict.fromkeys((r["workload"], r["device_requested"]) for r in recs))
    versions = ", ".join(f"{k} {v}" for k, v in sorted(env.get("packages", {}).items()))
    head = [
        f"# Export and serve: {run_dir.name}",
        "",
        f"Machine: {machine_name(env) if env else 'unknown'}; {env.get('threads', '?')} intra-op threads for "
        f"every framework and runtime. Versions: {versions or 'not recorded'}.",
        "",
        METHOD,
        "",
        "## Summary",
        "",
        *[
            f"- {fastest_sentence(w, d, [r for r in recs if (r['workload'], r['device_requested']) == (w, d)])}"
            for w, d in keys
        ],
        "",
    ]
    body: list[str] = []
    for w, d in keys:
        body += section(w, d, [r for r in recs if (r["workload"], r["device_requested"]) == (w, d)], plot_dir, colors)
    return "\n".join(head + body)


def write(run_dir: Path, out_dir: Path | None = None, raw: Sequence[Record] | None = None) -> Path:
    """report.md (with its plots) and report.html of an export run; returns report.md's path.
    ``raw``: its records as already loaded."""
    target = out_dir or run_dir
    target.mkdir(parents=True, exist_ok=True)
    path = target / "report.md"
    path.write_text(build(run_dir, target, raw))
    html.write(path)
    return path
