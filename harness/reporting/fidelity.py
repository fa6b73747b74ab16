"""fidelity.md: each adapter against its framework's idiomatic script (harness.checks.fidelity).

Per adapter and batch size: latency (synced steps) and throughput (per step in pipelined
blocks) of the adapter's cell and of the script, and their ratio adapter / script. The latency
ratio is paired by round with a 95% interval from the rounds' process levels (harness.stats.verdicts:
"unresolved" below three rounds); the throughput ratio is the geometric mean of the per-round ratios
with a 95% t interval over the rounds (harness.stats.inference.cell_interval; none from one round).

Judged both ways against TARGET (``against_target``): within only where the whole interval lies in
[1 / TARGET, TARGET]. An adapter faster than its script beyond that is flagged as plainly as a
slower one: a harness quicker than the code a framework's users run misrepresents the framework.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np
from tabulate import tabulate

from harness import records
from harness.records import IDIOMATIC, Record, is_idiomatic, load_env, round_of
from harness.reporting.formatting import machine_name
from harness.stats.cells import process_level
from harness.stats.inference import cell_interval
from harness.stats.verdicts import FASTER, SLOWER, UNRESOLVED, outcome_of, pair_verdict

TARGET = 1.10
WITHIN = f"within {TARGET:.2f}x"
FASTER_BEYOND = f"{FASTER} beyond {TARGET:.2f}x"
SLOWER_BEYOND = f"{SLOWER} beyond {TARGET:.2f}x"
MEASURES = ("latency", "throughput")
#: Step-0 losses of adapter and script must agree this closely: they start from one model.
LOSS_RTOL = 1e-4


def _pooled(runs: Sequence[Record]) -> dict[str, Any]:
    """A cell's rounds as one record that harness.stats.verdicts.pair_verdict reads."""
    runs = sorted(runs, key=round_of)
    return {
        "cell_id": runs[0]["cell_id"],
        "step_times_s": [t for r in runs for t in r["step_times_s"]],
        "round_numbers": [round_of(r) for r in runs],
        "process_levels": {round_of(r): level[0] for r in runs if (level := process_level(r))},
        "run_id": runs[0].get("run_id"),
        "machine": runs[0].get("machine"),
        "round_steps": [len(r["step_times_s"]) for r in runs],
        "median_s": float(np.mean([np.median(r["step_times_s"]) for r in runs])),
        "pipelined": {round_of(r): r.get("pipelined_s") for r in runs},
        "loss_first": runs[0].get("loss_first"),
    }


def _batch(rec: Record) -> int:
    return int(rec["spec"]["batch_size"])


def rows(recs: Sequence[Record]) -> list[dict[str, Any]]:
    """One row per adapter cell with a script: the two sides' times and ratios, or why not."""
    cells: dict[str, list[Record]] = {}
    for r in recs:
        cells.setdefault(r["cell_id"], []).append(r)
    out = []
    for cell_id, runs in cells.items():
        if is_idiomatic(runs[0]):
            continue
        twin = cells.get(f"{cell_id}|{IDIOMATIC}", [])
        row: dict[str, Any] = {"adapter": runs[0]["adapter"], "batch": _batch(runs[0]), "script": None}
        if twin:
            row["script"] = twin[0].get("script")
        bad = [r for r in runs + twin if r["status"] != "ok"]
        if bad or not twin:
            row["problem"] = f"{bad[0]['status']}: {bad[0]['reason']}" if bad else "the script did not run"
            out.append(row)
            continue
        a, s = _pooled(runs), _pooled(twin)
        latency = pair_verdict(cast(Record, s), cast(Record, a))
        common = sorted(set(a["pipelined"]) & set(s["pipelined"]))
        tput = [a["pipelined"][k] / s["pipelined"][k] for k in common if a["pipelined"][k] and s["pipelined"][k]]
        row.update(
            adapter_s=a["median_s"],
            script_s=s["median_s"],
            latency=(latency.point, latency.low, latency.high),
            adapter_pipelined_s=float(np.mean([v for v in a["pipelined"].values() if v])) if tput else None,
            script_pipelined_s=float(np.mean([v for v in s["pipelined"].values() if v])) if tput else None,
            throughput=_round_ratio(tput),
            rounds=len(set(a["round_numbers"]) & set(s["round_numbers"])),
            same_start=_same(a["loss_first"], s["loss_first"]),
            contended=any(r.get("contended") for r in runs + twin),
        )
        out.append(row)
    return sorted(out, key=lambda r: (r["adapter"], r["batch"]))


