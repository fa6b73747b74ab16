"""A cell's record from its processes, and a run's records grouped into cells and groups.

A generation (``round`` in the record) is one fresh worker process per cell of a group. A cell's
record (``combine``) keeps its steady time as the mean over its processes of each one's step
time, raw steps pooled for plots and quartiles, and each process's level (the log of its step
time, from the blocks every cell of its generation kept: ``process_levels``). Its interval is a t
interval over those levels where it ran in two processes or more (``ci_kind`` "processes"), else
the bootstrap of the steps within its one process (``ci_kind`` "steps"). ``combine_all`` also
writes on each cell what its group's model says, so that pairwise verdicts
(harness.stats.verdicts) read two records alone.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any, cast

import numpy as np
import scipy.stats

from harness.records import Record, round_of, setting_of
from harness.stats.inference import cell_interval, group_prior
from harness.stats.steps import step_time, summarize, tokens_per_step
from harness.stats.verdicts import DEFAULT_LEVEL, MIN_GENERATIONS, level_of

#: Share of a process's block times left out at each end of its level (``process_level``).
TRIM = 0.2


def fingerprint_key(rec: Record) -> str | None:
    """The record's machine fingerprint (harness.env.fingerprint) as one comparable string."""
    fp = rec.get("fingerprint")
    return json.dumps(fp, sort_keys=True) if fp else None


def group_of(rec: Record) -> str:
    """The group a record's cell is compared within: its ``group`` where the runner wrote one,
    else (older records) its setting: the cell id without its adapter (workload, device,
    overrides; ``|``-joined, so equal across runs for the same setting)."""
    if rec.get("group"):
        return str(rec["group"])
    return setting_of(rec) or json.dumps(
        [rec.get("workload"), rec.get("device_requested"), sorted(rec.get("overrides") or [])]
    )


def _batches(rec: Mapping[str, Any]) -> list[int] | None:
    """The batch each steady step ran, where steps differ in size (else None: plain medians)."""
    return rec.get("step_batches") if (rec.get("pass_steps") or 1) > 1 else None


def process_level(rec: Record, turns: set[int] | None = None) -> tuple[float, int | None] | None:
    """One process's level, the log of its step time, and how many blocks it rests on: the mean
    of log block times over ``turns`` (default: every block it kept), trimmed by TRIM at each end
    (a block caught by a passing disturbance that the contention check missed must not move a
    process's level; the trimmed mean keeps nearly all of the plain mean's efficiency on
    well-behaved blocks, a median does not); for records without blocks (one process at a time)
    the log of its step time, on no count of blocks (None). None for a record without raw times
    (a summary: nothing to judge from)."""
    blocks = rec.get("turn_block_s")
    if not rec.get("step_times_s") and not blocks:
        return None
    if blocks:
        ids = rec.get("turn_ids") or list(range(len(blocks)))
        kept = [b for i, b in zip(ids, blocks, strict=True) if turns is None or i in turns]
        if kept:
            return float(scipy.stats.trim_mean(np.log(kept), TRIM)), len(kept)
    steady = step_time(rec["step_times_s"], _batches(rec)) if rec.get("step_times_s") else rec["median_s"]
    return math.log(steady), (0 if blocks else None)


def _levels(found: dict[int, tuple[float, int | None] | None]) -> tuple[dict[int, float], int | None]:
    """Generation -> level, and the fewest blocks behind one (None: records without blocks)."""
    kept = {k: v for k, v in found.items() if v is not None}
    counts = [n for _, n in kept.values() if n is not None]
    return {k: v for k, (v, _) in kept.items()}, (min(counts) if counts else None)


