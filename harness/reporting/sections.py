"""Report sections that stand alone: the banner, failures, input pipelines, the Method."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from tabulate import tabulate

from harness import records
from harness.records import Record
from harness.reporting import calibration_note
from harness.reporting.cells import missing_pairs, strategy
from harness.reporting.formatting import DASH, row_label, sig
from harness.reporting.workload_tables import ordered
from harness.stats import inference, verdicts
from harness.stats.steps import NOISY_IQR_RATIO


def banner(recs: Sequence[Record]) -> list[str]:
    """A warning at the top naming every requested adapter x device that produced no result."""
    missing = missing_pairs(recs)
    if not missing:
        return []
    pairs = sum(len(adapters) for _, adapters, _ in missing)
    out = [f"> **Not in this comparison:** {pairs} requested adapter x device pairs produced no result."]
    for device, adapters, reason in missing:
        out.append(f"> - **{', '.join(adapters)}** on {device}: {reason}")
    return [*out, ""]


def failures(recs: Sequence[Record]) -> list[str]:
    """A section with each failed cell's reason and the tail of its stderr."""
    out = []
    for r in recs:
        if r["status"] != "failed":
            continue
        out += [f"- **{r['adapter']} / {r['workload']} / {r['device_requested']}**: {r['reason']}"]
        if r.get("stderr_tail"):
            out += ["", "  ```text", *(f"  {line}" for line in r["stderr_tail"].splitlines()), "  ```"]
    return ["## Failed cells", "", *out, ""] if out else []


def input_pipeline(recs: Sequence[Record]) -> list[str]:
    """Per adapter/workload/device: steady step time per data mode against ``resident``."""
    cells: dict[tuple, dict[str, Record]] = {}
    r: Record | None  # a record; below, the row's record of a data mode, if any
    for r in recs:
        key = (r["adapter"], r["workload"], strategy(r), r["device_requested"], r.get("machine"))
        cells.setdefault(key, {})[r.get("data", "resident")] = r
    complete = {id(modes["resident"]): modes for modes in cells.values() if len(modes) > 1 and "resident" in modes}
    rows = []
    for base in ordered([modes["resident"] for modes in complete.values()]):  # as the workload tables
        modes = complete[id(base)]
        row = row_label(base)
        for mode in ("resident", "host", "loader"):
            r = modes.get(mode)
            if r is None:
                row.append(DASH)
            elif r["status"] != "ok":
                row.append(f"{r['status']}: {r['reason']}")
            elif mode == "resident" or base["status"] != "ok":
                row.append(sig(r["median_s"] * 1e3))
            else:
                row.append(f"{sig(r['median_s'] * 1e3)} ({r['median_s'] / base['median_s']:.2f}x)")
        host = modes.get("host")
        row.append(sig(host["to_device_s"] * 1e3) if host and host["status"] == "ok" else DASH)
        both_ok = host and host["status"] == "ok" and base["status"] == "ok"
        share = max(0.0, 1 - base["median_s"] / cast(Mapping[str, Any], host)["median_s"]) if both_ok else None
        row.append(DASH if share is None else f"{share:.0%}")
        rows.append(row)
    if not rows:
        measured = sorted({r.get("data", "resident") for r in recs})
        note = (
            f"This run measured one data mode ({', '.join(measured)}). Run with `DATA=all` (`--data all`) to "
            "time the same cells with each step copying its batch from host memory (`host`) and with the "
            "framework's native input pipeline (`loader`), and to see the input-bound share here."
        )
        return ["## Input pipeline", "", note, ""]
    headers = [
        "adapter",
        "workload",
        "strategy",
        "device",
        "resident (ms/step)",
        "host (ms/step)",
        "loader (ms/step)",
        "copy of one batch (ms)",
        "input-bound share (host)",
    ]
    intro = (
        "Steady median step time when the dataset sits on the device (`resident`), when each "
        "step copies its batch from host memory (`host`), and when the framework's native input "
        "pipeline feeds it (`loader`); in brackets, the ratio to `resident`. The input-bound share "
        "is the part of a `host` step not spent computing: 1 - resident / host."
    )
    return ["## Input pipeline", "", intro, "", tabulate(rows, headers, tablefmt="github", disable_numparse=True), ""]


