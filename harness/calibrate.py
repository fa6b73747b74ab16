"""A/A calibration: how often the verdict rules call identical code different, and how often they see a
known slow-down, measured on this machine with the run protocol itself.

``python -m harness calibrate`` (``make calibrate``) runs one adapter's cell again and again
(``--repeats``), each time as a fresh small run of the normal protocol (resident workers taking
turns, ``--rounds`` generations) beside twins of itself: identical twins (the same adapter under
another name, ``~twin<i>``), twins slowed by a known share of their step (a busy-wait inside the
timed region, ``~slow10``, ``~slow25``; harness.running.resident.slowed) and twins slowed by a fixed
wait a step (``50ms``: ``~wait50``; slow cells, judged against their like). Every pair of cells of a
repeat whose true ratio is known is judged as a report judges it (harness.stats.verdicts).
``calibration-<K>-generations.md`` (``--generations K`` judges the first K of each repeat again;
``--looks`` judges each repeat where a budgeted bench of the looks protocol, which gave further
generations to unsettled groups, stopped adding them, at Pocock's level for its looks,
``calibration-3-to-K-generations``) gives, per true effect, how many pairs were called different
(false differences for 0%, power otherwise), with a Wilson interval, against the targets: at most
5% false, at least 80% power at 10%, 99% at 25%. A repeat in which a cell is flagged ``contended``
(other load through its kept turns) is judged apart, as a report does not rank such a cell, unless
``--rank-under-load`` judges it with the others, as a report of a bench run so ranks it. The
ranking under load is calibrated beside a steady load: ``--beside-load N`` keeps N cores busy with
spinning processes through every repeat (harness.measuring.contention.busy_cores). The records of
every repeat are kept, so the table can be recomputed.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import math
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tabulate import tabulate

from adapters import discover
from harness import env, records
from harness.measuring import contention, timing
from harness.records import Record
from harness.reporting.calibration_note import threads_words
from harness.running import budget, executors
from harness.running.plan import PlanError, parse_twins, plan, twins
from harness.running.progress import MatrixProgress
from harness.running.rounds import Run
from harness.stats import inference, verdicts
from harness.stats.inference import wilson

#: Targets from the project's issue: false differences at most, power at least.
TARGETS = {0.0: ("false differences", "<= 5%"), 0.1: ("detected", ">= 80%"), 0.25: ("detected", ">= 99%")}


def effect(rec: Record) -> float:
    """A twin's slow-down as a share of its step (0: identical code, or slowed by a fixed wait)."""
    return float(rec.get("slowdown") or 0.0)


def treatment(rec: Record) -> tuple[float, float]:
    """What slows a cell: its share of a step and its fixed wait per step; (0, 0) for unslowed code."""
    return effect(rec), float(rec.get("wait_s") or 0.0)


