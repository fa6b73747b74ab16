"""Where a profiled step's time goes: profiler events, read into one form, summed by category.

The readers (harness.measuring.profilers) turn each framework's trace into ``Event``s: ``step``
windows (one per profiled step, the harness's own annotation), ``op`` events (an op the framework
ran: an aten op, an XLA instruction, a TF op), ``scope`` events (annotations and runtime wrappers:
they cover no time themselves, but an optimizer or compile scope names the ops inside it), and
``kernel`` events (GPU kernels and copies, on the device's timeline).

``breakdown`` attributes each instant of the step windows: on a thread, to its innermost op (the
op's *self* time; nested ops are not counted twice); where ops of several threads run at once,
the instant is split evenly among them. So the categories' seconds sum to the time some op was
running, and UNCOVERED (the rest of the wall time: Python, dispatch, gaps, waiting) is never
negative: categories + uncovered = wall time, exactly. With kernel events (a GPU) the device's
timeline is the one broken down, and its uncovered time is the device idle.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from harness.stats import taxonomy

#: Ops kept in a breakdown's ``top_ops``.
TOP_OPS = 5


@dataclass(frozen=True)
class Event:
    """One profiler event: ``kind`` is step, op, scope or kernel; times in microseconds."""

    kind: str
    name: str
    start: float
    end: float
    thread: str = ""
    category: str | None = None
    """An op's or kernel's category; a scope's where it names its ops (optimizer, compile), else None."""


Segment = tuple[float, float, Event]


def _exclusive(events: list[Event]) -> list[Segment]:
    """One thread's nested events as self-time segments: (start, end, innermost op); a scope's own
    time and time outside every event give no segment. An op inside an optimizer or compile scope
    takes that scope's category."""
    out: list[Segment] = []
    stack: list[tuple[Event, float, str | None]] = []  # event, its end clipped to its parent's, context

    def emit(upto: float, cursor: float) -> float:
        if stack and upto > cursor and stack[-1][0].kind != "scope":
            ev, _, context = stack[-1]
            out.append((cursor, upto, Event(ev.kind, ev.name, ev.start, ev.end, ev.thread, context or ev.category)))
        return max(cursor, upto)

    cursor = float("-inf")
    for ev in sorted(events, key=lambda e: (e.start, -e.end)):
        while stack and stack[-1][1] <= ev.start:
            cursor = emit(stack[-1][1], cursor)
            stack.pop()
        cursor = emit(ev.start, cursor) if stack else ev.start
        parent_end = stack[-1][1] if stack else ev.end
        context = stack[-1][2] if stack else None
        if ev.kind == "scope" and ev.category in (taxonomy.OPTIMIZER, taxonomy.COMPILE):
            context = context or ev.category
        stack.append((ev, min(ev.end, parent_end), context))
    while stack:
        cursor = emit(stack[-1][1], cursor)
        stack.pop()
    return out


def _clip(segments: list[Segment], windows: list[tuple[float, float]]) -> Iterator[Segment]:
    """Segments cut to the step windows (sorted, disjoint)."""
    starts = [w[0] for w in windows]
    for start, end, ev in segments:
        i = max(0, bisect.bisect_right(starts, start) - 1)
        while i < len(windows) and windows[i][0] < end:
            lo, hi = max(start, windows[i][0]), min(end, windows[i][1])
            if hi > lo:
                yield lo, hi, ev
            i += 1


def _shared(segments: list[Segment]) -> list[float]:
    """Each segment's time, an instant shared by k segments counting 1/k to each."""
    points = sorted({p for s in segments for p in s[:2]})
    delta = [0] * (len(points) + 1)
    for start, end, _ in segments:
        delta[bisect.bisect_left(points, start)] += 1
        delta[bisect.bisect_left(points, end)] -= 1
    weight, active = [0.0], 0  # weight[i]: shared time from points[0] to points[i]
    for i in range(len(points) - 1):
        active += delta[i]
        weight.append(weight[-1] + ((points[i + 1] - points[i]) / active if active else 0.0))
    return [weight[bisect.bisect_left(points, e)] - weight[bisect.bisect_left(points, s)] for s, e, _ in segments]


