"""The report's summary: a few plain sentences derived from records alone.

At most about eight: who is fastest per device (named only where separated from every other
adapter of the workload, harness.stats.verdicts.family; else every adapter it could not be told
from, with the word for each: the same speed within 5%, or unresolved), each framework's static
against its dynamic mode (speed-up and break-even as ranges), the input-bound finding where
data modes ran, CPU against GPU where both ran, and what the run did not measure. A sentence
whose data is missing is left out, never guessed; cells that ran beside other CPU load
(``contended``) enter no verdict.
"""

from __future__ import annotations

from typing import Any

from harness.records import Record, override_number, setting_overrides, strategy_override
from harness.reporting import calibration_note
from harness.reporting.breakeven import pair_break_even, steps_text
from harness.reporting.cells import (
    axes,
    comparable,
    families,
    load_span,
    name,
    steal_said,
    stolen,
    strategy,
    top,
    under_load,
    unranked,
    what,
)
from harness.reporting.formatting import sig
from harness.reporting.static_dynamic import mode_pairs, speedup, speedup_text
from harness.stats.verdicts import FASTER, SAME, SLOWER, UNRESOLVED, Family, outcome, separated


def _ms(rec: Record) -> str:
    return f"{sig(rec['median_s'] * 1e3)} ms/step"


def _x(value: float) -> str:
    return f"{value:.0f}x" if value >= 10 else f"{value:.2f}x"


def _span(values: list[float]) -> str:
    """``1.24x`` or ``1.24x to 35x``."""
    low, high = min(values), max(values)
    return _x(low) if _x(low) == _x(high) else f"{_x(low)} to {_x(high)}"


