"""report.md of one run, or several merged: renders the report model (harness.reporting.model:
the records, rounds combined, and what is computed from them once) section by section;
report.html beside it is the same page rendered (harness.reporting.html).

The page opens with the answer: the overview (picture and table) and the summary sentences; the
tables, plots and sections that back them follow."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd

from harness import records
from harness.records import Record, is_idiomatic
from harness.reporting import (
    answer,
    attention,
    compare,
    export,
    fidelity,
    findings,
    html,
    model,
    ops,
    parity,
    pipelines,
    plots,
    run_time,
    static_dynamic,
)
from harness.reporting.breakeven import cumulative_s
from harness.reporting.cells import axes, comparable, family_pairs, strategy
from harness.reporting.formatting import device_label, sig, slug
from harness.reporting.hardware import hardware, memory
from harness.reporting.sections import banner, failures, input_pipeline, level_text, method, method_summary
from harness.reporting.sweeps import sweep_section
from harness.reporting.tables import env_table, machines_table, settings_table
from harness.reporting.workload_tables import table_title, workload_table
from harness.stats import generation_costs
from harness.stats.verdicts import SAME, SETTLE_MARGIN, Family, PairVerdict


def generations_note(group: Sequence[Record], *, going: bool = False, processes: Sequence[Record] = ()) -> list[str]:
    """A line where the workload's cells ran in fewer generations (fresh processes each) than the
    run planned (a time budget that ran out, or cells that failed in some): what its verdicts rest on,
    and, where the budget ran out, about how much more time the missing generations needed
    (harness.stats.generation_costs, from the run's ``processes``). ``going``: the run is still going (a
    provisional page), so its later generations are to come."""
    ok = [r for r in group if r["status"] == "ok" and r.get("group_generations")]
    if not ok:
        return []
    planned = max(int(r.get("rounds") or 1) for r in ok)
    ran = min(len(r["group_generations"]) for r in ok)
    if ran >= planned:
        return []
    # a budget's records say so (``budget_s``; None where the looks protocol kept no size: harness.records)
    budgeted = "budget_s" in ok[0]
    if going:
        why = "so far: the run is still going"
    else:
        why = "the run's time budget ran out before the next one" if budgeted else "see Status"
    said = f"Generations: {ran} of the {planned} planned ({why})"
    # the budget's own estimate, from the whole run: other groups' warm starts say what a warm start saves
    more_s = (
        generation_costs.missing_s(processes, planned, {r.get("cell_id") for r in ok})
        if budgeted and not going
        else 0.0
    )
    if more_s > 0:
        missing = generation_costs.generations_named(ran + 1, planned)
        minutes = math.ceil(more_s / 60)
        said += f"; about {minutes} more minute{'s' * (minutes != 1)} of budget would have run {missing}"
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
    """The whole report as one markdown text, its first page then its details page (``pages``);
    with ``plot_dir``, its PNG plots are written there and embedded. ``raw``: runs' records as already loaded."""
    first, details = pages(model.load([run_dirs] if isinstance(run_dirs, Path) else list(run_dirs), raw, plot_dir))
    return first + "\n" + details


def pages(m: model.Model) -> tuple[str, str]:
    """``report.md`` (the answer on its first screen, each workload's table, the Method in a
    paragraph) and ``details.md`` (everything else), each the blocks of ``SECTIONS`` in order."""
    blocks = [section(m) for section in SECTIONS]
    first = [f"# dlcompare report: run {m.title}", "", *(line for b in blocks for line in b.report)]
    details = [
        f"# dlcompare report: run {m.title}, details",
        "",
        f"The first page, with the answer: [report.md](report.md). Below: {DETAILS_CONTENTS}.",
        "",
        *(line for b in blocks for line in b.details),
    ]
    return "\n".join(first), "\n".join(details)


#: What the details page holds, as its first line says.
DETAILS_CONTENTS = (
    "what the run found per framework, every workload's full tables and plots, static against dynamic "
    "graphs, how close to the hardware, memory, where the run's time went, settings, machines, the "
    "environment and the full protocol"
)


def header(m: model.Model) -> model.Block:
    """The cell count, the run's settled share and the machine in one line each."""
    recs = m.recs
    counts = pd.Series([r["status"] for r in recs]).value_counts().to_dict() if recs else {}
    out = [f"> **Provisional**: {m.provisional}", ""] if m.provisional else []
    out += [f"{len(recs)} cells: " + ", ".join(f"{counts.get(s, 0)} {s}" for s in records.STATUSES) + ".", ""]
    out += settled_total(m.families)
    out += machine_line(m)
    return model.Block(out)


