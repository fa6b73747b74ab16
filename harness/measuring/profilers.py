"""The profiled pass of ``--profile-ops``: a few synced steps under the framework's own profiler.

Run in the worker after the cell's timing is done (a profiler perturbs timing; the two never
mix): ``torch.profiler`` for torch and Keras on torch, ``jax.profiler`` for JAX, Flax and Keras
on JAX, ``tf.profiler.experimental`` for TensorFlow. The profiler is picked by the modules an
adapter ``requires`` (its framework family), so no adapter takes part. A plugin adds its framework's
profiler as an entry point of ENTRY_POINT_GROUP named after a module its adapters require (a
``ProfilerHook``; docs/adding-an-adapter.md, section 9); a built-in profiler comes first. Each step runs
inside a ``dlcompare.step`` annotation: its window in the trace is the step's wall time on the trace's clock.

The trace is kept in the run folder, in a form opened without this project: torch's Chrome trace
(``trace.json.gz``, chrome://tracing or ui.perfetto.dev), JAX's TensorBoard profile directory with
its ``*.trace.json.gz``, TF's TensorBoard profile directory plus a Chrome trace written from its
XSpace. The readers below turn each into harness.measuring.breakdown events; they read plain
data (JSON, or the XSpace flattened to rows), so tests check them on recorded samples.
"""

from __future__ import annotations

import gzip
import json
import math
import re
import shutil
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, cast

from adapters import PluginError, hooks, load_hook
from harness.measuring.breakdown import Event, breakdown
from harness.stats import taxonomy

STEP = "dlcompare.step"
#: The run folder's subfolder of traces, one folder per profiled cell.
TRACES = "traces"
#: Seconds of steps a profiled pass aims at, and its bounds in steps.
PASS_S, MIN_STEPS, MAX_STEPS = 0.3, 3, 20


#: A plugin's profiler: an entry point of this group, named after a module its adapters require.
ENTRY_POINT_GROUP = "dlcompare.profilers"
#: The built-in profilers, by the module an adapter requires, in the order they are tried.
BUILT_IN = ("torch", "jax", "tensorflow")
#: The categories an event may carry (harness.stats.taxonomy): what a plugin's profiler names.
CATEGORIES = taxonomy.CATEGORIES

#: What a profiler is called with: (step, sync, inputs, out_dir, steps). It runs ``steps`` steps
#: (``timed_steps``, each inside a STEP annotation of its profiler), writes its trace under
#: ``out_dir`` and returns (the trace's Events, the trace's path, each step's perf_counter seconds).
ProfilerHook = Callable[
    [Callable[[Any], Any], Callable[[Any], float], Sequence[Any], Path, int],
    tuple[list[Event], Path, list[float]],
]


def profiler_of(requires: Iterable[str]) -> str | None:
    """The profiler for an adapter that needs ``requires``: torch, jax or tensorflow, else the
    first required module a plugin registers a profiler for; None if none. Raises PluginError
    for a profiler name two packages register."""
    needed = list(requires)
    built_in = next((name for name in BUILT_IN if name in needed), None)
    if built_in is not None:
        return built_in
    plugins = hooks(ENTRY_POINT_GROUP)
    return next((name for name in needed if name in plugins), None)


def _runner(profiler: str) -> ProfilerHook:
    """The function that runs ``profiler``: a built-in one, or the plugin's, loaded now."""
    built_in: dict[str, ProfilerHook] = {"torch": _torch, "jax": _jax, "tensorflow": _tf}
    if profiler in built_in:
        return built_in[profiler]
    return cast(ProfilerHook, load_hook(hooks(ENTRY_POINT_GROUP)[profiler]))