def breakdown(events: list[Event]) -> dict[str, Any]:
    """The step windows' time by category (module docstring), per step, from one profiled pass.

    Returns ``steps``, ``step_s`` (mean profiled step, the trace's clock), ``seconds`` and
    ``shares`` per category (every one of taxonomy.CATEGORIES, UNCOVERED included; shares sum to
    1), ``ops_per_step`` (ops not nested in another op, or kernels on a GPU), ``top_ops`` (the
    TOP_OPS ops with the most self time) and, with kernel events, ``device_busy_share`` and
    ``kernel_gap_s`` (mean idle time between consecutive kernels inside a step). Raises
    ValueError without step windows."""
    windows = sorted((e.start, e.end) for e in events if e.kind == "step")
    if not windows:
        raise ValueError("no step windows in the profile (the step annotation is missing)")
    device = any(e.kind == "kernel" for e in events)
    timed = [e for e in events if e.kind in (("kernel",) if device else ("op", "scope"))]
    by_thread: dict[str, list[Event]] = defaultdict(list)
    for e in timed:
        by_thread[e.thread].append(e)
    segments = [s for evs in by_thread.values() for s in _clip(_exclusive(evs), windows)]
    shared = _shared(segments)
    steps, wall = len(windows), sum(hi - lo for lo, hi in windows)
    seconds = dict.fromkeys(taxonomy.CATEGORIES, 0.0)
    per_op: dict[str, list[Any]] = defaultdict(lambda: [0.0, 0, None])  # self time, calls, category
    for (_, _, ev), t in zip(segments, shared, strict=True):
        category = ev.category or taxonomy.OTHER
        seconds[category] += t
        per_op[ev.name][0] += t
        per_op[ev.name][2] = per_op[ev.name][2] or category
    seconds[taxonomy.UNCOVERED] = max(0.0, wall - sum(seconds.values()))
    inside = [e for e in timed if e.kind != "scope" and _in(e.start, windows)]
    top_level = inside if device else _top_level(inside, by_thread)
    for e in inside:
        per_op[e.name][1] += 1
    top = sorted(per_op.items(), key=lambda kv: -kv[1][0])[:TOP_OPS]
    out: dict[str, Any] = {
        "steps": steps,
        "step_s": wall / steps / 1e6,
        "seconds": {k: v / steps / 1e6 for k, v in seconds.items()},
        "shares": {k: v / wall for k, v in seconds.items()},
        "ops_per_step": len(top_level) / steps,
        "top_ops": [
            {
                "name": name,
                "category": cat or taxonomy.OTHER,
                "s_per_step": t / steps / 1e6,
                "share": t / wall,
                "calls_per_step": n / steps,
            }
            for name, (t, n, cat) in top
        ],
    }
    if device:
        out.update(_device_fields(inside, windows, wall))
    return out


def _in(t: float, windows: list[tuple[float, float]]) -> bool:
    i = bisect.bisect_right([w[0] for w in windows], t) - 1
    return i >= 0 and t < windows[i][1]


def _top_level(ops: list[Event], by_thread: dict[str, list[Event]]) -> list[Event]:
    """The ops not nested inside another op of their thread (what the framework launched)."""
    out = []
    for evs in by_thread.values():
        mine = sorted((e for e in evs if e.kind == "op"), key=lambda e: (e.start, -e.end))
        end = float("-inf")
        for e in mine:
            if e.start >= end:
                out.append(e)
                end = e.end
    wanted = {id(e) for e in ops}
    return [e for e in out if id(e) in wanted]


def _device_fields(kernels: list[Event], windows: list[tuple[float, float]], wall: float) -> dict[str, Any]:
    """Kernel time over wall time (the union: overlapping streams count once) and the mean gap."""
    busy, gaps = 0.0, []
    for lo, hi in windows:
        spans = sorted((max(k.start, lo), min(k.end, hi)) for k in kernels if k.start < hi and k.end > lo)
        end = None
        for s, e in spans:
            if end is not None and s > end:
                gaps.append(s - end)
            if end is None or s > end:
                busy += e - s
                end = e
            elif e > end:
                busy += e - end
                end = e
    return {"device_busy_share": busy / wall, "kernel_gap_s": (sum(gaps) / len(gaps) / 1e6) if gaps else 0.0}
