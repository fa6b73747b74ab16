"""The report's "Static vs dynamic" section: each framework's two modes side by side, what
compiling costs each static-graph cell and when it pays off, and the loop strategies."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tabulate import tabulate

from harness.records import Record
from harness.reporting import calibration_note
from harness.reporting.breakeven import (
    break_even_range,
    break_even_text,
    cold_load_note,
    cumulative_s,
    steady_outcome,
    steps_text,
)
from harness.reporting.cells import axes, comparable, name, strategy, unranked, what
from harness.reporting.formatting import DASH, compiles_text, device_label, sig, verdict_text
from harness.stats.verdicts import SAME, UNRESOLVED, pair_verdict


def section(groups: dict[tuple, list[Record]], calibration: Path | None = None) -> list[str]:
    """``## Static vs dynamic`` with its subsections, or nothing where no static cell ran;
    ``calibration``: the user's own, quoted beside the committed ones."""
    parts = [*within_frameworks(groups), *compile_costs(groups), *strategies(groups, calibration)]
    return ["## Static vs dynamic", "", *parts] if parts else []


def _table(rows: Sequence[Sequence[str | None]], headers: list[str]) -> str:
    return tabulate(rows, headers, tablefmt="github", disable_numparse=True)


def payoff(static: Record, base: Record) -> str:
    """When ``static`` has paid for its compiles against ``base``, in words for a table cell."""
    outcome, reason = steady_outcome(base, static)
    if outcome == UNRESOLVED:
        return f"unresolved ({reason})"
    if outcome == SAME:
        return "the same steady speed within 5%: no break-even"
    span = break_even_range(static, base)
    if span is not None:
        note = cold_load_note(static, base)
        return f"after {steps_text(span)} steps" + (f" ({note})" if note else "")
    return "never (slower steady step)" if static["median_s"] > base["median_s"] else "no cold window recorded"


def compile_costs(groups: dict[tuple, list[Record]]) -> list[str]:
    """One row per static-graph adapter and comparable group (its strategy with the shortest
    cold start): its compiles, first and steady step, and when it has paid off against the
    fastest dynamic-graph cell of the same workload and device, from the interval of their ratio."""
    cells = [r for recs in groups.values() for r in comparable(recs) if "cold_times_s" in r]
    static: dict[tuple, Record] = {}
    for r in cells:
        key = (axes(r), r["adapter"])
        # every static cell, also one whose adapter reports no compile counts or seconds (its
        # counts read "not reported"): its first step and cold start are measured all the same
        if r.get("graph") == "static" and (key not in static or r["cold_s"] < static[key]["cold_s"]):
            static[key] = r
    rows = []
    for (key, _), r in sorted(static.items(), key=lambda kv: (kv[0][0][0], str(kv[0][0][1:]), kv[0][1])):
        eager = [e for e in cells if e.get("graph") == "dynamic" and axes(e) == key]
        base = min(eager, key=lambda e: e["median_s"]) if eager else None
        rows.append(
            [
                name(r),
                what(key),
                device_label(r),
                compiles_text(r),
                sig(r["first_step_s"] * 1e3),
                sig(r["median_s"] * 1e3),
                f"{name(base)}, {sig(base['median_s'] * 1e3)}" if base else DASH,
                payoff(r, base) if base else DASH,
            ]
        )
    if not rows:
        return []
    intro = (
        "What each static-graph cell pays to trace and compile (its loop strategy with the shortest cold "
        "start), and the step count from a cold start after which it has spent no more time in total than "
        "the fastest dynamic-graph cell of the same workload and device. It is a range, the earliest to the "
        "latest break-even over the two ends of the interval of their steady-time ratio "
        "(harness.stats.verdicts) and every pairing of the two cells' processes' cold windows (every process "
        "that compiled cold: round 1 where later rounds start from its compiler cache). A cold window that ran "
        "beside other CPU load is left out where a quiet one remains, and the cell says so; where all of a "
        "cell's did, they are kept and the cell says that. Pairs whose steady steps are the same speed within "
        "5% get no break-even, and pairs the run cannot tell apart say `unresolved`. Cells that "
        "ran beside other CPU load in their turns (`contended`) are left out"
        " unless the run ranks them under load. Traces and compiles are the "
        "framework's own counts, `not reported` where the adapter's `compile_stats` leaves one out."
    )
    note = cache_note(list(static.values()))
    intro += f" {note}" if note else ""
    headers = [
        "static cell",
        "workload",
        "device",
        "traces / compiles",
        "first step (ms)",
        "steady (ms/step)",
        "fastest dynamic (ms/step)",
        "pays off",
    ]
    return ["### What compiling costs", "", intro, "", _table(rows, headers), ""]


