"""The report's first screen: what a reader came for, in one table and a few lines.

Per workload, the fastest adapter with its lead and interval (named only where it is separated
from every rival by at least the same-speed margin and its physics check holds), else the
adapters the run could not tell apart at the top; what compiling costs each framework against
its own dynamic mode (one baseline, break-evens as a range); what a static graph buys on a
variable-length loop where the run has loop strategies; memory where it differs by more than
``MEMORY_SPREAD``; CPU against GPU, or plainly that the run has no GPU cells. Every ratio is the
one its workload's table prints (the pair's verdict); the rest of the report is linked.
"""

from __future__ import annotations

from collections.abc import Sequence

from harness.records import Record
from harness.reporting import overview, plots, summary
from harness.reporting.cells import load_span, name, overlap, steal_said, strategy, top, under_load, what
from harness.reporting.crossover import crossover_lines
from harness.reporting.formatting import sig
from harness.reporting.hardware import physics_violations
from harness.reporting.model import Block, Model
from harness.reporting.static_dynamic import KERNEL_LIBRARIES
from harness.stats.verdicts import SAME, SAME_BAND, SETTLE_MARGIN, SLOWER, Family

#: Peak host memory of the adapters of one workload differing by more than this is worth a line.
MEMORY_SPREAD = 1.5
#: More workloads and settings than this (a sweep's values) get a line each only where a fastest is named.
MAX_WORKLOAD_LINES = 6
#: The details page beside report.md (harness.reporting.report).
DETAILS = "details.md"
#: The overview picture's file name in the report's folder.
OVERVIEW_PNG = "overview.png"


def _ms(rec: Record) -> str:
    return f"{sig(rec['median_s'] * 1e3)} ms/step"


def _names(recs: Sequence[Record]) -> str:
    items = [name(r) for r in recs]
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def peak_left_out(m: Model, found: object) -> list[str]:
    """The kernel libraries this run's cells ran that a peak's ``matmul_gflops_by`` (``found``) did
    not time: an older run's peak, understated where those libraries are faster."""
    if not isinstance(found, dict):
        return []
    ran = {lib for r in m.recs for lib in KERNEL_LIBRARIES if lib in (r.get("versions") or {})}
    return sorted(ran - set(found))


def understated(m: Model) -> bool:
    """Whether any device's peak of the run left out a library its cells ran (``peak_left_out``)."""
    peaks = [p for env in m.envs.values() if env for p in (env.get("peaks") or {}).values() if isinstance(p, dict)]
    return any(peak_left_out(m, p.get("matmul_gflops_by")) for p in peaks)


def physics_failed(m: Model) -> set[int]:
    """Ids of the cells whose physics check failed (more FLOP/s claimed than the measured peak)."""
    env = next(iter(m.envs.values()), {}) or {}
    bad = set()
    for r in m.recs:
        if physics_violations([r], env):
            bad.add(id(r))
    return bad


def where_of(key: tuple, fam: Family, devices: int = 1) -> str:
    """``mlp``, ``mlp on cuda`` (a run on several devices), ``mlp on Xeon A, 64 cores: cpu`` (a
    report over several machines): what a workload line is about."""
    lead = fam.leader
    if lead.get("machine_label"):
        return f"{what(key)} on {lead['machine_label']}: {key[1]}"
    return what(key) + (f" on {key[1]}" if devices > 1 else "")


def load_said(fam: Family) -> str:
    """Where a family ranks cells that ran beside other CPU load (``--rank-under-load``): how many
    and how busy the machine was, said beside the verdict; empty otherwise."""
    loaded = [r for r in fam.members if under_load(r)]
    if not loaded:
        return ""
    return (
        f" Ranked under load: {len(loaded)} of its {len(fam.members)} cells ran beside {load_span(loaded)} other "
        f"busy cores{steal_said(loaded)} (`under load`)."
    )


