"""What this run found: frameworks against each other, one line per workload (issue 44).

The Summary compares each framework's static mode with its own eager mode; a reader choosing a
framework asks which framework, for what, and why. Each line names a workload's leader, each
other framework's best adapter with its ratio to the leader as the workload's table prints it
(the family-wise verdict: separated, ``same speed`` or ``unresolved``), and, for the largest gap
the run separated, the evidence it holds for why: the step as a multiple of its floors (the
table's "vs its floor"), the steady recompiles. Each adapter named links the module that ran.
"""

from __future__ import annotations

from pathlib import Path

from harness.records import Record
from harness.reporting.cells import families, name, what
from harness.reporting.formatting import DASH, sig, verdict_text
from harness.reporting.workload_tables import floor_text
from harness.stats.verdicts import SLOWER, Family, PairVerdict

#: At most this many lines (the workloads with the largest separated gaps first).
MAX_LINES = 8
ADAPTERS_DIR = Path(__file__).resolve().parents[2] / "adapters"


def module_of(adapter: str) -> Path | None:
    """The built-in module that defines ``adapter`` (``flax-nnx-cached`` -> ``adapters/flax_nnx.py``),
    None for a plugin's."""
    parts = adapter.split("~")[0].split("-")  # a calibration twin runs its base adapter
    for n in range(len(parts), 0, -1):
        path = ADAPTERS_DIR / ("_".join(parts[:n]) + ".py")
        if path.is_file():
            return path
    return None


def with_module(rec: Record) -> str:
    """The adapter's name with the module that ran it (``jax-jit`` (`adapters/jax_jit.py`)), a path
    from the repository's root, the same wherever the report is rebuilt."""
    module = module_of(rec["adapter"])
    return name(rec) if module is None else f"{name(rec)} (`adapters/{module.name}`)"


def _framework(rec: Record) -> str:
    return str(rec.get("framework") or rec["adapter"])


def best_of_each_framework(fam: Family) -> list[tuple[Record, PairVerdict]]:
    """Each other framework's fastest rival of the leader, with its verdict (rivals come fastest first)."""
    seen = {_framework(fam.leader)}
    out = []
    for rec, v in fam.rivals:
        if _framework(rec) not in seen:
            seen.add(_framework(rec))
            out.append((rec, v))
    return out


def why(leader: Record, slow: Record) -> str:
    """The evidence the run holds for ``slow`` being slower than ``leader``, or '' where it holds none."""
    said = []
    lead_floor, slow_floor = floor_text(leader), floor_text(slow)
    if DASH not in (slow_floor, lead_floor):
        said.append(f"its step is {slow_floor} (vs its floor), the leader's {lead_floor}: {_reading(slow_floor)}")
    if slow.get("steady_recompiles"):
        said.append(f"{slow['steady_recompiles']} recompiles in its steady window")
    return "; ".join(said)


def _reading(floor: str) -> str:
    """What a "vs its floor" text says of where the time goes."""
    if "dispatch" in floor:
        return "its time goes to per-step overhead (the same step on tiny tensors is its floor)"
    return "the gap is not the arithmetic (the fastest library's kernels for this step are the same for both)"


def line(key: tuple, fam: Family) -> tuple[float, str]:
    """(the largest separated ratio, the workload's line)."""
    lead = fam.leader
    head = f"**{what(key)}**: {with_module(lead)} leads at {sig(lead['median_s'] * 1e3)} ms/step"
    head += " (the fastest, separated from every other adapter)" if fam.fastest else ""
    others = best_of_each_framework(fam)
    if not others:
        return 0.0, head + "; no other framework ran."
    parts = [f"{_framework(r)}'s best, {with_module(r)}, {verdict_text(v)}" for r, v in others]
    gaps = [(v.point, r) for r, v in others if v.outcome == SLOWER]
    text = f"{head}; " + "; ".join(parts)
    if not gaps:
        return 0.0, text + " (no other framework separated from it)."
    worst, slow = max(gaps, key=lambda g: g[0])
    evidence = why(lead, slow)
    text += f". Largest gap: {name(slow)}" + (f", {evidence}." if evidence else ": the run holds no evidence of why.")
    return worst, text


def section(recs: list[Record], fams: dict[tuple, Family] | None = None) -> list[str]:
    """``## What this run found``: one line per workload with two frameworks or more, the
    largest separated gaps first, at most MAX_LINES; nothing where no workload has two."""
    lines = [line(key, fam) for key, fam in (families(recs) if fams is None else fams).items()]
    lines = [ln for ln in lines if "no other framework ran" not in ln[1]]
    if not lines:
        return []
    lines.sort(key=lambda ln: -ln[0])
    shown = lines[:MAX_LINES]
    intro = (
        "Frameworks against each other: per workload, the leader and each other framework's best adapter "
        "with its ratio to the leader as the workload's table prints it (the family-wise verdict); for the "
        "largest gap the run separated, what the run measured that explains it (the step over its floors, "
        "recompiles). Each adapter names the module that ran."
    )
    more = [f"{len(lines) - len(shown)} more workloads in their tables."] if len(lines) > len(shown) else []
    return ["## What this run found", "", intro, "", *(f"- {text}" for _, text in shown), *more, ""]
