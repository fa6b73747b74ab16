"""The report's "Where the time goes" section: each cell's profiled pass (``--profile-ops``).

From the ``ops_profile`` field of round-1 records (harness.measuring.profilers): per workload
and device, a stacked bar per adapter (the categories of harness.stats.taxonomy, in their
colours), a table of the shares with the profiled step beside the unprofiled one and a link to
the trace, the five ops with the most self time per adapter, and one sentence per framework's
dynamic/static pair, and where the profile disagrees with the cell's floors (overhead-bound by its
floors yet mostly matmul, or compute-bound yet mostly uncovered). A breakdown the profiler could not
give is listed with its reason.
"""

from __future__ import annotations

from pathlib import Path

from tabulate import tabulate

from harness.records import Record
from harness.reporting import plots
from harness.reporting.cells import strategy
from harness.reporting.formatting import DASH, device_label, sig, slug
from harness.stats import taxonomy

#: The profiler's own cost, apart from *uncovered* (``split_seconds``).
PROFILER = "profiler overhead"
#: Columns of the shares table that also print their time (ms): what the sentences quote.
TIMED = (taxonomy.UNCOVERED, PROFILER)


def split_seconds(r: Record) -> dict[str, float]:
    """The profiled step by category (seconds per step), the profiler's own cost apart: the
    profiled step's median over the unprofiled one's (same process and round), at most the
    uncovered time, taken out of *uncovered*, where the profiler's cost lands."""
    p = r["ops_profile"]
    seconds = {c: p["seconds"].get(c, 0.0) for c in taxonomy.CATEGORIES}
    overhead = min(max(0.0, p["profiled_step_s"] - _unprofiled_s(r)), seconds[taxonomy.UNCOVERED])
    seconds[taxonomy.UNCOVERED] -= overhead
    seconds[PROFILER] = overhead
    return seconds


def profiled(recs: list[Record]) -> list[Record]:
    """The ok records that carry a profiled pass (ok or skipped)."""
    return [r for r in recs if r["status"] == "ok" and r.get("ops_profile")]


def section(recs: list[Record], plot_dir: Path | None = None) -> list[str]:
    """``## Where the time goes`` or nothing where no cell was profiled."""
    cells = profiled(recs)
    if not cells:
        return []
    groups: dict[tuple, list[Record]] = {}
    for r in cells:
        key = (r["workload"], strategy(r) or "", r.get("data", "resident"), device_label(r))
        groups.setdefault(key, []).append(r)
    out = [
        "## Where the time goes",
        "",
        "A profiled pass per cell, after its timing (round 1), under its framework's own profiler; every op "
        "mapped into one taxonomy (harness.stats.taxonomy). On a CPU each instant of a step goes to the "
        "innermost op running (split evenly where ops of several threads overlap); on a GPU to the kernels. "
        "*uncovered* is the rest of the step's wall time (Python, dispatch, gaps, waiting): the categories "
        "sum to the profiled step. The profiled step is shown beside the unprofiled one. The profiler's own "
        "cost lands outside any op, so its estimate (the profiled step's median over the unprofiled one's, "
        "at most the uncovered time) is taken out of *uncovered* and shown as *profiler overhead*, its own "
        "column and bar. Ops/step counts the ops the framework launched (not nested in another).",
        "",
    ]
    for (workload, strat, data, device), group in groups.items():
        group = sorted(group, key=lambda r: r["adapter"])
        title = f"### {workload}" + (f" ({strat})" if strat else "") + (f", {data}" if data != "resident" else "")
        out += [f"{title}, {device}", ""]
        if plot_dir is not None:
            split = [(r, split_seconds(r)) for r in _ok(group)]
            path = plots.ops_breakdown(split, plot_dir / f"{slug(workload, strat, data, device)}-ops.png")
            if path is not None:
                out += [f"![{workload}: where the step's time goes]({path.name})", ""]
        out += [shares_table(group), "", top_ops_table(group), ""]
        out += [f"- {s}" for s in [*pair_sentences(group), *floor_disagreements(group)]]
        skipped = [r for r in group if r["ops_profile"].get("status") != "ok"]
        out += [f"- **{r['adapter']}**: no breakdown ({r['ops_profile'].get('reason', '?')})" for r in skipped]
        out += [""] if out[-1] else []
    return out


def _ok(group: list[Record]) -> list[Record]:
    return [r for r in group if r["ops_profile"].get("status") == "ok"]


def _pct(x: float | None) -> str:
    if x is None:
        return DASH
    return "<1%" if 0 < x < 0.005 else f"{100 * x:.0f}%"


