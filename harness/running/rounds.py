"""Rounds: each cell runs in several fresh processes, interleaved with every other cell's, and
its numbers and intervals come from those rounds.

A round is one worker process of one cell (one record in ``results.jsonl`` with ``round``).
Round r of every cell runs before round r + 1 of any, in a shuffled order, so the machine's
drift over the run lands on every adapter alike. Within a process, step times scatter little;
between processes they can differ by tens of percent. So:

- a cell's steady time is the mean over its rounds of each round's median step;
- its 95% interval is a two-level bootstrap: resample rounds, then steps within each;
- a ratio between two cells of one run is paired by round (round r of A against round r of B,
  which ran minutes apart), so common drift cancels; between two runs it is unpaired, from
  the round medians with Welch's t (``welch_ratio``).
"""

from __future__ import annotations

import json
import random
import zlib
from collections.abc import Iterable
from typing import Any

import numpy as np
import scipy.stats

from harness.measuring.stats import (
    BOOTSTRAP_SAMPLES,
    bootstrap_medians,
    pass_bootstrap,
    pass_mean,
    percentile_interval,
    summarize,
)

Record = dict[str, Any]


def round_of(rec: Record) -> int:
    """The round a record ran in (records written before rounds existed are round 1)."""
    return int(rec.get("round") or 1)


def schedule(cells: list[Record], rounds: int, run_id: str, done: Iterable[Record] = ()) -> list[tuple[Record, int]]:
    """(cell, round) pairs still to run, round by round, each round in its own shuffled order
    (seeded by the run id and round, so a resumed run keeps its order). A cell with a record
    that is not ``ok`` (skipped, failed) runs no further round; an ``ok`` round is not rerun."""
    finished = {(r.get("cell_id"), round_of(r)) for r in done if r["status"] == "ok"}
    ended = {r.get("cell_id") for r in done if r["status"] != "ok"}
    order = []
    for k in range(1, rounds + 1):
        shuffled = list(cells)
        random.Random(f"{run_id}:{k}").shuffle(shuffled)
        order += [(c, k) for c in shuffled if c["cell_id"] not in ended and (c["cell_id"], k) not in finished]
    return order


def fingerprint_key(rec: Record) -> str | None:
    """The record's machine fingerprint (harness.env.fingerprint) as one comparable string."""
    fp = rec.get("fingerprint")
    return json.dumps(fp, sort_keys=True) if fp else None


def combine_all(recs: list[Record]) -> list[Record]:
    """One record per cell and machine from its rounds, in first-seen order: rounds of one cell
    that ran on machines with different fingerprints (a mixed cluster) are never pooled. A round
    without a fingerprint (a job the scheduler lost with its node) joins its cell's machine where
    the cell has one."""
    machines: dict[tuple, set[str]] = {}
    for r in recs:
        if key := fingerprint_key(r):
            machines.setdefault((r.get("machine"), r.get("run_id"), r.get("cell_id")), set()).add(key)
    groups: dict[tuple, list[Record]] = {}
    for r in recs:
        cell = (r.get("machine"), r.get("run_id"), r.get("cell_id"))
        known = machines.get(cell, set())
        fp = fingerprint_key(r) or (next(iter(known)) if len(known) == 1 else None)
        groups.setdefault((*cell[:2], fp, r.get("cell_id") or id(r)), []).append(r)
    out = []
    for (_, _, fp, _), group in groups.items():
        rec = combine(group)
        out.append(rec if rec.get("fingerprint") or not fp else {**rec, "fingerprint": json.loads(fp)})
    return out


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


