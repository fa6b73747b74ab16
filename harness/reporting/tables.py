"""The per-workload results table, the framework settings and the environment tables."""

from __future__ import annotations

from typing import Any

from tabulate import tabulate

from harness.reporting.cells import overlap, strategy
from harness.reporting.formatting import DASH, compiles_text, device_label, sig, status_text
from harness.stats.verdicts import separated


def table_title(rec: dict[str, Any]) -> str:
    spec = rec.get("spec") or {}
    parts = [f"## {rec['workload']}"]
    detail = []
    if rec.get("param_count"):
        detail.append(f"{rec['param_count']:,} parameters")
    if "batch_size" in spec:
        detail.append(f"batch {spec['batch_size']}")
    if "optimizer" in spec:
        detail.append(f"{spec['optimizer']} lr {spec['learning_rate']:g}")
    overrides = [o for o in rec.get("overrides", []) if not o.startswith("strategy=")]
    if overrides:
        detail.append("overrides: " + ", ".join(overrides))
    return parts[0] + (f" ({', '.join(detail)})" if detail else "")


def _trains(rec: dict[str, Any]) -> bool:
    """False for inference workloads, whose sync value is a caption length, not a loss."""
    return (rec.get("spec") or {}).get("task", "train") == "train"


def _vs_fastest(rec: dict[str, Any], fastest: dict[str, Any]) -> str:
    ratio = f"{rec['median_s'] / fastest['median_s']:.2f}"
    if rec is fastest or "ci_low_s" not in rec:
        return ratio
    return ratio if separated(rec, fastest) else f"{ratio} (tie)"


def _median_ci(rec: dict[str, Any]) -> str:
    text = sig(rec["median_s"] * 1e3) + (" †" if (rec.get("pass_steps") or 1) > 1 else "")
    if "ci_low_s" in rec:
        text += f" [{sig(rec['ci_low_s'] * 1e3)}, {sig(rec['ci_high_s'] * 1e3)}]"
    return text


def _outcome(rec: dict[str, Any]) -> str:
    """Training: the loss at the first and last timed step. Decoding: tokens per caption."""
    if _trains(rec):
        return f"{rec['loss_first']:.3f} → {rec['loss_last']:.3f}"
    if rec.get("decode_len_mean") is None:
        return DASH
    return f"{sig(rec['decode_len_mean'])} per caption ({rec['decode_len_min']}..{rec['decode_len_max']})"


def _pipelined(rec: dict[str, Any]) -> str:
    """``0.61 (0.83x)``: time per step with one sync per block, and its ratio to the synced steps
    over windows of the same length (cells.overlap)."""
    if rec.get("pipelined_s") is None:
        return DASH
    return f"{sig(rec['pipelined_s'] * 1e3)} ({overlap(rec):.2f}x)"


def floor_text(rec: dict[str, Any]) -> str:
    """``2.1x kernels``: the steady step as a multiple of the larger of its two floors
    (harness.measuring.floors), named: ``kernels`` (compute-bound) or ``dispatch`` (overhead-bound)."""
    floors = {"kernels": rec.get("kernel_floor_s"), "dispatch": rec.get("dispatch_floor_s")}
    known = {k: v for k, v in floors.items() if v}
    if not known:
        return DASH
    name, value = max(known.items(), key=lambda kv: kv[1])
    return f"{rec['median_s'] / value:.1f}x {name}"


def _steps(rec: dict[str, Any]) -> str:
    """``412 (2)``: timed steps in all, and the rounds (fresh processes) they came from."""
    return f"{rec.get('steps', DASH)} ({rec.get('rounds_done') or 1})"