def judge(recs: Sequence[Record], level: float) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One repeat judged at ``level``: every pair of cells of one adapter whose true effects differ
    by 0 or a known factor (one side identical code), with its true ratio, the estimate, the
    interval and the verdict; and the repeat as one group (``verdicts.family`` over all its cells,
    as a report judges a workload): whether any identical pair was separated (pair by pair), and
    whether a cell identical to the leader was marked different from it (family-wise)."""
    cells = ok_cells(recs)
    out = [p for a, b in itertools.combinations(cells, 2) if (p := known_pair(a, b, level))]
    group: dict[str, Any] = {"judged": bool(_identical(out)), "any_pair_false": any_false(out)}
    if len(cells) >= 2:
        fam = verdicts.family(cells, level)
        lead = fam.leader

        def same(r: Record) -> bool:
            unslowed = not any(treatment(r)) and not any(treatment(lead))
            return records.base_adapter(r) == records.base_adapter(lead) and unslowed

        known = [v for r, v in fam.rivals if same(r) and v.judged]
        group.update(leader=lead["adapter"], leader_twins=len(known), family_false=any(v.separated for v in known))
    return out, group


#: The level ``--looks`` judges at unless told: Pocock's for the two looks (generations 3 and 4)
#: a budgeted bench of the looks protocol took (harness.running.budget.VERDICT_LEVEL says why no more).
LOOKS_LEVEL = inference.pocock_level(2)


def stopping_look(recs: Sequence[Record], first: int, last: int, level: float) -> int:
    """The generation after which a budgeted bench of the looks protocol stopped looking at this
    repeat's group: the first of ``first``..``last`` where none of its verdicts is unsettled
    (``unsettled_groups``), else ``last`` (that budget added a generation to an unsettled group
    while one fitted, up to 4 generations)."""
    for k in range(first, last):
        if not unsettled_groups([r for r in recs if records.round_of(r) <= k], level):
            return k
    return last


def unsettled_groups(recs: Sequence[Record], level: float) -> dict[str, int]:
    """Group -> how many of its pairs of ``ok`` cells are not settled (harness.stats.verdicts.settled),
    and how many of its cells are separated from the leader alone but not family-wise (``family``):
    the test by which a budget of the looks protocol gave a group another generation."""
    by_group: dict[str, list[Record]] = {}
    for rec in ok_cells(recs):
        if rec.get("group"):
            by_group.setdefault(rec["group"], []).append(rec)
    counts = {}
    for group, cells in by_group.items():
        n = sum(not verdicts.settled(a, b, level) for i, a in enumerate(cells) for b in cells[i + 1 :])
        if len(cells) >= 2:  # and the reports' family-wise marks: separated alone, not against the leader
            n += sum(v.reason == verdicts.FAMILY for _, v in verdicts.family(cells, level).rivals)
        if n:
            counts[group] = n
    return counts


def ok_cells(recs: Sequence[Record]) -> list[Record]:
    """A repeat's cells as a report combines them (harness.stats.cells), the ``ok`` ones."""
    from harness.stats import cells as stats_cells

    return [r for r in stats_cells.combine_all(recs) if r["status"] == "ok"]


def known_pair(a: Record, b: Record, level: float) -> dict[str, Any] | None:
    """Two cells of one adapter whose true ratio is known judged as a report judges them
    (harness.stats.verdicts.pair_verdict: paired by generation within a group, Welch's t across
    groups), the slowed one as ``b``: one side identical code and the other slowed by a share, or
    two twins slowed alike in one group (``--twins`` naming a share or a wait twice: a ratio of 1,
    ``effect`` 0, so slow cells are judged against each other); None for two adapters, twins slowed
    unalike, two slowed twins of two runs (as every committed page judges them), or a twin slowed
    by a fixed wait against anything but its like (its true ratio depends on the step's time)."""
    from harness.stats import verdicts

    if records.base_adapter(a) != records.base_adapter(b):
        return None
    both = any(treatment(a)) and any(treatment(b))
    if both and (treatment(a) != treatment(b) or not verdicts.same_group(a, b)):
        return None
    base, slow = (b, a) if any(treatment(a)) and not any(treatment(b)) else (a, b)
    if treatment(slow)[1] and not any(treatment(base)):
        return None
    true = 0.0 if any(treatment(base)) else effect(slow)
    v = verdicts.pair_verdict(base, slow, level)
    return {
        "a": base["adapter"],
        "b": slow["adapter"],
        "effect": true,
        "ratio": v.point,
        "low": v.low,
        "high": v.high,
        "outcome": v.outcome,
        "different": v.separated,
        # The test alone, before "same speed within 5%" takes precedence (verdicts.outcome_of).
        "excludes_one": v.low > 1 or v.high < 1,
        "right_way": v.outcome == "slower" if true else None,
        **({"slow": rule} if (rule := _slow_rule(base) or _slow_rule(slow)) else {}),
    }


def _slow_rule(rec: Record) -> dict[str, float] | None:
    """The rule a slow cell's turns followed (harness.running.turns.slow_rule), None for another."""
    return rec.get("slow_rule") if rec.get("sat_out_turns") else None


def _identical(pairs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pairs if not p["effect"] and math.isfinite(p["high"])]  # judged identical pairs


def any_false(pairs: list[dict[str, Any]]) -> bool:
    """Whether any judged pair of identical cells was separated."""
    return any(p["different"] for p in _identical(pairs))


