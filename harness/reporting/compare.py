"""Run-to-run comparison: matching cells, ratio of geometric means with Welch's interval, verdict.

The use: before/after a framework upgrade on one machine. Cells match by ``cell_id`` (adapter,
workload, device, overrides, data mode, precision), never by run id. Two runs on different kinds
of machine (``machine_match`` on their env.json fingerprints, harness.env.machine_fingerprint)
get no verdicts unless asked for (``across_machines``): a ratio between them measures the machines
as much as the code, and two VMs sold under one CPU name can answer a pair oppositely.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tabulate import tabulate

from harness import records
from harness.records import Record, is_idiomatic
from harness.reporting import cells
from harness.reporting.formatting import fingerprint_name, machine_name, sig, status_text
from harness.reporting.hardware import same_machine
from harness.stats.cells import combine_all, fingerprint_key
from harness.stats.verdicts import (
    FASTER,
    SAME,
    SETTLE_MARGIN,
    SLOWER,
    UNRESOLVED,
    Family,
    RunChange,
    change,
    separated,
)


def geometric_mean_s(rec: Record) -> float:
    """A cell's steady time as the comparison reads it: the geometric mean of its processes'."""
    levels = rec.get("process_levels") or {}
    return math.exp(sum(levels.values()) / len(levels)) if levels else rec["median_s"]


def detectable_text(found: RunChange) -> str:
    return "—" if found.detectable is None else f"{found.detectable:.0%}"


def match(recs_a: list[Record], recs_b: list[Record]) -> tuple[list[tuple[Record, Record]], list[Record]]:
    by_id = {r.get("cell_id"): r for r in recs_a}
    pairs, unmatched = [], []
    for r in recs_b:
        other = by_id.pop(r.get("cell_id"), None)
        (pairs.append((other, r)) if other else unmatched.append(r))
    return pairs, unmatched + list(by_id.values())


class DifferentMachines(ValueError):
    """Runs A and B ran on different kinds of machine and verdicts were not asked for across them;
    the message names the fields that differ and the option that asks."""


#: The option of ``python -m harness compare`` that asks for verdicts across machines.
ACROSS_FLAG = "--across-machines"


def build(run_a: Path, run_b: Path, across_machines: bool = False) -> str:
    """The comparison page of run B against run A. Raises DifferentMachines where their
    fingerprints differ (``machine_match``, and the machines their cells' records name) unless
    ``across_machines``: then the page opens with a warning naming what differs."""
    # Idiomatic scripts of a fidelity run are not cells of the matrix (harness.checks.fidelity).
    recs_a = combine_all([r for r in records.load(run_a / records.RESULTS) if not is_idiomatic(r)])
    recs_b = combine_all([r for r in records.load(run_b / records.RESULTS) if not is_idiomatic(r)])
    env_a, env_b = records.load_env(run_a), records.load_env(run_b)
    machines = _machines(env_a, env_b, recs_a, recs_b)
    if machines.same is False and not across_machines:
        raise DifferentMachines(
            f"{run_a.name} (A) and {run_b.name} (B) ran on different machines: {'; '.join(machines.differences)}. "
            "A ratio between them measures the machines as much as the code, so compare judges none; "
            f"{ACROSS_FLAG} writes the comparison anyway, its verdicts under a warning"
        )
    for recs in (recs_a, recs_b):  # a run over unlike cluster nodes: its verdicts stay within a machine
        if len({fingerprint_key(r) for r in recs if r.get("fingerprint")}) > 1:
            for r in recs:
                r["machine"] = fingerprint_name(r["fingerprint"]) if r.get("fingerprint") else None
    pairs, unmatched = match(recs_a, recs_b)
    rows = []
    counts = {FASTER: 0, SLOWER: 0, SAME: 0, UNRESOLVED: 0}
    for a, b in pairs:
        label = [
            b["adapter"],
            b["workload"],
            cells.strategy(b) or "—",
            b.get("data", "resident"),
            b["device_requested"],
        ]
        if a["status"] != "ok" or b["status"] != "ok":
            rows.append([*label, status_text(a), status_text(b), "—", "—", "not comparable"])
            continue
        found = change(a, b)
        counts[found.outcome] += 1
        interval = f"[{found.low:.3f}, {found.high:.3f}]" if math.isfinite(found.high) else "(one process)"
        rows.append(
            [
                *label,
                sig(geometric_mean_s(a) * 1e3),
                sig(geometric_mean_s(b) * 1e3),
                f"{found.point:.3f} {interval}",
                detectable_text(found),
                found.outcome,
            ]
        )
    headers = ["adapter", "workload", "strategy", "data", "device", "A (ms/step)", "B (ms/step)", "B / A [CI]"]
    headers += ["detectable change", "B vs A"]
    out = [
        f"# dlcompare comparison: {run_b.name} (B) against {run_a.name} (A)",
        "",
        *_machine_lines(machines, env_a),
        f"- A: `{run_a}`, {machine_name(env_a)}, git {env_a.get('git_sha')}, {_versions(env_a)}",
        f"- B: `{run_b}`, {machine_name(env_b)}, git {env_b.get('git_sha')}, {_versions(env_b)}",
        *_measured(env_a, env_b, pairs),
        "",
        f"{len(pairs)} matching cells: {counts[FASTER]} faster, {counts[SLOWER]} slower, "
        f"{counts[SAME]} the same speed within {SETTLE_MARGIN:.0%}, {counts[UNRESOLVED]} unresolved.",
        "",
        "A and B are a cell's steady step times, the geometric mean over its processes (fresh worker "
        "processes, one per generation) of each one's step time. B / A is their ratio (below 1: B is faster), "
        "with an interval at the runs' verdict level (95%, or a budgeted run's 97.06%) from Welch's t on the "
        "logarithms of the process step times: nothing pairs two "
        "runs' processes, and the t quantile accounts for how few of them there are (two processes a side "
        "say little). The verdict has a report's three words: `same speed` where the whole interval lies "
        f"within 1 ± {SETTLE_MARGIN:.0%} (whether or not it excludes 1: a change under {SETTLE_MARGIN:.0%} is "
        "not claimed), else `faster` or `slower` where it lies on one side of 1, else `unresolved`. "
        "Detectable change: the smallest slow-down this comparison detects with 80% power, "
        "exp((t_0.025 + t_0.2) se) - 1 (how wide an `unresolved` interval is in these terms). A cell run "
        "in one process a side is `unresolved`: one process says nothing about a rerun.",
        *_few_rounds(recs_a + recs_b),
        "",
        *_verdicts(recs_a, recs_b),
        tabulate(rows, headers, tablefmt="github", disable_numparse=True),
        "",
    ]
    if unmatched:
        out += ["Cells in only one of the runs:", ""]
        out += [f"- {r['adapter']} / {r['workload']} / {r['device_requested']} ({r.get('run_id')})" for r in unmatched]
        out.append("")
    return "\n".join(out)


#: Fewer rounds than this (``full``'s count) leave a cell's interval built from few processes.
ENOUGH_ROUNDS = 5


def _few_rounds(recs: list[Record]) -> list[str]:
    ran = [r.get("rounds_done") or 1 for r in recs if r["status"] == "ok"]
    if not ran or min(ran) >= ENOUGH_ROUNDS:
        return []
    return [
        "",
        f"Some cells ran in only {min(ran)} round(s): their intervals have seen few processes, so a "
        "cell marked faster or slower may be the machine drifting rather than the code. For a "
        f"before/after verdict use `--rounds {ENOUGH_ROUNDS}` or more (`PROFILE=full`), and rerun a cell "
        "that comes out changed.",
    ]


def _verdicts(recs_a: list[Record], recs_b: list[Record]) -> list[str]:
    """Each run's "fastest" verdicts side by side: which hold in both, which the other run contradicts."""
    lead_a, lead_b = cells.families(recs_a), cells.families(recs_b)
    rows, contradicted, named = [], 0, 0
    for key in [k for k in lead_a if k in lead_b]:
        fam_a, fam_b = lead_a[key], lead_b[key]
        apart_a, apart_b = fam_a.fastest, fam_b.fastest
        named += apart_a or apart_b
        word = cells.name(fam_a.leader) if apart_a else _unnamed(fam_a)
        other = cells.name(fam_b.leader) if apart_b else _unnamed(fam_b)
        fa, fb = fam_a.leader, fam_b.leader
        clash = apart_a and apart_b and cells.name(fa) != cells.name(fb)
        contradicted += clash
        rows.append([cells.what(key), key[1], word, other, "contradicted" if clash else "consistent"])
    lines = [_resolution("A", recs_a), _resolution("B", recs_b), ""]
    if not rows:
        return lines
    return [
        *lines,
        f"Fastest verdicts: {len(rows)} groups in both runs, {named} with a named fastest in at least one, "
        f"{contradicted} contradicted (each run names a different fastest).",
        "",
        tabulate(rows, ["workload", "device", "A: fastest", "B: fastest", ""], tablefmt="github"),
        "",
    ]


def _unnamed(fam: Family) -> str:
    """``same speed (a, b)`` or ``unresolved (a, b, c)``: a group without a fastest, and the adapters
    at its top that could not be told apart (cells.top)."""
    word, at_top = cells.top(fam)
    return f"{word} ({', '.join(cells.name(r) for r in at_top)})"


#: Pairs of cells this far apart must come out separated, or the intervals are too wide to use.
CLEAR_RATIO = 1.5


def _resolution(label: str, recs: list[Record]) -> str:
    """How many pairs of comparable cells of one run differ by CLEAR_RATIO or more, and how many
    of those its intervals separate (wide intervals that leave everything unresolved are no answer)."""
    groups: dict[tuple, list[Record]] = {}
    for r in recs:
        if r["status"] == "ok" and not cells.unranked(r):
            groups.setdefault(cells.axes(r), []).append(r)
    clear = [
        (a, b)
        for cells in groups.values()
        for i, a in enumerate(cells)
        for b in cells[i + 1 :]
        if max(a["median_s"], b["median_s"]) >= CLEAR_RATIO * min(a["median_s"], b["median_s"])
    ]
    apart = sum(separated(a, b) for a, b in clear)
    return (
        f"- Within {label}: {len(clear)} pairs of cells differ by {CLEAR_RATIO}x or more; "
        f"its intervals separate {apart} of them."
    )


#: The fields that decide whether two fingerprints are one machine kind, with their words.
MACHINE_FIELDS = {
    "vendor": "CPU vendor",
    "model_name": "CPU name",
    "family": "CPU family",
    "model": "CPU model",
    "stepping": "CPU stepping",
    "microcode": "microcode",
    "cache": "CPU cache",
    "flags": "instruction sets",
    "architecture": "architecture",
    "cores": "logical cores",
    "physical_cores": "physical cores",
    "memory_gib": "memory",
    "hypervisor": "hypervisor",
    "kernel": "kernel",
    "gpus": "GPUs",
    "driver": "NVIDIA driver",
}
#: Memory totals this close are one machine kind: a kernel's reservations move them a little.
MEMORY_TOLERANCE = 0.10
#: What an env.json from before ``machine_kind`` existed still says, under the fingerprint's names.
_LEGACY = {"cpu": "model_name", "cpu_logical": "cores", "cpu_physical": "physical_cores", "memory_gib": "memory_gib"}


@dataclass(frozen=True)
class MachineMatch:
    """Whether two runs' env.json describe one machine kind: ``differences`` in words (``CPU
    model 17 vs 24``, ``avx512_bf16 only in B``), and ``unknown``, what could not be compared
    (an older env.json, a field one side could not read)."""

    differences: tuple[str, ...]
    unknown: tuple[str, ...]

    @property
    def same(self) -> bool | None:
        """False where a field differs; None where none differs but some could not be compared
        (never a claim of sameness on part of the fingerprint); True where all agree."""
        return False if self.differences else (None if self.unknown else True)


def _view(env: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
    """(fields, complete): env.json's ``machine_kind``, else what an older env.json has."""
    found = env.get("machine_kind")
    if isinstance(found, dict):
        return dict(found), True
    old = {new: env[key] for key, new in _LEGACY.items() if env.get(key) is not None}
    if "gpus" in env:
        old["gpus"] = [g.get("name") for g in env["gpus"]]
        old["driver"] = env["gpus"][0].get("driver") if env["gpus"] else None
    # Python's platform string holds the kernel release (Linux-6.18.44-fc-v657-x86_64-with-glibc2.36):
    # two VMs of one CPU name told apart by their kernel builds, 2.5x apart in speed
    kernel = re.match(r"Linux-(.+?)-(?:x86_64|aarch64|arm64)\b", str(env.get("platform") or ""))
    if kernel:
        old["kernel"] = kernel[1]
    return old, False


def _gpu_words(names: Sequence[str]) -> str:
    counts: dict[str, int] = {}
    for n in names:
        counts[n] = counts.get(n, 0) + 1
    return ", ".join(f"{k}x {name}" for name, k in counts.items()) or "none"


def _difference(field: str, a: Any, b: Any) -> list[str]:
    """One field's differences in words (flags: what only A has, what only B has); none where they agree."""
    if field == "flags":
        only = ((sorted(set(a) - set(b)), "A"), (sorted(set(b) - set(a)), "B"))
        return [f"{', '.join(names)} only in {side}" for names, side in only if names]
    if field == "memory_gib":
        return [] if abs(a - b) <= MEMORY_TOLERANCE * max(a, b) else [f"memory {a} vs {b} GiB"]
    if field == "gpus":
        return [] if sorted(a) == sorted(b) else [f"GPUs {_gpu_words(a)} vs {_gpu_words(b)}"]
    return [] if a == b else [f"{MACHINE_FIELDS[field]} {a} vs {b}"]


def machine_match(env_a: Mapping[str, Any], env_b: Mapping[str, Any]) -> MachineMatch:
    """Whether runs A and B (their env.json) ran on one machine kind: every MACHINE_FIELDS field
    both fingerprints know is compared. A field one side does not know, or an ESSENTIAL field
    neither knows, leaves the match incomplete; so does an env.json without ``machine_kind`` (an older
    run), compared on what it has (CPU name, cores, memory, GPUs)."""
    (a, full_a), (b, full_b) = _view(env_a), _view(env_b)
    differences, unknown = [], []
    for side, env, full in (("A", env_a, full_a), ("B", env_b, full_b)):
        if not env:
            unknown.append(f"{side} has no env.json")
        elif not full:
            unknown.append(
                f"{side}'s env.json has no machine fingerprint (an older run): "
                "only its CPU name, cores, memory and GPUs are known"
            )
    for field, words in MACHINE_FIELDS.items():
        if field not in a or field not in b:  # an older env.json: said once above
            continue
        x, y = a[field], b[field]
        if field == "driver" and not a.get("gpus") and not b.get("gpus"):
            continue  # no GPU, no driver to compare
        if x is None or y is None:
            if full_a and full_b and (x is not None or y is not None or field in ESSENTIAL):
                side = "A and B" if x is None and y is None else ("A" if x is None else "B")
                unknown.append(f"{words} unknown in {side}")
            continue
        differences += _difference(field, x, y)
    return MachineMatch(tuple(differences), tuple(unknown))


#: Fields without which a fingerprint cannot tell two CPUs sold under one name apart: unknown on
#: both sides, they leave a match incomplete. Others unknown on both (an arm64 CPU's microcode)
#: are what the platform does not say, and are left out.
ESSENTIAL = ("vendor", "model", "flags")


def machine_text(machine: Mapping[str, Any]) -> str:
    """A fingerprint in one line: CPU, its identity, cores, memory, hypervisor, kernel, GPUs."""
    ids = [f"{k} {machine[k]}" for k in ("family", "model", "stepping") if machine.get(k) is not None]
    ident = ", ".join(x for x in (machine.get("vendor"), " ".join(ids)) if x)
    if machine.get("microcode"):
        ident += f", microcode {machine['microcode']}"
    flags = machine.get("flags")
    parts = [f"{machine.get('model_name') or 'CPU ?'}" + (f" ({ident})" if ident else "")]
    if machine.get("cores") is not None:
        parts.append(f"{machine['cores']} logical cores")
    if machine.get("memory_gib") is not None:
        parts.append(f"{machine['memory_gib']} GiB")
    if flags is not None:
        headline = [f for f in HEADLINE_FLAGS if f in flags]
        parts.append(
            f"{len(flags)} instruction-set flags" + (f" ({', '.join(headline)} among them)" if headline else "")
        )
    hypervisor = machine.get("hypervisor")
    if hypervisor is not None:
        words = {"none": "no hypervisor", "unknown vendor": "a hypervisor of unknown vendor"}
        parts.append(words.get(hypervisor, f"hypervisor {hypervisor}"))
    if machine.get("kernel"):
        parts.append(f"kernel {machine['kernel']}")
    if machine.get("gpus"):
        parts.append(f"{_gpu_words(machine['gpus'])} (driver {machine.get('driver')})")
    return ", ".join(parts)


#: The flags ``machine_text`` names: those that change which kernels a framework runs most.
HEADLINE_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "avx_vnni", "amx_bf16", "sve", "bf16")


def _machines(
    env_a: Mapping[str, Any], env_b: Mapping[str, Any], recs_a: Sequence[Record], recs_b: Sequence[Record]
) -> MachineMatch:
    """``machine_match`` of the runs' env.json, and where that finds no difference, the machines
    their cells ran on (each record's fingerprint: a cluster run's nodes, not the submitting host)."""
    found = machine_match(env_a, env_b)
    where = [{fingerprint_name(r["fingerprint"]) for r in recs if r.get("fingerprint")} for recs in (recs_a, recs_b)]
    if found.differences or not all(where) or where[0] == where[1]:
        return found
    ran = f"the cells ran on {'; '.join(sorted(where[0]))} in A, {'; '.join(sorted(where[1]))} in B"
    return MachineMatch((*found.differences, ran), found.unknown)


def _machine_lines(found: MachineMatch, env_a: Mapping[str, Any]) -> list[str]:
    """The page's first words on its machines: the same kind, different (verdicts asked for
    across them), or not known to be the same (an older env.json)."""
    if found.same is False:
        return [
            f"**Different machines: {'; '.join(found.differences)}.** The verdicts below were asked for "
            f"across them ({ACROSS_FLAG}): each ratio is B's machine and code against A's, so a cell "
            "`faster` or `slower` may be the machine rather than the code.",
            "",
        ]
    view_a, _ = _view(env_a)
    if found.same is None:
        return [
            f"**Machines not known to be the same: {'; '.join(found.unknown)}.** What both record agrees "
            f"(A: {machine_text(view_a)}), but two machines sold under one CPU name can differ in model, "
            "microcode and instruction sets; the measured peaks and kernel floors below are the evidence.",
            "",
        ]
    return [f"Machine: the same kind in A and B: {machine_text(view_a)}.", ""]


def _measured(env_a: Mapping[str, Any], env_b: Mapping[str, Any], pairs: list[tuple[Record, Record]]) -> list[str]:
    """What each run measured of its machine: the devices' matmul and copy peaks (env.json), and
    the matching cells' kernel floors (their step's kernels timed alone), B's over A's."""
    lines: list[str] = []
    peaks_a, peaks_b = env_a.get("peaks") or {}, env_b.get("peaks") or {}
    for device in [d for d in peaks_a if d in peaks_b]:
        on_a, on_b = peaks_a[device], peaks_b[device]
        parts = [
            f"{what} {sig(on_a[key])} {unit} in A, {sig(on_b[key])} in B (B / A {on_b[key] / on_a[key]:.2f})"
            for key, what, unit in (("matmul_gflops", "matmul", "GFLOP/s"), ("copy_gbs", "copy", "GB/s"))
            if on_a.get(key) and on_b.get(key)
        ]
        if parts:
            lines.append(f"- Measured peaks on {device}: {'; '.join(parts)}.")
    ratios: list[float] = []
    for a, b in pairs:
        floor_a, floor_b = a.get("kernel_floor_s"), b.get("kernel_floor_s")
        # a cluster node unlike the submitting host: the host's floors say nothing of its cells
        if floor_a and floor_b and same_machine(env_a, a) and same_machine(env_b, b):
            ratios.append(floor_b / floor_a)
    if ratios:
        mean = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
        lines.append(
            f"- Kernel floors (each cell's matmuls and convolutions timed alone), B / A: {mean:.2f}, the geometric "
            f"mean over {len(ratios)} matching cells ({min(ratios):.2f} to {max(ratios):.2f})."
        )
    return lines


def _versions(env: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted((env.get("packages") or {}).items())) or "versions unknown"
