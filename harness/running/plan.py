"""Matrix planning: turn FRAMEWORK / WORKLOAD / DEVICE selections into cells.

Selections are validated here, in the parent, before anything runs: a bad value is a
PlanError naming it, the valid choices and the closest match.
"""

from __future__ import annotations

import difflib
import itertools
import math
import os
import shutil
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from adapters import AdapterInfo
from adapters.base import PRECISIONS
from harness.install.environments import ENV_NAME
from harness.records import Cell, base_adapter, cell_id, setting_of, spec_of
from harness.running import devices as device_names
from workloads import STRATEGIES, WORKLOADS, SpecError, get_workload, model_file
from workloads.images import PIPELINE_FIELDS, has_images, parse_setting
from workloads.spec import overridable_fields

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
        if model_file.is_model_file(item):
            item = model_file.canonical_name(item)
        names = list(WORKLOADS) if item == "all" else [item]
        if item != "all" and item not in WORKLOADS:
            if not model_file.is_model_file(item):
                raise _bad("workload", item, ["all", *WORKLOADS, "a Keras model file (a .py path)"])
            try:
                get_workload(item)  # the file's own faults, one line, before anything runs
            except SpecError as exc:
                raise PlanError(str(exc)) from None
        chosen += [n for n in names if n not in chosen]
    return chosen


def select_devices(expr: str, gpu_present: bool = False) -> list[str]:
    """Concrete devices: ``auto`` is this machine's GPU where it has one, else its CPU, for every
    adapter alike (a framework that cannot use the GPU then fails instead of quietly running on
    the CPU beside GPU rows)."""
    chosen: list[str] = []
    known = device_names.names()  # cpu, cuda and the devices plugins name (harness.running.devices)
    for item in _items(expr):
        if item not in ("auto", *known, "all"):
            raise _bad("device", item, ["auto", *known, "all"])
        auto = "cuda" if gpu_present else "cpu"
        for d in known if item == "all" else (auto,) if item == "auto" else (item,):
            if d not in chosen:
                chosen.append(d)
    return chosen


#: ``--strategy default``: each workload's own default strategy, and its plan axes at their defaults.
DEFAULT_STRATEGY = "default"


def select_strategies(expr: str) -> list[str]:
    if _items(expr) == [DEFAULT_STRATEGY]:
        return [DEFAULT_STRATEGY]
    chosen: list[str] = []
    for item in _items(expr):
        if item != "all" and item not in STRATEGIES:
            raise _bad("strategy", item, ["all", DEFAULT_STRATEGY, *STRATEGIES])
        chosen += [s for s in (STRATEGIES if item == "all" else [item]) if s not in chosen]
    return chosen


def variants(workload: str, overrides: list[str], strategies: list[str]) -> list[list[str]]:
    """Override lists for one workload: one per loop strategy where the workload has them
    (training with a variable-length loop: its ``strategies``) and the user did not fix one
    with --set, none where it has none of ``strategies``; times each value of every field in
    its ``plan_axes`` that --set does not fix (the transformer's ``attention``)."""
    spec = get_workload(workload)
    fixed = {o.split("=")[0].strip() for o in overrides}
    out = [list(overrides)]
    looped = spec.task == "train" and bool(spec.strategies) and "strategy" not in fixed
    if strategies == [DEFAULT_STRATEGY]:  # the spec's own defaults: one cell per adapter
        if looped:
            out = [[*overrides, f"strategy={spec.strategy}"]]
        return out
    if looped:
        out = [[*overrides, f"strategy={s}"] for s in strategies if s in spec.strategies]
    for field, values in spec.plan_axes.items():
        if field not in fixed:
            out = [[*o, f"{field}={v}"] for o in out for v in values]
    return out


