"""Compile cost against steady speed: cumulative time from a cold start and the break-even step."""

from __future__ import annotations

import math
from typing import cast

import numpy as np

from harness.records import Record
from harness.stats.verdicts import FASTER, SAME, SLOWER, UNRESOLVED, pair_verdict, relative, separated


def cold_window(rec: Record) -> list[float]:
    """A cell's cold window, step by step: the mean over its processes (generations) of each one's
    ``cold_times_s``, over the length they all have; a lone process's own window."""
    windows = [w for w in rec.get("round_cold_times_s") or [] if w]
    if len(windows) < 2:
        return list(rec["cold_times_s"])
    n = min(len(w) for w in windows)
    return [float(v) for v in np.mean([w[:n] for w in windows], axis=0)]


def process_windows(rec: Record) -> tuple[list[list[float]], int, bool]:
    """Each process's cold window for the break-even range: those that ran without other load,
    how many were left out for load, and whether every one had load (then all are kept, and the
    caller says so). A record without per-process windows gives its own, with its own flag;
    harness.stats.cells.combine writes both per-process lists together, from records of any schema."""
    found: list[tuple[list[float], bool]] = []
    if rec.get("round_cold_times_s"):
        flagged = zip(rec["round_cold_times_s"], rec["round_cold_contended"], strict=True)
        found = [(list(w), bool(busy)) for w, busy in flagged if w]
    found = found or [(list(rec["cold_times_s"]), bool(rec.get("cold_contended")))]
    windows = [w for w, _ in found]
    quiet = [w for w, busy in found if not busy]
    if not quiet:
        return windows, 0, True
    return quiet, len(windows) - len(quiet), False


def _alone(rec: Record, window: list[float], median_s: float) -> Record:
    """``rec`` as if one process with cold ``window`` and steady ``median_s`` had made it."""
    return {**rec, "cold_times_s": window, "round_cold_times_s": [], "median_s": median_s}


def cumulative_s(rec: Record, steps: int) -> float:
    """Seconds to train ``steps`` batches from a cold start: the measured cold window (``cold_window``),
    then the steady median per step beyond it."""
    cold = cold_window(rec)
    if steps <= len(cold):
        return float(sum(cold[:steps]))
    return float(sum(cold)) + (steps - len(cold)) * rec["median_s"]


def break_even(static: Record, eager: Record) -> int | None:
    """The step count from which ``static`` has spent no more time than ``eager`` since a cold
    start and stays so: the step after the last one inside the cold window at which it is behind
    (it is never behind again inside the window), extrapolated with the steady medians where it
    is still behind at the window's end. None if its steady step is not faster (it falls behind
    for good, whatever the window showed)."""
    gain = eager["median_s"] - static["median_s"]
    if gain <= 0:
        return None
    window = max(len(cold_window(static)), len(cold_window(eager)))
    behind = [n for n in range(1, window + 1) if cumulative_s(static, n) > cumulative_s(eager, n)]
    if not behind:
        return 1
    if behind[-1] < window:
        return behind[-1] + 1
    gap = cumulative_s(static, window) - cumulative_s(eager, window)
    return window + math.ceil(gap / gain)


def steady_outcome(base: Record, static: Record) -> tuple[str, str]:
    """``static``'s steady step against ``base``'s: faster, slower, same speed or unresolved (with the
    reason) from harness.stats.verdicts; records without processes to read by their intervals."""
    if not all(r.get("process_levels") or r.get("step_times_s") for r in (base, static)):
        if not separated(base, static):
            return UNRESOLVED, "no processes to read"
        return (FASTER if static["median_s"] < base["median_s"] else SLOWER), ""
    v = pair_verdict(base, static)
    return v.outcome, v.reason


def pair_break_even(static: Record, base: Record) -> tuple[str, int | None]:
    """``static``'s steady outcome against ``base`` (``steady_outcome``) and, where it is faster,
    its break-even step (``break_even``; None: never, or no cold window recorded): what the "Within
    each framework" table prints and the summary quotes."""
    outcome, _ = steady_outcome(base, static)
    cold = all("cold_times_s" in r for r in (static, base))
    return outcome, break_even(static, base) if outcome == FASTER and cold else None


def break_even_text(static: Record, base: Record) -> str:
    """The break-even step of ``static`` against ``base`` for a table cell (``pair_break_even``):
    ``same speed`` where their steady steps are within 5% of each other, ``unresolved`` where the
    evidence cannot say, else a count or ``never``."""
    outcome, steps = pair_break_even(static, base)
    if outcome in (SAME, UNRESOLVED):
        return outcome
    return "never" if steps is None else steps_text((steps, steps))


def break_even_range(static: Record, base: Record) -> tuple[int, int] | None:
    """Where compiling pays off against ``base``, with both spreads: the earliest and latest
    break-even over every pairing of the two cells' processes' cold windows (``process_windows``:
    those under other load left out where quiet ones remain), at the ends of the interval of the
    steady-time ratio. None unless ``static``'s steady step is faster and separated from
    ``base``'s: steady times not separated give no break-even."""
    if static["median_s"] >= base["median_s"] or not separated(static, base):
        return None
    _, low, high = relative(base, static)  # time(static) / time(base), wholly below 1 here
    others = [_alone(base, theirs, base["median_s"]) for theirs in process_windows(base)[0]]
    found = [
        break_even(_alone(static, mine, base["median_s"] * ratio), other)
        for mine in process_windows(static)[0]
        for other in others
        for ratio in (low, high)
    ]
    if None in found:
        return None
    ends = cast(list[int], found)  # no None left
    return min(ends), max(ends)


def cold_load_note(static: Record, base: Record) -> str:
    """What other load did to the cold windows behind ``break_even_range``, in words ("" if nothing)."""
    notes = []
    for rec in (static, base):
        _, left_out, all_busy = process_windows(rec)
        if all_busy:
            notes.append(f"{rec['adapter']}'s cold window ran under other load")
        elif left_out:
            notes.append(f"{left_out} of {rec['adapter']}'s cold windows left out for other load")
    return "; ".join(notes)


def steps_text(span: tuple[int, int]) -> str:
    """``793`` or ``793 to 1,180``."""
    early, late = span
    return f"{early:,}" if early == late else f"{early:,} to {late:,}"