def between(
    repeats: Sequence[tuple[int, Sequence[Record]]], level: float
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Identical code in two groups: every cell of repeat 1 against every cell of its adapter in
    repeat 2, then 3 against 4, ... (disjoint pairs of consecutive repeats: two fresh runs minutes
    apart, as two groups of one run are), one side identical, judged as a report judges cells of
    different groups (Welch's t on their process levels, nothing pairing them: a strategy against
    its exact, a sweep across groups). The pairs, each with its ``repeats``, and per pair of
    repeats whether any identical pair was separated."""
    pairs: list[dict[str, Any]] = []
    groups: list[dict[str, Any]] = []
    for (i, first), (j, second) in zip(repeats[::2], repeats[1::2], strict=False):
        cells = itertools.product(ok_cells(first), ok_cells(second))
        mine = [{**p, "repeats": [i, j]} for a, b in cells if (p := known_pair(a, b, level))]
        pairs += mine
        groups.append({"repeats": [i, j], "judged": bool(_identical(mine)), "any_pair_false": any_false(mine)})
    return pairs, groups


def contended(recs: Sequence[Record]) -> bool:
    """Whether a repeat had a cell its run flags ``contended`` (other load through its kept turns, the
    cap on retakes reached): a report does not rank such a cell, so its pairs are judged apart."""
    return any(r.get("contended") for r in recs if r["status"] == "ok")


def turn_counts(recs: Sequence[Record]) -> dict[str, int]:
    """A repeat's turns over its cells and generations: kept, retaken for contention, kept under it."""
    ok = [r for r in recs if r["status"] == "ok"]
    return {
        "kept": sum(len(r.get("turn_ids") or []) for r in ok),
        "retaken": sum(r.get("turns_dropped") or 0 for r in ok),
        "contended": sum(r.get("turns_contended") or 0 for r in ok),
    }


def group_table(groups: list[dict[str, Any]]) -> str:
    """Per repeat (a group of cells as a report's workload): false separations of identical cells."""
    n = sum(g.get("judged", True) for g in groups)
    pair_false = sum(g["any_pair_false"] for g in groups)
    with_twin = [g for g in groups if g.get("leader_twins")]
    fam_false = sum(g["family_false"] for g in with_twin)
    rows = []
    for what, hits, total, target in (
        ("any identical pair separated (pair by pair)", pair_false, n, "-"),
        ("a cell identical to the leader marked different (family-wise)", fam_false, len(with_twin), "<= 5%"),
    ):
        low, high = wilson(hits, total)
        rate = f"{100 * hits / max(total, 1):.1f}% [{100 * low:.1f}, {100 * high:.1f}]"
        rows.append([what, total, hits, rate, target])
    return tabulate(rows, ["groups (repeats)", "judged", "with it", "rate [95% Wilson]", "target"], tablefmt="github")


def across_table(groups: list[dict[str, Any]]) -> str:
    """Per pair of repeats (``between``): whether any identical pair across them was separated."""
    judged = [g for g in groups if g["judged"]]
    hits = sum(g["any_pair_false"] for g in judged)
    low, high = wilson(hits, len(judged))
    rate = f"{100 * hits / max(len(judged), 1):.1f}% [{100 * low:.1f}, {100 * high:.1f}]"
    row = ["any identical pair separated across the two runs", len(judged), hits, rate]
    return tabulate([row], ["pairs of repeats", "judged", "with it", "rate [95% Wilson]"], tablefmt="github")


def table(pairs: list[dict[str, Any]]) -> str:
    rows = []
    for f in sorted({p["effect"] for p in pairs}):
        mine = [p for p in pairs if p["effect"] == f]
        judged = [p for p in mine if math.isfinite(p["high"])]
        hits = sum(p["right_way"] if f else p["different"] for p in judged)
        low, high = wilson(hits, len(judged))
        what, target = TARGETS.get(f, ("detected", "-"))
        widths = sorted((p["high"] - p["low"]) / 2 for p in judged)
        ratios = sorted(p["ratio"] for p in judged)
        excluding = sum(bool(p.get("excludes_one")) for p in judged)
        rows.append(
            [
                f"{100 * f:g}%",
                len(mine),
                len(judged),
                f"{hits} {what}",
                f"{100 * hits / max(len(judged), 1):.1f}% [{100 * low:.1f}, {100 * high:.1f}]",
                target,
                "-" if f else f"{excluding} ({100 * excluding / max(len(judged), 1):.1f}%)",
                f"{100 * widths[len(widths) // 2]:.1f}%" if widths else "-",
                f"{ratios[len(ratios) // 2]:.3f}" if ratios else "-",
            ]
        )
    headers = [
        "true slow-down",
        "pairs",
        "judged",
        "called",
        "rate [95% Wilson]",
        "target",
        "interval excludes 1",
        "median half-width",
        "median ratio measured",
    ]
    return tabulate(rows, headers, tablefmt="github")


def _strict(pairs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**p, "high": None} if not math.isfinite(p["high"]) else p for p in pairs]  # strict JSON


