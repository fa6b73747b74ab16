"""Matrix planning: turn FRAMEWORK / WORKLOAD / DEVICE selections into cells.

Selections are validated here, in the parent, before anything runs: a bad value is a
PlanError naming it, the valid choices and the closest match.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping

from adapters import AdapterInfo
from harness.records import cell_id
from workloads import WORKLOADS, SpecError, get_workload, override

DEVICES = ("auto", "cpu", "cuda", "all")


class PlanError(ValueError):
    """Bad user input to the planner."""


#: Words users type for a valid value, used for the "did you mean" hint.
ALIASES = {"gpu": "cuda", "tf": "tensorflow", "pytorch": "torch"}


def _bad(kind: str, value: str, valid: Iterable[str]) -> PlanError:
    valid = list(valid)
    close = [ALIASES[value]] if ALIASES.get(value) in valid else difflib.get_close_matches(value, valid, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return PlanError(f"unknown {kind} {value!r}{hint}; valid: {', '.join(valid)}")


def _items(expr: str) -> list[str]:
    items = [s.strip() for s in expr.split(",") if s.strip()]
    if not items:
        raise PlanError(f"empty selection {expr!r}")
    return items


def select_adapters(expr: str, adapters: Mapping[str, AdapterInfo]) -> list[str]:
    """``all``, adapter names, framework families, or a comma list of them."""
    families = sorted({a.framework for a in adapters.values()})
    chosen: list[str] = []
    for item in _items(expr):
        if item == "all":
            names = list(adapters)
        elif item in adapters:
            names = [item]
        elif item in families:
            names = [n for n, a in adapters.items() if a.framework == item]
        else:
            raise _bad("framework or adapter", item, ["all", *families, *adapters])
        chosen += [n for n in names if n not in chosen]
    return chosen


def select_workloads(expr: str) -> list[str]:
    chosen: list[str] = []
    for item in _items(expr):
        names = list(WORKLOADS) if item == "all" else [item]
        if item != "all" and item not in WORKLOADS:
            raise _bad("workload", item, ["all", *WORKLOADS])
        chosen += [n for n in names if n not in chosen]
    return chosen


def select_devices(expr: str) -> list[str]:
    chosen: list[str] = []
    for item in _items(expr):
        if item not in DEVICES:
            raise _bad("device", item, DEVICES)
        for d in ("cpu", "cuda") if item == "all" else (item,):
            if d not in chosen:
                chosen.append(d)
    return chosen


def plan(
    adapters: Mapping[str, AdapterInfo],
    framework: str,
    workload: str,
    device: str,
    overrides: list[str],
    profile: str,
    threads: int,
    run_id: str,
) -> list[dict]:
    """The cells of a run, in order: workload, then device, then adapter."""
    names = select_adapters(framework, adapters)
    workloads = select_workloads(workload)
    devices = select_devices(device)
    specs = {}
    for w in workloads:
        try:
            specs[w] = override(get_workload(w), overrides)
        except SpecError as exc:
            raise PlanError(str(exc)) from None
    cells = []
    for w in workloads:
        for d in devices:
            for name in names:
                info = adapters[name]
                cells.append(
                    {
                        "run_id": run_id,
                        "cell_id": cell_id(name, w, d, overrides),
                        "adapter": name,
                        "framework": info.framework,
                        "graph": info.graph,
                        "workload": w,
                        "overrides": list(overrides),
                        "spec": specs[w].as_dict(),
                        "param_count": specs[w].param_count(),
                        "device_requested": d,
                        "profile": profile,
                        "threads": threads,
                    }
                )
    return cells
