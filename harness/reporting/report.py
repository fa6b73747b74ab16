"""report.md of one run, or several merged: renders the report model (harness.reporting.model:
the records, rounds combined, and what is computed from them once) section by section;
report.html beside it is the same page rendered (harness.reporting.html).

The page opens with the answer: the overview (picture and table) and the summary sentences; the
tables, plots and sections that back them follow."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd

from harness import records
from harness.records import Record, is_idiomatic
from harness.reporting import (
    attention,
    export,
    fidelity,
    findings,
    html,
    model,
    ops,
    overview,
    parity,
    pipelines,
    plots,
    run_time,
    static_dynamic,
    summary,
)
from harness.reporting.breakeven import cumulative_s
from harness.reporting.cells import axes, comparable, family_pairs, strategy
from harness.reporting.formatting import device_label, slug
from harness.reporting.hardware import hardware, memory
from harness.reporting.sections import banner, failures, input_pipeline, level_text, method
from harness.reporting.sweeps import sweep_section
from harness.reporting.tables import env_table, machines_table, settings_table
from harness.reporting.workload_tables import table_title, workload_table
from harness.stats.verdicts import SAME, SETTLE_MARGIN, Family, PairVerdict


def generations_note(group: Sequence[Record]) -> list[str]:
    """A line where the workload's cells ran in fewer generations (fresh processes each) than the
    run planned (a time budget that ran out, or cells that failed in some): what its verdicts rest on."""
    ok = [r for r in group if r["status"] == "ok" and r.get("group_generations")]
    if not ok:
        return []
    planned = max(int(r.get("rounds") or 1) for r in ok)
    ran = min(len(r["group_generations"]) for r in ok)
    if ran >= planned:
        return []
    # a budget's records say so; before 2026-11-27 they did not, but its looks raised the level (Pocock)
    budgeted = ok[0].get("budget_s") is not None or ok[0].get("verdict_level", 0.95) > 0.95
    why = "the run's time budget ran out before the next one" if budgeted else "see Status"
    said = f"Generations: {ran} of the {planned} planned ({why})"
    said += "; with fewer than 3, every pair stays `unresolved`" if ran < 3 else ""
    if not any(r.get("dispatch_floor_s") or r.get("dispatch_floor_error") for r in ok):
        said += "; no dispatch floor was timed (they come with a group's last planned generation)"
    return [said + ".", ""]


def pairs_note(group: Sequence[Record], fams: Mapping[tuple, Family]) -> list[str]:
    """How many of a workload's pairs the run settled, each pair judged alone (``cells.family_pairs``):
    separated, the same speed within 5%, or unresolved with why, and how wide the judged
    intervals were; one line per comparable group (device, machine) of the section."""
    out = []
    keys = dict.fromkeys(axes(r) for r in comparable(list(group)))
    found = [fams[k] for k in keys if k in fams]
    for fam in found:
        pairs = family_pairs(fam)
        where = f" on {device_label(fam.leader)}" if len(found) > 1 else ""
        out.append(f"Pairs{where}: {settled_text(pairs, fam.members)}.")
    return [*out, ""] if out else []


def settled_text(pairs: Sequence[PairVerdict], recs: Sequence[Record]) -> str:
    """``52 of 55 settled, each pair judged alone at 95% (40 separated, 12 the same speed within
    5%); 3 unresolved (<reason>: 3); median half-width 4.6% over the 55 judged``: the half-width
    of each judged interval relative to its ratio, median over the pairs the run could judge."""
    settled = [v for v in pairs if v.settled]
    same = sum(v.outcome == SAME for v in settled)
    text = (
        f"{len(settled)} of {len(pairs)} settled, each pair judged alone at {level_text(recs)} "
        f"({len(settled) - same} separated, {same} the same speed within {SETTLE_MARGIN:.0%})"
    )
    why = Counter(v.reason for v in pairs if not v.settled)
    if why:
        text += f"; {sum(why.values())} unresolved ({', '.join(f'{r}: {n}' for r, n in why.most_common())})"
    widths = sorted((v.high - v.low) / 2 / v.point for v in pairs if v.judged)
    if widths:
        text += f"; median half-width {widths[len(widths) // 2]:.1%} over the {len(widths)} judged"
    return text


def settled_total(fams: Mapping[tuple, Family]) -> list[str]:
    """The run's share of settled pairs over every workload (``pairs_note`` counts each)."""
    pairs = [v for fam in fams.values() for v in family_pairs(fam)]
    if not pairs:
        return []
    settled = sum(v.settled for v in pairs)
    levels = sorted({level_text(fam.members) for fam in fams.values()})
    return [
        f"Pairs settled (separated, or the same speed within {SETTLE_MARGIN:.0%}), each pair judged alone at "
        f"{' or '.join(levels)}: {settled} of {len(pairs)} ({settled / len(pairs):.1%}); each workload's "
        "section counts its own.",
        "",
    ]


def build(
    run_dirs: Path | list[Path], plot_dir: Path | None = None, raw: Mapping[Path, list[Record]] | None = None
) -> str:
    """The report's markdown; with ``plot_dir``, its PNG plots are written there and embedded.
    ``raw``: runs' records as already loaded."""
    m = model.load([run_dirs] if isinstance(run_dirs, Path) else list(run_dirs), raw)
    with m.judged():  # every pair judged once: a sentence reads the verdict its table printed
        return render(m, plot_dir)


