"""Markdown report built from a run directory's records and env.json alone."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
from tabulate import tabulate

from harness import records
from harness.stats import NOISY_IQR_RATIO
from harness.timing import PROFILES

DASH = "—"


def sig(value: Any, digits: int = 3) -> str:
    """A number to ``digits`` significant figures, or a dash when absent."""
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return DASH
    value = float(value)
    if value == 0:
        return "0"
    if abs(value) >= 10 ** (digits - 1):
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"


def _status(rec: dict[str, Any]) -> str:
    if rec["status"] == "ok":
        return "ok"
    reason = " ".join(str(rec.get("reason", "")).split())
    return f"{rec['status']}: {reason}"


def _title(rec: dict[str, Any]) -> str:
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


def _compiles(rec: dict[str, Any]) -> str:
    """Trace and compile counts during training, as the framework itself reports them."""
    parts = []
    if rec.get("traces") is not None:
        parts.append(f"{rec['traces']} traces")
    if rec.get("compiles") is not None:
        parts.append(f"{rec['compiles']} compiles")
    if rec.get("compile_s") is not None:
        parts.append(f"{sig(rec['compile_s'])} s")
    return ", ".join(parts) or DASH


def strategy(rec: dict[str, Any]) -> str | None:
    return (rec.get("spec") or {}).get("strategy") if (rec.get("spec") or {}).get("task") == "train" else None


def _device(rec: dict[str, Any]) -> str:
    device = rec.get("device") or rec["device_requested"]
    return f"{device} (auto)" if rec["device_requested"] == "auto" and rec["status"] == "ok" else device


def workload_table(recs: list[dict[str, Any]]) -> str:
    ok = [r for r in recs if r["status"] == "ok"]
    fastest = min((r["median_s"] for r in ok), default=None)
    with_strategy = any(strategy(r) for r in recs)
    rows = []
    for r in recs:
        good = r["status"] == "ok"
        iqr = sig(r["iqr_s"] * 1e3) + (" noisy" if r.get("noisy") else "") if good else DASH
        rows.append(
            [
                r["adapter"],
                r.get("graph", DASH),
                *([strategy(r) or DASH] if with_strategy else []),
                _device(r),
                sig(r["first_step_s"] * 1e3) if good else DASH,
                sig(r["median_s"] * 1e3) if good else DASH,
                iqr,
                sig(r["samples_per_s"]) if good else DASH,
                f"{r['median_s'] / fastest:.2f}" if good else DASH,
                _compiles(r) if good else DASH,
                f"{r['loss_first']:.3f} → {r['loss_last']:.3f}" if good else DASH,
                r.get("steps", DASH) if good else DASH,
                _status(r),
            ]
        )
    headers = [
        "adapter",
        "graph",
        *(["strategy"] if with_strategy else []),
        "device",
        "first step (ms)",
        "steady median (ms/step)",
        "IQR (ms)",
        "samples/s",
        "time vs fastest",
        "traces / compiles",
        "loss first → last",
        "timed steps",
        "status",
    ]
    return tabulate(rows, headers, tablefmt="github", disable_numparse=True)


def settings_table(recs: list[dict[str, Any]]) -> str:
    seen: dict[str, list[str]] = {}
    for r in recs:
        if r["status"] != "ok" or r["adapter"] in seen:
            continue
        versions = ", ".join(f"{k} {v}" for k, v in sorted(r.get("versions", {}).items()))
        settings = ", ".join(f"{k}={v}" for k, v in sorted(r.get("settings", {}).items()))
        seen[r["adapter"]] = [r["adapter"], versions, settings]
    if not seen:
        return ""
    return tabulate(list(seen.values()), ["adapter", "versions", "settings"], tablefmt="github")


def env_table(env: dict[str, Any]) -> str:
    gpus = "; ".join(f"{g['name']} (driver {g['driver']}, {g['memory']})" for g in env.get("gpus", [])) or "none"
    packages = ", ".join(f"{k} {v}" for k, v in sorted(env.get("packages", {}).items()))
    rows = [
        ["CPU", f"{env.get('cpu')} ({env.get('cpu_logical')} logical cores, {env.get('cpu_physical')} physical)"],
        ["memory", f"{env.get('memory_gib')} GiB"],
        ["GPU", gpus],
        ["threads per framework", env.get("threads")],
        ["Python", env.get("python")],
        ["OS", env.get("platform")],
        ["packages", packages],
        ["git", f"{env.get('git_sha')}{' (dirty tree)' if env.get('git_dirty') else ''}"],
        ["command", f"`{env.get('command')}`"],
    ]
    return tabulate(rows, ["", ""], tablefmt="github")


def method(recs: list[dict[str, Any]]) -> str:
    names = sorted({r.get("profile") for r in recs if r.get("profile") in PROFILES})
    lines = []
    for name in names:
        p = PROFILES[name]
        lines.append(
            f"- Profile `{name}`: the first step is timed alone (trace, compile and first run); then "
            f"{p.warmup_steps} untimed warm-up steps; then timed steps until at least {p.min_steps} steps "
            f"and {p.budget_s:g} s (at most {p.max_steps})."
        )
    lines += [
        "- Every timed step is the adapter's `train_step` followed by `sync`, which blocks until the "
        "device has finished and reads the loss, so asynchronous dispatch cannot hide work.",
        "- Each cell runs in a fresh process; every framework starts from the same NumPy parameters and "
        "trains on the same batches, already placed on the device (placement is timed apart).",
        "- `time vs fastest` is this cell's median over the fastest median of the workload (1.00 = fastest). "
        f"IQR is flagged `noisy` when it exceeds {NOISY_IQR_RATIO:.0%} of the median.",
        "- `first step` includes tracing and compilation for static-graph adapters. `traces / compiles` "
        "are counted during training by the framework's own instrumentation (tf.function's tracing "
        "count, jax.monitoring compile events); a dash means the adapter has none to report.",
    ]
    return "\n".join(lines)


def cumulative_s(rec: dict[str, Any], steps: int) -> float:
    """Seconds to train ``steps`` batches from a cold start: the measured cold window, then
    the steady median per step beyond it."""
    cold = rec["cold_times_s"]
    if steps <= len(cold):
        return float(sum(cold[:steps]))
    return float(sum(cold)) + (steps - len(cold)) * rec["median_s"]


def break_even(static: dict[str, Any], eager: dict[str, Any]) -> int | None:
    """The first step count at which ``static`` has spent no more time than ``eager`` since a
    cold start, or None if it never catches up (its steady step is not faster)."""
    window = max(len(static["cold_times_s"]), len(eager["cold_times_s"]))
    for n in range(1, window + 1):
        if cumulative_s(static, n) <= cumulative_s(eager, n):
            return n
    gain = eager["median_s"] - static["median_s"]
    if gain <= 0:
        return None
    behind = cumulative_s(static, window) - cumulative_s(eager, window)
    return window + math.ceil(behind / gain)


def static_vs_dynamic(groups: dict[tuple, list[dict[str, Any]]]) -> list[str]:
    """For workloads run under loop strategies: compiles, cold time and break-even per cell."""
    out: list[str] = []
    for (workload, _), recs in groups.items():
        ok = [r for r in recs if r["status"] == "ok" and strategy(r) and "cold_times_s" in r]
        for device in sorted({_device(r) for r in ok}):
            cells = [r for r in ok if _device(r) == device]
            eager = [r for r in cells if r.get("graph") == "dynamic"]
            if not cells:
                continue
            base = min(eager, key=lambda r: r["median_s"]) if eager else None
            n = max(len(r["cold_times_s"]) for r in cells)
            rows = []
            for r in sorted(cells, key=lambda r: (r.get("graph") != "static", r["adapter"])):
                if r is base:
                    even = "baseline"
                elif base is None or r.get("graph") != "static":
                    even = DASH
                else:
                    steps = break_even(r, base)
                    even = "never" if steps is None else f"{steps:,}"
                rows.append(
                    [
                        r["adapter"],
                        r.get("graph", DASH),
                        strategy(r),
                        _compiles(r),
                        sig(r["first_step_s"] * 1e3),
                        sig(r["median_s"] * 1e3),
                        sig(cumulative_s(r, n)),
                        even,
                    ]
                )
            headers = [
                "adapter",
                "graph",
                "strategy",
                "traces / compiles",
                "first step (ms)",
                "steady (ms/step)",
                f"cold time, {n} batches (s)",
                "break-even (steps)",
            ]
            out += [f"## Static vs dynamic: {workload} on {device}", ""]
            if base is not None:
                out += [
                    f"Break-even: the number of training steps from a cold start after which the static-graph "
                    f"cell has spent no more time in total than the fastest dynamic-graph cell, "
                    f"{base['adapter']} ({strategy(base)}, {sig(base['median_s'] * 1e3)} ms/step); measured over "
                    f"the first {n} steps (every compile included), extrapolated with the steady medians beyond. "
                    "`never`: its steady step is not faster.",
                    "",
                ]
            out += [tabulate(rows, headers, tablefmt="github", disable_numparse=True), ""]
    return out


def failures(recs: list[dict[str, Any]]) -> list[str]:
    """A section with each failed cell's reason and the tail of its stderr."""
    out = []
    for r in recs:
        if r["status"] != "failed":
            continue
        out += [f"- **{r['adapter']} / {r['workload']} / {r['device_requested']}**: {r['reason']}"]
        if r.get("stderr_tail"):
            out += ["", "  ```text", *(f"  {line}" for line in r["stderr_tail"].splitlines()), "  ```"]
    return ["## Failed cells", "", *out, ""] if out else []