def write(
    out: Path,
    pairs: list[dict[str, Any]],
    groups: list[dict[str, Any]],
    meta: dict[str, Any],
    busy: Sequence[dict[str, Any]] = (),
    across: tuple[list[dict[str, Any]], list[dict[str, Any]]] = ([], []),
) -> Path:
    """``calibration-<K>-generations.md`` and ``.json``: the tables from the uncontended repeats,
    then, where there are two or more, their cells across repeats (``across``, from ``between``),
    then the contended ones (``busy``) apart, with their turn counts."""
    first, last = meta.get("first_look", meta["rounds"]), meta["rounds"]
    span = f"{first}-to-{last}" if first < last else f"{last}"
    name = f"calibration-{span}-generations"
    data = {
        "meta": meta,
        "pairs": _strict(pairs),
        "groups": groups,
        "contended": [{**b, "pairs": _strict(b["pairs"])} for b in busy],
        **({"between": {"pairs": _strict(across[0]), "groups": across[1]}} if across[1] else {}),
    }
    (out / f"{name}.json").write_text(json.dumps(data, indent=1, allow_nan=False) + "\n")
    lines = [
        "# Calibration: identical twins and known slow-downs",
        "",
        f"{meta['adapter']} on `{meta['workload']}` ({meta['device']}"
        + threads_words(meta.get("cell_threads"))
        + f"), {meta['repeats']} repeats"
        + (f" (and {len(busy)} under contention, judged apart below)" if busy else "")
        + ", each a fresh run "
        f"of the bench protocol with {last} generations (fresh processes per cell) taking turns; in each "
        f"repeat every adapter's cell runs beside twins of itself: {meta['twins']}, all of them in one group. "
        + (_looks(groups, first, last) if first < last else "")
        + f"Judged at {100 * meta['level']:.4g}%. Machine: {meta['machine']}. "
        f"Took {meta['wall_min']:.0f} minutes. Command: `{meta['command']}`." + _load_words(meta),
        "",
        "Every pair of one repeat whose true ratio is known (identical code, one side slowed by a "
        "busy-wait of a known share of its step inside the timed region, or two twins slowed alike: by "
        "one share, or by one fixed wait a step, `50ms`, whose ratio to anything else is not known) is "
        "judged by the verdict rules "
        "of the reports (harness.stats.verdicts, at the level a report uses). Pairs of twins in one "
        "repeat share that repeat's machine state, so they are not independent: the Wilson interval "
        "counts them as if they were and is too narrow by about the square root of the pairs per repeat. "
        "A false difference is what a report would print, `faster` or `slower`: the interval excludes 1 "
        "and reaches past the same-speed band [0.952, 1.05] (wholly within it, a report says `same speed`); "
        "the column `interval excludes 1` counts identical pairs whose interval excludes 1 at all, the test alone.",
        "",
        table(pairs),
        "",
        "A slowed twin counts as detected only when called slower than its base (the right way). Its "
        "busy-wait adds the share it names to each step's time, yet such twins have measured slower than "
        "that share: the median ratio its pairs measured (the last column) is the effect the power "
        "was measured at.",
        "",
        *_slow_lines(pairs),
        "Each repeat as one group, judged as a report judges a workload (Holm over all its pairs; "
        "the leader is its fastest cell): how often an identical cell is called different.",
        "",
        group_table(groups),
        "",
    ]
    if across[1]:
        lines += [
            "## Across groups: identical code in two fresh runs (Welch's t)",
            "",
            "A report judges two cells of different groups (a strategy against its exact, a sweep across "
            "groups) by Welch's t on their process levels, as nothing pairs their generations. Here every "
            "cell of repeat 1 is judged so against every cell of its adapter in repeat 2, then 3 against 4, "
            "and so on: two fresh runs minutes apart, as two groups of one run are. The pairs of one pair "
            f"of repeats share its two machine states ({len(across[1])} pairs of repeats): the Wilson "
            "interval is too narrow, as above.",
            "",
            table(across[0]),
            "",
            across_table(across[1]),
            "",
        ]
    if busy:
        busy_pairs = [{**p, "repeat": b["repeat"]} for b in busy for p in b["pairs"]]
        counts = "; ".join(
            f"repeat {b['repeat']}: {b['turns']['contended']} of {b['turns']['kept']} kept turns under contention, "
            f"{b['turns']['retaken']} retaken"
            for b in busy
        )
        lines += [
            f"## Repeats under contention ({len(busy)}, judged apart)",
            "",
            "Other work loaded the machine through these repeats past the cap on retaken turns, so their "
            "cells are flagged `contended`, which a report does not rank; they are not in the tables above. "
            f"{counts}.",
            "",
            table(busy_pairs),
            "",
            group_table([{**b["group"], "repeat": b["repeat"]} for b in busy]),
            "",
        ]
    path = out / f"{name}.md"
    path.write_text("\n".join(lines))
    return path


