"""Compile cost against steady speed: cumulative time from a cold start, break-even, and the
static-vs-dynamic and within-framework sections."""

from __future__ import annotations

import math
from typing import Any

from tabulate import tabulate

from harness.reporting.formatting import DASH, compiles_text, device_label, sig
from harness.reporting.summary import strategy


def cumulative_s(rec: dict[str, Any], steps: int) -> float:
    """Seconds to train ``steps`` batches from a cold start: the measured cold window, then
    the steady median per step beyond it."""
    cold = rec["cold_times_s"]
    if steps <= len(cold):
        return float(sum(cold[:steps]))
    return float(sum(cold)) + (steps - len(cold)) * rec["median_s"]


def break_even(static: dict[str, Any], eager: dict[str, Any]) -> int | None:
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


def static_vs_dynamic(groups: dict[tuple, list[dict[str, Any]]]) -> list[str]:
    """For workloads run under loop strategies: compiles, cold time and break-even per cell."""
    out: list[str] = []
    for (workload, _), recs in groups.items():
        ok = [r for r in recs if r["status"] == "ok" and strategy(r) and "cold_times_s" in r]
        for device in sorted({device_label(r) for r in ok}):
            cells = [r for r in ok if device_label(r) == device]
            eager = [r for r in cells if r.get("graph") == "dynamic"]
            if not cells:
                continue
            base = min(eager, key=lambda r: r["median_s"]) if eager else None
            n = max(len(r["cold_times_s"]) for r in cells)
            rows = []
            for r in sorted(cells, key=lambda r: (r.get("graph") != "static", r["adapter"])):
                if r is base:
                    even = "baseline"
                elif base is None or r.get("graph") != "static":
                    even = DASH
                else:
                    steps = break_even(r, base)
                    even = "never" if steps is None else f"{steps:,}"
                rows.append(
                    [
                        r["adapter"],
                        r.get("graph", DASH),
                        strategy(r),
                        compiles_text(r),
                        sig(r["first_step_s"] * 1e3),
                        sig(r["median_s"] * 1e3),
                        sig(cumulative_s(r, n)),
                        even,
                    ]
                )
            headers = [
                "adapter",
                "graph",
                "strategy",
                "traces / compiles",
                "first step (ms)",
                "steady (ms/step)",
                f"cold time, {n} batches (s)",
                "break-even (steps)",
            ]
            out += [f"## Static vs dynamic: {workload} on {device}", ""]
            if base is not None:
                out += [
                    f"Break-even: the number of training steps from a cold start after which the static-graph "
                    f"cell has spent no more time in total than the fastest dynamic-graph cell, "
                    f"{base['adapter']} ({strategy(base)}, {sig(base['median_s'] * 1e3)} ms/step); measured over "
                    f"the first {n} steps (every compile included), extrapolated with the steady medians beyond. "
                    "`never`: its steady step is not faster.",
                    "",
                ]
            out += [tabulate(rows, headers, tablefmt="github", disable_numparse=True), ""]
    return out


def within_frameworks(groups: dict[tuple, list[dict[str, Any]]]) -> list[str]:
    """Each framework's dynamic and static modes side by side (torch eager vs torch.compile,
    TF eager vs tf.function, JAX op by op vs jit, Keras on torch vs on JAX)."""
    rows = []
    for (workload, _), recs in groups.items():
        ok = [r for r in recs if r["status"] == "ok"]
        for device in sorted({device_label(r) for r in ok}):
            for framework in sorted({r.get("framework", "") for r in ok}):
                mine = [r for r in ok if device_label(r) == device and r.get("framework") == framework]
                dynamic = [r for r in mine if r.get("graph") == "dynamic"]
                static = [r for r in mine if r.get("graph") == "static"]
                if not dynamic or not static:
                    continue
                d, st = min(dynamic, key=lambda r: r["median_s"]), min(static, key=lambda r: r["median_s"])
                steps = break_even(st, d) if "cold_times_s" in st and "cold_times_s" in d else None
                rows.append(
                    [
                        framework,
                        workload,
                        device,
                        " ".join(filter(None, [d["adapter"], strategy(d)])),
                        sig(d["median_s"] * 1e3),
                        " ".join(filter(None, [st["adapter"], strategy(st)])),
                        sig(st["median_s"] * 1e3),
                        f"{d['median_s'] / st['median_s']:.2f}x",
                        compiles_text(st),
                        "never" if steps is None else f"{steps:,}",
                    ]
                )
    if not rows:
        return []
    headers = [
        "framework",
        "workload",
        "device",
        "dynamic",
        "dynamic (ms/step)",
        "static",
        "static (ms/step)",
        "static speed-up",
        "static traces / compiles",
        "break-even (steps)",
    ]
    intro = (
        "Each framework's fastest dynamic-graph cell against its fastest static-graph cell (best loop "
        "strategy where there are several). Speed-up is dynamic time over static time (above 1: the "
        "static graph is faster once compiled); break-even is the step count from a cold start after "
        "which the static mode has spent no more time in total."
    )
    return [
        "## Static vs dynamic within each framework",
        "",
        intro,
        "",
        tabulate(rows, headers, tablefmt="github", disable_numparse=True),
        "",
    ]