def combine(runs: list[Record]) -> Record:
    """A cell's record from its rounds. A round that did not end ``ok`` decides the status (its
    record is returned, with the number of rounds that did). Otherwise: the cold window and
    first step of round 1 (the first cold start), steady statistics over rounds as the module
    says, raw steps pooled for plots and quartiles, each round's median and cold start kept."""
    runs = sorted(runs, key=round_of)
    bad = [r for r in runs if r["status"] != "ok"]
    if bad:
        return {**bad[0], "rounds_ok": len(runs) - len(bad)}
    if len(runs) == 1:
        return runs[0]  # its interval, from the worker, covers the noise within one process
    record = dict(runs[0])
    per_round = [r["step_times_s"] for r in runs]
    pooled = [t for times in per_round for t in times]
    medians = [step_time(r["step_times_s"], _batches(r)) for r in runs]
    mean = float(np.mean(medians))  # one value per process: processes differ more than steps
    record.update(summarize(pooled, record["batch_size"], ci=False))
    if _batches(record) is not None:
        record["step_batches"] = [b for r in runs for b in r["step_batches"]]
        record["pass_s"] = mean * record["pass_steps"]
    record.update(
        median_s=mean,
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
    record["ci_low_s"], record["ci_high_s"] = interval(record)
    # An image pipeline's measures (harness.measuring.input_pipeline): each round's, averaged; waits pooled.
    for field in PIPELINE_MEANS:
        if all(r.get(field) is not None for r in runs):
            record[field] = float(np.mean([r[field] for r in runs]))
    if all("wait_times_s" in r for r in runs):
        record["wait_times_s"] = [t for r in runs for t in r["wait_times_s"]]
    for field in ("tokens_per_s", "gflops"):
        if record.get(field) is not None:
            record[field] = float(np.mean([r[field] for r in runs]))
    for field in ("gflops_max_step", "pipelined_gflops_max"):
        if all(r.get(field) is not None for r in runs):
            record[field] = max(r[field] for r in runs)
    if all(r.get("pipelined_s") is not None for r in runs):
        record["round_pipelined_s"] = [r["pipelined_s"] for r in runs]
        record["pipelined_s"] = float(np.mean(record["round_pipelined_s"]))
        if all(r.get("synced_block_s") for r in runs):
            record["synced_block_s"] = float(np.mean([r["synced_block_s"] for r in runs]))
        record["pipelined_samples_per_s"] = record["batch_size"] / record["pipelined_s"]
        record["pipelined_recompiles"] = sum(r.get("pipelined_recompiles") or 0 for r in runs)
    else:
        record["pipelined_s"] = None
    return record


#: Each round's bootstrap step times, computed once: (cell, round, its steps) -> array.
_BOOTS: dict[tuple, np.ndarray] = {}


def _batches(rec: Record) -> list[int] | None:
    """The batch each steady step ran, where steps differ in size (else None: plain medians)."""
    return rec.get("step_batches") if (rec.get("pass_steps") or 1) > 1 else None


def step_time(times: list[float], batches: list[int] | None) -> float:
    """One round's step time: the median, or over a pass of variable-size steps, ``pass_mean``."""
    return float(np.median(times)) if batches is None else pass_mean(times, batches)


def _per_round(rec: Record) -> dict[int, tuple[list[float], list[int] | None]]:
    """Round number -> that round's steady step times and their batches, for a combined record."""
    numbers = rec.get("round_numbers") or [round_of(rec)]
    sizes = rec.get("round_steps") or [len(rec["step_times_s"])]
    batches = _batches(rec)
    out, start = {}, 0
    for k, n in zip(numbers, sizes, strict=True):
        out[k] = (rec["step_times_s"][start : start + n], None if batches is None else batches[start : start + n])
        start += n
    return out


def _boots(rec: Record, rounds: list[int]) -> np.ndarray:
    """(len(rounds), BOOTSTRAP_SAMPLES) bootstrap step times of the given rounds of a cell."""
    per_round = _per_round(rec)
    rows = []
    for k in rounds:
        times, batches = per_round[k]
        data = np.asarray(times, dtype=np.float64).tobytes()
        key = (rec.get("cell_id"), k, data)
        if key not in _BOOTS:  # seeded by the data: reproducible, and independent between cells
            seed = zlib.crc32(data)
            _BOOTS[key] = bootstrap_medians(times, seed) if batches is None else pass_bootstrap(times, batches, seed)
        rows.append(_BOOTS[key])
    return np.stack(rows)


def _pick(n: int, rng: np.random.Generator) -> np.ndarray:
    """For each bootstrap sample, n round indices drawn with replacement."""
    return rng.integers(0, n, size=(BOOTSTRAP_SAMPLES, n))


def _resampled_mean(boots: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Per bootstrap sample: the mean of resampled rounds' resampled medians."""
    return boots[_pick(len(boots), rng), np.arange(BOOTSTRAP_SAMPLES)[:, None]].mean(axis=1)


def interval(rec: Record) -> tuple[float, float]:
    """95% interval of a cell's steady time: rounds resampled, then steps within each."""
    rounds = sorted(_per_round(rec))
    return percentile_interval(_resampled_mean(_boots(rec, rounds), np.random.default_rng(0)))


def ratio(a: Record, b: Record, paired: bool) -> tuple[float, float, float]:
    """time(b) / time(a) and its 95% interval.

    ``paired`` (two cells of one run): the mean over their common rounds of round-by-round
    ratios of medians, rounds resampled together, steps resampled within every round. Unpaired
    (one cell in two runs, or cells without common rounds): ``welch_ratio`` of their round
    medians where each has two rounds or more; else the ratio of their steady times, each
    cell's rounds and steps resampled on their own.
    """
    ra, rb = _per_round(a), _per_round(b)
    common = sorted(set(ra) & set(rb))
    rng = np.random.default_rng(1)
    if paired and common:
        pick = _pick(len(common), rng)
        columns = np.arange(BOOTSTRAP_SAMPLES)[:, None]
        samples = (_boots(b, common)[pick, columns] / _boots(a, common)[pick, columns]).mean(axis=1)
        point = float(np.mean([step_time(*rb[k]) / step_time(*ra[k]) for k in common]))
        return (point, *percentile_interval(samples))
    la, lb = (np.log([step_time(*r[k]) for k in sorted(r)]) for r in (ra, rb))
    if len(la) >= 2 and len(lb) >= 2:
        return welch_ratio(la, lb)
    ma = _resampled_mean(_boots(a, sorted(ra)), rng)
    mb = _resampled_mean(_boots(b, sorted(rb)), rng)
    return (b["median_s"] / a["median_s"], *percentile_interval(mb / ma))


def welch_ratio(log_a: np.ndarray, log_b: np.ndarray, level: float = 0.95) -> tuple[float, float, float]:
    """Ratio of geometric means of two sets of round medians (given as logs) and its interval
    from Welch's t on the logs: unequal variances, and a t quantile for the few rounds there are.

    Why not the bootstrap here: two runs are compared through their rounds only (nothing pairs
    them), and resampling 2 to 5 rounds under-covers badly (2 rounds give 3 distinct means, an
    interval no wider than their range). In the committed rerun experiments the bootstrap called
    2 of 8 (2 rounds) and 1 of 8 (4 rounds) identical cells changed; Welch's interval, honest
    about how few processes were seen, called none."""
    va, vb = log_a.var(ddof=1) / len(log_a), log_b.var(ddof=1) / len(log_b)
    diff, se = float(log_b.mean() - log_a.mean()), float(np.sqrt(va + vb))
    if se == 0:
        return float(np.exp(diff)), float(np.exp(diff)), float(np.exp(diff))
    df = (va + vb) ** 2 / (va**2 / (len(log_a) - 1) + vb**2 / (len(log_b) - 1))
    t = float(scipy.stats.t.ppf(0.5 + level / 2, df))
    return float(np.exp(diff)), float(np.exp(diff - t * se)), float(np.exp(diff + t * se))


def separated(a: Record, b: Record) -> bool:
    """True when two cells differ: the 95% interval of their time ratio excludes 1 (paired by
    round within one run, unpaired across runs). Records without raw steps fall back to
    non-overlapping intervals of each."""
    if "step_times_s" not in a or "step_times_s" not in b:
        if "ci_low_s" not in a or "ci_low_s" not in b:
            return False
        return a["ci_high_s"] < b["ci_low_s"] or b["ci_high_s"] < a["ci_low_s"]
    _, low, high = relative(a, b)
    return high < 1 or low > 1


def relative(a: Record, b: Record) -> tuple[float, float, float]:
    """``ratio(a, b)``, paired by round where both cells come from one run on one machine."""
    same_run = a.get("run_id") == b.get("run_id") and a.get("machine") == b.get("machine")
    return ratio(a, b, paired=same_run)