def combine_all(recs: Sequence[Record]) -> list[Record]:
    """One record per cell and machine from its processes, in first-seen order: rounds of one cell
    that ran on machines with different fingerprints (a mixed cluster) are never pooled. A round
    without a fingerprint (a job the scheduler lost with its node) joins its cell's machine where
    the cell has one. Each ok cell is annotated with its group's model (``annotate_groups``)."""
    machines: dict[tuple, set[str]] = {}
    for r in recs:
        if found := fingerprint_key(r):
            machines.setdefault((r.get("machine"), r.get("run_id"), r.get("cell_id")), set()).add(found)
    groups: dict[tuple, list[Record]] = {}
    for r in recs:
        cell = (r.get("machine"), r.get("run_id"), r.get("cell_id"))
        known = machines.get(cell, set())
        fp = fingerprint_key(r) or (next(iter(known)) if len(known) == 1 else None)
        groups.setdefault((*cell[:2], fp, r.get("cell_id") or id(r)), []).append(r)
    cells = [(key, runs) for key, runs in groups.items()]
    levels = _group_levels(cells)
    out: list[Record] = []
    for key, runs in cells:
        rec = combine(runs, levels.get(id(runs)))
        fp = key[2]
        out.append(rec if rec.get("fingerprint") or not fp else {**rec, "fingerprint": json.loads(fp)})
    annotate_groups([(key[:3], rec) for (key, _), rec in zip(cells, out, strict=True)])
    return out


def _group_levels(cells: list[tuple[tuple, list[Record]]]) -> dict[int, tuple[dict[int, float], int | None]]:
    """For each cell (by ``id`` of its runs): generation -> level over the turns that every ok
    cell of that generation of its group kept, and the fewest such blocks in any generation. A slow
    cell that sat some turns out (``sat_out_turns``: harness.running.turns.takes_part) does not
    narrow the others' turns: its level is over its own, theirs over all they shared."""
    by_group: dict[tuple, list[list[Record]]] = {}
    for key, runs in cells:
        by_group.setdefault((*key[:3], group_of(runs[0])), []).append(runs)
    out: dict[int, tuple[dict[int, float], int | None]] = {}
    for members in by_group.values():
        common: dict[int, set[int]] = {}
        for full in (True, False):  # the turns of the cells that took every turn, else the slow ones'
            shared: dict[int, set[int]] = {}
            for runs in members:
                for r in runs:
                    if r["status"] == "ok" and r.get("turn_block_s") and full != bool(r.get("sat_out_turns")):
                        ids, k = set(r.get("turn_ids") or range(len(r["turn_block_s"]))), round_of(r)
                        shared[k] = shared[k] & ids if k in shared else ids
            common = {**shared, **common}
        for runs in members:
            found = {round_of(r): process_level(r, common.get(round_of(r))) for r in runs if r["status"] == "ok"}
            out[id(runs)] = _levels(found)
    return out


def annotate_groups(cells: list[tuple[tuple, Record]]) -> None:
    """Write on each ok cell (in place) its group's model: ``group``, the generations the group
    ran (``group_generations``), how many complete cells (``group_cells``), the prior its pairs
    are moderated with (harness.stats.inference.group_prior: ``group_prior_var``,
    ``group_prior_df``, and the cell's own ``prior_weight``; None where the group has fewer than
    two complete cells or generations), and ``verdict_level``. ``key`` is the (machine, run id,
    fingerprint) the cell ran on."""
    by_group: dict[tuple, list[Record]] = {}
    for key, rec in cells:
        if rec["status"] == "ok":
            by_group.setdefault((*key, group_of(rec)), []).append(rec)
    for (*_, group), recs in by_group.items():
        gens = sorted({k for r in recs for k in r["process_levels"]})
        complete = [r for r in recs if set(r["process_levels"]) >= set(gens)]
        prior_var, prior_df, weights = None, None, {}
        if len(complete) >= 2 and len(gens) >= 2:
            matrix = np.array([[r["process_levels"][k] for k in gens] for r in complete])
            s0, d0, w = group_prior(matrix)
            prior_var, prior_df = float(s0), float(d0)
            weights = {id(r): float(x) for r, x in zip(complete, w, strict=True)}
        level = level_of(*recs)
        for r in recs:
            r.update(
                {
                    "group": group,
                    "group_generations": gens,
                    "group_cells": len(complete),
                    "group_prior_var": prior_var,
                    "group_prior_df": prior_df,
                    "prior_weight": weights.get(id(r), 0.0),
                    "verdict_level": level,
                }
            )


