"""fidelity.md: each adapter against its framework's idiomatic script (harness.checks.fidelity).

Per adapter and batch size: latency (synced steps) and throughput (per step in pipelined
blocks) of the adapter's cell and of the script, and their ratio adapter / script. The latency
ratio is paired by round with a 95% interval from the rounds' process levels (harness.stats.verdicts:
"unresolved" below three rounds); the throughput ratio is the mean of the per-round ratios with their range.
A ratio above TARGET means the adapter costs more than the framework does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from tabulate import tabulate

from harness import records
from harness.records import IDIOMATIC, is_idiomatic, load_env
from harness.reporting.formatting import machine_name
from harness.stats.cells import process_level, round_of
from harness.stats.verdicts import pair_verdict

TARGET = 1.10
#: Step-0 losses of adapter and script must agree this closely: they start from one model.
LOSS_RTOL = 1e-4


def _pooled(runs: list[dict[str, Any]]) -> dict[str, Any]:
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


def _batch(rec: dict[str, Any]) -> int:
    return int(rec["spec"]["batch_size"])


def rows(recs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per adapter cell with a script: the two sides' times and ratios, or why not."""
    cells: dict[str, list[dict[str, Any]]] = {}
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
        latency = pair_verdict(s, a)
        common = sorted(set(a["pipelined"]) & set(s["pipelined"]))
        tput = [a["pipelined"][k] / s["pipelined"][k] for k in common if a["pipelined"][k] and s["pipelined"][k]]
        row.update(
            adapter_s=a["median_s"],
            script_s=s["median_s"],
            latency=(latency.point, latency.low, latency.high),
            adapter_pipelined_s=float(np.mean([v for v in a["pipelined"].values() if v])) if tput else None,
            script_pipelined_s=float(np.mean([v for v in s["pipelined"].values() if v])) if tput else None,
            throughput=(float(np.mean(tput)), min(tput), max(tput)) if tput else None,
            rounds=len(set(a["round_numbers"]) & set(s["round_numbers"])),
            same_start=_same(a["loss_first"], s["loss_first"]),
            contended=any(r.get("contended") for r in runs + twin),
        )
        out.append(row)
    return sorted(out, key=lambda r: (r["adapter"], r["batch"]))


def _same(a: float | None, b: float | None) -> bool | None:
    if a is None or b is None:
        return None
    return abs(a - b) <= LOSS_RTOL * max(abs(a), abs(b))


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.3g}"


def _verdict(row: dict[str, Any]) -> str:
    over = [name for name in ("latency", "throughput") if row.get(name) and row[name][0] > TARGET]
    if row.get("contended"):
        return "unresolved: another process used the CPU meanwhile (harness.measuring.contention)"
    if row.get("same_start") is False:
        return "different model (step-0 loss differs)"
    return f"over {TARGET:.2f}x: {', '.join(over)}" if over else f"within {TARGET:.2f}x"


def table(found: list[dict[str, Any]]) -> str:
    body = []
    for r in found:
        if "problem" in r:
            body.append([r["adapter"], r["batch"], *["-"] * 6, r["problem"]])
            continue
        lat, tput = r["latency"], r["throughput"]
        body.append(
            [
                r["adapter"],
                r["batch"],
                _ms(r["adapter_s"]),
                _ms(r["script_s"]),
                f"{lat[0]:.2f} [{lat[1]:.2f}, {lat[2]:.2f}]" if lat[2] < float("inf") else f"{lat[0]:.2f} (unresolved)",
                f"{_ms(r['adapter_pipelined_s'])} / {_ms(r['script_pipelined_s'])}",
                "-" if tput is None else f"{tput[0]:.2f} ({tput[1]:.2f}..{tput[2]:.2f})",
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
        "throughput ratio (rounds' range)",
        "same step-0 loss",
        "verdict",
    ]
    return tabulate(body, head, tablefmt="github", disable_numparse=True)


def summary(found: list[dict[str, Any]]) -> list[str]:
    measured = [r for r in found if "problem" not in r and not r["contended"]]
    lat = [r for r in measured if r["latency"][0] <= TARGET]
    tput = [r for r in measured if r["throughput"] and r["throughput"][0] <= TARGET]
    lines = [
        f"{len(lat)} of {len(measured)} adapter cells are within {TARGET:.2f}x of their idiomatic script on latency, "
        f"{len(tput)} of {len(measured)} on throughput."
    ]
    busy = len([r for r in found if r.get("contended")])
    if busy:
        lines.append(f"{busy} cells ran while other processes used the CPU and are unresolved.")
    worst = max(measured, key=lambda r: r["latency"][0], default=None)
    if worst is not None:
        lines.append(
            f"Largest latency ratio: {worst['adapter']} at batch {worst['batch']}, {worst['latency'][0]:.2f}x "
            f"({_ms(worst['adapter_s'])} vs {_ms(worst['script_s'])} ms/step)."
        )
    faster = [r for r in measured if r["latency"][2] < 1]
    if faster:
        names = ", ".join(f"{r['adapter']} (batch {r['batch']}, {r['latency'][0]:.2f}x)" for r in faster)
        lines.append(f"Faster than their script (interval below 1): {names}.")
    return lines


def build(run_dir: Path) -> str:
    recs = records.load(run_dir / records.RESULTS)
    env = load_env(run_dir)
    found = rows(recs)
    scripts = sorted({r["script"] for r in found if r.get("script")})
    out = [
        f"# dlcompare fidelity: adapters against idiomatic scripts, run {run_dir.name}",
        "",
        f"Machine: {machine_name(env) if env else 'unknown'}; git {env.get('git_sha', '?')}.",
        "",
        *summary(found),
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
        f"framework does; the target is {TARGET:.2f}x. Scripts: " + ", ".join(f"`{s}`" for s in scripts) + ".",
        "",
    ]
    return "\n".join(out)


def write(run_dir: Path) -> Path:
    path = run_dir / "fidelity.md"
    path.write_text(build(run_dir))
    return path