def workload_table(recs: list[dict[str, Any]]) -> str:
    fastest: dict[Any, dict[str, Any]] = {}  # per machine: cells of two machines are never compared
    for r in recs:
        best = fastest.get(r.get("machine"))
        if r["status"] == "ok" and (best is None or r["median_s"] < best["median_s"]):
            fastest[r.get("machine")] = r
    with_strategy = any(strategy(r) for r in recs)
    with_tokens = any(r.get("tokens_per_s") for r in recs)
    with_floors = any(r.get("kernel_floor_s") or r.get("dispatch_floor_s") for r in recs)
    rows = []
    for r in recs:
        good = r["status"] == "ok"
        iqr = sig(r["iqr_s"] * 1e3) + (" noisy" if r.get("noisy") else "") if good else DASH
        rows.append(
            [
                r["adapter"],
                r.get("graph", DASH),
                *([strategy(r) or DASH] if with_strategy else []),
                device_label(r),
                sig(r["first_step_s"] * 1e3) if good else DASH,
                _median_ci(r) if good else DASH,
                _pipelined(r) if good else DASH,
                iqr,
                sig(r["samples_per_s"]) if good else DASH,
                *([sig(r.get("tokens_per_s")) if good else DASH] if with_tokens else []),
                _vs_fastest(r, fastest[r.get("machine")]) if good else DASH,
                *([floor_text(r) if good else DASH] if with_floors else []),
                compiles_text(r) if good else DASH,
                _outcome(r) if good else DASH,
                _steps(r) if good else DASH,
                status_text(r),
            ]
        )
    headers = [
        "adapter",
        "graph",
        *(["strategy"] if with_strategy else []),
        "device",
        "first step (ms)",
        "steady median [95% CI] (ms/step)",
        "pipelined (ms/step)",
        "IQR (ms)",
        "samples/s",
        *(["tokens/s"] if with_tokens else []),
        "time vs fastest",
        *(["vs its floor"] if with_floors else []),
        "traces / compiles",
        "loss first → last / decoded tokens",
        "timed steps (rounds)",
        "status",
    ]
    return tabulate(rows, headers, tablefmt="github", disable_numparse=True)


def settings_table(recs: list[dict[str, Any]]) -> str:
    """One row per adapter and distinct settings (the optimiser, for one, follows the workload),
    naming the workloads that ran with them."""
    seen: dict[tuple[str, str, str], list[str]] = {}
    for r in recs:
        if r["status"] != "ok":
            continue
        versions = ", ".join(f"{k} {v}" for k, v in sorted(r.get("versions", {}).items()))
        settings = ", ".join(f"{k}={v}" for k, v in sorted(r.get("settings", {}).items()))
        workloads = seen.setdefault((r["adapter"], versions, settings), [])
        if r["workload"] not in workloads:
            workloads.append(r["workload"])
    rows = [[adapter, ", ".join(w), versions, settings] for (adapter, versions, settings), w in seen.items()]
    if not rows:
        return ""
    return tabulate(rows, ["adapter", "workloads", "versions", "settings"], tablefmt="github")


def machines_table(recs: list[dict[str, Any]]) -> str:
    """Where a report's cells ran, one row per machine (fingerprint): its nodes and cells; empty
    where every cell ran on one machine."""
    found: dict[str, tuple[set[str], list[dict[str, Any]]]] = {}
    for r in recs:
        nodes, cells = found.setdefault(r.get("machine") or DASH, (set(), []))
        nodes.update(n for n in r.get("nodes") or [r.get("node")] if n)
        cells.append(r)
    if len(found) < 2:
        return ""
    rows = [
        [machine, ", ".join(sorted(nodes)) or DASH, len(cells), sum(c["status"] == "ok" for c in cells)]
        for machine, (nodes, cells) in sorted(found.items())
    ]
    return tabulate(rows, ["machine", "nodes", "cells", "ok"], tablefmt="github")


def environments_text(found: dict[str, Any]) -> str:
    """``main: /r/.venv (locks/cuda13.txt, CUDA 13); tf: /r/.venv-tf (locks/tf-cuda12.txt, CUDA 12, tensorflow)``."""
    parts = []
    for name, e in found.items():
        details = [e.get("lock") or "not installed by make", *([f"CUDA {e['cuda']}"] if e.get("cuda") else [])]
        details += [", ".join(e.get("frameworks") or [])] if e.get("frameworks") else []
        parts.append(f"{name}: {e.get('folder')} ({', '.join(details)})")
    return "; ".join(parts)


def env_table(env: dict[str, Any]) -> str:
    gpus = "; ".join(f"{g['name']} (driver {g['driver']}, {g['memory']})" for g in env.get("gpus", [])) or "none"
    packages = ", ".join(f"{k} {v}" for k, v in sorted(env.get("packages", {}).items()))
    rows = [
        ["CPU", f"{env.get('cpu')} ({env.get('cpu_logical')} logical cores, {env.get('cpu_physical')} physical)"],
        ["memory", f"{env.get('memory_gib')} GiB"],
        ["GPU", gpus],
        ["threads per framework", env.get("threads")],
        ["Python", env.get("python")],
        *([["environments", environments_text(env["environments"])]] if env.get("environments") else []),
        ["OS", env.get("platform")],
        ["packages", packages],
        ["git", f"{env.get('git_sha')}{' (dirty tree)' if env.get('git_dirty') else ''}"],
        ["command", f"`{env.get('command')}`"],
    ]
    return tabulate(rows, ["", ""], tablefmt="github")
