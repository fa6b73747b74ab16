"""How close to the hardware: measured peaks, achieved GFLOP/s, the physics check, memory."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tabulate import tabulate

from harness.records import Record
from harness.reporting.formatting import DASH, row_label, sig
from harness.reporting.workload_tables import ordered
from workloads.model_file import FAMILY as MODEL_FILE

#: Measured peaks are the best of repeats at the run's start and end; a step may beat them by
#: noise, not by more than this.
PEAK_SLACK = 1.10


def same_machine(env: Mapping[str, Any], rec: Record) -> bool:
    """False where the record ran on another machine than the one ``env`` describes (a cluster
    node unlike the submitting host): that machine's peaks and floors say nothing about it."""
    here, there = env.get("fingerprint"), rec.get("fingerprint")
    return not (here and there) or here == there


def peak_gflops(env: Mapping[str, Any], rec: Record) -> float | None:
    """The matmul peak ``env`` measured on the record's device, None where it ran elsewhere."""
    if not same_machine(env, rec):
        return None
    peak = (env.get("peaks") or {}).get(rec.get("device") or "", {})
    return peak.get("matmul_gflops")


def physics_violations(recs: Sequence[Record], env: Mapping[str, Any]) -> list[str]:
    """Cells whose fastest step or pipelined block claims more FLOP/s than the device's measured
    matmul peak (with PEAK_SLACK): a missing sync or a wrong FLOP count, never a real result. A
    record's own ``peak_gflops`` (merged runs) wins over ``env``'s."""
    problems = []
    for r in recs:
        peak = r["peak_gflops"] if "peak_gflops" in r else peak_gflops(env, r)
        if r["status"] != "ok" or not peak:
            continue
        for claim, what in ((r.get("gflops_max_step"), "a step"), (r.get("pipelined_gflops_max"), "a pipelined block")):
            if claim and claim > PEAK_SLACK * peak:
                problems.append(
                    f"{r['adapter']} / {r['workload']} / {r.get('device')}: {what} ran at {sig(claim)} "
                    f"GFLOP/s, above the measured peak of {sig(peak)} GFLOP/s: its timing cannot be trusted"
                )
    return problems


