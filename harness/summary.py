"""Plain-sentence findings derived from records alone.

Every sentence states numbers taken from the records; where the data for a sentence is
missing (a cell skipped or failed, no GPU run), the sentence is left out, never guessed.
Winners are named only where 95% confidence intervals of the medians separate.
"""

from __future__ import annotations

from typing import Any

Record = dict[str, Any]


def separated(a: Record, b: Record) -> bool:
    """True when the two medians' confidence intervals do not overlap."""
    if "ci_low_s" not in a or "ci_low_s" not in b:
        return False
    return a["ci_high_s"] < b["ci_low_s"] or b["ci_high_s"] < a["ci_low_s"]


def _num(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _ms(rec: Record) -> str:
    return f"{_num(rec['median_s'] * 1e3)} ms/step"


def _ok_resident(recs: list[Record]) -> list[Record]:
    return [r for r in recs if r["status"] == "ok" and r.get("data", "resident") == "resident"]


def strategy(rec: Record) -> str | None:
    """The loop strategy of a training cell whose workload has them, else None."""
    spec = rec.get("spec") or {}
    return spec.get("strategy") if spec.get("task") == "train" else None


def _name(rec: Record) -> str:
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
    return sorted(requested - {r["adapter"] for r in _ok_resident(resident) if r.get("device") == device})


def fastest_sentences(recs: list[Record]) -> list[str]:
    out = []
    groups: dict[tuple, list[Record]] = {}
    for r in _ok_resident(recs):
        groups.setdefault((r["workload"], r.get("device")), []).append(r)
    for (workload, device), cells in groups.items():
        ranked = _best_per_adapter(cells)
        if len(ranked) < 2:
            continue
        first, second = ranked[0], ranked[1]
        missing = absent(recs, workload, device)
        among = f" (not compared: {', '.join(missing)}, which have no result on {device})" if missing else ""
        if separated(first, second):
            out.append(
                f"On {device}, {_name(first)} is the fastest for {workload}{among} ({_ms(first)}), "
                f"{second['median_s'] / first['median_s']:.2f}x faster than the runner-up {_name(second)} "
                f"({_ms(second)})."
            )
        else:
            out.append(
                f"On {device}, {_name(first)} ({_ms(first)}) and {_name(second)} ({_ms(second)}) are tied "
                f"for fastest on {workload}{among}: their 95% confidence intervals overlap."
            )
    return out


def gpu_vs_cpu_sentences(recs: list[Record]) -> list[str]:
    out = []
    cells: dict[tuple, dict[str, Record]] = {}
    for r in _ok_resident(recs):
        cells.setdefault((r["workload"], r["adapter"], strategy(r)), {})[r.get("device")] = r
    for (workload, _, _), by_device in cells.items():
        cpu, gpu = by_device.get("cpu"), by_device.get("cuda")
        if not cpu or not gpu:
            continue
        if not separated(cpu, gpu):
            out.append(f"For {workload} with {_name(cpu)}, GPU and CPU are tied ({_ms(gpu)} vs {_ms(cpu)}).")
        elif gpu["median_s"] < cpu["median_s"]:
            ratio = cpu["median_s"] / gpu["median_s"]
            out.append(
                f"For {workload} with {_name(cpu)}, the GPU beats the CPU {ratio:.2f}x ({_ms(gpu)} vs {_ms(cpu)})."
            )
        else:
            ratio = gpu["median_s"] / cpu["median_s"]
            out.append(
                f"For {workload} with {_name(cpu)}, the CPU beats the GPU {ratio:.2f}x ({_ms(cpu)} vs {_ms(gpu)})."
            )
    return out


def compile_sentences(recs: list[Record], break_even) -> list[str]:
    """Compile cost of each static-graph adapter (its quickest-starting strategy) and where it
    pays off against the fastest eager cell of the same workload and device."""
    out = []
    cells = [r for r in _ok_resident(recs) if "cold_times_s" in r]
    static: dict[tuple, Record] = {}
    for r in cells:
        key = (r["adapter"], r["workload"], r.get("device"))
        if (
            r.get("graph") == "static"
            and r.get("compile_s")
            and (key not in static or r["cold_s"] < static[key]["cold_s"])
        ):
            static[key] = r  # its strategy with the shortest cold start
    for r in static.values():
        eager = [
            e
            for e in cells
            if e.get("graph") == "dynamic"
            and (e["workload"], e.get("device"))
            == (
                r["workload"],
                r.get("device"),
            )
        ]
        text = (
            f"{_name(r)} spends {_num(r['compile_s'])} s tracing/compiling on {r['workload']} "
            f"({r.get('device')}; first step {_num(r['first_step_s'] * 1e3)} ms vs {_ms(r)} steady)"
        )
        if eager:
            base = min(eager, key=lambda e: e["median_s"])
            steps = break_even(r, base)
            if steps is None:
                text += f" and never catches up with {_name(base)} ({_ms(base)})"
            else:
                text += f" and has paid it off against {_name(base)} after {steps:,} steps"
        out.append(text + ".")
    return out


def sentences(recs: list[Record], break_even) -> list[str]:
    return [*fastest_sentences(recs), *gpu_vs_cpu_sentences(recs), *compile_sentences(recs, break_even)]