def _xla_floor(ok: Sequence[Record]) -> str:
    """The compile time from which the run's XLA cache kept an executable, in words: as the
    records say (``persistent_cache_min_compile_s``), else both values it has had, since records
    written before it was recorded do not say which applied."""
    found = [(r.get("settings") or {}).get("persistent_cache_min_compile_s") for r in ok]
    floors = [f for f in found if f is not None]
    if floors:
        return f"under {max(floors):g} s"
    return "under the cache's floor (JAX's default 1 s, or 0.1 s from 2026-11-26; these records do not say which)"


def _piped(every: int, first_process: bool = False) -> str:
    """How often a turn held a pipelined block (harness.running.resident.PIPED_EVERY), and in which
    processes (a cell's first only, since the records say ``piped_first_process``)."""
    often = "a" if every == 1 else f"every {({2: 'second', 3: 'third'}).get(every, f'{every}th')} turn a"
    return f"in each cell's first process, {often}" if first_process else often


def _protocol_line(p: dict[str, Any]) -> str:
    if p.get("mode") == "turns":
        return (
            f"- Profile `{p['name']}`, resident workers taking turns (harness/running/turns.py): each cell's "
            "fresh process ran its cold window alone, every step timed: at least "
            f"{1 + p['warmup_steps']} steps and one whole pass over the dataset (its first step holds trace, "
            "compile and first run), then, where the adapter counts its compiles, more passes until one runs "
            f"without compiling (at most {p['max_cold_passes']}). Then it waited while the others warmed up, "
            "and the processes of its group (the same setting, every adapter) took turns: each turn, one "
            f"after another in a shuffled order, a block of synced steps (about {p['block_s'] * 1e3:g} ms"
            f"{_sized(p)}, whole passes where steps differ in size) and "
            f"{_piped(p.get('piped_every', 1), p.get('piped_first_process', False))} "
            "pipelined block of as many (its figure is set against that process's synced blocks); the first turn is a "
            "warm-up, not kept. A block's step time is the median of its synced steps (or their pass mean); "
            "a step during which the adapter compiled is kept out and counted. A turn during which other "
            "processes used the CPU or the hypervisor stole it (/proc/stat) is retaken."
        )
    return (
        f"- Profile `{p['name']}`: a cold window of every step from a cold start, each timed: at least "
        f"{1 + p['warmup_steps']} steps and one whole pass over the dataset (its first step holds trace, "
        f"compile and first run), then, where the adapter counts its compiles, more passes until one "
        f"runs without compiling (at most {p['max_cold_passes']}). Then the steady window: timed steps "
        f"until at least {p['min_steps']} and either {p['budget_s']:g} s spent or IQR/median below "
        f"{p['target_rel_iqr']:.0%} (checked every {p['check_every']} steps), at most {p['max_steps']}; a "
        "step during which the adapter compiled is kept out of the statistics and counted. Then the "
        f"pipelined window: blocks of about {p['block_s'] * 1e3:g} ms, at least {p['min_blocks']}, until "
        f"{p['budget_s'] / 2:g} s."
    )


def _turns_left_out(ok: Sequence[Record]) -> list[str]:
    """How many turns were retaken for contention, counted once per generation of a group."""
    seen: dict[tuple, list[int]] = {}
    for r in ok:
        for k, counts in (r.get("round_turns") or {}).items():
            seen[(r.get("run_id"), r.get("group"), str(k))] = counts
    if not seen:
        return []
    kept, dropped, contended = (sum(v[i] for v in seen.values()) for i in range(3))
    return [
        f"- Contention: {dropped} turns were taken while other processes used the CPU or the hypervisor "
        f"stole it, and were left out and retaken; {kept} turns were kept in {len(seen)} generations"
        + (f", {contended} of them under contention once retaking had reached its limit." if contended else ".")
    ]