def build(run_dir: Path) -> str:
    recs = records.load(run_dir / records.RESULTS)
    env_path = run_dir / records.ENV
    env = json.loads(env_path.read_text()) if env_path.is_file() else {}
    run_id = recs[0].get("run_id", run_dir.name) if recs else run_dir.name
    counts = pd.Series([r["status"] for r in recs]).value_counts().to_dict() if recs else {}
    out = [
        f"# dlcompare report: run {run_id}",
        "",
        f"{len(recs)} cells: " + ", ".join(f"{counts.get(s, 0)} {s}" for s in records.STATUSES) + ".",
        "",
    ]
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in recs:
        key = tuple(o for o in r.get("overrides", []) if not o.startswith("strategy="))
        groups.setdefault((r["workload"], key), []).append(r)
    for group in groups.values():
        out += [_title(group[0]), "", workload_table(group), ""]
    out += static_vs_dynamic(groups)
    out += failures(recs)
    settings = settings_table(recs)
    if settings:
        out += ["## Framework settings", "", settings, ""]
    if env:
        out += ["## Environment", "", env_table(env), ""]
    out += ["## Method", "", method(recs), ""]
    return "\n".join(out)


def write(run_dir: Path) -> Path:
    path = run_dir / "report.md"
    path.write_text(build(run_dir))
    return path