def workload_line(key: tuple, fam: Family, failed: set[int], devices: int = 1, low_peak: bool = False) -> str:
    """One workload's answer: its fastest (with why it is or is not claimed) and the adapters at its
    top, and the load its cells ran beside where the run ranks under load (``load_said``)."""
    return _verdict_line(key, fam, failed, devices, low_peak) + load_said(fam)


def _verdict_line(key: tuple, fam: Family, failed: set[int], devices: int, low_peak: bool) -> str:
    lead, where = fam.leader, where_of(key, fam, devices)
    if fam.fastest and id(lead) not in failed:
        second, v = fam.rivals[0]
        return (
            f"**{where}**: {name(lead)} is the fastest at {_ms(lead)}, separated from every other adapter; "
            f"the nearest, {name(second)}, takes {v.point:.2f}x [{v.low:.2f}, {v.high:.2f}] as long."
        )
    text = f"**{where}**: {name(lead)} leads at {_ms(lead)}"
    if id(lead) in failed or not fam.claimable:
        against = " against a peak that did not time every library the cells ran (above)" if low_peak else ""
        return (
            text
            + f", but its physics check failed{against} (details: How close to the hardware): no fastest is claimed."
        )
    if fam.rivals and all(v.outcome == SLOWER for _, v in fam.rivals):
        second, v = fam.rivals[0]
        return (
            f"{text}; {name(second)} is {v.point:.2f}x [{v.low:.2f}, {v.high:.2f}] behind, a lead under the "
            f"{SETTLE_MARGIN:.0%} a report claims, so no fastest is named."
        )
    word, cells = top(fam)
    rest = [r for r in cells if r is not lead]
    if word == SAME:
        return f"{text}; the same speed as {_names(rest)} (every ratio within {SAME_BAND}): no single fastest."
    return f"{text}; unresolved against {_names(rest)} (the table gives each interval): no fastest is named."


def memory_lines(recs: Sequence[Record]) -> list[str]:
    """Per workload (and device, where the run has several) where the adapters' peak host memory
    differs by more than MEMORY_SPREAD: each adapter at its largest over the workload's settings
    (a sweep's widths), so one adapter is never set against itself."""
    out = []
    ok = [
        r
        for r in recs
        if r["status"] == "ok" and r.get("host_peak_rss_bytes") and r.get("data", "resident") == "resident"
    ]
    several = len({r.get("device") for r in ok}) > 1
    largest: dict[tuple[str, str], dict[str, Record]] = {}
    for r in ok:
        where = (r["workload"], f" on {r.get('device')}" if several else "")
        mine = largest.setdefault(where, {})
        best = mine.get(name(r))
        if best is None or r["host_peak_rss_bytes"] > best["host_peak_rss_bytes"]:
            mine[name(r)] = r
    for (workload, device), by_adapter in sorted(largest.items()):
        cells = list(by_adapter.values())
        low = min(cells, key=lambda r: r["host_peak_rss_bytes"])
        high = max(cells, key=lambda r: r["host_peak_rss_bytes"])
        if high["host_peak_rss_bytes"] / low["host_peak_rss_bytes"] > MEMORY_SPREAD:
            out.append(
                f"{workload}{device}: {name(high)} {sig(high['host_peak_rss_bytes'] / 2**20)} MiB against "
                f"{name(low)} {sig(low['host_peak_rss_bytes'] / 2**20)} MiB"
            )
    return out


def pipelined_lines(recs: Sequence[Record]) -> list[str]:
    """On a GPU, which step the verdicts rank: the synced one (each step waits for the device),
    while a training loop that never syncs gets the pipelined one, with the range of their ratio."""
    gpu = [r for r in recs if r["status"] == "ok" and r.get("device") == "cuda" and r.get("pipelined_s")]
    if not gpu:
        return []
    ratios = sorted(overlap(r) for r in gpu)
    return [
        "On the GPU the verdicts rank the synced step (each step waits for the device: launch and sync latency "
        "included); a training loop that never syncs gets the pipelined step, the tables' `pipelined` column: "
        f"{ratios[0]:.2f}x to {ratios[-1]:.2f}x of the synced time over the run's {len(gpu)} GPU cells."
    ]