def compiler_cache(rec: Record) -> str:
    """Whether the compiles behind a record's first step and cold window met a compiler cache:
    ``cold`` (caches off, TensorFlow's tf.function has none, or the run's own cache of the cell,
    empty when its first process started: harness.running.turns.compile_cache), ``warm`` (a later
    process of the cell, started from that cache), ``kept`` (a cache on in a folder that outlives
    the run, which earlier runs may have filled), or ``unrecorded`` (the record does not say)."""
    settings = rec.get("settings") or {}
    on = settings.get("inductor_caches", settings.get("persistent_compile_cache"))
    if rec.get("framework") == "tensorflow" or on is False:
        return "cold"
    if rec.get("compile_cache_dir"):
        return "warm" if rec.get("warm_compiles") else "cold"
    return "unrecorded" if on is None else "kept"


def cache_note(cells: list[Record]) -> str:
    """The compile table's caches in a sentence ("" without cells): which first steps are cold and
    which may have been served by a cache that earlier runs filled."""
    kinds: dict[str, list[str]] = {}
    for r in cells:
        kinds.setdefault(compiler_cache(r), []).append(r["adapter"])
    words = []
    if kinds.get("cold"):
        words.append(
            f"First steps and compiles are cold for {', '.join(sorted(set(kinds['cold'])))} (compiler caches "
            "off, none in TensorFlow, or the run's own cache, empty when the cell's first process started)."
        )
    if kinds.get("kept"):
        words.append(
            f"{', '.join(sorted(set(kinds['kept'])))} compiled with a cache kept between runs: earlier runs "
            "may have filled it, and their first steps and cold windows may read low."
        )
    if kinds.get("unrecorded"):
        words.append(
            f"The records of {', '.join(sorted(set(kinds['unrecorded'])))} do not say whether a compiler "
            "cache was on (their adapter did not record it): Inductor's and XLA's on-disk "
            "caches, left by earlier runs on the machine, may have served their first steps, which may "
            "read low."
        )
    return " ".join(words)