def _round_ratio(ratios: list[float]) -> tuple[float, float, float] | None:
    """Per-round ratios as their geometric mean and its 95% t interval over the rounds (one
    round: no interval, ``(point, 0, inf)``)."""
    if not ratios:
        return None
    logs = [math.log(r) for r in ratios]
    center = math.exp(float(np.mean(logs)))
    return (center, *cell_interval(logs, center)) if len(logs) > 1 else (center, 0.0, math.inf)


def _same(a: float | None, b: float | None) -> bool | None:
    if a is None or b is None:
        return None
    return abs(a - b) <= LOSS_RTOL * max(abs(a), abs(b))


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.3g}"


def against_target(ratio: tuple[float, float, float] | None) -> str:
    """Adapter / script ``(point, low, high)`` against TARGET both ways: within it only where the
    whole interval lies in [1 / TARGET, TARGET], beyond it (faster or slower) where the whole
    interval lies outside; else unresolved, with harness.stats.verdicts' word where the interval
    excludes 1 (faster or slower than the script, not surely beyond TARGET)."""
    if ratio is None or not math.isfinite(ratio[2]):
        return UNRESOLVED
    _, low, high = ratio
    if 1 / TARGET <= low and high <= TARGET:
        return WITHIN
    if low > TARGET:
        return SLOWER_BEYOND
    if high < 1 / TARGET:
        return FASTER_BEYOND
    word = outcome_of(low, high)[0]
    return _short_of(word) if word in (FASTER, SLOWER) else UNRESOLVED


def _short_of(word: str) -> str:
    """A ratio separated from 1 (``word``: faster or slower) but not surely beyond TARGET."""
    return f"{word}, unresolved against {TARGET:.2f}x"


def _verdict(row: dict[str, Any]) -> str:
    if row.get("contended"):
        return "unresolved: another process used the CPU meanwhile (harness.measuring.contention)"
    if row.get("same_start") is False:
        return "different model (step-0 loss differs)"
    measures: dict[str, list[str]] = {}
    for name in MEASURES:
        measures.setdefault(against_target(row.get(name)), []).append(name)
    if list(measures) == [WITHIN]:
        return WITHIN
    return "; ".join(f"{word}: {', '.join(names)}" for word, names in measures.items())


def _ratio(ratio: tuple[float, float, float] | None) -> str:
    if ratio is None:
        return "-"
    point, low, high = ratio
    return f"{point:.2f} [{low:.2f}, {high:.2f}]" if math.isfinite(high) else f"{point:.2f} (unresolved)"


def table(found: list[dict[str, Any]]) -> str:
    body = []
    for r in found:
        if "problem" in r:
            body.append([r["adapter"], r["batch"], *["-"] * 6, r["problem"]])
            continue
        body.append(
            [
                r["adapter"],
                r["batch"],
                _ms(r["adapter_s"]),
                _ms(r["script_s"]),
                _ratio(r["latency"]),
                f"{_ms(r['adapter_pipelined_s'])} / {_ms(r['script_pipelined_s'])}",
                _ratio(r["throughput"]),
                {True: "yes", False: "NO", None: "-"}[r["same_start"]],
                _verdict(r),
            ]
        )
    head = [
        "adapter",
        "batch",
        "adapter ms/step (latency)",
        "script ms/step (latency)",
        "latency ratio [CI]",
        "pipelined ms/step adapter / script",
        "throughput ratio [CI]",
        "same step-0 loss",
        "verdict",
    ]
    return tabulate(body, head, tablefmt="github", disable_numparse=True)


def _cells_judged(judged: list[tuple[dict[str, Any], dict[str, str]]], word: str) -> str:
    """The cells with ``word`` on some measure, each with those measures' ratios."""
    return ", ".join(
        f"{r['adapter']} at batch {r['batch']} ("
        + "; ".join(f"{m} {_ratio(r[m])}" for m in MEASURES if words[m] == word)
        + ")"
        for r, words in judged
        if word in words.values()
    )