def _load_words(meta: dict[str, Any]) -> str:
    """What loaded the machine through the repeats (``_load_meta``), as the page's first paragraph ends."""
    said = ""
    if meta.get("beside_load"):
        n = meta["beside_load"]
        said += (
            f" Beside a steady load: {n} spinning process{'es' * (n > 1)} kept as many cores busy through every repeat."
        )
    if meta.get("rank_under_load"):
        said += (
            f" Repeats with contended cells are judged with the others, as a report of a bench run with "
            f"`--rank-under-load` ranks them: {meta['loaded_repeats']} of the {meta['repeats']} repeats had such cells."
        )
    if meta.get("other_cores"):
        low, high = meta["other_cores"]
        said += f" Other processes kept {low:.2f}-{high:.2f} cores busy through the cells' turns."
    return said


def _slow_lines(pairs: list[dict[str, Any]]) -> list[str]:
    """The pairs above with a slow cell (one that sat turns out: harness.running.turns.takes_part),
    apart, and the others: a slow cell's level rests on fewer blocks. None without one."""
    slow = [p for p in pairs if p.get("slow")]
    if not slow:
        return []
    rule = slow[0]["slow"]
    return [
        f"Of those, the pairs with a slow cell (its block lasted {rule['block_factor']:g} times its group's "
        f"median or more, so it took part in only {rule['blocks']:g} of every {rule['turns']:g} kept turns, its "
        "level over its own blocks):",
        "",
        table(slow),
        "",
        "and the pairs of cells that took every turn:",
        "",
        table([p for p in pairs if not p.get("slow")]),
        "",
    ]


def _looks(groups: list[dict[str, Any]], first: int, last: int) -> str:
    """What ``--looks`` judged: where each repeat's budgeted bench would have stopped."""
    stopped = [sum(g["generations"] == k for g in groups) for k in range(first, last + 1)]
    counts = ", ".join(f"{n} after generation {k}" for k, n in zip(range(first, last + 1), stopped, strict=True))
    return (
        f"Each repeat is judged where a budgeted bench of the looks protocol stopped looking at its group (`--looks`): "
        f"after generation {first} where every verdict of the group was settled, else after the next while any was "
        f"unsettled, up to {last} (at Pocock's per-look level); the quiet repeats stopped "
        f"{counts}. "
    )