#: Per-round measures of an image pipeline cell that its record holds as the mean over rounds.
PIPELINE_MEANS = (
    "wait_median_s",
    "input_bound_share",
    "compute_median_s",
    "cpu_cores_busy",
    "cpu_worker_cores_busy",
    "cpu_util",
    "pipeline_batches_per_s",
    "pipeline_ceiling_s",
    "gpu_util_mean",
)


def energy(runs: Sequence[Record], level: float = DEFAULT_LEVEL) -> dict[str, Any]:
    """A GPU cell's energy per synced step (joules, the whole GPU's, NVML's counter) from its
    processes, each its median over its kept turns: their geometric mean, as the steady step is
    built, and with MIN_GENERATIONS processes or more a t interval over them (``energy_ci_j``).
    None where a process could not read the counter (before Volta, or no NVML); nothing where no
    process tried (a CPU cell, or a record from before energy was read)."""
    if not any("energy_per_step_j" in r for r in runs):
        return {}
    found = [r.get("energy_per_step_j") for r in runs]
    if any(e is None or e <= 0 for e in found):
        return {"energy_per_step_j": None}
    logs = [math.log(cast(float, e)) for e in found]
    center = float(math.exp(np.mean(logs)))
    out: dict[str, Any] = {"energy_per_step_j": center, "round_energy_j": found}
    if len(logs) >= MIN_GENERATIONS:
        out["energy_ci_j"] = list(cell_interval(logs, center, level))
    return out