def hardware(recs: Sequence[Record], envs: dict[str, dict[str, Any]]) -> list[str]:
    """Achieved useful GFLOP/s against the measured matmul peak of the device (``envs`` by
    machine name; a plain env dict is one machine)."""
    if "peaks" in envs or not all(isinstance(v, dict) for v in envs.values()):
        envs = {"": envs}
    peaks = []
    for machine, env in envs.items():
        peaks += _peak_rows(machine if len(envs) > 1 else "", env.get("peaks") or {})
    rows = []
    for r in ordered(recs):
        gflops = r.get("gflops")
        if r["status"] != "ok" or r.get("data", "resident") != "resident" or gflops is None:
            continue
        peak = r["peak_gflops"] if "peak_gflops" in r else peak_gflops(next(iter(envs.values())), r)
        fastest, flops = r.get("gflops_max_step"), r.get("flops_per_step")
        assert fastest is not None and flops is not None  # a record's gflops comes with both
        gflops = flops / r["median_s"] / 1e9  # over the steady step the tables print, as every rate is
        pct = f"{gflops / peak:.1%}" if peak else DASH
        best = f"{fastest / peak:.1%}" if peak else DASH
        rows.append([*row_label(r), sig(flops / 1e9), sig(gflops), pct, best])
    jit = [line for env in envs.values() for line in kernel_jit_lines(env.get("kernel_jit") or [])]
    placed = placement(recs, envs)
    if not rows and not peaks and not jit and not placed:
        return []
    out = ["## How close to the hardware", ""]
    if peaks:
        headers = PEAK_HEADERS
        if all(row[-1] == DASH for row in peaks):  # no GPU: no host-to-device figure to give
            headers, peaks = headers[:-1], [row[:-1] for row in peaks]
        out += [
            "Measured peaks (at the run's start and, where measured, at its end; the better of the two counts):",
            "",
            tabulate(peaks, headers, tablefmt="github", disable_numparse=True),
            "",
        ]
    out += placed
    if jit:
        out += ["Kernels compiled by the driver before timing (the build ships only PTX for this GPU):", "", *jit, ""]
    if rows:
        headers = ["adapter", "workload", "strategy", "device", "GFLOP per step", "GFLOP/s", "% of peak", "best step"]
        counted = (
            "Useful work per step is counted from the spec (matmul and convolution multiply-adds, "
            "padding not counted); GFLOP/s is that work over the steady step the tables print."
        )
        if any((r.get("spec") or {}).get("family") == MODEL_FILE and r.get("gflops") is not None for r in recs):
            counted += (
                " A model file's work is counted from one forward pass on Keras's NumPy backend: each matmul, "
                "einsum and convolution it asks of keras.ops, and one backward product per operand that needs a "
                "gradient (workloads/model_flops.py)."
            )
        out += [
            counted,
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


def kernel_jit_lines(warmed: list[dict[str, Any]]) -> list[str]:
    """One line per kernel JIT warm-up a run did before timing (harness.running.kernel_jit)."""
    lines = []
    for w in warmed:
        head = f"- **{w['framework']}** ({w['adapter']}): {w['what']}."
        if w["status"] == "ok":
            lines.append(
                f"{head} It did so before timing, in {w['seconds']:.0f} s: one untimed step of "
                f"{', '.join(w['workloads'])}, process start included. The driver's compute cache kept the "
                "result for the timed cells, so no cold window holds the compile."
            )
        else:
            lines.append(
                f"{head} The warm-up failed ({w['reason']}), so the first step of each of its cells "
                "may hold the compile."
            )
    return lines


#: What the peak's matmul ran in, by the run's precision (harness.measuring.peak).
PEAK_KIND = {"tf32": "float32 (TF32 allowed)", "bf16": "bfloat16 or float32 (the faster)"}


def _peak_rows(machine: str, peaks: dict[str, Any]) -> list[list[str]]:
    """One table row per device's measured peaks (the numbers the report's sentences may quote)."""
    rows = []
    for device, peak in peaks.items():
        where = f"{machine}: {device}" if machine else device
        if "error" in peak:
            rows.append([where, f"not measured ({peak['error'].splitlines()[-1]})", *[DASH] * 6])
            continue
        by = peak["matmul_gflops_by"]
        source = ", ".join(f"{k} {sig(v)}" for k, v in by.items()) if isinstance(by, dict) else by
        # each figure where it was measured (records.load_env gives a peak measured once its start's)
        start = sig(peak["matmul_gflops_start"]) if peak.get("matmul_gflops_start") is not None else DASH
        end = sig(peak["matmul_gflops_end"]) if "matmul_gflops_end" in peak else DASH
        kind = PEAK_KIND.get(peak.get("precision", "fp32"), "float32")
        if peak.get("bf16_emulated"):  # harness.measuring.peak: an emulated bfloat16 matmul is not timed
            kind = f"float32 (bfloat16 not timed: emulated here, {peak['bf16_emulated']})"
        h2d = ", ".join(
            f"{sig(peak[f])} {what}"
            for f, what in (("h2d_gbs", "pinned"), ("h2d_pageable_gbs", "pageable"))
            if peak.get(f)
        )
        rows.append([where, sig(peak["matmul_gflops"]), kind, source, start, end, sig(peak["copy_gbs"]), h2d or DASH])
    return rows


def placement(recs: Sequence[Record], envs: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Each GPU cell's placement of one batch (``to_device_s``, ``batch_bytes``) as a rate beside the
    device's measured host-to-device peak: how far an adapter's copy is from what the bus gives."""
    env = next(iter(envs.values()), {}) if len(envs) == 1 else {}
    peak = ((env.get("peaks") or {}).get("cuda") or {}) if env else {}
    best = peak.get("h2d_gbs") or peak.get("h2d_pageable_gbs")
    rows = []
    placed = [r for r in recs if r["status"] == "ok" and r.get("device") == "cuda" and r.get("to_device_s")]
    for r in ordered([r for r in placed if r.get("batch_bytes")]):
        rate = r["batch_bytes"] / r["to_device_s"] / 1e9
        share = f"{rate / best:.0%}" if best else DASH
        rows.append([*row_label(r), sig(r["batch_bytes"] / 2**20), sig(r["to_device_s"] * 1e3), sig(rate), share])
    if not rows:
        return []
    measured = (
        f"the measured host-to-device peak, {sig(best)} GB/s ({'pinned' if peak.get('h2d_gbs') else 'pageable'} memory)"
        if best
        else "no host-to-device peak (a run from before it was measured, or several machines)"
    )
    headers = ["adapter", "workload", "strategy", "device", "batch (MiB)", "placed in (ms)", "GB/s", "of the peak"]
    return [
        "Placing one batch on the GPU (its `to_device_s`: outside the steady step where the data is resident) "
        f"against {measured}:",
        "",
        tabulate(rows, headers, tablefmt="github", disable_numparse=True),
        "",
    ]


#: The measured peaks' table columns.
PEAK_HEADERS = [
    "device",
    "matmul GFLOP/s",
    "matmul in",
    "by library",
    "at the run's start",
    "at its end",
    "copy GB/s (read + write)",
    "host to device GB/s",
]


def _mib(value: Any) -> str:
    return "unavailable" if value is None else sig(value / 2**20)


def energy_text(rec: Record) -> str:
    """``0.41 [0.39, 0.43] J (380 W)``: a GPU cell's energy per synced step with its interval over
    processes where it has one, and the mean power it implies over its steady step; ``not measured``,
    saying why, on a GPU without an energy counter or in an older record; a dash on the CPU."""
    if rec.get("device") != "cuda":
        return DASH
    if "energy_per_step_j" not in rec:
        return "not measured (a record from before energy was read)"
    joules = rec["energy_per_step_j"]
    if not joules:
        return "not measured (NVML gave no energy counter: Volta and later GPUs have one)"
    ci = rec.get("energy_ci_j")
    interval = f" [{sig(ci[0])}, {sig(ci[1])}]" if ci else ""
    return f"{sig(joules)}{interval} J ({sig(joules / rec['median_s'])} W)"


def memory(recs: Sequence[Record]) -> list[str]:
    """``## Memory``: each cell's host and device peaks, GPU utilisation and, on a GPU, energy per step."""
    ok = [r for r in ordered(recs) if r["status"] == "ok" and "host_peak_rss_bytes" in r]
    gpu = any(r.get("device") == "cuda" for r in ok)
    rows = [
        [
            *row_label(r),
            r.get("data", "resident"),
            _mib(r.get("host_peak_rss_bytes")),
            _mib(r.get("device_peak_bytes")),
            DASH if r.get("gpu_util_mean") is None else f"{r['gpu_util_mean']:.0f}%",
            *([energy_text(r)] if gpu else []),
        ]
        for r in ok
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
    if gpu:
        headers.append("GPU energy per step")
        note += (
            " Energy per step is the whole GPU's (NVML's total energy counter, read around each turn's synced "
            "steps, idle moments between them included), each process's median over its kept turns, their "
            "geometric mean with a t interval over processes as the steady step has; in brackets the mean "
            "power over the steady step."
        )
    return ["## Memory", "", note, "", tabulate(rows, headers, tablefmt="github", disable_numparse=True), ""]