def summary(found: list[dict[str, Any]]) -> list[str]:
    """The page's opening paragraphs: how many cells are within TARGET both ways, then the cells
    beyond it (faster ones flagged first) and the count left unresolved."""
    measured = [r for r in found if "problem" not in r and not r["contended"]]
    judged = [(r, {m: against_target(r[m]) for m in MEASURES}) for r in measured]
    within = {m: sum(words[m] == WITHIN for _, words in judged) for m in MEASURES}
    lines = [
        f"{within['latency']} of {len(measured)} adapter cells are within {TARGET:.2f}x of their idiomatic script "
        f"both ways on latency, {within['throughput']} of {len(measured)} on throughput: the whole 95% interval of "
        f"adapter / script inside [{1 / TARGET:.2f}, {TARGET:.2f}]. The others are beyond it or unresolved (below)."
    ]
    faster = _cells_judged(judged, FASTER_BEYOND)
    if faster:
        lines.append(
            f"**Faster than their idiomatic script beyond {TARGET:.2f}x**: {faster}. A harness quicker than the code "
            "a user of the framework runs misrepresents the framework just as a slower one does: these cells time "
            "the adapter, not what the framework's users get."
        )
    slower = _cells_judged(judged, SLOWER_BEYOND)
    if slower:
        lines.append(f"**Slower than their idiomatic script beyond {TARGET:.2f}x**: {slower}.")
    unsettled = {
        m: sum(words[m] not in (WITHIN, FASTER_BEYOND, SLOWER_BEYOND) for _, words in judged) for m in MEASURES
    }
    if any(unsettled.values()):
        separated = ", ".join(filter(None, (_cells_judged(judged, _short_of(w)) for w in (FASTER, SLOWER))))
        lines.append(
            f"Unresolved against {TARGET:.2f}x (the interval reaches past {1 / TARGET:.2f} or {TARGET:.2f}, or too few "
            f"rounds give none): {unsettled['latency']} on latency, {unsettled['throughput']} on throughput"
            + (
                f"; of these, faster or slower than their script (the interval excludes 1): {separated}."
                if separated
                else "."
            )
        )
    busy = len([r for r in found if r.get("contended")])
    if busy:
        lines.append(f"{busy} cells ran while other processes used the CPU and are unresolved.")
    return lines


def build(run_dir: Path, raw: list[Record] | None = None) -> str:
    """fidelity.md's text from a run's records (``raw``: as loaded, else read from the run)."""
    recs = records.load(run_dir / records.RESULTS) if raw is None else raw
    env = load_env(run_dir)
    found = rows(recs)
    scripts = sorted({r["script"] for r in found if r.get("script")})
    out = [
        f"# dlcompare fidelity: adapters against idiomatic scripts, run {run_dir.name}",
        "",
        f"Machine: {machine_name(env) if env else 'unknown'}; git {env.get('git_sha', '?')}.",
        "",
        "\n\n".join(summary(found)),
        "",
        table(found),
        "",
        "## Method",
        "",
        "Each adapter's ordinary bench cell (workload `mlp`, data `resident`) ran beside an idiomatic "
        "script of its framework (`fidelity/*.py`: the shortest training loop the framework's documentation "
        "teaches, written without the harness's adapter code), each in fresh processes, the rounds of all "
        "of them interleaved in a shuffled order, the script in the adapter's worker environment (same "
        "threads, same backend). Both start from the spec's weights on the spec's batches; their step-0 "
        f"losses must agree to {LOSS_RTOL:g} relative. Latency: per-step time with the loss read on the host "
        "every step (adapter: the harness's synced steady window; script: its own loop after one untimed "
        "pass). Throughput: per-step time of blocks issued back to back with one read per block (adapter: "
        "the harness's pipelined window, blocks of about 30 ms; script: blocks of about 0.2 s; Keras's "
        "script: whole `fit` epochs). Ratios are adapter / script: above 1 the adapter costs more than its "
        "framework does, below 1 less. A cell is within "
        f"{TARGET:.2f}x only where the whole 95% interval of its ratio lies inside [{1 / TARGET:.2f}, {TARGET:.2f}] "
        "(latency: paired by round, harness.stats.verdicts; throughput: a t interval over the rounds' ratios); "
        "beyond it either way where the whole interval lies outside, else unresolved. Faster beyond it is flagged "
        "like slower: a harness quicker than its framework's idiomatic code misrepresents the framework. Scripts: "
        + ", ".join(f"`{s}`" for s in scripts)
        + ".",
        "",
    ]
    return "\n".join(out)


def write(run_dir: Path, raw: list[Record] | None = None) -> Path:
    path = run_dir / "fidelity.md"
    path.write_text(build(run_dir, raw))
    return path