def _listing(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def contention_sentences(recs: list[Record]) -> list[str]:
    """The cells that ran beside other CPU load: left out of every verdict, or ranked all the same
    where the run asked (``--rank-under-load``), with what such a ranking's error rate is."""
    busy = [r for r in recs if r["status"] == "ok" and r.get("contended")]
    out = []
    left = [r for r in busy if unranked(r)]
    if left:
        names = ", ".join(sorted({f"{r['adapter']} / {r['workload']} / {r.get('device')}" for r in left}))
        host = sum(stolen(r) for r in left)
        if host == 0:
            cause = "other processes kept the CPU busy"
        elif host == len(left):
            cause = "the VM's host took the CPU (hypervisor steal)"
        else:
            cause = "other processes or the VM's host (hypervisor steal) kept the CPU busy"
        out.append(
            f"{len(left)} cells ran while {cause} and are left out of every verdict here: {names}. "
            "Rerun them on a quiet machine (`--resume` does not rerun finished cells), or rank "
            "them with their load stated (`python -m harness report RUN --rank-under-load`)."
        )
    ranked = [r for r in busy if under_load(r)]
    if ranked:
        steal = steal_said(ranked)
        out.append(
            f"{len(ranked)} cells ran while other processes kept {load_span(ranked)} cores busy"
            f"{steal + ',' if steal else ''} and are ranked all the same, as the run asked (`--rank-under-load`): "
            "every verdict resting on one says `under load`. " + calibration_note.under_load_sentence(ranked)
        )
    return out


def _order(key: tuple) -> tuple:
    """Comparable groups in reading order: by workload, then numerically by setting (16 before 1024)."""
    numbers = tuple(override_number(o) or 0.0 for o in key[2])
    return key[0], numbers, str(key)


def winner_sentences(recs: list[Record], fams: dict[tuple, Family] | None = None) -> list[str]:
    """Per device: the fastest adapter of each workload where it is separated from every other
    (family-wise), else the adapters at the top it could not be told from: all of them, each
    workload's marked the same speed (within 5%) where every one is, else unresolved."""
    by_device: dict[str, tuple[list[str], list[str], list[str]]] = {}
    fams = families(recs) if fams is None else fams
    for key, fam in sorted(fams.items(), key=lambda kv: _order(kv[0])):
        first = fam.leader
        where = f"{first['machine_label']}: {key[1]}" if first.get("machine_label") else str(key[1])
        clear, same, unresolved = by_device.setdefault(where, ([], [], []))
        if fam.fastest:  # the runner-up's ratio as its workload's table prints it (time vs fastest)
            second, verdict = fam.rivals[0]
            clear.append(f"{name(first)} on {what(key)} ({_ms(first)}, {verdict.point:.2f}x ahead of {name(second)})")
            continue
        word, cells = top(fam)
        (same if word == SAME else unresolved).append(f"{_listing([name(r) for r in cells])} on {what(key)}")
    out = []
    for device, (clear, same, unresolved) in sorted(by_device.items()):
        parts = [f"the fastest, separated from every other adapter: {_listing(clear)}"] if clear else []
        if same:
            parts.append(f"the same speed within 5% at the top: {'; '.join(same)}")
        if unresolved:
            parts.append(f"unresolved at the top (the workload's table gives each interval): {'; '.join(unresolved)}")
        if not clear:
            parts.insert(0, "no adapter is separated from every other")
        out.append(f"On {device}, {'; '.join(parts)}.")
    return out


def framework_sentences(recs: list[Record]) -> list[str]:
    """Per framework, from the rows of "Within each framework" (static_dynamic.mode_pairs) and as
    they print them: on how many workloads its static mode is faster than its dynamic one once
    compiled, the range of its printed speed-ups, and of its printed break-even steps."""
    devices = {str(r.get("device")) for r in comparable(recs)}
    found: dict[str, dict[str, Any]] = {}
    for dyn, st in sorted(mode_pairs(recs), key=lambda p: p[1].get("framework", "")):
        key = axes(st)
        where = what(key) + (f" on {key[1]}" if len(devices) > 1 else "")
        mine = found.setdefault(
            st.get("framework", ""), {FASTER: [], SAME: [], SLOWER: [], UNRESOLVED: [], "pays": [], "names": set()}
        )
        mine["names"].add((st["adapter"], dyn["adapter"]))
        verdict, steps = pair_break_even(st, dyn)
        mine[verdict].append((where, speedup(dyn, st)))
        if steps is not None:
            mine["pays"].append(steps)
    out = []
    for framework, f in found.items():
        static = "/".join(sorted({s for s, _ in f["names"]}))
        dynamic = "/".join(sorted({d for _, d in f["names"]}))
        n = sum(len(f[word]) for word in (FASTER, SAME, SLOWER, UNRESOLVED))
        if f[FASTER]:
            text = f"{framework}: {static} is faster than {dynamic} once compiled on {len(f[FASTER])} of {n} "
            text += f"workloads ({', '.join(w for w, _ in f[FASTER])}: {_speedups(f[FASTER])})"
            if f["pays"]:
                unit = "step" if max(f["pays"]) == 1 else "steps"
                text += f", its compiles paid off after {steps_text((min(f['pays']), max(f['pays'])))} {unit} "
                text += "from a cold start"
        else:
            text = f"{framework}: {static} is faster than {dynamic} on none of {n} workloads"
        rest = []
        if f[SAME]:
            rest.append(f"the same speed within 5% on {len(f[SAME])} ({', '.join(w for w, _ in f[SAME])})")
        if f[SLOWER]:
            rest.append(f"slower on {len(f[SLOWER])} ({', '.join(w for w, _ in f[SLOWER])}: {_speedups(f[SLOWER])})")
        if f[UNRESOLVED]:
            rest.append(f"unresolved on {len(f[UNRESOLVED])} ({', '.join(w for w, _ in f[UNRESOLVED])})")
        out.append(text + (f"; {' and '.join(rest)}" if rest else "") + ".")
    return out


def _speedups(found: list[tuple[str, float]]) -> str:
    """The lowest and highest of (workload, speed-up) as the table prints them: ``1.20x to 22.80x``."""
    values = [s for _, s in found]
    low, high = speedup_text(min(values)), speedup_text(max(values))
    return low if low == high else f"{low} to {high}"


def _mode_pairs(recs: list[Record], mode: str) -> dict[str, list[tuple[Record, Record]]]:
    """Per device: (resident, ``mode``) records of the same cell, both ok and uncontended."""
    cells: dict[tuple, dict[str, Record]] = {}
    for r in recs:
        if r["status"] == "ok" and not unranked(r):
            key = (r["adapter"], strategy(r), *axes(r)[:4], r.get("machine"))
            cells.setdefault(key, {})[r.get("data", "resident")] = r
    out: dict[str, list[tuple[Record, Record]]] = {}
    for modes in cells.values():
        if "resident" in modes and mode in modes:
            out.setdefault(str(modes["resident"].get("device")), []).append((modes["resident"], modes[mode]))
    return out


def input_sentences(recs: list[Record]) -> list[str]:
    """Per device where data modes ran: how many cells a host copy and the native loader slow
    down (separated from resident data), and the worst of each."""
    host, loader = _mode_pairs(recs, "host"), _mode_pairs(recs, "loader")
    out = []
    for device in sorted(set(host) | set(loader)):
        parts = []
        for label, pairs in (
            ("copying each batch from host memory", host.get(device)),
            # The loaders are this project's, written in each framework's input API; TensorFlow's runs
            # Python per sample through tf.numpy_function (the GIL held), not tf.data's own ops.
            ("this project's loader in each framework's input API", loader.get(device)),
        ):
            if not pairs:
                continue
            slower = [
                (b["median_s"] / a["median_s"], a)
                for a, b in pairs
                if b["median_s"] > a["median_s"] and separated(a, b)
            ]
            if not slower:
                parts.append(f"{label} slows none of {len(pairs)} cells measurably")
                continue
            worst, rec = max(slower, key=lambda s: s[0])
            text = f"{label} slows {len(slower)} of {len(pairs)} cells, by up to {_x(worst)} "
            text += f"({name(rec)} on {what(axes(rec))}"
            if label.startswith("copying"):
                text += f": {1 - 1 / worst:.0%} of its step waits for input)"
            else:
                text += ", TensorFlow's through `tf.numpy_function`)" if rec.get("framework") == "tensorflow" else ")"
            parts.append(text)
        out.append(f"Input pipeline on {device}: " + "; ".join(parts) + ".")
    return out


def device_sentences(recs: list[Record]) -> list[str]:
    """CPU against GPU for the same adapter and workload: per workload, which device wins how often."""
    pairs: dict[tuple, dict[str, Record]] = {}
    for r in comparable(recs):
        key = axes(r)
        pairs.setdefault((key[0], *key[2:], r["adapter"], strategy(r)), {})[str(r.get("device"))] = r
    per_workload: dict[str, dict[str, list[float]]] = {}
    for key, by_device in pairs.items():
        cpu, gpu = by_device.get("cpu"), by_device.get("cuda")
        if not cpu or not gpu:
            continue
        label = what((key[0], None, *key[1:4]))
        tally = per_workload.setdefault(label, {"GPU": [], "CPU": [], SAME: [], UNRESOLVED: []})
        speed = cpu["median_s"] / gpu["median_s"]
        found = outcome(cpu, gpu)
        tally[found if found in (SAME, UNRESOLVED) else "GPU" if speed > 1 else "CPU"].append(speed)
    if not per_workload:
        return []
    parts = []
    for label, tally in sorted(per_workload.items()):
        n = sum(len(v) for v in tally.values())
        counts = ", ".join(
            f"{k} faster for {len(v)}" if k in ("GPU", "CPU") else f"{k} for {len(v)}" for k, v in tally.items() if v
        )
        every = [s for v in tally.values() for s in v]
        parts.append(f"{label}: {counts} of {n} adapters (GPU speed-up {_span(every)})")
    return ["CPU against GPU, same adapter: " + "; ".join(parts) + "."]


def missing_sentences(recs: list[Record]) -> list[str]:
    """What this run did not measure: a device, data modes, further rounds, cells that did not run."""
    gaps = []
    if not any(r.get("device") == "cuda" or r.get("device_requested") == "cuda" for r in recs):
        gaps.append("no GPU cells (so no CPU/GPU crossover)")
    if {r.get("data", "resident") for r in recs} == {"resident"}:
        gaps.append("only data already on the device (`DATA=all` adds host copies and native loaders)")
    ok = [r for r in recs if r["status"] == "ok"]
    if ok and all((r.get("rounds_done") or 1) == 1 for r in ok):
        gaps.append("one round per cell (no pair is judged below 3; `--rounds 3` or a longer `BUDGET`)")
    idle: dict[tuple, set[str]] = {}  # (status, strategy or data mode) -> adapters; workloads apart
    places: dict[tuple, set[str]] = {}
    for r in recs:
        if r["status"] != "ok":
            data = r.get("data") if r.get("data", "resident") != "resident" else None
            # the cell's other settings (e.g. attention=fused): the gap may be theirs, not the strategy's
            extra = list(setting_overrides(r))
            how = " ".join(filter(None, [strategy(r) or _spec_strategy(r), data, *extra]))
            idle.setdefault((r["status"], how), set()).add(r["adapter"])
            places.setdefault((r["status"], how), set()).add(r["workload"])
    for (status, how), adapters in sorted(idle.items()):
        who = _listing(sorted(adapters)) if len(adapters) <= 2 else f"{len(adapters)} adapters"
        where = ", ".join(sorted(places[(status, how)]))
        gaps.append(f"{status}: {how} for {who} on {where}" if how else f"{status}: {who} on {where}")
    if not gaps:
        return []
    why = " (the tables give each reason)" if idle else ""
    return ["Not in this run: " + "; ".join(gaps) + why + "."]


def _spec_strategy(rec: Record) -> str | None:
    """The strategy of a cell that did not run, whose record may lack the spec's task."""
    return strategy_override(rec)


def sentences(recs: list[Record], fams: dict[tuple, Family] | None = None) -> list[str]:
    """The summary, in reading order; ``fams``: ``cells.families(recs)`` where the caller has it."""
    return [
        *contention_sentences(recs),
        *winner_sentences(recs, fams),
        *framework_sentences(recs),
        *input_sentences(recs),
        *device_sentences(recs),
        *missing_sentences(recs),
    ]
