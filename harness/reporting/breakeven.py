"""Compile cost against steady speed: cumulative time from a cold start and the break-even step."""

from __future__ import annotations

import math
from typing import Any

from harness.running.rounds import relative, separated

Record = dict[str, Any]


def cumulative_s(rec: Record, steps: int) -> float:
    """Seconds to train ``steps`` batches from a cold start: the measured cold window, then
    the steady median per step beyond it."""
    cold = rec["cold_times_s"]
    if steps <= len(cold):
        return float(sum(cold[:steps]))
    return float(sum(cold)) + (steps - len(cold)) * rec["median_s"]


def break_even(static: Record, eager: Record) -> int | None:
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


def break_even_range(static: Record, base: Record) -> tuple[int, int] | None:
    """Where compiling pays off against ``base``: the break-even step at both ends of the 95%
    interval of the steady-time ratio (paired by round). None unless ``static``'s steady step is
    faster and separated from ``base``'s: overlapping steady times give no break-even."""
    if static["median_s"] >= base["median_s"] or not separated(static, base):
        return None
    _, low, high = relative(base, static)  # time(static) / time(base), wholly below 1 here
    early = break_even({**static, "median_s": base["median_s"] * low}, base)
    late = break_even({**static, "median_s": base["median_s"] * high}, base)
    if early is None or late is None:
        return None
    return early, late


def steps_text(span: tuple[int, int]) -> str:
    """``793`` or ``793 to 1,180``."""
    early, late = span
    return f"{early:,}" if early == late else f"{early:,} to {late:,}"
