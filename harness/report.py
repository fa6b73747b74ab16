"""Markdown report built from a run directory's records and env.json alone."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
from tabulate import tabulate

from harness import plots, records, rounds, summary
from harness.contention import CONTENDED_CORES
from harness.stats import NOISY_IQR_RATIO
from harness.summary import strategy
from harness.timing import BLOCK_S, CHECK_EVERY, MAX_COLD_PASSES, MIN_BLOCKS, PROFILES

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


def status_text(rec: dict[str, Any]) -> str:
    if rec["status"] == "ok":
        notes = []
        if rec.get("steady_recompiles"):
            n = rec["steady_recompiles"]
            notes.append(f"{n} recompile{'s' * (n > 1)} in the steady window, excluded")
        if rec.get("cold_settled") is False:
            notes.append("still compiling after the cold window")
        if rec.get("contended"):
            notes.append(f"contended ({rec['other_cpu_cores']:.2f} other cores busy): not ranked")
        return ", ".join(["ok", *notes])
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


def _trains(rec: dict[str, Any]) -> bool:
    """False for inference workloads, whose sync value is a caption length, not a loss."""
    return (rec.get("spec") or {}).get("task", "train") == "train"


def _device(rec: dict[str, Any]) -> str:
    device = rec.get("device") or rec["device_requested"]
    if rec["device_requested"] == "auto" and rec["status"] == "ok":
        device = f"{device} (auto)"
    return f"{rec['machine_label']}: {device}" if rec.get("machine_label") else device


def _vs_fastest(rec: dict[str, Any], fastest: dict[str, Any]) -> str:
    ratio = f"{rec['median_s'] / fastest['median_s']:.2f}"
    if rec is fastest or "ci_low_s" not in rec:
        return ratio
    return ratio if summary.separated(rec, fastest) else f"{ratio} (tie)"


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
    over windows of the same length (summary.overlap)."""
    if rec.get("pipelined_s") is None:
        return DASH
    return f"{sig(rec['pipelined_s'] * 1e3)} ({summary.overlap(rec):.2f}x)"


def _steps(rec: dict[str, Any]) -> str:
    """``412 (2)``: timed steps in all, and the rounds (fresh processes) they came from."""
    return f"{rec.get('steps', DASH)} ({rec.get('rounds_done') or 1})"