def select_from(expr: str, valid: list[str], kind: str) -> list[str]:
    """``all`` or a comma list of ``valid`` names, in the order given, each once; PlanError
    naming the bad one (as a ``kind``) and the valid ones."""
    chosen: list[str] = []
    for item in _items(expr):
        if item != "all" and item not in valid:
            raise _bad(kind, item, ["all", *valid])
        chosen += [v for v in (valid if item == "all" else [item]) if v not in chosen]
    return chosen


def select_data(expr: str) -> list[str]:
    return select_from(expr, list(DATA_MODES), "data mode")


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
    force_precision: bool = False,
    sweep: str | None = None,
    gpu_present: bool = False,
    envs: Sequence[str] = (),
) -> list[Cell]:
    """The cells of a run, in order: workload (and its strategies), data mode, device, adapter
    (and its environments). With ``envs`` (``NAME=PYTHON``), every adapter also runs in each
    named Python environment, as the adapter ``<adapter>@<NAME>``: two versions of a framework
    side by side in one run. ``force_precision``: run a precision the device only emulates
    (harness.running.precision) instead of skipping its cells."""
    names = select_adapters(framework, adapters)
    workloads = select_workloads(workload)
    devices = select_devices(device, gpu_present)
    strategies = select_strategies(strategy)
    modes = select_data(data)
    if precision not in PRECISIONS:
        raise _bad("precision", precision, PRECISIONS)
    axes: list[tuple[str | None, list[Any]]] = [*parse_sweeps(sweep)] if sweep else [(None, [None])]
    environments = parse_envs(envs)
    overrides, pipeline = split_pipeline(overrides)
    for field, _ in axes:
        if field is not None:
            check_sweep_field(field, workloads)
    if pipeline or any(field in PIPELINE_FIELDS for field, _ in axes):
        check_pipeline_cells(workloads, modes)
    planned = []
    for w, (field, values) in itertools.product(workloads, axes):
        for ovr, value in itertools.product(variants(w, overrides, strategies), values):
            pipe = dict(pipeline)
            try:
                if field in PIPELINE_FIELDS:
                    pipe[field] = cast(int, value)  # parsed by parse_sweep
                elif field is not None:
                    ovr = [*ovr, f"{field}={_swept_value(w, ovr, field, value)}"]
                planned.append((w, ovr, spec_of({"workload": w, "overrides": ovr}), field, value, pipe))
            except SpecError as exc:
                raise PlanError(str(exc)) from None
    if not planned:
        raise PlanError(f"no workload of {workload!r} has any of the strategies {', '.join(strategies)}")
    cells: list[Cell] = []
    runs_in = [(None, None), *environments.items()]  # this environment, then each named one
    for (w, ovr, spec, field, value, pipe), mode, d, name, (env, python) in itertools.product(
        planned, modes, devices, names, runs_in
    ):
        info = adapters[name]
        label = f"{name}@{env}" if env else name
        settings = [f"{k}={v}" for k, v in sorted(pipe.items())]
        cells.append(
            cast(
                Cell,
                {
                    "run_id": run_id,
                    "cell_id": cell_id(label, w, d, [*ovr, f"data={mode}", f"precision={precision}", *settings]),
                    "adapter": label,
                    **({"base_adapter": name, "env": env, "python": python} if env else {}),
                    "framework": info.framework,
                    "graph": info.graph,
                    "workload": w,
                    "overrides": ovr,
                    "spec": spec.as_dict(),
                    "param_count": spec.param_count(),
                    "data": mode,
                    "device_requested": d,
                    "precision": precision,
                    **({"force_precision": True} if force_precision else {}),
                    "profile": profile,
                    "threads": threads,
                    **({"pipeline": pipe} if pipe else {}),
                    **({"sweep": {"field": field, "value": float(cast("str | int", value))}} if field else {}),
                },
            )
        )
    return cells


#: Most a twin may be slowed: ten times its step, or this many milliseconds of wait per step.
MAX_SLOWDOWN = 10.0
MAX_WAIT_MS = 1000.0