def _checked(events: list[Event], times: list[float], steps: int) -> list[Event]:
    """A plugin's events and step times as the breakdown reads them; ValueError naming what is not."""
    if len(times) != steps:
        raise ValueError(f"the profiler timed {len(times)} steps, not the {steps} it was asked for")
    for e in events:
        if not isinstance(e, Event) or e.kind not in ("step", "op", "scope", "kernel"):
            raise ValueError(f"not a breakdown Event of kind step/op/scope/kernel: {e!r}")
        if e.category is not None and e.category not in CATEGORIES:
            raise ValueError(f"event {e.name!r} has category {e.category!r}, not one of {', '.join(CATEGORIES)}")
    return events


def folder_name(cell_id: str) -> str:
    """A cell's trace folder name: its id with every character a path may not hold replaced."""
    return re.sub(r"[^A-Za-z0-9._=-]+", "_", cell_id).strip("._") or "cell"


def pass_steps(step_s: float | None) -> int:
    """Profiled steps for a step of ``step_s`` seconds (MIN_STEPS..MAX_STEPS, about PASS_S)."""
    if not step_s or step_s <= 0:
        return MIN_STEPS
    return max(MIN_STEPS, min(MAX_STEPS, math.ceil(PASS_S / step_s)))


def profile_cell(
    requires: Iterable[str],
    step: Callable[[Any], Any],
    sync: Callable[[Any], float],
    inputs: Sequence[Any],
    out_dir: Path,
    run_dir: Path,
    unprofiled_s: float | None,
) -> dict[str, Any]:
    """The cell's ``ops_profile`` record field: its breakdown (harness.measuring.breakdown) with
    ``profiler``, ``trace`` (relative to ``run_dir``), ``profiled_step_s`` (median of the profiled
    steps, perf_counter; each, sorted, in ``profiled_times_s``) beside ``unprofiled_step_s``; or
    ``{"status": "skipped", "reason": ...}`` where the profiler cannot run or its trace cannot be
    read. Never raises for the profiler's sake."""
    requires = list(requires)
    try:
        profiler = profiler_of(requires)
    except PluginError as exc:
        return {"status": "skipped", "reason": str(exc)[:300]}
    if profiler is None:
        return {"status": "skipped", "reason": f"no profiler for an adapter requiring {', '.join(requires)}"}
    steps = pass_steps(unprofiled_s)
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        events, trace, times = _runner(profiler)(step, sync, inputs, out_dir, steps)
        found = breakdown(events if profiler in BUILT_IN else _checked(events, times, steps))
        where = str(Path(trace).resolve().relative_to(run_dir.resolve()))  # a plugin's trace must be in the run
    except Exception as exc:  # noqa: BLE001 - a profiler that cannot run skips the breakdown, with why
        return {"status": "skipped", "profiler": profiler, "reason": f"{type(exc).__name__}: {exc}"[:300]}
    times = sorted(times)
    return {
        "status": "ok",
        "profiler": profiler,
        **found,
        "profiled_step_s": times[len(times) // 2],
        "profiled_times_s": times,
        "unprofiled_step_s": unprofiled_s,
        "trace": where,
    }


def timed_steps(
    step: Callable[[Any], Any],
    sync: Callable[[Any], float],
    inputs: Sequence[Any],
    steps: int,
    annotate: Callable[[], Any],
) -> list[float]:
    """Run ``steps`` synced steps over ``inputs`` in turn, each inside ``annotate()`` (a context
    manager: the profiler's STEP annotation); each step's perf_counter seconds."""
    times = []
    for i in range(steps):
        t0 = time.perf_counter()
        with annotate():
            sync(step(inputs[i % len(inputs)]))
        times.append(time.perf_counter() - t0)
    return times


def _torch(step, sync, inputs, out_dir: Path, steps: int) -> tuple[list[Event], Path, list[float]]:
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with profile(activities=activities) as prof:
        times = timed_steps(step, sync, inputs, steps, lambda: record_function(STEP))
    raw = out_dir / "trace.json"
    prof.export_chrome_trace(str(raw))
    trace = json.loads(raw.read_text())
    path = out_dir / "trace.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(trace, f)
    raw.unlink()
    return read_torch(trace), path, times


def _jax(step, sync, inputs, out_dir: Path, steps: int) -> tuple[list[Event], Path, list[float]]:
    import jax

    options = jax.profiler.ProfileOptions()
    options.python_tracer_level = 0  # Python's own calls are uncovered time; tracing each one slows them
    with jax.profiler.trace(str(out_dir), profiler_options=options):
        times = timed_steps(step, sync, inputs, steps, lambda: jax.profiler.TraceAnnotation(STEP))
    path = max((out_dir / "plugins" / "profile").glob("*/*.trace.json.gz"), key=lambda p: p.stat().st_mtime)
    with gzip.open(path, "rt") as f:
        return read_xla(json.load(f)), path, times


def _tf(step, sync, inputs, out_dir: Path, steps: int) -> tuple[list[Event], Path, list[float]]:
    import tensorflow as tf
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    # Level 3: every op; at the default level 2 the executor leaves out cheap ones (ReadVariableOp, Sum).
    tf.profiler.experimental.start(str(out_dir), tf.profiler.experimental.ProfilerOptions(host_tracer_level=3))
    try:
        times = timed_steps(step, sync, inputs, steps, lambda: tf.profiler.experimental.Trace(STEP))
    finally:
        tf.profiler.experimental.stop()
    pb = max((out_dir / "plugins" / "profile").glob("*/*.xplane.pb"), key=lambda p: p.stat().st_mtime)
    space = xplane_pb2.XSpace()
    space.ParseFromString(pb.read_bytes())
    rows = xspace_rows(space)
    path = pb.parent / "trace.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(chrome_trace(rows), f)
    return read_tf(rows), path, times


# --- readers: a trace as plain data -> breakdown events ---------------------------------------


def read_torch(trace: dict[str, Any]) -> list[Event]:
    """Events of torch.profiler's Chrome trace: ``aten::``/``c10d::`` cpu ops and inductor's
    compiled graph calls are ops; autograd and dynamo wrappers, annotations are scopes (the
    optimizer's ``Optimizer.step#...`` names its ops); CUDA kernels, copies and sets are kernels."""
    out = []
    for e in trace.get("traceEvents", []):
        if e.get("ph") != "X" or "dur" not in e:
            continue
        name, cat, start = e["name"], e.get("cat", ""), float(e["ts"])
        end, thread = start + float(e["dur"]), f"{e.get('pid')}:{e.get('tid')}"
        if name == STEP:
            out.append(Event("step", name, start, end, thread))
        elif cat in ("kernel", "gpu_memcpy", "gpu_memset"):
            out.append(Event("kernel", name, start, end, thread, taxonomy.classify(taxonomy.GPU_KERNEL, name)))
        elif cat == "cpu_op" and name.startswith(("aten::", "c10d::", "## Call CompiledFxGraph")):
            category = taxonomy.classify(taxonomy.TORCH, name)
            if name.startswith("## Call CompiledFxGraph"):
                # Its self time is inductor's generated loops, which the profiler does not name:
                # fused pointwise work (and the reductions fused into it).
                name, category = "inductor compiled graph", taxonomy.ELEMENTWISE
            out.append(Event("op", name, start, end, thread, category))
        elif cat in ("cpu_op", "user_annotation"):
            category = taxonomy.classify(taxonomy.TORCH, name)
            named = category if category in (taxonomy.OPTIMIZER, taxonomy.COMPILE) else None
            out.append(Event("scope", name, start, end, thread, named))
    return out


#: XLA control flow: its thunks run the ops of its body; its own time (the loop's bookkeeping,
#: the condition's read-back) is the runtime's, so it is a scope and that time is uncovered.
XLA_CONTROL = frozenset({"while", "cond", "conditional", "call"})


def read_xla(trace: dict[str, Any]) -> list[Event]:
    """Events of a JAX profiler trace (TensorBoard's ``*.trace.json.gz``): the harness's step
    annotation; XLA instructions (an event with an ``hlo_op`` argument) on the host's executor
    threads are ops (control flow, XLA_CONTROL, a scope), those on a ``/device:GPU`` process are
    kernels. Runtime and Python events are left out: their time is the uncovered time."""
    devices = {
        e["pid"]
        for e in trace.get("traceEvents", [])
        if e.get("ph") == "M" and e.get("name") == "process_name" and "/device:" in str(e.get("args", {}).get("name"))
    }
    out = []
    for e in trace.get("traceEvents", []):
        if e.get("ph") != "X" or "dur" not in e:
            continue
        start = float(e["ts"])
        end, thread = start + float(e["dur"]), f"{e.get('pid')}:{e.get('tid')}"
        hlo = (e.get("args") or {}).get("hlo_op")
        if e["name"] == STEP:
            out.append(Event("step", STEP, start, end, thread))
        elif hlo:
            name = taxonomy.op_name(taxonomy.XLA, hlo)
            if name in XLA_CONTROL:
                out.append(Event("scope", name, start, end, thread))
                continue
            kind = "kernel" if e.get("pid") in devices else "op"
            out.append(Event(kind, name, start, end, thread, taxonomy.classify(taxonomy.XLA, hlo)))
    return out


#: A TF XSpace flattened: (plane name, line name, event name, start us, duration us).
Row = tuple[str, str, str, float, float]


def xspace_rows(space: Any) -> list[Row]:
    """Every event of a TF/XLA XSpace protobuf as a Row."""
    rows = []
    for plane in space.planes:
        names = {k: m.name for k, m in plane.event_metadata.items()}
        for line in plane.lines:
            base_ps = line.timestamp_ns * 1000
            for ev in line.events:
                rows.append(
                    (
                        plane.name,
                        line.name,
                        names.get(ev.metadata_id, ""),
                        (base_ps + ev.offset_ps) / 1e6,
                        ev.duration_ps / 1e6,
                    )
                )
    return rows


def read_tf(rows: list[Row]) -> list[Event]:
    """Events of a TF profile: the step annotation; eager ops (``EagerLocalExecute: OpType``) and
    graph ops (``name:OpType`` on the executor's threads) are ops, a tf.function's own call
    (``__inference_...``) is a scope; events on a ``/device:GPU`` plane are kernels."""
    out = []
    for plane, line, name, start, dur in rows:
        thread, end = f"{plane}:{line}", start + dur
        if name == STEP:
            out.append(Event("step", STEP, start, end, thread))
        elif plane.startswith("/device:GPU"):
            out.append(Event("kernel", name, start, end, thread, taxonomy.classify(taxonomy.GPU_KERNEL, name)))
        elif name.startswith("EagerLocalExecute: ") or (":" in name and "::" not in name):
            op = taxonomy.op_name(taxonomy.TF, name).strip()
            kind = "scope" if op.startswith("__") else "op"
            out.append(
                Event(kind, op, start, end, thread, None if kind == "scope" else taxonomy.classify(taxonomy.TF, op))
            )
    return out


def chrome_trace(rows: list[Row]) -> dict[str, Any]:
    """Rows as a Chrome trace (one process per plane, one thread per line), for Perfetto."""
    pids: dict[str, int] = {}
    tids: dict[tuple[str, str], int] = {}
    events: list[dict[str, Any]] = []
    for plane, line, name, start, dur in rows:
        pid = pids.setdefault(plane, len(pids) + 1)
        tid = tids.setdefault((plane, line), len(tids) + 1)
        events.append({"ph": "X", "pid": pid, "tid": tid, "name": name, "ts": start, "dur": dur})
    meta = [{"ph": "M", "pid": p, "name": "process_name", "args": {"name": n}} for n, p in pids.items()]
    meta += [
        {"ph": "M", "pid": pids[pl], "tid": t, "name": "thread_name", "args": {"name": ln}}
        for (pl, ln), t in tids.items()
    ]
    return {"displayTimeUnit": "ns", "traceEvents": meta + events}


def clear(out_dir: Path) -> None:
    """Remove an earlier pass's files (a resumed cell profiles again)."""
    shutil.rmtree(out_dir, ignore_errors=True)