def shares_table(group: list[Record]) -> str:
    """Per adapter: profiled and unprofiled step, ops per step, each category's share (the
    categories no adapter of the group used left out), device busy share, and the trace."""
    ok = _ok(group)
    split = {id(r): split_seconds(r) for r in ok}
    order = [*taxonomy.CATEGORIES, PROFILER]
    used = [c for c in order if any(split[id(r)][c] for r in ok)]
    gpu = any("device_busy_share" in r["ops_profile"] for r in ok)
    headers = ["adapter", "profiled ms/step", "unprofiled ms/step", "ops/step", *used]
    headers += ["device busy", "mean kernel gap (µs)"] if gpu else []
    rows = []
    for r in ok:
        p = r["ops_profile"]
        row = [r["adapter"], sig(p["profiled_step_s"] * 1e3), sig(_unprofiled_s(r) * 1e3), sig(p["ops_per_step"])]
        # the time outside any op, and the profiler's, also in ms: the sentences below quote both
        row += [_share_ms(split[id(r)], c) if c in TIMED else _share(split[id(r)], c) for c in used]
        if gpu:
            row += [_pct(p.get("device_busy_share")), sig((p.get("kernel_gap_s") or 0) * 1e6)]
        rows.append(row)
    table = tabulate(rows, headers, tablefmt="github", disable_numparse=True)
    links = ", ".join(f"[{r['adapter']}]({r['ops_profile']['trace']})" for r in ok if r["ops_profile"].get("trace"))
    return table + (f"\n\nTraces (open in ui.perfetto.dev or TensorBoard's profile plugin): {links}" if links else "")


def top_ops_table(group: list[Record]) -> str:
    """Per adapter, its five ops with the most self time: name, category, share of the step."""
    rows = []
    for r in _ok(group):
        tops = r["ops_profile"].get("top_ops", [])
        cells = [f"`{t['name']}` {t['category']}, {_pct(t['share'])}" for t in tops]
        rows.append([r["adapter"], *cells, *[DASH] * (5 - len(cells))])
    return tabulate(rows, ["adapter", "op 1", "op 2", "op 3", "op 4", "op 5"], tablefmt="github", disable_numparse=True)


def pair_sentences(group: list[Record]) -> list[str]:
    """One sentence per framework with a dynamic and a static adapter in the group: ops launched
    per step, the uncovered and profiler-overhead shares of each (``split_seconds``, as the table
    prints them), and which spends more of its step outside any op."""
    out = []
    by_framework: dict[str, dict[str, list[Record]]] = {}
    for r in _ok(group):
        by_framework.setdefault(r.get("framework", "?"), {}).setdefault(r.get("graph", "?"), []).append(r)
    for framework, graphs in sorted(by_framework.items()):
        for dyn in graphs.get("dynamic", []):
            for sta in graphs.get("static", []):
                d, s = split_seconds(dyn), split_seconds(sta)
                more = d[taxonomy.UNCOVERED] > s[taxonomy.UNCOVERED]
                whole = [sig(_unprofiled_s(r) * 1e3) for r in (dyn, sta)]  # as the table prints them
                out.append(
                    f"{framework}: {dyn['adapter']} launches {sig(dyn['ops_profile']['ops_per_step'])} ops per step "
                    f"and {_share_ms(d, taxonomy.UNCOVERED)} of its profiled step is uncovered, "
                    f"{_share_ms(d, PROFILER)} profiler overhead; {sta['adapter']} launches "
                    f"{sig(sta['ops_profile']['ops_per_step'])}, {_share_ms(s, taxonomy.UNCOVERED)} uncovered, "
                    f"{_share_ms(s, PROFILER)} profiler overhead"
                    + (
                        ": the dynamic mode's profiled step holds more outside any op, its profiler overhead apart "
                        f"(unprofiled, the whole steps take {whole[0]} and {whole[1]} ms)."
                        if more
                        else "."
                    )
                )
    return out


def _unprofiled_s(r: Record) -> float:
    """The unprofiled step of the profiled process and round (another round's may differ by
    drift), else the cell's steady median."""
    return r["ops_profile"].get("unprofiled_step_s") or r["median_s"]


def _share(seconds: dict[str, float], category: str) -> str:
    """``25%``: a category's share of the profiled step."""
    total = sum(seconds.values())
    return _pct(seconds[category] / total if total else 0.0)


def _share_ms(seconds: dict[str, float], category: str) -> str:
    """``25% (0.5 ms)``: a category's share of the profiled step and its time, as the table prints it."""
    return f"{_share(seconds, category)} ({sig(seconds[category] * 1e3)} ms)"


#: A share at or above this is "mostly" one thing, for floor_disagreements.
MOSTLY = 0.5


def floor_disagreements(group: list[Record]) -> list[str]:
    """A sentence per cell whose larger floor (harness.measuring.floors: ``kernels`` or
    ``dispatch``) says one thing and the profile another: overhead-bound by the floors while at
    least MOSTLY of the profiled step is matmul/conv, or compute-bound while at least MOSTLY is
    uncovered."""
    out = []
    for r in _ok(group):
        kernels, dispatch = r.get("kernel_floor_s"), r.get("dispatch_floor_s")
        if not kernels or not dispatch:
            continue
        shares = r["ops_profile"]["shares"]
        matmul, uncovered = shares.get(taxonomy.MATMUL, 0.0), shares.get(taxonomy.UNCOVERED, 0.0)
        if dispatch > kernels and matmul >= MOSTLY:
            out.append(
                f"{r['adapter']} is overhead-bound by its floors (dispatch floor {sig(dispatch * 1e3)} ms > kernel "
                f"floor {sig(kernels * 1e3)} ms), yet {_pct(matmul)} of its profiled step is matmul/conv."
            )
        elif kernels >= dispatch and uncovered >= MOSTLY:
            out.append(
                f"{r['adapter']} is compute-bound by its floors (kernel floor {sig(kernels * 1e3)} ms >= dispatch "
                f"floor {sig(dispatch * 1e3)} ms), yet {_pct(uncovered)} of its profiled step is outside any op."
            )
    return out