def parse_twins(text: str) -> list[float | str]:
    """``--twins``: a comma list of twins, each a share of its step to slow it by (0: identical
    code, 0.1: 10%, at most MAX_SLOWDOWN) or a fixed wait per step in milliseconds (``50ms``, at
    most MAX_WAIT_MS), kept as the string; a PlanError naming a bad one and the valid forms."""
    out: list[float | str] = []
    for item in (t.strip() for t in text.split(",")):
        try:
            if item.endswith("ms"):
                ms = float(item[:-2])
                if 0 < ms <= MAX_WAIT_MS:
                    out.append(f"{ms:g}ms")
                    continue
            else:
                share = float(item)
                if 0 <= share <= MAX_SLOWDOWN:
                    out.append(share)
                    continue
        except ValueError:
            pass
        raise PlanError(
            f"--twins {text!r}: {item!r} is not a twin; valid: a comma list of slow-downs between 0 and "
            f"{MAX_SLOWDOWN:g} (a share of the step, 0: identical) or waits a step of more than 0 and at most "
            f"{MAX_WAIT_MS:g} ms (e.g. 50ms), e.g. 0,0,0.1,50ms,50ms"
        )
    if not out:
        raise PlanError(f"--twins {text!r}: no twin given; e.g. 0,0,0.1,50ms,50ms")
    return out


def wait_s(twin: float | str) -> float:
    """A twin's fixed wait per step in seconds (0 for a twin slowed by a share, or identical)."""
    return float(twin[:-2]) / 1000 if isinstance(twin, str) else 0.0


def twins(cells: list[Cell], factors: Sequence[float | str]) -> list[Cell]:
    """Each cell, then its twins for calibration (harness.calibrate): the same adapter under
    another name, ``<adapter>~twin<i>`` for a factor of 0 (identical code), ``<adapter>~slow<p>``
    for a factor f > 0 (a busy-wait of f times its step inside the timed region, p = 100 f),
    ``<adapter>~wait<ms>`` for a wait of ``<ms>ms`` (a busy-wait of that many milliseconds a step:
    a slow cell whose wait does not grow with contention, as a share of a contended step would),
    each with ``-<i>`` where it is given more than once (twins slowed alike: identical code to
    each other, so slow cells can be calibrated against each other)."""
    out = []
    for cell in cells:
        out.append(cell)
        for i, f in enumerate(factors, start=1):
            if isinstance(f, str):
                label, slow = f"{cell['adapter']}~wait{f.removesuffix('ms')}", {"wait_s": wait_s(f)}
            elif f:
                label, slow = f"{cell['adapter']}~slow{round(100 * f):g}", {"slowdown": f}
            else:
                label, slow = f"{cell['adapter']}~twin{i}", {}
            if slow and factors.count(f) > 1:
                label += f"-{i}"
            ident = f"{label}|" + setting_of(cell)
            twin: dict[str, Any] = {**cell, "adapter": label, "base_adapter": base_adapter(cell), "cell_id": ident}
            out.append(cast(Cell, {**twin, **slow}))
    return out


def parse_envs(exprs: Iterable[str]) -> dict[str, str]:
    """``NAME=PYTHON`` items -> {name: interpreter path}; the interpreter must exist and run."""
    found: dict[str, str] = {}
    for expr in exprs:
        name, sep, python = expr.partition("=")
        if not sep or not ENV_NAME.match(name) or not python:
            raise PlanError(f"--env {expr!r}: expected NAME=PYTHON, e.g. torch-next=.venv-next/bin/python")
        if name in found:
            raise PlanError(f"--env {expr!r}: environment {name!r} given twice")
        path = shutil.which(python) or python
        if not os.access(path, os.X_OK) or not Path(path).is_file():
            raise PlanError(f"--env {expr!r}: {python!r} is not an executable Python interpreter")
        found[name] = str(Path(path).absolute())
    return found