def _machine(repeats: Sequence[tuple[int, Sequence[Record]]]) -> str | None:
    """The CPU the repeats ran on, from their records (a repeat judged again elsewhere keeps it)."""
    return next((str(r["fingerprint"]["cpu"]) for _, recs in repeats for r in recs if r.get("fingerprint")), None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness calibrate", description=__doc__.split("\n\n")[0])
    parser.add_argument("--framework", default="torch-eager", help="adapters, comma-separated (default: torch-eager)")
    parser.add_argument(
        "--level",
        type=float,
        default=None,
        help="confidence level of the verdicts (default: a bench's, 95%%; with --looks, Pocock's for its looks)",
    )
    parser.add_argument("--workload", default="mlp")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=12)
    parser.add_argument(
        "--rounds", type=int, default=3, help="generations (fresh processes) per cell and repeat (3 or more to judge)"
    )
    parser.add_argument(
        "--twins",
        default="0,0,0,0.1,0.25",
        help="the twins: slow-downs as a share of a step (0: identical, 0.1: 10%%) or waits a step (50ms)",
    )
    parser.add_argument("--out", type=Path, default=None, help="folder (default: reports/<date>-calibration)")
    parser.add_argument("--judge-only", action="store_true", help="judge the repeats already in --out again, run none")
    parser.add_argument(
        "--generations", type=int, default=None, help="judge only the first N generations of each repeat (default: all)"
    )
    parser.add_argument(
        "--threads", type=int, default=None, help="intra-op threads of every cell (default: the bench's, every core)"
    )
    parser.add_argument(
        "--beside-load",
        type=int,
        default=0,
        metavar="N",
        help="keep N cores busy with spinning processes through every repeat: a steady load beside the twins",
    )
    parser.add_argument(
        "--rank-under-load",
        action="store_true",
        help="judge repeats with contended cells with the others, as a bench's --rank-under-load ranks them",
    )
    parser.add_argument(
        "--looks",
        action="store_true",
        help="judge each repeat where a budgeted bench stops looking: after the quick profile's generations where "
        "its group is settled, else after the next, up to the last judged",
    )
    args = parser.parse_args(argv)
    adapters = discover()
    if args.repeats < 1 or args.rounds < 1:
        print(f"error: --repeats and --rounds must be >= 1, got {args.repeats} and {args.rounds}")
        return 2
    if not 0 <= args.beside_load < (os.cpu_count() or 1):
        most = (os.cpu_count() or 1) - 1  # one core at least left to the twins
        print(f"error: --beside-load {args.beside_load}: 0 up to {most} busy cores on this machine")
        return 2
    if args.threads is not None and not 1 <= args.threads <= (os.cpu_count() or 1):
        print(f"error: --threads {args.threads}: 1 up to {os.cpu_count() or 1} on this machine")
        return 2
    if args.beside_load and not args.rank_under_load:
        print("note: beside a steady load most repeats' cells are contended and judged apart; --rank-under-load "
              "judges them with the others, as a run that ranks under load does")  # fmt: skip
    try:
        factors = parse_twins(args.twins)
    except PlanError as exc:
        print(f"error: {exc}")
        return 2
    stamp = datetime.datetime.now().strftime("%Y-%m-%d")
    out = args.out or Path("reports") / f"{stamp}-calibration"
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    command = "python -m harness calibrate " + " ".join(sys.argv[1:] if argv is None else argv)
    pairs: list[dict[str, Any]] = []
    groups: list[dict[str, Any]] = []
    level = args.level or (LOOKS_LEVEL if args.looks else budget.VERDICT_LEVEL)
    with contention.busy_cores(0 if args.judge_only else args.beside_load):
        if _run_repeats(args, adapters, factors, out) is None:
            return 2
    ran = out / "calibration-run.json"  # what the repeats took, kept for a later --judge-only
    given = {"framework": args.framework, "workload": args.workload, "device": args.device, "twins": args.twins}
    given |= {"beside_load": args.beside_load} if args.beside_load else {}
    given |= {"threads": args.threads} if args.threads else {}
    given |= {"rank_under_load": True} if args.rank_under_load else {}
    before = json.loads(ran.read_text()) if ran.is_file() else {}
    if not args.judge_only:
        # A resumed calibration adds its minutes to those of the runs before it; the setting is recorded
        # so a later --judge-only describes what ran, not its own defaults.
        minutes = (time.monotonic() - t0) / 60 + before.get("wall_min", 0.0)
        before = {"wall_min": minutes, "rounds": args.rounds, "command": command, "setting": given}
        ran.write_text(json.dumps(before) + "\n")
    done = {"wall_min": math.nan, "rounds": args.rounds, "command": command, **before}
    setting = {**given, **done.get("setting", {})}
    factors = parse_twins(setting["twins"])
    keep = args.generations or done["rounds"]
    first = min(keep, timing.PROFILES["quick"].rounds) if args.looks else keep
    busy: list[dict[str, Any]] = []  # repeats with a contended cell, judged apart
    quiet: list[tuple[int, list[Record]]] = []
    loaded = 0  # repeats with a contended cell judged with the others (--rank-under-load)
    for i, run_dir in enumerate(sorted(out.glob("repeat-*")), start=1):
        recs = [r for r in records.load(run_dir / records.RESULTS) if records.round_of(r) <= keep]
        stop = stopping_look(recs, first, keep, level)
        recs = [r for r in recs if records.round_of(r) <= stop]
        found, group = judge(recs, level)
        group["generations"] = stop
        if contended(recs) and not setting.get("rank_under_load"):
            busy.append({"repeat": i, "pairs": found, "group": group, "turns": turn_counts(recs)})
            continue
        loaded += contended(recs)
        quiet.append((i, recs))
        pairs += [{**p, "repeat": i} for p in found]
        groups.append({**group, "repeat": i})
    meta = {
        "adapter": setting["framework"],
        "workload": setting["workload"],
        "device": setting["device"],
        "repeats": len(groups),
        "contended_repeats": [b["repeat"] for b in busy],
        "rounds": keep,
        "first_look": first,
        "twins": ", ".join(f if isinstance(f, str) else f"{100 * f:g}%" for f in factors),
        "level": level,
        "machine": _machine(quiet) or env.fingerprint().get("cpu", "?"),
        "wall_min": done["wall_min"],
        "command": done["command"],
        **_load_meta(setting.get("beside_load", 0), bool(setting.get("rank_under_load")), loaded, quiet),
        **({"cell_threads": threads} if (threads := _threads(quiet)) else {}),
    }
    print(f"calibration: {write(out, pairs, groups, meta, busy, between(quiet, level))}")
    return 0


