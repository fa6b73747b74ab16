"""Matrix planning: turn FRAMEWORK / WORKLOAD / DEVICE selections into cells.

Selections are validated here, in the parent, before anything runs: a bad value is a
PlanError naming it, the valid choices and the closest match.
"""

from __future__ import annotations

import difflib
import itertools
import math
from collections.abc import Iterable, Mapping

from adapters import AdapterInfo
from adapters.base import PRECISIONS
from harness.records import cell_id
from workloads import STRATEGIES, WORKLOADS, SpecError, get_workload, override

DEVICES = ("auto", "cpu", "cuda", "all")
DATA_MODES = ("resident", "host", "loader")


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


def select_strategies(expr: str) -> list[str]:
    chosen: list[str] = []
    for item in _items(expr):
        if item != "all" and item not in STRATEGIES:
            raise _bad("strategy", item, ["all", *STRATEGIES])
        chosen += [s for s in (STRATEGIES if item == "all" else [item]) if s not in chosen]
    return chosen


def variants(workload: str, overrides: list[str], strategies: list[str]) -> list[list[str]]:
    """Override lists for one workload: one per loop strategy where the workload has them
    (training with a variable-length loop) and the user did not fix one with --set."""
    spec = get_workload(workload)
    if getattr(spec, "task", None) != "train" or any(o.split("=")[0].strip() == "strategy" for o in overrides):
        return [list(overrides)]
    return [[*overrides, f"strategy={s}"] for s in strategies]


def select_data(expr: str) -> list[str]:
    chosen: list[str] = []
    for item in _items(expr):
        if item != "all" and item not in DATA_MODES:
            raise _bad("data mode", item, ["all", *DATA_MODES])
        chosen += [d for d in (DATA_MODES if item == "all" else [item]) if d not in chosen]
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
    strategy: str = "all",
    data: str = "resident",
    precision: str = "fp32",
    sweep: str | None = None,
) -> list[dict]:
    """The cells of a run, in order: workload (and its strategies), data mode, device, adapter."""
    names = select_adapters(framework, adapters)
    workloads = select_workloads(workload)
    devices = select_devices(device)
    strategies = select_strategies(strategy)
    modes = select_data(data)
    if precision not in PRECISIONS:
        raise _bad("precision", precision, PRECISIONS)
    field, values = parse_sweep(sweep) if sweep else (None, [None])
    planned = []
    for w in workloads:
        for ovr, value in itertools.product(variants(w, overrides, strategies), values):
            if field is not None:
                ovr = [*ovr, f"{field}={value}"]
            try:
                planned.append((w, ovr, override(get_workload(w), ovr), value))
            except SpecError as exc:
                raise PlanError(str(exc)) from None
    cells = []
    for (w, ovr, spec, value), mode, d, name in itertools.product(planned, modes, devices, names):
        info = adapters[name]
        cells.append(
            {
                "run_id": run_id,
                "cell_id": cell_id(name, w, d, [*ovr, f"data={mode}", f"precision={precision}"]),
                "adapter": name,
                "framework": info.framework,
                "graph": info.graph,
                "workload": w,
                "overrides": ovr,
                "spec": spec.as_dict(),
                "param_count": spec.param_count(),
                "data": mode,
                "device_requested": d,
                "precision": precision,
                "profile": profile,
                "threads": threads,
                **({"sweep": {"field": field, "value": float(value)}} if field else {}),
            }
        )
    return cells


def parse_sweep(expr: str) -> tuple[str, list[str]]:
    """``FIELD=V1,V2,...`` with numeric values (the sweep's x axis)."""
    field, sep, raw = expr.partition("=")
    values = [v.strip() for v in raw.split(",") if v.strip()]
    if not sep or not field.strip() or len(values) < 2:
        raise PlanError(f"--sweep {expr!r}: expected FIELD=V1,V2,... with at least two values")
    for v in values:
        try:
            number = float(v)
        except ValueError:
            raise PlanError(f"--sweep {expr!r}: value {v!r} is not a number") from None
        if not math.isfinite(number):
            raise PlanError(f"--sweep {expr!r}: value {v!r} is not a finite number")
    return field.strip(), values