def strategies(groups: dict[tuple, list[Record]], calibration: Path | None = None) -> list[str]:
    """For workloads run under loop strategies: compiles, cold time and break-even per cell."""
    out: list[str] = []
    for (workload, setting), recs in groups.items():
        ok = [r for r in recs if r["status"] == "ok" and strategy(r) and "cold_times_s" in r and not unranked(r)]
        for device in sorted({device_label(r) for r in ok}):
            cells = [r for r in ok if device_label(r) == device]
            if {strategy(r) for r in cells} == {"exact"}:  # one strategy: nothing to set beside `exact`
                continue
            eager = [r for r in cells if r.get("graph") == "dynamic"]
            base = min(eager, key=lambda r: r["median_s"]) if eager else None
            n = max(len(r["cold_times_s"]) for r in cells)
            exact = {r["adapter"]: r for r in cells if strategy(r) == "exact"}
            rows = []
            # static first, by adapter, each adapter's strategies fastest first (not in the run's shuffled order)
            for r in sorted(cells, key=lambda r: (r.get("graph") != "static", r["adapter"], r["median_s"])):
                if r is base:
                    even = "baseline"
                elif base is None or r.get("graph") != "static":
                    even = DASH
                else:
                    even = break_even_text(r, base)
                rows.append(
                    [
                        r["adapter"],
                        r.get("graph", DASH),
                        strategy(r),
                        compiles_text(r),
                        sig(r["first_step_s"] * 1e3),
                        sig(r["median_s"] * 1e3),
                        vs_exact(r, exact.get(r["adapter"])),
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
                "steady vs its exact (unpaired)",
                f"cold time, {n} batches (s)",
                "break-even (steps)",
            ]
            title = f"{workload} ({', '.join(setting)})" if setting else workload
            out += [f"### Loop strategies: {title} on {device}", ""]
            if base is not None:
                calibrated = bool(calibration_note.across(cells, calibration))
                out += [
                    f"Break-even: the number of training steps from a cold start after which the static-graph "
                    f"cell has spent no more time in total than the fastest dynamic-graph cell, "
                    f"{base['adapter']} ({strategy(base)}, {sig(base['median_s'] * 1e3)} ms/step); measured over "
                    f"the first {n} steps (every compile included; the mean over the cell's processes that "
                    "compiled cold), and extrapolated with the steady medians beyond; the last crossing counts (the "
                    "static cell is never behind again). `never`: its steady step is slower; `same speed`: the "
                    "steady steps are within 5%; `unresolved`: the run cannot tell them apart. Cells that ran beside "
                    "other CPU load (`contended`) are left out"
                    " unless the run ranks them under load. `steady vs its exact`: the cell's steady step over the "
                    "same adapter's under `exact` (below 1: the strategy saves time once compiled), with its interval "
                    "from the two cells' processes (Welch's t: different strategies ran in different groups, so their "
                    "generations do not pair"
                    + ("; the Method quotes what that verdict told apart in calibration)." if calibrated else ")."),
                    "",
                ]
            out += [_table(rows, headers), ""]
    return out


def vs_exact(rec: Record, exact: Record | None) -> str:
    """A cell's steady step over the same adapter's ``exact`` cell, with its verdict (between
    groups: Welch's t on the processes' levels); "baseline" for the exact cell, a dash without one."""
    if exact is None:
        return DASH
    if rec is exact:
        return "baseline"
    return verdict_text(pair_verdict(exact, rec))


#: The libraries whose kernels a step runs, as a record's ``versions`` names them.
KERNEL_LIBRARIES = ("torch", "tensorflow", "jax")


def backend(rec: Record) -> str:
    """The library that runs a cell's kernels: Keras's backend where the record names one, else
    the first kernel library among its versions (flax: jax), else its framework."""
    versions = rec.get("versions") or {}
    if versions.get("keras_backend"):
        return str(versions["keras_backend"])
    return next((lib for lib in KERNEL_LIBRARIES if lib in versions), str(rec.get("framework", "")))


def mode_pairs(recs: list[Record]) -> list[tuple[Record, Record]]:
    """Each framework's fastest dynamic-graph and fastest static-graph cell (its best loop strategy:
    the fastest steady step) per group of comparable cells (cells.axes), as (dynamic, static), by
    device, framework and backend (``backend``): a pair differs in its graph mode alone, so Keras on
    torch (dynamic) is never set against Keras on JAX or TensorFlow (static). The rows of "Within
    each framework", and the pairs the answer quotes."""
    modes: dict[tuple, dict[str, list[Record]]] = {}
    for r in comparable(recs):
        if r.get("graph") in ("static", "dynamic"):
            key = (device_label(r), r.get("framework", ""), backend(r), str(axes(r)))
            modes.setdefault(key, {}).setdefault(r["graph"], []).append(r)
    return [
        (min(m["dynamic"], key=lambda r: r["median_s"]), min(m["static"], key=lambda r: r["median_s"]))
        for _, m in sorted(modes.items(), key=lambda kv: kv[0])
        if len(m) == 2
    ]


def speedup(dynamic: Record, static: Record) -> float:
    """The static mode's speed-up once compiled: dynamic steady time over static steady time."""
    return dynamic["median_s"] / static["median_s"]


def speedup_text(value: float) -> str:
    """A speed-up as "Within each framework" prints it: ``1.20x``, ``22.8x`` (three figures)."""
    return f"{value:.2f}x" if value < 10 else f"{value:.1f}x"


def within_frameworks(groups: dict[tuple, list[Record]]) -> list[str]:
    """Each framework's dynamic and static modes side by side on one backend (torch eager vs
    torch.compile, TF eager vs tf.function, JAX op by op vs jit): ``mode_pairs``."""
    rows = []
    for (workload, setting), recs in groups.items():
        label = f"{workload} ({', '.join(setting)})" if setting else workload
        for d, st in mode_pairs(recs):
            even = break_even_text(st, d) if "cold_times_s" in st and "cold_times_s" in d else DASH
            rows.append(
                [
                    st.get("framework", ""),
                    label,
                    device_label(st),
                    name(d),
                    sig(d["median_s"] * 1e3),
                    name(st),
                    sig(st["median_s"] * 1e3),
                    speedup_text(speedup(d, st)),
                    compiles_text(st),
                    even,
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
        "strategy: the one with the fastest steady step). Speed-up is dynamic time over static time (above "
        "1: the static graph is faster once compiled); break-even is the step count from a cold start after "
        "which the static mode has spent no more time in total and stays so (the last crossing), `same speed` "
        "where the steady steps are within 5% and `unresolved` where the run cannot tell them apart. Cells that "
        "ran beside other CPU load (`contended`) are left out"
        " unless the run ranks them under load. A pair differs in its graph mode alone: a "
        "framework whose dynamic and static cells run on different backends (Keras: eager on torch, compiled "
        "on JAX or TensorFlow) has no row; its workload tables set them side by side."
    )
    return ["### Within each framework", "", intro, "", _table(rows, headers), ""]
