"""Where a run's time went: its generations' wall time split into starting processes and taking
turns, per workload group and per adapter, read from every process's record (the model's
``processes``, harness.reporting.model).

A generation (harness.running.turns) starts its workers one at a time, each alone (import,
set-up, cold window: the record's ``ready_s``; in records without ``floor_after_turns``, a planned
dispatch floor's set-up too, and a floor whose ``dispatch_floor_timed_s`` is 0 was timed there),
then takes turns and times the floors (before the turns, in such records); its
wall time is its longest-lived worker's (``wall_s``, the first started lives through all of it).
So a generation's start-ups are the sum of its workers' ``ready_s`` (or, where its workers
started two at a time, ``starting_s``: its first start to its last ready) and the rest of its
wall time is floors, turns (warm-up and retaken turns included) and finishing. Cells that run
alone (no turns: idiomatic scripts, image loaders) count whole. The run's own start and close (the
doctor, device peaks, kernel floors, the report) are in no record: the table's totals are the
generations' alone, and a table below it reads the start and close from env.json's ``phases_s``.
A cluster's jobs run side by side on its nodes and record neither time: a cluster run has no such
section.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tabulate import tabulate

from harness.records import Record, round_of, setting_overrides
from harness.reporting.cells import strategy, what
from harness.reporting.formatting import DASH, sig
from harness.stats import generation_costs as costs


def _label(rec: Record) -> str:
    loop = strategy(rec)
    label = what((rec["workload"], None, tuple(sorted(setting_overrides(rec))), rec.get("precision", "fp32"), None))
    data = rec.get("data", "resident")
    return label + (f", {loop}" if loop else "") + (f", {data} data" if data != "resident" else "")


def _device(rec: Record) -> str:
    return str(rec.get("device") or rec.get("device_requested") or "")


def _minutes(seconds: float) -> str:
    return sig(seconds / 60)


def generations(processes: list[Record]) -> dict[str, dict[int, dict[str, float]]]:
    """Group label -> generation -> its ``wall`` and ``startup`` seconds, ``workers``, the seconds
    its workers spent preparing dispatch floors (``floors_in_start``, part of ``startup``) and how many warmed
    up beside another (``beside``), from the records of processes that took turns (``ready_s``);
    cells that ran alone are a generation of their own label's each, all of their wall time
    start-up and timing together (``startup`` 0)."""
    out: dict[str, dict[int, dict[str, float]]] = {}
    by_gen: dict[tuple[str, int], list[Record]] = {}
    # a setting on two devices is two groups, each with its own generations (harness.running.turns)
    several = len({_device(r) for r in processes}) > 1
    for r in processes:
        if r.get("wall_s") is None:
            continue  # skipped before it started
        label = _label(r) + (f" on {_device(r)}" if several else "")
        gen = out.setdefault(label, {}).setdefault(
            round_of(r), {"wall": 0.0, "startup": 0.0, "workers": 0, "floors_in_start": 0.0, "beside": 0}
        )
        gen["workers"] += 1
        by_gen.setdefault((label, round_of(r)), []).append(r)
        gen["beside"] += bool(r.get("warmed_beside"))
        if r.get("ready_s") is None:  # alone: its whole wall, one after another
            gen["wall"] += r["wall_s"]
            continue
        gen["wall"] = max(gen["wall"], r["wall_s"])
        gen["startup"] += r["ready_s"]
        if (r.get("starts_at_once") or 1) > 1 and r.get("starting_s") is not None:
            gen["side_by_side"] = max(gen.get("side_by_side", 0.0), r["starting_s"])
    for gens in out.values():
        for gen in gens.values():
            gen["startup"] = gen.pop("side_by_side", gen["startup"])
    for label, gens in out.items():  # a floor prepared in a worker's start (harness.running.turns)
        for k, gen in gens.items():
            gen["floors_in_start"] = costs.floors_in_start_s(
                [r for r in by_gen[label, k] if r.get("ready_s") is not None]
            )
    return out


#: The phases of a run's start (env.json's ``phases_s``, harness.session), in the order they run.
START = ("start-up and plan", "doctor", "kernel JIT warm-up", "device peaks", "kernel floors")


def own_phases(env: Mapping[str, Any], generations_s: float) -> list[str]:
    """A table of the run's own start and close (``phases_s``) and, where the run went through
    to its report in one process (``report_at_s``), its whole length against ``generations_s``;
    nothing for a run before phases were kept."""
    phases = env.get("phases_s") or {}
    if not phases:
        return []
    start = sum(phases.get(n, 0.0) for n in START)
    close = phases.get("device peaks again")
    rows = [[n, sig(phases[n]), DASH] for n in START if phases.get(n, 0.0) >= 0.05]
    rows.append(["the run's own start, before its first generation", sig(start), _minutes(start)])
    if close is not None:
        rows.append(["device peaks again: its close, before the report", sig(close), DASH])
    whole = env.get("report_at_s")
    if whole is not None:
        own = start + (close or 0.0)
        rows += [
            ["the generations above", DASH, _minutes(generations_s)],
            ["around the generations (workers ending, each next generation planned)", DASH,
             _minutes(max(whole - generations_s - own, 0.0))],
            ["the command's start to its report", DASH, _minutes(whole)],
        ]  # fmt: skip
    intro = "The run's own start and close, timed by the bench command (env.json's `phases_s`)" + (
        ", and its whole length:" if whole is not None else ":"
    )
    headers = ["part of the run", "seconds", "minutes"]
    return [intro, "", tabulate(rows, headers, tablefmt="github", disable_numparse=True), ""]


def section(processes: list[Record], envs: Mapping[str, Mapping[str, Any]] | None = None) -> list[str]:
    """``## Where the run's time went``, or nothing where no record says how long it took (runs
    before resident workers kept ``wall_s``). ``envs``: the runs' env.json by machine; a run of one
    adds its own start and close (``own_phases``)."""
    found = generations(processes)
    if not found:
        return []
    rows, total, starts = [], 0.0, 0.0
    for label, gens in found.items():
        wall = sum(g["wall"] for g in gens.values())
        startup = sum(g["startup"] for g in gens.values())
        first = gens.get(min(gens), {})
        later = [g["wall"] for k, g in gens.items() if k != min(gens)]
        total, starts = total + wall, starts + startup
        rows.append(
            [
                label,
                str(len(gens)),
                _minutes(wall),
                _minutes(startup),
                _minutes(wall - startup),
                _minutes(first.get("wall", 0.0)),
                _minutes(sum(later) / len(later)) if later else DASH,
            ]
        )
    rows.append(["all", "", _minutes(total), _minutes(starts), _minutes(total - starts), "", ""])
    runs = [e for e in (envs or {}).values() if e]
    own = own_phases(runs[0], total) if len(runs) == 1 else []
    headers = [
        "workload",
        "generations",
        "minutes",
        "starting processes",
        "turns and finishing",
        "generation 1",
        "each later one (mean)",
    ]
    # a floor timed inside its worker's start took no seconds after it (harness.records, schema 1)
    floors_after_start = any(r.get("dispatch_floor_timed_s") for r in processes)
    floors_after_turns = any(r.get("floor_after_turns") for r in processes)
    side_by_side = ""
    if any((r.get("starts_at_once") or 1) > 1 for r in processes):
        # gated workers (harness.running.resident) warm up one at a time, never beside another's import
        how = (
            "the two importing and setting up together, then warming up one after the other"
            + (
                " (or side by side, where both warm-ups use about one core)"
                if any(r.get("warmed_beside") for r in processes)
                else ""
            )
            + ", and the next two once both were ready"
            if any(r.get("gated") for r in processes)
            else "each next one as soon as one was ready"
        )
        side_by_side = (
            f"Later generations{'' if floors_after_start else ' that timed no floor'} started them two at a time, "
            f"{how} (their start counts from the first start to the last ready). "
        )
    out = [
        "## Where the run's time went",
        "",
        "Minutes of the run's generations (harness.running.turns): each starts its workers one at a time, alone "
        + (
            "(import, set-up, cold window), then they take turns, then each dispatch floor is set up and timed, one "
            "worker at a time while the others wait (counted with the turns). "
            if floors_after_turns
            else "(import, set-up, cold window, a dispatch floor's set-up where one is planned), then each floor is "
            "timed, one worker at a time (counted with the turns), then they take turns. "
            if floors_after_start
            else "(import, set-up, cold window, a dispatch floor where one is timed), then they take turns. "
        )
        + side_by_side
        + "The run's own start and close (doctor, device peaks, kernel floors, the report) are not counted here"
        + (", but in the table below it." if own else "."),
        "",
        tabulate(rows, headers, tablefmt="github", disable_numparse=True),
        "",
        *_starts(found, any((r.get("starts_at_once") or 1) > 1 for r in processes)),
        *own,
    ]
    return out + _per_adapter(processes)


def _starts(found: Mapping[str, Mapping[int, Mapping[str, float]]], two_at_once: bool) -> list[str]:
    """Each workload's later generations' starts against its generation 1's (a generation's start
    less the dispatch floors it prepared, which it says beside); nothing without a later one."""
    later = {label: gens for label, gens in found.items() if len(gens) > 1 and gens[min(gens)]["startup"] > 0}
    if not later:
        return []
    ks = sorted({k for gens in later.values() for k in gens if k != min(gens)})
    rows = []
    for label, gens in later.items():
        first = gens[min(gens)]["startup"]
        row = [label, sig(first)]
        for k in ks:
            g = gens.get(k)
            if g is None:
                row.append(DASH)
                continue
            share = f"{(g['startup'] - g['floors_in_start']) / first:.0%}"
            floors = (
                f", {sig(g['floors_in_start'])} of it preparing floors: {share} without"
                if g["floors_in_start"]
                else f", {share}"
            )
            row.append(f"{sig(g['startup'])}{floors}")
        rows.append(row)
    beside = sum(g["beside"] for gens in later.values() for g in gens.values())
    pairs = (
        f"; {beside} of their workers warmed up side by side with another, both warm-ups using about one core"
        if beside
        else ""
    )
    headers = ["workload", "generation 1's start, s", *[f"generation {k}'s, s and share" for k in ks]]
    return [
        "Each generation's start (its first worker started to its last one ready, in seconds) against "
        "generation 1's, whose workers compile cold, one at a time. Later generations start from the "
        f"compiler cache where the framework has one{', two workers at a time' if two_at_once else ''}{pairs}."
        + (
            " A generation that prepared dispatch floors (a second, tiny instance of each adapter, set up and "
            "compiled for the floor) says how long that took; its share leaves it out."
            if any(g["floors_in_start"] for gens in later.values() for g in gens.values())
            else ""
        ),
        "",
        tabulate(rows, headers, tablefmt="github", disable_numparse=True),
        "",
    ]


def _per_adapter(processes: list[Record]) -> list[str]:
    """Per adapter: its processes' start-ups, in generation 1 and after, and its own timed blocks."""
    adapters: dict[str, dict[str, float]] = {}
    for r in processes:
        if r.get("ready_s") is None:
            continue
        a = adapters.setdefault(r["adapter"], {"first": 0.0, "later": 0.0, "turns_s": 0.0, "processes": 0})
        a["first" if round_of(r) == 1 else "later"] += r["ready_s"]
        a["processes"] += 1
        steps = r.get("turn_block_steps") or 0
        a["turns_s"] += steps * sum(r.get("turn_block_s") or []) + sum(r.get("pipelined_blocks_s") or [])
    if not adapters:
        return []
    rows = [
        [name, str(int(a["processes"])), sig(a["first"]), sig(a["later"]), sig(a["turns_s"])]
        for name, a in sorted(adapters.items(), key=lambda kv: -(kv[1]["first"] + kv[1]["later"]))
    ]
    headers = [
        "adapter",
        "processes",
        "start-up s, generation 1",
        "start-up s, later generations",
        "its kept turns' blocks, s",
    ]
    return [
        "Per adapter, over every workload: the seconds its processes took to start (generation 1 compiles cold; "
        "later ones start from the compiler cache where the framework has one"
        + (
            "; one started beside another shared the CPU with it"
            if any((r.get("starts_at_once") or 1) > 1 for r in processes)
            else ""
        )
        + ") and the seconds of its kept turns' blocks (synced and pipelined), the part of the turns that is its own.",
        "",
        tabulate(rows, headers, tablefmt="github", disable_numparse=True),
        "",
    ]