def strategy_lines(m: Model) -> list[str]:
    """Where the run has loop strategies besides ``exact``: each static adapter's best strategy
    against its own ``exact`` (the pair's verdict, between groups)."""
    out = []
    for (workload, _), group in m.sections.items():
        ok = [r for r in group if r["status"] == "ok" and strategy(r)]
        if {strategy(r) for r in ok} <= {"exact"}:
            continue
        exact = {r["adapter"]: r for r in ok if strategy(r) == "exact"}
        for adapter, base in sorted(exact.items()):
            others = [r for r in ok if r["adapter"] == adapter and r is not base]
            if not others or base.get("graph") != "static":
                continue
            best = min(others, key=lambda r: r["median_s"])
            v = m.pair(base, best)
            out.append(
                f"{workload}, {adapter}: `{strategy(best)}` {v.point:.2f}x [{v.low:.2f}, {v.high:.2f}] of `exact`'s "
                f"step ({v.outcome if not v.separated else ('faster' if v.point < 1 else 'slower')})"
            )
    return out


def render(m: Model) -> Block:
    """``## The answer``: the overview table and the lines above (module docstring)."""
    grid = m.grid
    out = ["## The answer", ""]
    if grid is not None:
        if m.plot_dir is not None:
            path = plots.overview(grid, m.plot_dir / OVERVIEW_PNG)
            out += [f"![overview: steady step time over the fastest of each column]({path.name})", ""]
        modes = any(r.get("data", "resident") != "resident" for r in m.recs)
        out += [
            overview.caption(grid, modes),
            "",
            overview.table(grid),
            "",
        ]
    failed = physics_failed(m)
    devices = len({key[1] for key in m.families})
    ordered = sorted(m.families.items(), key=lambda kv: str(kv[0]))
    named = [(k, f) for k, f in ordered if f.fastest and id(f.leader) not in failed]
    if len(ordered) <= MAX_WORKLOAD_LINES or len(named) == len(ordered):
        lines = [workload_line(key, fam, failed, devices, understated(m)) for key, fam in ordered]
    else:  # a sweep's many settings: the ones with an answer, and how many have none
        lines = [workload_line(key, fam, failed, devices, understated(m)) for key, fam in named]
        lines.append(
            f"{len(ordered) - len(named)} {'more ' if named else ''}of the run's {len(ordered)} workloads and "
            "settings have no fastest named (unresolved or within 5% at the top, or a failed physics check): each "
            "one's table below says why."
        )
    frameworks = summary.framework_sentences(m.recs)
    if frameworks:
        lines.append(
            "What compiling buys, each framework's static mode against its own dynamic one (the baseline), "
            "break-even in training steps from a cold start: " + " ".join(frameworks)
        )
    loops = strategy_lines(m)
    if loops:
        lines.append(
            "Static graphs on the variable-length loop, the best strategy against `exact`: " + "; ".join(loops)
        )
    mem = memory_lines(m.recs)
    if mem:
        lines.append(
            "Peak host memory differs by half again or more (framework imports included; details: Memory): "
            + "; ".join(mem)
        )
    crossing = crossover_lines(m.recs)
    if crossing:
        lines.append("CPU against GPU along the sweep, where the GPU starts to win:")
        lines += [f"  - {c}" for c in crossing]
    cpu_gpu = summary.device_sentences([r for r in m.recs if not r.get("sweep")])
    lines += cpu_gpu
    if not cpu_gpu and not crossing and not any(r.get("device") == "cuda" for r in m.recs):
        lines.append(
            "CPU against GPU: not measured, this run has no GPU cells (`make crossover` on a GPU machine: "
            "where the GPU starts to win)."
        )
    lines += pipelined_lines(m.recs)
    lines += summary.contention_sentences(m.recs)
    out += [*(line if line.startswith("  - ") else f"- {line}" for line in lines), ""]  # nested: as given
    out += [
        f"Every cell's detail, the floors, the run's time, the settings and the full protocol: [{DETAILS}]({DETAILS}).",
        "",
    ]
    return Block(out)
