"""The profiled pass of ``--profile-ops``: a few synced steps under the framework's own profiler.

Run in the worker after the cell's timing is done (a profiler perturbs timing; the two never
mix): ``torch.profiler`` for torch and Keras on torch, ``jax.profiler`` for JAX, Flax and Keras
on JAX, ``tf.profiler.experimental`` for TensorFlow. The profiler is picked by the modules an
adapter ``requires`` (its framework family), so no adapter takes part. Each step runs inside a
``dlcompare.step`` annotation: its window in the trace is the step's wall time on the trace's clock.

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
from typing import Any

from harness.measuring.breakdown import Event, breakdown
from harness.stats import taxonomy

STEP = "dlcompare.step"
#: The run folder's subfolder of traces, one folder per profiled cell.
TRACES = "traces"
#: Seconds of steps a profiled pass aims at, and its bounds in steps.
PASS_S, MIN_STEPS, MAX_STEPS = 0.3, 3, 20


def profiler_of(requires: Iterable[str]) -> str | None:
    """The profiler for an adapter that needs ``requires``: torch, jax or tensorflow; None if none."""
    needed = set(requires)
    return next((name for name in ("torch", "jax", "tensorflow") if name in needed), None)


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
    profiler = profiler_of(requires)
    if profiler is None:
        return {"status": "skipped", "reason": f"no profiler for an adapter requiring {', '.join(requires)}"}
    steps = pass_steps(unprofiled_s)
    out_dir.mkdir(parents=True, exist_ok=True)
    run = {"torch": _torch, "jax": _jax, "tensorflow": _tf}[profiler]
    try:
        events, trace, times = run(step, sync, inputs, out_dir, steps)
        found = breakdown(events)
    except Exception as exc:  # noqa: BLE001 - a profiler that cannot run skips the breakdown, with why
        return {"status": "skipped", "profiler": profiler, "reason": f"{type(exc).__name__}: {exc}"[:300]}
    times.sort()
    return {
        "status": "ok",
        "profiler": profiler,
        **found,
        "profiled_step_s": times[len(times) // 2],
        "profiled_times_s": times,
        "unprofiled_step_s": unprofiled_s,
        "trace": str(trace.relative_to(run_dir)),
    }


def _steps(step, sync, inputs, steps: int, annotate: Callable[[], Any]) -> list[float]:
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
        times = _steps(step, sync, inputs, steps, lambda: record_function(STEP))
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
        times = _steps(step, sync, inputs, steps, lambda: jax.profiler.TraceAnnotation(STEP))
    path = max((out_dir / "plugins" / "profile").glob("*/*.trace.json.gz"), key=lambda p: p.stat().st_mtime)
    with gzip.open(path, "rt") as f:
        return read_xla(json.load(f)), path, times


def _tf(step, sync, inputs, out_dir: Path, steps: int) -> tuple[list[Event], Path, list[float]]:
    import tensorflow as tf
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    # Level 3: every op; at the default level 2 the executor leaves out cheap ones (ReadVariableOp, Sum).
    tf.profiler.experimental.start(str(out_dir), tf.profiler.experimental.ProfilerOptions(host_tracer_level=3))
    try:
        times = _steps(step, sync, inputs, steps, lambda: tf.profiler.experimental.Trace(STEP))
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