def split_pipeline(overrides: Iterable[str]) -> tuple[list[str], dict[str, int]]:
    """``--set`` items apart: spec overrides, and input pipeline settings (workloads.images)."""
    spec, pipeline = [], {}
    for item in overrides:
        key, sep, raw = item.partition("=")
        if sep and key.strip() in PIPELINE_FIELDS:
            try:
                pipeline[key.strip()] = parse_setting(key.strip(), raw.strip())
            except SpecError as exc:
                raise PlanError(str(exc)) from None
        else:
            spec.append(item)
    return spec, pipeline


def check_sweep_field(field: str, workloads: list[str]) -> None:
    """A swept field must be a spec field of every selected workload or a pipeline setting."""
    if field in PIPELINE_FIELDS:
        return
    for w in workloads:
        fields = overridable_fields(get_workload(w))
        if field not in fields:
            raise PlanError(
                f"--sweep {field!r}: not a field of workload {w}; valid: spec fields {', '.join(fields)}; "
                f"input pipeline settings (--data loader) {', '.join(PIPELINE_FIELDS)}"
            )


def check_pipeline_cells(workloads: list[str], modes: list[str]) -> None:
    """Pipeline settings tune the image pipeline: only ``--data loader`` on image workloads."""
    if modes != ["loader"]:
        raise PlanError(
            f"input pipeline settings ({', '.join(PIPELINE_FIELDS)}) apply to --data loader only; got --data "
            f"{','.join(modes)}"
        )
    plain = [w for w in workloads if not has_images(get_workload(w))]
    if plain:
        images = [w for w in WORKLOADS if has_images(get_workload(w))]
        raise PlanError(
            f"input pipeline settings apply to the image workloads ({', '.join(images)}); "
            f"{', '.join(plain)} feed pre-made batches"
        )


def parse_sweeps(expr: str) -> list[tuple[str, list[str] | list[int]]]:
    """One or more sweep axes, ``FIELD=V1,...;FIELD=V1,...``: each axis varies its field with every
    other field at the spec's value (axes, not their product). A PlanError names a field given twice."""
    axes = [parse_sweep(part) for part in expr.split(";") if part.strip()]
    fields = [field for field, _ in axes]
    twice = sorted({f for f in fields if fields.count(f) > 1})
    if not axes or twice:
        again = f" ({', '.join(twice)} given twice)" if twice else ""
        raise PlanError(f"--sweep {expr!r}: expected FIELD=V1,V2,... axes separated by ';', each field once{again}")
    return axes


def _swept_value(workload: str, overrides: list[str], field: str, value: str) -> str:
    """The override text of a swept value: a number as given, or for a field holding a list of
    sizes (the mlp's ``hidden``) that number for every entry, so the depth stays the spec's and
    ``hidden=1024`` makes every hidden layer 1024 wide."""
    current = getattr(spec_of({"workload": workload, "overrides": overrides}), field)
    if isinstance(current, tuple):
        return ",".join([value] * len(current))
    return value


def parse_sweep(expr: str) -> tuple[str, list[str] | list[int]]:
    """``FIELD=V1,V2,...`` with numeric values (the sweep's x axis); ``autotune`` for workers.
    A spec field's values stay text (they become ``--set`` overrides); a pipeline setting's are
    parsed here, once, to the integers its cells record."""
    field, sep, raw = expr.partition("=")
    values = [v.strip() for v in raw.split(",") if v.strip()]
    if not sep or not field.strip() or len(values) < 2:
        raise PlanError(f"--sweep {expr!r}: expected FIELD=V1,V2,... with at least two values")
    if field.strip() in PIPELINE_FIELDS:
        try:
            return field.strip(), [parse_setting(field.strip(), v) for v in values]
        except SpecError as exc:
            raise PlanError(f"--sweep {expr!r}: {exc}") from None
    for v in values:
        try:
            number = float(v)
        except ValueError:
            raise PlanError(f"--sweep {expr!r}: value {v!r} is not a number") from None
        if not math.isfinite(number):
            raise PlanError(f"--sweep {expr!r}: value {v!r} is not a finite number")
    return field.strip(), values