def machine_line(m: model.Model) -> list[str]:
    """Where the run ran, with its measured peaks and which library set its kernel floors: a time
    means something only next to how fast its machine is."""
    out = []
    for name, env in m.envs.items():
        if not env:
            continue
        text = f"Machine: {name}, {env.get('cpu_logical', '?')} logical CPUs"
        for device, peak in sorted((env.get("peaks") or {}).items()):
            if not isinstance(peak, dict) or peak.get("matmul_gflops") is None:  # a peak that failed: said in details
                continue
            found = peak.get("matmul_gflops_by")
            by = ", ".join(f"{lib} {sig(v)}" for lib, v in sorted(found.items())) if isinstance(found, dict) else ""
            text += f"; {device} float32 matmul peak {sig(peak['matmul_gflops'])} GFLOP/s" + (f" ({by})" if by else "")
            h2d = peak.get("h2d_gbs") or peak.get("h2d_pageable_gbs")
            if h2d:  # what placing a batch on the GPU can get (details: How close to the hardware)
                text += f", host to device {sig(h2d)} GB/s"
            left_out = answer.peak_left_out(m, found)
            if left_out:  # an older run's peak timed fewer libraries than its cells ran
                text += (
                    f", understated: this run's cells ran {' and '.join(left_out)} kernels that the peak did not "
                    "time, so its `% of peak` reads high"
                )
        kernel_floors = env.get("kernel_floors") or {}
        floors, skipped = kernel_floors.get("fastest_library") or {}, kernel_floors.get("left_out") or []
        for device, counts in sorted(floors.items()):
            libs = ", ".join(f"{lib} {n}" for lib, n in sorted(counts.items(), key=lambda kv: -kv[1]))
            text += f"; kernel floors on {device} from the fastest library per kernel ({libs} kernels)"
            if skipped:  # a test run's floors, timed by fewer libraries (harness.measuring.floors.LIBRARIES_ENV)
                text += f", timing no {' or '.join(skipped)} kernels, so a floor errs high where they are faster"
        load = env.get("load_at_start")
        if load:  # how busy the machine was before the run started anything
            text += f"; at the start other processes kept {load['other_cores']:.2f} cores busy"
        out += [text + ". Times measured on another machine are not comparable with these.", ""]
    named = [(name, env) for name, env in m.envs.items() if env]
    for name, env in named[1:]:  # a report over several runs: say where their machines differ
        found = compare.machine_match(named[0][1], env)
        if found.same is not True:
            what = "; ".join(found.differences) or "fingerprints incomplete: " + ", ".join(found.unknown)
            out += [
                f"Machines: {named[0][0]} and {name} are not one machine kind ({what}): "
                "their cells are never compared with each other.",
                "",
            ]
    return out


def failures_block(m: model.Model) -> model.Block:
    return model.Block([*banner(m.recs), *failures(m.recs)])


def findings_block(m: model.Model) -> model.Block:
    return model.Block(details=findings.section(m.recs, m.families))


def workloads_block(m: model.Model) -> model.Block:
    """Each workload: on the first page its counts and compact table with the step-time plot;
    on the details page its full tables and the other plots."""
    first: list[str] = []
    details: list[str] = []
    colors = plots.palette(m.recs)
    for (workload, key), group in m.sections.items():
        title = table_title(group[0])
        note = generations_note(group, going=bool(m.provisional), processes=m.processes)
        first += [title, "", *note, *pairs_note(group, m.families)]
        first += parity.note(workload, m.parity)
        first += [workload_table(group, m.families, compact=True), ""]
        details += [f"{title}: every column", "", workload_table(group, m.families), ""]
        if m.plot_dir is not None:
            drawn = _plots(group, workload, key, m.plot_dir, colors)
            first += drawn[0] if drawn else []
            details += [line for pic in drawn[1:] for line in pic]
    return model.Block(first, details)


def static_dynamic_block(m: model.Model) -> model.Block:
    return model.Block(details=static_dynamic.section(m.sections, m.calibration))


def more_sections_block(m: model.Model) -> model.Block:
    """Sections that appear where the run has their data: operators, attention, sweeps, pipelines."""
    out = [*ops.section(m.recs, m.plot_dir), *attention.section(m.recs)]
    out += sweep_section(m.recs, m.plot_dir, plots.palette(m.recs))
    pipes = pipelines.section(m.recs, m.plot_dir, plots.palette(m.recs))
    out += pipes
    if not pipes or any(r.get("data", "resident") != "loader" for r in m.recs):
        out += input_pipeline(m.recs)
    return model.Block(details=out)