def _slow_cells(ok: Sequence[Record]) -> list[str]:
    """Which cells sat turns out as slow ones (harness.running.turns.takes_part), and the rule."""
    by_rule: dict[str, tuple[dict[str, Any], set[str]]] = {}
    for r in ok:
        if r.get("sat_out_turns") and r.get("slow_rule"):
            key = json.dumps(r["slow_rule"], sort_keys=True)
            by_rule.setdefault(key, (r["slow_rule"], set()))[1].add(f"{r['adapter']} on {r['workload']}")
    lines = []
    for key in sorted(by_rule):
        rule, cells = by_rule[key]
        lines.append(
            f"- Slow cells: a cell whose block (its fewest steps, or whole passes) lasted {rule['block_factor']:g} "
            f"times its group's median block or more, in its warm-up turn, took part in only {rule['blocks']:g} of "
            f"every {rule['turns']:g} kept turns, spread evenly, and its level is the trimmed mean over those blocks "
            f"(the others' over every turn they kept): {', '.join(sorted(cells))}. Its blocks past the fewest a "
            "verdict needs buy little, since processes differ more than blocks, and took most of a generation's turns."
        )
    return lines


def _resolution(ok: Sequence[Record]) -> list[str]:
    """What differences this run's verdicts could tell apart: per group, the slow-down a pair of its
    cells would be called different for with 80% power, from the group's prior (a typical pair)."""
    found = {}
    for r in ok:
        s2, d0, gens = r.get("group_prior_var"), r.get("group_prior_df"), r.get("group_generations")
        if s2 is not None and d0 is not None and gens and len(gens) >= verdicts.MIN_GENERATIONS:
            df = min(d0, len(gens) - 1) + len(gens) - 1
            if df >= 2:
                se = math.sqrt(s2 / len(gens))
                found[r.get("group")] = inference.detectable_change(se, df, r.get("verdict_level") or 0.95)
    if not found:
        return []
    values = sorted(found.values())
    middle = values[len(values) // 2]
    return [
        f"- Resolution: this run can tell apart differences of about {middle:.0%} between two cells of one "
        f"setting (80% power; the median over its {len(values)} settings, {values[0]:.0%} to {values[-1]:.0%}), "
        "from the spread of their processes; a pair noisier than its setting needs more. `make calibrate` "
        "measures how often identical code is called different on a machine (docs/measurement.md, Calibration)."
    ]


def level_text(recs: Sequence[Record]) -> str:
    """The confidence level the records' verdicts and intervals use, as printed: ``95%``, ``97.06%``."""
    level = verdicts.level_of(*recs)
    return f"{100 * level:.4g}%"


def _sized(p: dict[str, Any]) -> str:
    """How a protocol's blocks were sized, where every process took its cell's round-1 size
    (``blocks_sized``); nothing where each process sized its own, as a probe alone does."""
    if p.get("blocks_sized") == "round 1":
        return " at the step its cell's round-1 process measured alone, in every process"
    return ""


def method(recs: Sequence[Record], calibration: Path | None = None) -> str:
    """The protocol each cell's record says it was timed with (cells recorded before records
    carried it are said to be so, not described by today's settings)."""
    ok = [r for r in recs if r["status"] == "ok"]
    # each cell's block is sized to its own step (``block_steps``): the protocol is the same
    protocols = {
        json.dumps(p, sort_keys=True): p
        for p in ({k: v for k, v in r["protocol"].items() if k != "block_steps"} for r in ok if r.get("protocol"))
    }
    lines = [_protocol_line(p) for _, p in sorted(protocols.items())]
    if any(not r.get("protocol") for r in ok):
        lines.append(
            "- Cells without a protocol in their record were measured by an earlier version of dlcompare "
            "(see `git` in the Environment): a single steady window per process, no pipelined window; "
            "the Method of that version's report describes them."
        )
    done = sorted({r.get("rounds_done") or 1 for r in ok})
    if done:
        processes = " or ".join(map(str, done)) + (" fresh process" if done == [1] else " fresh processes")
        lines.append(
            f"- Rounds: each cell ran in {processes} (rounds), round 1 of every cell in a shuffled order "
            "before round 2 of any, so the machine's drift during the run lands on every adapter alike. "
            "A cell's steady time is the geometric mean of its processes' levels (one process: its median "
            "step), the estimator every ratio is built on, so a ratio is the quotient of the steps printed; its "
            f"{level_text(ok)} interval is a t interval over its processes' levels (the trimmed mean of log block "
            "times, over the turns every cell of its group kept), so it covers the difference between "
            "processes, not only the noise within one. A pair's ratio is the mean over rounds of its "
            "per-round log ratio (the round's drift cancels); its variance is the pair's own spread "
            "moderated toward its group's (empirical Bayes, as limma: the group's prior counts at most "
            "as much as the pair's own rounds, and nothing for a cell far noisier than the group), on "
            "the combined degrees of freedom; a pair needs 3 rounds and 2 degrees of freedom or more, else it is "
            "`unresolved`. Three words: `same speed` (the whole interval within "
            f"{verdicts.SAME_BAND}, even where it excludes 1: a difference under 5% either way is not "
            "claimed), separated (else, where the interval "
            "excludes 1), `unresolved` (neither: the interval is printed). `fastest` is a "
            "claim against every other cell of the workload: the fastest cell is named only where its "
            "pairs with every rival are rejected by Holm's step-down over all the workload's pairs, and "
            "the `time vs fastest` marks use the same family-wise test. "
            + (
                "With one round, the interval covers only the noise within that process, and no pair is judged. "
                if 1 in done
                else ""
            )
            + "First step and cold window are those of round 1. Each cell's later rounds start from the compiler "
            "cache its round 1 filled (XLA's persistent cache, Inductor's; their records say `warm_compiles`), so "
            "they pay no compile again: compile counts, first steps, cold windows and break-even come from round 1, "
            "which compiled cold into an empty cache. TensorFlow has none, and XLA compiles "
            f"{_xla_floor(ok)} (jax-eager's per-op ones) are not cached."
        )
    lines += _resolution(ok) + _turns_left_out(ok) + _slow_cells(ok)
    if any((r.get("protocol") or {}).get("mode") == "turns" for r in ok):  # verdicts from processes taking turns
        lines += calibration_note.lines(ok, calibration)
    if any(strategy(r) for r in ok) and (across := calibration_note.across(ok, calibration)):
        lines.append(f"- {across}")  # the `steady vs its exact` column's verdict: between two groups
    if any((r.get("pass_steps") or 1) > 1 for r in ok):
        lines.append(
            "- † Steps of different sizes (variable-length batches): the steady window and every "
            "pipelined block hold whole passes over the dataset, and the step time is the mean over a "
            "pass of each batch's median step (a pass's time divided by its steps), never the median of "
            "mixed lengths; two such cells compare the same batches."
        )
    if any(r.get("pipelined_s") for r in ok):
        lines.append(
            "- `pipelined`: after the steady window, blocks of steps issued back to back with one `sync` "
            "at the end of each block, as a training loop runs them (Python dispatch overlaps device "
            "work); whole passes over the dataset where steps differ in size; the median block's time "
            "per step, and in brackets its ratio to the synced time per step printed after `of`: the "
            "synced steps cut into windows of a block's length, mean per step, median over windows (not the "
            "steady median, which leaves out the occasional slow step a block holds; the steady median where "
            "a record has no windows); below 1: the loop gains from overlap. The physics check applies to both."
        )
    if any(r.get("kernel_floor_s") and r.get("dispatch_floor_s") for r in ok):
        lines.append(
            "- `vs its floor`: the steady step as a multiple of the larger of two floors "
            "(harness/measuring/floors.py), where both were measured (a dash otherwise: decoding has no "
            "kernel floor, and one floor alone names no bound). "
            "Kernel floor: the step's own matmuls and convolutions (counted from the spec, the recurrent "
            "model's projections over all steps as one matmul each), each timed alone at the fastest "
            "library's speed on the device (each kernel's fastest of NumPy, PyTorch, JAX and TensorFlow, "
            "as installed; the first page counts which), summed; `kernels`: the cell is "
            "compute-bound. Dispatch floor: the same adapter running the same step structure on tiny tensors "
            "(every width 1-3), timed once per cell (alone, in the first round or in its group's last planned "
            "generation, before the turns); `dispatch`: the cell is overhead-bound. 1.0x would "
            "be the floor itself; below it, the floor (one short window of one process) read above the "
            "cell's step (over all its turns): the two are that close."
        )
    if any(r.get("precision") == "bf16" for r in ok):
        lines.append(
            "- `bf16`: mixed precision, float32 master weights and optimiser state, bfloat16 compute in the "
            "training step's forward and backward, the loss in float32, through each framework's own "
            "mechanism (`torch.autocast`, Keras's `mixed_bfloat16` policy, explicit casts at the loss's "
            "entry in TensorFlow without Keras, JAX and Flax; each record's `settings.mixed_precision` "
            "names it). The peak is the faster of a bfloat16 and a float32 matmul; the kernel floors time "
            "the step's matmuls and convolutions with bfloat16 operands. On a device without bfloat16 "
            "arithmetic these cells are skipped unless the run was forced (`--force-precision`), since "
            "they would time the emulation."
            + (
                " This run was forced: on such a device its bf16 cells time the emulation."
                if any(r.get("force_precision") for r in ok)
                else ""
            )
        )
    lines += [
        "- Every timed step is the adapter's `train_step` followed by `sync`, which blocks until the "
        "device has finished and reads the loss, so asynchronous dispatch cannot hide work. On a GPU, "
        "one more step checks that the device has nothing queued right after `sync`. This synced step "
        "time (latency) is what tables and the summary rank by.",
        f"- A cell that ran while other processes used more than {records.CONTENDED_CORES:g} cores, or the "
        f"hypervisor took more than {records.STEAL_SHARE:.0%} of the CPU (with resident "
        "workers: in most of its kept turns, after contended turns were retaken) is marked `contended` and "
        "left out of the summary's verdicts, unless the run ranks under load (`--rank-under-load`): then it is "
        "ranked, marked `under load`, with the load beside each verdict.",
        "- Each cell runs in a fresh process; every framework starts from the same NumPy parameters and "
        "trains on the same batches, already placed on the device (placement is timed apart).",
        "- `time vs fastest` is this cell's steady time over the fastest one of the workload with the "
        f"ratio's {level_text(ok)} interval (`1.00 fastest`: separated from every other cell; `same speed`, "
        "`unresolved`: as under Rounds). "
        f"IQR (of all rounds' steps) is flagged `noisy` when it exceeds {NOISY_IQR_RATIO:.0%} of the median, "
        "never for steps of different sizes (†), whose IQR spans the sizes. A column no row has a value in "
        "is left out.",
        "- `tokens/s`: tokens per step over a pass of the dataset (decoding: what a decode of every batch "
        "emitted) over the steady median beside it.",
        "- `first step` includes tracing and compilation for static-graph adapters. `traces / compiles` "
        "are counted during training by the framework's own instrumentation (tf.function's tracing "
        "count, jax.monitoring compile events); `not reported` where the adapter's `compile_stats` leaves a "
        "count out (an eager adapter's framework counts none); 0 only where a static adapter decodes op by op "
        "(its settings' `decode_path`: `0 traces: decodes eagerly`).",
    ]
    return "\n".join(lines)


def method_summary(recs: Sequence[Record]) -> str:
    """The protocol in one paragraph for the first page; ``method`` has it in full (details page)."""
    ok = [r for r in recs if r["status"] == "ok"]
    done = sorted({r.get("rounds_done") or 1 for r in ok}) or [1]
    return (
        "Each cell (adapter x workload x device) ran in "
        + " or ".join(map(str, done))
        + " fresh processes (generations), the cells of a workload taking turns in short timed blocks so that the "
        "machine's drift lands on all alike; every framework starts from the same NumPy weights and batches, "
        "every timed step is synced with the device, and compile time stays out of the steady step. A ratio "
        "is paired by generation, its variance moderated toward its workload's; at "
        f"{level_text(ok)} it reads `same speed` where its whole interval lies within {verdicts.SAME_BAND} "
        "(symmetric: naming a pair the other way round keeps the word), faster or slower where it excludes 1, "
        "else `unresolved`; a fastest is named only where Holm's test over the workload's pairs separates it "
        "from every rival by at least 5%. How often these rules call identical code different, and how often "
        "they find a 10% slow-down: the calibration the full protocol quotes ([details.md](details.md#method-in-full)) "
        "and docs/measurement.md (Calibration) in dlcompare."
    )