def combine(runs: Sequence[Record], levels: tuple[dict[int, float], int | None] | None = None) -> Record:
    """A cell's record from its processes (rounds). A round that did not end ``ok`` decides the
    status (its record is returned, with the number of rounds that did). Otherwise: the cold
    window and first step of round 1 (the first cold start), the cold window of each process that
    compiled cold kept (``round_cold_times_s``; not those of ``warm_compiles``), steady statistics
    over rounds as the module says, raw steps pooled for plots and quartiles, each round's median
    and level kept. ``levels``: each generation's
    level and the fewest blocks behind one (``combine_all``, from the turns its group shares);
    by default each process's own blocks."""
    runs = sorted(runs, key=round_of)
    bad = [r for r in runs if r["status"] != "ok"]
    if bad:
        return cast(Record, {**bad[0], "rounds_ok": len(runs) - len(bad)})
    if levels is None:
        levels = _levels({round_of(r): process_level(r) for r in runs})
    process_levels, blocks = levels
    level = level_of(*runs)
    extra: dict[str, Any] = {
        "process_levels": process_levels,
        "blocks": blocks,
        "verdict_level": level,
    }
    if sat_out := sum(r.get("sat_out_turns") or 0 for r in runs):  # a slow cell (harness.running.turns)
        extra["sat_out_turns"] = sat_out
        extra["slow_rule"] = next(r["slow_rule"] for r in runs if r.get("slow_rule"))
    cold = [r for r in runs if not r.get("warm_compiles")]  # processes that compiled cold
    if cold and all(r.get("cold_times_s") for r in cold):
        extra["round_cold_times_s"] = [r["cold_times_s"] for r in cold]
        extra["round_cold_contended"] = [bool(r.get("cold_contended")) for r in cold]  # break-even leaves these out
    if all(r.get("turn_ids") is not None for r in runs):  # resident workers: each generation's turns
        extra["round_turns"] = {
            round_of(r): [
                len(r["turn_ids"]) + (r.get("sat_out_turns") or 0),
                r.get("turns_dropped") or 0,
                r.get("turns_contended") or 0,
            ]
            for r in runs
        }
    if len(runs) == 1:  # its interval, from the worker, covers the noise within one process
        return cast(Record, {**runs[0], **extra, "ci_kind": "steps"})
    record: dict[str, Any] = {k: v for k, v in runs[0].items() if k not in ("ci_low_s", "ci_high_s", "ci_kind")} | extra
    for r in runs:  # the one process that timed the dispatch floor (a group's last planned generation)
        record.update({k: v for k, v in r.items() if k.startswith("dispatch_floor")})
    per_round = [r["step_times_s"] for r in runs]
    pooled = [t for times in per_round for t in times]
    medians = [step_time(r["step_times_s"], _batches(r)) for r in runs]
    # One value per process (processes differ more than steps): the steady step is the geometric
    # mean of the process levels, the estimator every pair's ratio is built on, so a table's
    # ms/step column and its ratio column order alike (a ratio is these values' quotient).
    levels_found = list(process_levels.values())
    mean = float(math.exp(np.mean(levels_found))) if levels_found else float(np.mean(medians))
    # steps of mixed sizes: their pooled IQR spans sizes, so never ``noisy`` (steps.summarize)
    batches = [b for r in runs for b in r["step_batches"]] if _batches(record) is not None else None
    record.update(summarize(pooled, record["batch_size"], ci=False, batches=batches))
    if batches is not None:
        record["step_batches"] = batches
        record["pass_s"] = mean * record["pass_steps"]
    record.update(
        median_s=mean,
        process_mean_median_s=float(np.mean(medians)),
        samples_per_s=record["batch_size"] / mean,
        step_times_s=pooled,
        steps=len(pooled),
        rounds_done=len(runs),
        round_numbers=[round_of(r) for r in runs],
        round_medians_s=medians,
        round_steps=[len(t) for t in per_round],
        round_cold_s=[r["cold_s"] for r in runs],
        nodes=sorted({r["node"] for r in runs if r.get("node")}),
        host_peak_rss_bytes=max(r.get("host_peak_rss_bytes") or 0 for r in runs),
        wall_s=sum(r.get("wall_s", 0.0) for r in runs),
        other_cpu_cores=max(r.get("other_cpu_cores", 0.0) for r in runs),
        contended=any(r.get("contended") for r in runs),
        steady_recompiles=sum(r.get("steady_recompiles") or 0 for r in runs),
        recompile_times_s=[t for r in runs for t in r.get("recompile_times_s") or []],
        cold_settled=None if runs[0].get("cold_settled") is None else all(r.get("cold_settled") for r in runs),
    )
    # Two processes give a t interval on one degree of freedom (34.3 and 35.3 ms print as [18.7, 64.6]):
    # a cell's interval is printed from as many generations as a pair needs to be judged.
    if len(process_levels) >= MIN_GENERATIONS:
        record["ci_low_s"], record["ci_high_s"] = cell_interval(
            list(process_levels.values()), mean, level or DEFAULT_LEVEL
        )
        record["ci_kind"] = "processes"
    # An image pipeline's measures (harness.measuring.input_pipeline): each round's, averaged; waits pooled.
    raw: Sequence[Mapping[str, Any]] = runs  # read by a field name held in a variable
    for field in PIPELINE_MEANS:
        if all(r.get(field) is not None for r in raw):
            record[field] = float(np.mean([r[field] for r in raw]))
    if all("wait_times_s" in r for r in runs):
        record["wait_times_s"] = [t for r in runs for t in r["wait_times_s"]]
    if all(tokens_per_step(r) is not None for r in runs):
        record["tokens_per_step"] = float(np.mean([tokens_per_step(r) for r in runs]))
    for field in ("tokens_per_s", "gflops"):
        if record.get(field) is not None:
            record[field] = float(np.mean([r[field] for r in raw]))
    for field in ("gflops_max_step", "pipelined_gflops_max"):  # the fastest any process claimed
        claims = [r[field] for r in raw if r.get(field) is not None]
        record[field] = max(claims) if claims else None
    record.update(energy(runs, level or DEFAULT_LEVEL))
    # Pipelined blocks come from a cell's first process (harness.running.resident.PIPED_EVERY), and
    # are set against the synced blocks of the same processes.
    piped = [r for r in runs if r.get("pipelined_s") is not None]
    if piped:
        record["round_pipelined_s"] = [r["pipelined_s"] for r in piped]
        record["pipelined_s"] = float(np.mean(record["round_pipelined_s"]))
        if all(r.get("synced_block_s") for r in piped):
            record["synced_block_s"] = float(np.mean([r["synced_block_s"] for r in piped]))
        else:
            record.pop("synced_block_s", None)
        record["pipelined_samples_per_s"] = record["batch_size"] / record["pipelined_s"]
        record["pipelined_recompiles"] = sum(r.get("pipelined_recompiles") or 0 for r in piped)
    else:
        record["pipelined_s"] = None
    return cast(Record, record)