def render(m: model.Model, plot_dir: Path | None = None) -> str:
    """The report's markdown from its model (``build``), every section in reading order."""
    recs, fams = m.recs, m.families
    counts = pd.Series([r["status"] for r in recs]).value_counts().to_dict() if recs else {}
    out = [
        f"# dlcompare report: run {m.title}",
        "",
        f"{len(recs)} cells: " + ", ".join(f"{counts.get(s, 0)} {s}" for s in records.STATUSES) + ".",
        "",
    ]
    out += settled_total(fams)
    colors = plots.palette(recs)
    out += _overview(m.grid, recs, plot_dir)
    said = summary.sentences(recs, fams)
    if said:
        out += ["## Summary", "", *(f"- {line}" for line in said), ""]
    out += findings.section(recs, fams)
    out += banner(recs)
    for (workload, key), group in m.sections.items():
        out += [table_title(group[0]), "", *generations_note(group), *pairs_note(group, fams)]
        out += parity.note(workload, m.parity)
        out += [workload_table(group, fams), ""]
        if plot_dir is not None:
            out += _plots(group, workload, key, plot_dir, colors)
    out += static_dynamic.section(m.sections)
    out += ops.section(recs, plot_dir)
    out += attention.section(recs)
    out += sweep_section(recs, plot_dir, colors)
    pipes = pipelines.section(recs, plot_dir, colors)
    out += pipes
    if not pipes or any(r.get("data", "resident") != "loader" for r in recs):
        out += input_pipeline(recs)
    out += hardware(recs, m.envs)
    out += memory(recs)
    out += failures(recs)
    out += run_time.section(m.processes, m.envs)
    settings = settings_table(recs)
    if settings:
        out += ["## Framework settings", "", settings, ""]
    machines = machines_table(recs)
    if machines:
        intro = "Cells are compared only with cells of the same machine (CPU, cores, GPUs, driver)."
        out += ["## Machines", "", intro, "", machines, ""]
    for name, env in m.envs.items():
        if env:
            heading = "## Environment" + (f": {name}" if len(m.envs) > 1 else "")
            out += [heading, "", env_table(env), ""]
    out += ["## Method", "", method(recs), ""]
    return "\n".join(out)


#: The overview picture's file name in the report's folder.
OVERVIEW_PNG = "overview.png"


def _overview(grid: overview.Grid | None, recs: Sequence[Record], plot_dir: Path | None) -> list[str]:
    """The picture (where plots are drawn) and the same grid as a compact table."""
    if grid is None:
        return []
    out = ["## Overview", ""]
    if plot_dir is not None:
        path = plots.overview(grid, plot_dir / OVERVIEW_PNG)
        out += [f"![overview: steady step time over the fastest of each column]({path.name})", ""]
    modes = any(r.get("data", "resident") != "resident" for r in recs)
    return [*out, overview.caption(grid, modes), "", overview.table(grid), ""]


def _plots(group: list[Record], workload: str, key: tuple, plot_dir: Path, colors: plots.Colors) -> list[str]:
    """Embedded plots of one workload table; only plots with data are drawn."""
    made = []
    name = slug(workload, *key)
    drawn = [
        ("steady step time", plots.step_times(group, workload, plot_dir / f"{name}-steps.png", colors), ""),
        ("first step vs steady", plots.compile_cost(group, workload, plot_dir / f"{name}-compile.png", colors), ""),
    ]
    if any(strategy(r) for r in group):
        path = plots.cumulative(group, workload, plot_dir / f"{name}-cumulative.png", cumulative_s, colors)
        note = (
            f"Left: each adapter's `exact` strategy. Right: each adapter's best strategy for a training run of "
            f"{plots.HORIZON:,} steps, the one with the least total time at {plots.HORIZON:,} steps from a cold "
            "start, compiles included (the tables' best strategy is the fastest steady step instead)."
        )
        drawn.append(("cumulative time from a cold start", path, note))
    for alt, path, note in drawn:
        if path is not None:
            made += [f"![{workload}: {alt}]({path.name})", "", *([note, ""] if note else [])]
    return made


def write(run_dir: Path, extra: Sequence[Path] = (), out_dir: Path | None = None) -> Path:
    """Write report.md, its plots and report.html (the same page, self-contained) for one run, or
    merge ``extra`` runs into it; merged reports go to ``out_dir``. A fidelity run
    (idiomatic-script records) also gets fidelity.md."""
    recs = records.load(run_dir / records.RESULTS)  # read once: every part of the report gets these
    if not extra and recs and all(export.is_export(r) for r in recs):
        return export.write(run_dir, out_dir, recs)  # an export run (python -m harness export) has its own report
    target = out_dir or run_dir
    target.mkdir(parents=True, exist_ok=True)
    path = target / "report.md"
    path.write_text(build([run_dir, *extra], plot_dir=target, raw={run_dir: recs}))
    html.write(path)
    if not extra and any(is_idiomatic(r) for r in recs):
        fidelity.write(run_dir, recs)
    return path