def workload_table(recs: list[dict[str, Any]]) -> str:
    ok = [r for r in recs if r["status"] == "ok"]
    fastest = min(ok, key=lambda r: r["median_s"], default=None)
    with_strategy = any(strategy(r) for r in recs)
    with_tokens = any(r.get("tokens_per_s") for r in recs)
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
                _median_ci(r) if good else DASH,
                _pipelined(r) if good else DASH,
                iqr,
                sig(r["samples_per_s"]) if good else DASH,
                *([sig(r.get("tokens_per_s")) if good else DASH] if with_tokens else []),
                _vs_fastest(r, fastest) if good else DASH,
                _compiles(r) if good else DASH,
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
        "traces / compiles",
        "loss first → last / decoded tokens",
        "timed steps (rounds)",
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
    done = sorted({r.get("rounds_done") or 1 for r in recs if r["status"] == "ok"})
    lines = []
    for name in names:
        p = PROFILES[name]
        lines.append(
            f"- Profile `{name}`: a cold window of every step from a cold start, each timed: at least "
            f"{1 + p.warmup_steps} steps and one whole pass over the dataset (its first step holds trace, "
            f"compile and first run), then, where the adapter counts its compiles, more passes until one "
            f"runs without compiling (at most {MAX_COLD_PASSES}). Then the steady window: timed steps until "
            f"at least {p.min_steps} and either {p.budget_s:g} s spent or IQR/median below "
            f"{p.target_rel_iqr:.0%} (checked every {CHECK_EVERY} steps), at most {p.max_steps}; a step "
            f"during which the adapter compiled is kept out of the statistics and counted."
        )
    if done:
        lines.append(
            f"- Rounds: each cell ran in {' or '.join(map(str, done))} fresh processes (rounds), round 1 of "
            "every cell in a shuffled order before round 2 of any, so the machine's drift during the run "
            "lands on every adapter alike. A cell's steady time is the mean over its rounds of each "
            "round's median step; its 95% interval resamples rounds, then steps within each round, so it "
            "covers the difference between processes, not only the noise within one. "
            + ("With one round, the interval covers only the noise within that process. " if 1 in done else "")
            + "First step and cold window are those of round 1."
        )
    lines += [
        "- Every timed step is the adapter's `train_step` followed by `sync`, which blocks until the "
        "device has finished and reads the loss, so asynchronous dispatch cannot hide work. On a GPU, "
        "one more step checks that the device has nothing queued right after `sync`. This synced step "
        "time (latency) is what tables and the summary rank by.",
        "- † Steps of different sizes (variable-length batches): the steady window and every pipelined "
        "block hold whole passes over the dataset, and the step time is the mean over a pass of each "
        "batch's median step (a pass's time divided by its steps), never the median of mixed lengths; "
        "two such cells compare the same batches.",
        f"- `pipelined`: after the steady window, blocks of steps issued back to back with one `sync` "
        f"at the end of each block, as a training loop runs them (Python dispatch overlaps device work); "
        f"a block lasts about {BLOCK_S * 1e3:g} ms (whole passes over the dataset where steps differ in "
        f"size), at least {MIN_BLOCKS} blocks; the median block's time per step, and in brackets its "
        "ratio to the synced steps cut into windows of a block's length (mean per step, median over "
        "windows; below 1: the loop gains from overlap). The physics check applies to both.",
        f"- A cell that ran while other processes used more than {CONTENDED_CORES:g} cores is marked "
        "`contended` and left out of the summary's verdicts.",
        "- Each cell runs in a fresh process; every framework starts from the same NumPy parameters and "
        "trains on the same batches, already placed on the device (placement is timed apart).",
        "- `time vs fastest` is this cell's steady time over the fastest one of the workload (1.00 = "
        "fastest); `(tie)`: the 95% interval of the ratio of the two, paired by round (round k of one "
        "cell against round k of the other), includes 1, so the cell is not ranked against the fastest. "
        f"IQR (of all rounds' steps) is flagged `noisy` when it exceeds {NOISY_IQR_RATIO:.0%} of the median.",
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


def load_env(run_dir: Path) -> dict[str, Any]:
    path = run_dir / records.ENV
    return json.loads(path.read_text()) if path.is_file() else {}


#: Measured peaks are best-of-five; a step may beat them by noise, not by more than this.
PEAK_SLACK = 1.10


def peak_gflops(env: dict[str, Any], rec: dict[str, Any]) -> float | None:
    peak = (env.get("peaks") or {}).get(rec.get("device") or "", {})
    return peak.get("matmul_gflops")


def physics_violations(recs: list[dict[str, Any]], env: dict[str, Any]) -> list[str]:
    """Cells whose fastest step or pipelined block claims more FLOP/s than the device's measured
    matmul peak (with PEAK_SLACK): a missing sync or a wrong FLOP count, never a real result. A
    record's own ``peak_gflops`` (merged runs) wins over ``env``'s."""
    problems = []
    for r in recs:
        peak = r.get("peak_gflops") or peak_gflops(env, r)
        if r["status"] != "ok" or not peak:
            continue
        for field, what in (("gflops_max_step", "a step"), ("pipelined_gflops_max", "a pipelined block")):
            if r.get(field) and r[field] > PEAK_SLACK * peak:
                problems.append(
                    f"{r['adapter']} / {r['workload']} / {r.get('device')}: {what} ran at {sig(r[field])} "
                    f"GFLOP/s, above the measured peak of {sig(peak)} GFLOP/s: its timing cannot be trusted"
                )
    return problems


def _label(rec: dict[str, Any]) -> list[str]:
    return [rec["adapter"], rec["workload"], strategy(rec) or DASH, _device(rec)]


def input_pipeline(recs: list[dict[str, Any]]) -> list[str]:
    """Per adapter/workload/device: steady step time per data mode against ``resident``."""
    cells: dict[tuple, dict[str, dict[str, Any]]] = {}
    for r in recs:
        key = (r["adapter"], r["workload"], strategy(r), r["device_requested"], r.get("machine"))
        cells.setdefault(key, {})[r.get("data", "resident")] = r
    rows = []
    for modes in cells.values():
        if len(modes) < 2 or "resident" not in modes:
            continue
        base = modes["resident"]
        row = _label(base)
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
        share = max(0.0, 1 - base["median_s"] / host["median_s"]) if both_ok else None
        row.append(DASH if share is None else f"{share:.0%}")
        rows.append(row)
    if not rows:
        modes = sorted({r.get("data", "resident") for r in recs})
        note = (
            f"This run measured one data mode ({', '.join(modes)}). Run with `DATA=all` (`--data all`) to "
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


def hardware(recs: list[dict[str, Any]], envs: dict[str, dict[str, Any]]) -> list[str]:
    """Achieved useful GFLOP/s against the measured matmul peak of the device (``envs`` by
    machine name; a plain env dict is one machine)."""
    if "peaks" in envs or not all(isinstance(v, dict) for v in envs.values()):
        envs = {"": envs}
    lines = []
    for machine, env in envs.items():
        lines += _peak_lines(machine if len(envs) > 1 else "", env.get("peaks") or {})
    rows = []
    for r in recs:
        if r["status"] != "ok" or r.get("data", "resident") != "resident" or r.get("gflops") is None:
            continue
        peak = r.get("peak_gflops") or peak_gflops(next(iter(envs.values())), r)
        pct = f"{r['gflops'] / peak:.1%}" if peak else DASH
        best = f"{r['gflops_max_step'] / peak:.1%}" if peak else DASH
        rows.append([*_label(r), sig(r["flops_per_step"] / 1e9), sig(r["gflops"]), pct, best])
    if not rows and not lines:
        return []
    out = ["## How close to the hardware", "", "Measured peaks, once per run:", "", *lines, ""]
    if rows:
        headers = ["adapter", "workload", "strategy", "device", "GFLOP per step", "GFLOP/s", "% of peak", "best step"]
        out += [
            "Useful work per step is counted from the spec (matmul and convolution multiply-adds, "
            "padding not counted); GFLOP/s is that work over the steady window's time.",
            "",
            tabulate(rows, headers, tablefmt="github", disable_numparse=True),
            "",
        ]
    problems = physics_violations(recs, next(iter(envs.values())))
    if problems:
        out += ["**Physics check failed** (timing suspect):", "", *(f"- {p}" for p in problems), ""]
    elif rows:
        out += [f"Physics check: no step exceeds {PEAK_SLACK:.0%} of the measured peak.", ""]
    return out


def _peak_lines(machine: str, peaks: dict[str, Any]) -> list[str]:
    lines = []
    for device, peak in peaks.items():
        where = f"{machine}: {device}" if machine else device
        if "error" in peak:
            lines.append(f"- {where}: peak not measured ({peak['error'].splitlines()[-1]})")
            continue
        by = peak["matmul_gflops_by"]
        source = ", ".join(f"{k} {sig(v)}" for k, v in by.items()) if isinstance(by, dict) else by
        lines.append(
            f"- {where}: float32 matmul {sig(peak['matmul_gflops'])} GFLOP/s ({source}); "
            f"copy {sig(peak['copy_gbs'])} GB/s (read + write)"
        )
    return lines


def _mib(value: Any) -> str:
    return "unavailable" if value is None else sig(value / 2**20)


def memory(recs: list[dict[str, Any]]) -> list[str]:
    rows = [
        [
            *_label(r),
            r.get("data", "resident"),
            _mib(r.get("host_peak_rss_bytes")),
            _mib(r.get("device_peak_bytes")),
            DASH if r.get("gpu_util_mean") is None else f"{r['gpu_util_mean']:.0f}%",
        ]
        for r in recs
        if r["status"] == "ok" and "host_peak_rss_bytes" in r
    ]
    if not rows:
        return []
    headers = ["adapter", "workload", "strategy", "device", "data", "host peak RSS (MiB)", "device peak (MiB)"]
    headers.append("GPU util (steady)")
    note = (
        "Host RSS is the worker process's peak (framework import included). Device peak is what the "
        "framework itself reports (torch max_memory_allocated, JAX peak_bytes_in_use, TF "
        "get_memory_info), with JAX preallocation off and TF memory growth on; on CPU the frameworks "
        "report none, so it reads unavailable, never 0. GPU utilisation is NVML's, sampled over the "
        "steady window."
    )
    return ["## Memory", "", note, "", tabulate(rows, headers, tablefmt="github", disable_numparse=True), ""]


def within_frameworks(groups: dict[tuple, list[dict[str, Any]]]) -> list[str]:
    """Each framework's dynamic and static modes side by side (torch eager vs torch.compile,
    TF eager vs tf.function, JAX op by op vs jit, Keras on torch vs on JAX)."""
    rows = []
    for (workload, _), recs in groups.items():
        ok = [r for r in recs if r["status"] == "ok"]
        for device in sorted({_device(r) for r in ok}):
            for framework in sorted({r.get("framework", "") for r in ok}):
                mine = [r for r in ok if _device(r) == device and r.get("framework") == framework]
                dynamic = [r for r in mine if r.get("graph") == "dynamic"]
                static = [r for r in mine if r.get("graph") == "static"]
                if not dynamic or not static:
                    continue
                d, st = min(dynamic, key=lambda r: r["median_s"]), min(static, key=lambda r: r["median_s"])
                steps = break_even(st, d) if "cold_times_s" in st and "cold_times_s" in d else None
                rows.append(
                    [
                        framework,
                        workload,
                        device,
                        " ".join(filter(None, [d["adapter"], strategy(d)])),
                        sig(d["median_s"] * 1e3),
                        " ".join(filter(None, [st["adapter"], strategy(st)])),
                        sig(st["median_s"] * 1e3),
                        f"{d['median_s'] / st['median_s']:.2f}x",
                        _compiles(st),
                        "never" if steps is None else f"{steps:,}",
                    ]
                )
    if not rows:
        return []
    headers = [
        "framework",
        "workload",
        "device",
        "dynamic",
        "dynamic (ms/step)",
        "static",
        "static (ms/step)",
        "static speed-up",
        "static traces / compiles",
        "break-even (steps)",
    ]
    intro = (
        "Each framework's fastest dynamic-graph cell against its fastest static-graph cell (best loop "
        "strategy where there are several). Speed-up is dynamic time over static time (above 1: the "
        "static graph is faster once compiled); break-even is the step count from a cold start after "
        "which the static mode has spent no more time in total."
    )
    return [
        "## Static vs dynamic within each framework",
        "",
        intro,
        "",
        tabulate(rows, headers, tablefmt="github", disable_numparse=True),
        "",
    ]


def banner(recs: list[dict[str, Any]]) -> list[str]:
    """A warning at the top naming every requested adapter x device that produced no result."""
    missing = summary.missing_pairs(recs)
    if not missing:
        return []
    pairs = sum(len(adapters) for _, adapters, _ in missing)
    out = [f"> **Not in this comparison:** {pairs} requested adapter x device pairs produced no result."]
    for device, adapters, reason in missing:
        out.append(f"> - **{', '.join(adapters)}** on {device}: {reason}")
    return [*out, ""]


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


def crossovers(series: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Where the ranking of two series changes along a sweep.

    ``series`` maps a label to records sorted by swept value. A pair's order counts only at
    values where both medians' CIs separate (ties are skipped); a crossover is a change of the
    faster series between two such consecutive values."""
    found = []
    labels = sorted(series)
    for i, a in enumerate(labels):
        for b in labels[i + 1 :]:
            by_value_b = {r["sweep"]["value"]: r for r in series[b]}
            order = []
            for ra in series[a]:
                rb = by_value_b.get(ra["sweep"]["value"])
                if rb is not None and summary.separated(ra, rb):
                    order.append((ra["sweep"]["value"], a if ra["median_s"] < rb["median_s"] else b))
            for (v0, w0), (v1, w1) in zip(order, order[1:], strict=False):
                if w0 != w1:
                    found.append({"before": v0, "after": v1, "faster_before": w0, "faster_after": w1})
    return found


def sweep_section(recs: list[dict[str, Any]], plot_dir: Path | None) -> list[str]:
    """Step time and throughput against the swept field, with the crossovers marked."""
    swept = [r for r in recs if r.get("sweep") and r["status"] == "ok" and r.get("data", "resident") == "resident"]
    out: list[str] = []
    for workload in sorted({r["workload"] for r in swept}):
        cells = [r for r in swept if r["workload"] == workload]
        field = cells[0]["sweep"]["field"]
        series: dict[str, list[dict[str, Any]]] = {}
        for r in sorted(cells, key=lambda r: r["sweep"]["value"]):
            series.setdefault(" / ".join(filter(None, [r["adapter"], strategy(r), _device(r)])), []).append(r)
        out += [f"## Sweep: {workload} over {field}", ""]
        if plot_dir is not None:
            points = {
                label: [
                    (
                        r["sweep"]["value"],
                        r["median_s"],
                        r.get("ci_low_s", r["median_s"]),
                        r.get("ci_high_s", r["median_s"]),
                        r["samples_per_s"],
                    )
                    for r in rs
                ]
                for label, rs in series.items()
            }
            path = plots.sweep(points, field, workload, plot_dir / f"{_slug(workload, 'sweep', field)}.png")
            out += [f"![{workload}: sweep over {field}]({path.name})", ""]
        values = sorted({r["sweep"]["value"] for r in cells})
        header_values = [f"{field}={v:g}" for v in values]
        rows = []
        for label, rs in series.items():
            by_value = {r["sweep"]["value"]: r for r in rs}
            rows.append([label, *(sig(by_value[v]["median_s"] * 1e3) if v in by_value else DASH for v in values)])
        out += [
            "Steady median step time (ms/step):",
            "",
            tabulate(rows, ["series", *header_values], tablefmt="github", disable_numparse=True),
            "",
        ]
        found = crossovers(series)
        if found:
            out += ["Crossovers (where the faster of two series changes; ties are not counted):", ""]
            out += [
                f"- between {field}={c['before']:g} and {c['after']:g}: {c['faster_after']} overtakes "
                f"{c['faster_before']}"
                for c in found
            ]
        else:
            out += ["No crossover: no pair of series changes order within the swept range (ties not counted)."]
        out.append("")
    return out


def machine_name(env: dict[str, Any]) -> str:
    gpus = ", ".join(g["name"] for g in env.get("gpus", []))
    return f"{env.get('hostname', '?')} ({gpus or env.get('cpu', 'CPU')})"


def load_runs(run_dirs: list[Path]) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """Records of one or several runs, each annotated with its machine and the measured peak of
    its device; with several machines, device labels name the machine."""
    recs, envs = [], {}
    for run_dir in run_dirs:
        env = load_env(run_dir)
        name = machine_name(env) if env else run_dir.name
        if name in envs:
            name = f"{name} [{run_dir.name}]"
        envs[name] = env
        for r in rounds.combine_all(records.load(run_dir / records.RESULTS)):
            r["machine"] = name
            r["peak_gflops"] = peak_gflops(env, r)
            recs.append(r)
    if len(envs) > 1:
        for r in recs:
            r["machine_label"] = r["machine"]
    return recs, envs


def build(run_dirs: Path | list[Path], plot_dir: Path | None = None) -> str:
    """The report's markdown; with ``plot_dir``, its PNG plots are written there and embedded."""
    run_dirs = [run_dirs] if isinstance(run_dirs, Path) else list(run_dirs)
    recs, envs = load_runs(run_dirs)
    title = ", ".join(sorted({str(r.get("run_id", "")) for r in recs})) or ", ".join(d.name for d in run_dirs)
    counts = pd.Series([r["status"] for r in recs]).value_counts().to_dict() if recs else {}
    out = [
        f"# dlcompare report: run {title}",
        "",
        f"{len(recs)} cells: " + ", ".join(f"{counts.get(s, 0)} {s}" for s in records.STATUSES) + ".",
        "",
    ]
    out += banner(recs)
    findings = summary.sentences(recs, break_even)
    if findings:
        out += ["## Summary", "", *(f"- {line}" for line in findings), ""]
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in recs:
        key = tuple(o for o in r.get("overrides", []) if not o.startswith("strategy="))
        groups.setdefault((r["workload"], key), []).append(r)
    resident = {k: [r for r in g if r.get("data", "resident") == "resident"] for k, g in groups.items()}
    for (workload, key), group in resident.items():
        if not group:
            continue
        out += [_title(group[0]), "", workload_table(group), ""]
        if plot_dir is not None:
            out += _plots(group, workload, key, plot_dir)
    out += within_frameworks(resident)
    out += static_vs_dynamic(resident)
    out += sweep_section(recs, plot_dir)
    out += input_pipeline(recs)
    out += hardware(recs, envs)
    out += memory(recs)
    out += failures(recs)
    settings = settings_table(recs)
    if settings:
        out += ["## Framework settings", "", settings, ""]
    for name, env in envs.items():
        if env:
            heading = "## Environment" + (f": {name}" if len(envs) > 1 else "")
            out += [heading, "", env_table(env), ""]
    out += ["## Method", "", method(recs), ""]
    return "\n".join(out)


def _slug(*parts: Any) -> str:
    text = "-".join(str(p) for p in parts if p)
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)[:80]


def _plots(group: list[dict[str, Any]], workload: str, key: tuple, plot_dir: Path) -> list[str]:
    """Embedded plots of one workload table; only plots with data are drawn."""
    made = []
    slug = _slug(workload, *key)
    drawn = [
        ("steady step time", plots.step_times(group, workload, plot_dir / f"{slug}-steps.png")),
        ("first step vs steady", plots.compile_cost(group, workload, plot_dir / f"{slug}-compile.png")),
    ]
    if any(strategy(r) for r in group):
        path = plots.cumulative(group, workload, plot_dir / f"{slug}-cumulative.png", cumulative_s)
        drawn.append(("cumulative time from a cold start", path))
    for alt, path in drawn:
        if path is not None:
            made += [f"![{workload}: {alt}]({path.name})", ""]
    return made


def write(run_dir: Path, extra: list[Path] = (), out_dir: Path | None = None) -> Path:
    """Write report.md (and its plots) for one run, or merge ``extra`` runs into it; merged
    reports go to ``out_dir``."""
    target = out_dir or run_dir
    target.mkdir(parents=True, exist_ok=True)
    path = target / "report.md"
    path.write_text(build([run_dir, *extra], plot_dir=target))
    return path