def _threads(repeats: Sequence[tuple[int, Sequence[Record]]]) -> int | None:
    """The intra-op threads every judged cell ran with (its records' own), None where they differ."""
    found = {r.get("threads") for _, recs in repeats for r in recs if r["status"] == "ok"}
    return found.pop() if len(found) == 1 and None not in found else None


def _load_meta(
    beside: int, ranked: bool, loaded: int, repeats: Sequence[tuple[int, Sequence[Record]]]
) -> dict[str, Any]:
    """What loaded the machine through the judged repeats: the cores kept busy beside them
    (``--beside-load``), whether contended repeats were judged with the others (``--rank-under-load``)
    and how many were, and the other cores busy that the cells measured (lowest and highest)."""
    cores = sorted(r.get("other_cpu_cores") or 0.0 for _, recs in repeats for r in recs if r["status"] == "ok")
    out: dict[str, Any] = {"beside_load": beside} if beside else {}
    if ranked:
        out |= {"rank_under_load": True, "loaded_repeats": loaded}
    if cores and (beside or ranked):
        out["other_cores"] = [round(cores[0], 2), round(cores[-1], 2)]
    return out


def _run_repeats(args: argparse.Namespace, adapters: Any, factors: list[Any], out: Path) -> bool | None:
    """Run ``args.repeats`` fresh small runs into ``out`` (each resumes what its folder holds); None
    where the plan is refused (said on stdout)."""
    for i in range(1, 0 if args.judge_only else args.repeats + 1):
        run_dir = out / f"repeat-{i:02d}"
        run_dir.mkdir(exist_ok=True)
        results = run_dir / records.RESULTS
        try:
            cells = plan(
                adapters,
                args.framework,
                args.workload,
                args.device,
                [],
                "quick",
                args.threads or env.default_threads(),
                run_dir.name,
                strategy="default",  # the bench's default strategy: every strategy would multiply the cells
            )
        except PlanError as exc:
            print(f"error: {exc}")
            return None
        if args.workload in ("mlp", "cnn"):
            # A mixed calibration group holds two or three cells per adapter, all resident at once; these
            # workloads' workers peaked under 0.85 GiB in the default run of 2026-11-25, not the 1.5 GiB
            # a bench assumes for every workload, so a group of 12 need not be split.
            cells = [{**c, "worker_bytes": 1 << 30} for c in cells]
        # The verdicts are what is calibrated: no dispatch floors (a second adapter's compiles per cell).
        cells = [{**c, "floors": False} for c in cells]
        run = Run(twins(cells, factors), args.rounds, timeout_s=600)
        todo = run.todo(results)
        with MatrixProgress(len(todo)) as progress:
            executors.LocalExecutor(adapters).run(todo, run, results, progress)
    return True
