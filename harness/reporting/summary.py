"""Plain-sentence findings derived from records alone.

Every sentence states numbers taken from the records; where the data for a sentence is
missing (a cell skipped or failed, no GPU run), the sentence is left out, never guessed.
Winners are named only where two cells are separated (harness.rounds.separated: the 95%
interval of their time ratio, paired by round, excludes 1).
"""

from __future__ import annotations

from typing import Any

from harness.rounds import relative, separated

Record = dict[str, Any]


def _num(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _ms(rec: Record) -> str:
    return f"{_num(rec['median_s'] * 1e3)} ms/step"


def _ok_resident(recs: list[Record]) -> list[Record]:
    """Cells a verdict may use: ran, on resident data, not beside other CPU load."""
    return [
        r for r in recs if r["status"] == "ok" and r.get("data", "resident") == "resident" and not r.get("contended")
    ]


def contention_sentences(recs: list[Record]) -> list[str]:
    busy = [r for r in recs if r["status"] == "ok" and r.get("contended")]
    if not busy:
        return []
    names = ", ".join(sorted({f"{r['adapter']} / {r['workload']} / {r.get('device')}" for r in busy}))
    return [
        f"{len(busy)} cells ran while other processes kept the CPU busy and are left out of every verdict "
        f"here: {names}. Rerun them on a quiet machine (`--resume` does not rerun finished cells)."
    ]


def strategy(rec: Record) -> str | None:
    """The loop strategy of a training cell whose workload has them, else None."""
    spec = rec.get("spec") or {}
    return spec.get("strategy") if spec.get("task") == "train" else None


def name(rec: Record) -> str:
    loop = strategy(rec)
    return f"{rec['adapter']} ({loop})" if loop else rec["adapter"]


def _best_per_adapter(recs: list[Record]) -> list[Record]:
    """Each adapter's fastest cell (its best loop strategy, where there are several)."""
    best: dict[str, Record] = {}
    for r in recs:
        if r["adapter"] not in best or r["median_s"] < best[r["adapter"]]["median_s"]:
            best[r["adapter"]] = r
    return sorted(best.values(), key=lambda r: r["median_s"])


def _requested_device(rec: Record) -> str:
    return rec.get("device") or rec.get("device_requested") or "?"


def missing_pairs(recs: list[Record]) -> list[tuple[str, list[str], str]]:
    """Requested adapter x device pairs with no ``ok`` cell at all, grouped by reason:
    (device, adapters, the reason of their first cell that did not run)."""
    ran = {(r["adapter"], r.get("device")) for r in recs if r["status"] == "ok"}
    reasons: dict[tuple[str, str], str] = {}
    for r in recs:
        key = (r["adapter"], _requested_device(r))
        if key not in ran and key not in reasons:
            reasons[key] = f"{r['status']}: {r.get('reason') or 'no reason recorded'}"
    grouped: dict[tuple[str, str], list[str]] = {}
    for (adapter, device), reason in reasons.items():
        grouped.setdefault((device, reason), []).append(adapter)
    return [(device, sorted(adapters), reason) for (device, reason), adapters in grouped.items()]


def absent(recs: list[Record], workload: str, device: str) -> list[str]:
    """Adapters requested for ``workload`` on ``device`` that have no result there."""
    resident = [r for r in recs if r["workload"] == workload and r.get("data", "resident") == "resident"]
    requested = {r["adapter"] for r in resident if _requested_device(r) == device}
    ran = {r["adapter"] for r in resident if r["status"] == "ok" and r.get("device") == device}
    return sorted(requested - ran)


def axes(rec: Record) -> tuple:
    """Every axis of the plan but the adapter and its loop strategy: cells that differ in any
    of these (batch size, precision, data mode, ...) are never compared in one sentence."""
    setting = tuple(sorted(o for o in rec.get("overrides", []) if not o.startswith("strategy=")))
    return rec["workload"], rec.get("device"), setting, rec.get("precision", "fp32"), rec.get("data", "resident")


def what(key: tuple) -> str:
    """``mlp`` or ``mlp (batch_size=16, tf32)``: the workload and what sets it apart."""
    workload, _, setting, precision, _ = key
    extra = [*setting, *([precision] if precision != "fp32" else [])]
    return f"{workload} ({', '.join(extra)})" if extra else workload


def leaders(recs: list[Record]) -> dict[tuple, tuple[Record, Record, bool]]:
    """For every group of comparable cells (``axes``) with two adapters or more: the fastest,
    the runner-up, and whether the fastest is separated from it (else: tied)."""
    groups: dict[tuple, list[Record]] = {}
    for r in _ok_resident(recs):
        groups.setdefault(axes(r), []).append(r)
    out = {}
    for key, cells in groups.items():
        ranked = _best_per_adapter(cells)
        if len(ranked) >= 2:
            out[key] = (ranked[0], ranked[1], separated(ranked[0], ranked[1]))
    return out


def fastest_sentences(recs: list[Record]) -> list[str]:
    out = []
    for key, (first, second, apart) in leaders(recs).items():
        workload, device = key[0], key[1]
        missing = absent(recs, workload, device)
        among = f" (not compared: {', '.join(missing)}, which have no result on {device})" if missing else ""
        if apart:
            out.append(
                f"On {device}, {name(first)} is the fastest for {what(key)}{among} ({_ms(first)}), "
                f"{second['median_s'] / first['median_s']:.2f}x faster than the runner-up {name(second)} "
                f"({_ms(second)})."
            )
        else:
            out.append(
                f"On {device}, {name(first)} ({_ms(first)}) and {name(second)} ({_ms(second)}) are tied "
                f"for fastest on {what(key)}{among}: the 95% interval of their ratio includes 1."
            )
    return out


def gpu_vs_cpu_sentences(recs: list[Record]) -> list[str]:
    out = []
    cells: dict[tuple, dict[str, Record]] = {}
    for r in _ok_resident(recs):
        key = axes(r)
        cells.setdefault((key[:1] + key[2:], r["adapter"], strategy(r)), {})[r.get("device")] = r
    for (key, _, _), by_device in cells.items():
        workload = what(key[:1] + (None,) + key[1:])
        cpu, gpu = by_device.get("cpu"), by_device.get("cuda")
        if not cpu or not gpu:
            continue
        if not separated(cpu, gpu):
            out.append(f"For {workload} with {name(cpu)}, GPU and CPU are tied ({_ms(gpu)} vs {_ms(cpu)}).")
        elif gpu["median_s"] < cpu["median_s"]:
            ratio = cpu["median_s"] / gpu["median_s"]
            out.append(
                f"For {workload} with {name(cpu)}, the GPU beats the CPU {ratio:.2f}x ({_ms(gpu)} vs {_ms(cpu)})."
            )
        else:
            ratio = gpu["median_s"] / cpu["median_s"]
            out.append(
                f"For {workload} with {name(cpu)}, the CPU beats the GPU {ratio:.2f}x ({_ms(cpu)} vs {_ms(gpu)})."
            )
    return out


def compile_sentences(recs: list[Record], break_even) -> list[str]:
    """Compile cost of each static-graph adapter (its quickest-starting strategy) and where it
    pays off against the fastest eager cell of the same workload and device."""
    out = []
    cells = [r for r in _ok_resident(recs) if "cold_times_s" in r]
    static: dict[tuple, Record] = {}
    for r in cells:
        key = (r["adapter"], axes(r))
        if (
            r.get("graph") == "static"
            and r.get("compile_s")
            and (key not in static or r["cold_s"] < static[key]["cold_s"])
        ):
            static[key] = r  # its strategy with the shortest cold start
    for r in static.values():
        eager = [e for e in cells if e.get("graph") == "dynamic" and axes(e) == axes(r)]
        text = (
            f"{name(r)} spends {_num(r['compile_s'])} s tracing/compiling on {what(axes(r))} "
            f"({r.get('device')}; first step {_num(r['first_step_s'] * 1e3)} ms vs {_ms(r)} steady)"
        )
        if eager:
            base = min(eager, key=lambda e: e["median_s"])
            text += _payoff(r, base, break_even)
        out.append(text + ".")
    return out


def _payoff(static: Record, base: Record, break_even) -> str:
    """Where compiling pays off against ``base``: a step range from the ends of both confidence
    intervals, and only where they separate (overlapping steady times give no break-even)."""
    if not separated(static, base):
        return f"; its steady step is tied with {name(base)} ({_ms(base)}), so it has no clear break-even"
    if static["median_s"] > base["median_s"]:
        return f" and never catches up with {name(base)} ({_ms(base)})"
    # the ends of the 95% interval of the steady-time ratio, which lies wholly below 1 here
    _, low, high = relative(base, static)
    early = break_even({**static, "median_s": base["median_s"] * low}, base)
    late = break_even({**static, "median_s": base["median_s"] * high}, base)
    steps = f"{early:,}" if early == late else f"{early:,} to {late:,}"
    return f" and has paid it off against {name(base)} after {steps} steps (from the 95% interval)"


def overlap(rec: Record) -> float:
    """Pipelined time per step over synced time per step in windows of the same length (the
    median step where the record has no windows): below 1, the loop gains from overlap."""
    return rec["pipelined_s"] / (rec.get("synced_block_s") or rec["median_s"])


def ranking_sentences(recs: list[Record]) -> list[str]:
    """What verdicts rank by, and where the pipelined loop gains most over synced steps."""
    both = [r for r in _ok_resident(recs) if r.get("pipelined_s")]
    if not both:
        return []
    gain = min(both, key=overlap)
    text = "Verdicts rank by the synced step time (latency: each step waits for the device). "
    if overlap(gain) < 1:
        text += (
            f"With one sync per block of steps (throughput), the largest gain is {name(gain)} on "
            f"{what(axes(gain))} ({gain.get('device')}): {_num(gain['pipelined_s'] * 1e3)} ms/step, "
            f"{overlap(gain):.2f}x its synced steps' time."
        )
    else:
        text += "With one sync per block of steps (throughput), no cell ran faster than synced."
    return [text]


def sentences(recs: list[Record], break_even) -> list[str]:
    return [
        *contention_sentences(recs),
        *ranking_sentences(recs),
        *fastest_sentences(recs),
        *gpu_vs_cpu_sentences(recs),
        *compile_sentences(recs, break_even),
    ]
