"""Text helpers shared by every report page: numbers, statuses, labels."""

from __future__ import annotations

from typing import Any

import pandas as pd

from harness.records import Record
from harness.reporting.cells import stolen, strategy
from harness.stats.verdicts import FAMILY, RANKS, UNRESOLVED, PairVerdict

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


def load_text(rec: Record) -> str:
    """The load a cell ran beside: ``0.41 other cores busy``, and the hypervisor's steal where it
    is what made the cell contended (a busy host is invisible to the VM's process counts)."""
    said = f"{rec.get('other_cpu_cores') or 0.0:.2f} other cores busy"
    return f"the hypervisor took {rec['steal_share']:.1%} of the CPU, {said}" if stolen(rec) else said


def status_text(rec: Record) -> str:
    if rec["status"] == "ok":
        notes = []
        if rec.get("steady_recompiles"):
            n = rec["steady_recompiles"]
            notes.append(f"{n} recompile{'s' * (n > 1)} in the steady window, excluded")
        if rec.get("cold_settled") is False:
            notes.append("still compiling after the cold window")
        if rec.get("contended"):
            ranked = "ranked under load, as the run asked" if rec.get("ranked_under_load") else "not ranked"
            notes.append(f"contended ({load_text(rec)}): {ranked}")
        return ", ".join(["ok", *notes])
    reason = " ".join(str(rec.get("reason", "")).split())
    return f"{rec['status']}: {reason}"


def device_label(rec: Record) -> str:
    device = rec.get("device") or rec["device_requested"]
    if rec["device_requested"] == "auto" and rec["status"] == "ok":
        device = f"{device} (auto)"
    return f"{rec['machine_label']}: {device}" if rec.get("machine_label") else device


def row_label(rec: Record) -> list[str]:
    return [rec["adapter"], rec["workload"], strategy(rec) or DASH, device_label(rec)]


#: What a table prints for a trace or compile count the adapter's ``compile_stats`` left out (the
#: record holds None): never 0, which would claim the framework counted none.
NOT_REPORTED = "not reported"


def compiles_text(rec: Record) -> str:
    """Trace and compile counts during training, as the framework itself reports them, and the
    seconds it spent compiling: ``1 traces, 1 compiles, 0.25 s``. A count the adapter did not
    report reads "not reported" (``1 traces, compiles not reported, 0.229 s``; with neither,
    ``not reported``, or ``counts not reported, 0.9 s`` where it timed its compiles)."""
    counts = {k: rec.get(k) for k in ("traces", "compiles")}
    known = [f"{n} {k}" for k, n in counts.items() if n is not None]
    missing = [k for k, n in counts.items() if n is None]
    seconds = [f"{sig(rec['compile_s'])} s"] if rec.get("compile_s") is not None else []
    if not known:
        return ", ".join([f"counts {NOT_REPORTED}", *seconds]) if seconds else NOT_REPORTED
    inferring = (rec.get("spec") or {}).get("task", "train") != "train"
    if inferring and rec.get("graph") == "static" and not any(counts.values()):  # its decode ran op by op
        return "0 traces: decodes eagerly"
    return ", ".join([*known, *(f"{k} {NOT_REPORTED}" for k in missing), *seconds])


def machine_name(env: dict[str, Any]) -> str:
    gpus = ", ".join(g["name"] for g in env.get("gpus", []))
    return f"{env.get('hostname', '?')} ({gpus or env.get('cpu', 'CPU')})"


def fingerprint_name(fp: dict[str, Any]) -> str:
    """A machine fingerprint (harness.env.fingerprint) in words: CPU, cores, GPUs and driver."""
    gpus: dict[str, int] = {}
    for name in fp.get("gpus") or []:
        gpus[name] = gpus.get(name, 0) + 1
    text = f"{fp.get('cpu', '?')}, {fp.get('cores', '?')} cores"
    if gpus:
        text += ", " + ", ".join(f"{n}x {name}" for name, n in gpus.items()) + f" (driver {fp.get('driver')})"
    return text


def slug(*parts: Any) -> str:
    text = "-".join(str(p) for p in parts if p)
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)[:80]


def verdict_text(v: PairVerdict) -> str:
    """A ratio with its verdict, as every table prints it: ``1.17 [1.09, 1.25]`` (separated),
    ``1.01 [0.98, 1.03] same speed``, ``1.17 [0.98, 1.41] unresolved``, ``1.21 [1.02, 1.43]
    slower as a pair, not family-wise`` (separated alone, not once the group's pairs are counted: no
    verdict against the leader is claimed), or where the run could not
    judge the pair ``1.20 unresolved (one process per cell)``."""
    if not v.judged:  # separated here only by records' own intervals (no processes): the ratio alone
        return f"{v.point:.2f}" if v.separated else f"{v.point:.2f} {UNRESOLVED} ({v.reason})"
    text = f"{v.point:.2f} [{v.low:.2f}, {v.high:.2f}]"
    if v.separated:
        return text
    if v.reason == FAMILY:  # the pair alone is separated; Holm's step-down stopped at a closer rival
        return f"{text} {'slower' if v.point > 1 else 'faster'} as a pair, not family-wise"
    return f"{text} {v.outcome}" + (f" ({SHORT_REASONS[v.reason]})" if v.reason in SHORT_REASONS else "")


#: Why an interval that excludes 1 still reads ``unresolved`` (harness.stats.verdicts.family).
SHORT_REASONS = {FAMILY: "family-wise", RANKS: "faster by levels"}