def hardware_block(m: model.Model) -> model.Block:
    return model.Block(details=[*hardware(m.recs, m.envs), *memory(m.recs)])


def run_time_block(m: model.Model) -> model.Block:
    return model.Block(details=run_time.section(m.processes, m.envs))


def machine_block(m: model.Model) -> model.Block:
    """Framework settings, machines and environments (details page)."""
    out = []
    settings = settings_table(m.recs)
    if settings:
        out += ["## Framework settings", "", settings, ""]
    machines = machines_table(m.recs)
    if machines:
        intro = "Cells are compared only with cells of the same machine (CPU, cores, GPUs, driver)."
        out += ["## Machines", "", intro, "", machines, ""]
    for name, env in m.envs.items():
        if env:
            heading = "## Environment" + (f": {name}" if len(m.envs) > 1 else "")
            out += [heading, "", env_table(env), ""]
    return model.Block(details=out)


def method_block(m: model.Model) -> model.Block:
    """The Method in a paragraph on the first page, the full protocol on the details page."""
    full = ["## Method in full", "", method(m.recs, m.calibration), ""]
    return model.Block(["## Method", "", method_summary(m.recs), ""], full)


#: The report's sections in reading order, each ``render(model) -> Block`` (harness.reporting.model.Section).
#: A new section is one function (or module) and one line here.
SECTIONS: list[model.Section] = [
    header,
    answer.render,
    failures_block,
    workloads_block,
    findings_block,
    static_dynamic_block,
    more_sections_block,
    hardware_block,
    run_time_block,
    machine_block,
    method_block,
]


def _plots(group: list[Record], workload: str, key: tuple, plot_dir: Path, colors: plots.Colors) -> list[list[str]]:
    """Embedded plots of one workload table, each as its lines; only plots with data are drawn
    (the cumulative one only where the workload ran a loop strategy besides ``exact``)."""
    name = slug(workload, *key)
    drawn = [
        ("steady step time", plots.step_times(group, workload, plot_dir / f"{name}-steps.png", colors), ""),
        ("first step vs steady", plots.compile_cost(group, workload, plot_dir / f"{name}-compile.png", colors), ""),
    ]
    if {strategy(r) for r in group if strategy(r)} - {"exact"}:
        path = plots.cumulative(group, workload, plot_dir / f"{name}-cumulative.png", cumulative_s, colors)
        note = (
            f"Left: each adapter's `exact` strategy. Right: each adapter's best strategy for a training run of "
            f"{plots.HORIZON:,} steps, the one with the least total time at {plots.HORIZON:,} steps from a cold "
            "start, compiles included (the tables' best strategy is the fastest steady step instead)."
        )
        drawn.append(("cumulative time from a cold start", path, note))
    return [
        [f"![{workload}: {alt}]({path.name})", "", *([note, ""] if note else [])]
        for alt, path, note in drawn
        if path is not None
    ]


def write(
    run_dir: Path,
    extra: Sequence[Path] = (),
    out_dir: Path | None = None,
    calibration: Path | None = None,
    provisional: str | None = None,
    rank_under_load: bool = False,
) -> Path:
    """Write report.md, its plots and report.html (the same page, self-contained) for one run, or
    merge ``extra`` runs into it; merged reports go to ``out_dir``. A fidelity run
    (idiomatic-script records) also gets fidelity.md. ``rank_under_load``: rank contended cells,
    their load stated, as a run's ``--rank-under-load`` asks (harness.reporting.model.load_runs)."""
    recs = records.load(run_dir / records.RESULTS)  # read once: every part of the report gets these
    if not extra and recs and all(export.is_export(r) for r in recs):
        return export.write(run_dir, out_dir, recs)  # an export run (python -m harness export) has its own report
    target = out_dir or run_dir
    target.mkdir(parents=True, exist_ok=True)
    path = target / "report.md"
    m = model.load([run_dir, *extra], {run_dir: recs}, None if provisional else target, calibration, rank_under_load)
    m.provisional = provisional
    first, details = pages(m)
    path.write_text(first)
    (target / answer.DETAILS).write_text(details)
    html.write(path)
    html.write(target / answer.DETAILS)
    if not extra and any(is_idiomatic(r) for r in recs):
        fidelity.write(run_dir, recs)
    return path
