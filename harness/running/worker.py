"""The per-cell worker process: ``python -m harness.running.worker MODE CELL.json OUT``.

One fresh process per cell, so framework thread pools, GPU memory and Keras's backend choice
never leak between cells. The parent sets the adapter's ``worker_env`` before this process
starts. Modes:

``bench``: run the timing protocol and write one result record (JSON) to OUT. Failures inside
the cell are written as ``failed`` records; skips as ``skipped``.
``serve``: a resident worker (harness.running.resident): set up and run the cold window, then
take turns at blocks of steps when the parent asks, over the pipes ``--fds IN,OUT``; then write
its record to OUT like ``bench``.
``probe``: write the adapter's versions and build (``build_info``) as JSON to OUT; for doctor.
``check``: CELL.json holds {"cells": [...]}, cells of one adapter; for each, train ``--steps``
steps and write OUT/<i>.npz with the losses and the parameters before and after each of the
first ``--snapshot`` steps (inference: the outputs of every batch), for harness.checks.conformance.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
import traceback
from pathlib import Path

import numpy as np

from adapters import discover
from harness import env, processes
from harness.measuring import input_pipeline, timing
from harness.measuring.gpu_util import UtilSampler
from harness.records import Cell, Record, amended, base_adapter, new_record, round_of, writable
from harness.running import resident
from harness.running.cell_work import (
    DeviceFailure,
    Skip,
    compile_count,
    compile_counters,
    dispatch_floor,
    finish,
    ops_profile,
    pipeline_fields,
    place,
    prepare,
    start,
    steady_meters,
)


def bench(cell: Cell) -> Record:
    """The cell's record, timed alone (the protocol of harness.measuring.timing.measure)."""
    profile = timing.PROFILES[cell["profile"]]
    try:
        s = start(cell)
    except Skip as exc:
        return new_record(cell, "skipped", str(exc))
    except DeviceFailure as exc:
        return new_record(cell, "failed", str(exc))
    sampler = UtilSampler() if s.device == "cuda" else None
    cpu = input_pipeline.CpuMeter() if s.pipe else None
    m = timing.measure(
        s.step,
        s.adapter.sync,
        s.inputs,
        profile,
        steady=steady_meters(sampler, cpu, s.pipe and s.pipe["meter"]),
        compiles=compile_count(s.adapter),
        pass_steps=s.pass_steps,
        chained=s.chained,
    )
    record = finish(cell, s, m, profile, sampler)
    if record["status"] != "ok":
        return record
    if s.pipe:
        record = amended(record, pipeline_fields(s.adapter, s.spec, s.pipe, cpu, m, profile))
    # The floor is timed too (a second adapter instance, after the cell's own timing); the profiled
    # pass comes after every timed step, since the profiler perturbs timing.
    if round_of(cell) == 1:
        record = amended(record, dispatch_floor(cell, s.spec, s.device))
    return amended(record, ops_profile(cell, s, record))


def check(cell: Cell, steps: int, snapshot: int) -> dict[str, np.ndarray]:
    """Losses of ``steps`` steps, the parameters before the first and after each of the first
    ``snapshot`` steps (``param{t}:{name}``), the adapter's settings (JSON) and, for a static-graph
    adapter, which of traces and compiles it counts (``compile_keys``, possibly none) and, where it
    counts any, the traces and compiles of each step (``step_compiles``); for inference
    workloads, the outputs of ``infer_step`` on every batch, stacked. A skip is returned as ``skipped``, a GPU the
    framework cannot use as ``device_failed``."""
    try:
        adapter, spec, device, _ = prepare(cell)
    except Skip as exc:
        return {"skipped": np.asarray(str(exc))}
    except DeviceFailure as exc:
        return {"device_failed": np.asarray(str(exc))}
    placed, _ = place(adapter, spec.batches())
    if spec.task != "train":
        return {"outputs": np.stack([adapter.fetch(adapter.infer_step(batch)) for batch in placed])}
    snaps = {f"param0:{k}": v for k, v in adapter.params().items()}
    # A static graph's traces and compiles in each step, read around the step alone (params()
    # between steps is the check's doing, not the step's): harness.checks.conformance checks them.
    # Which counts its compile_stats reports goes along (a count left out is "not reported", not 0;
    # with none the check says so rather than passing).
    static = cell.get("graph") == "static"
    reported = [k for k in ("traces", "compiles") if k in adapter.compile_stats()] if static else []  # _counters order
    counted = bool(reported)
    losses, compiled = [], []
    for step in range(steps):
        before = compile_counters(adapter) if counted else None
        losses.append(adapter.sync(adapter.train_step(placed[step % len(placed)])))
        if counted:
            assert before is not None
            compiled.append([a - b for a, b in zip(compile_counters(adapter), before, strict=True)])
        if step < snapshot:
            snaps.update({f"param{step + 1}:{k}": v for k, v in adapter.params().items()})
    settings = np.asarray(json.dumps(writable(adapter.settings())))  # as a bench record keeps them
    extra = {"compile_keys": np.asarray(reported, dtype=str)} if static else {}
    if counted:
        extra["step_compiles"] = np.asarray(compiled, dtype=np.int64)
    precision = np.asarray(cell.get("precision", "fp32"))  # harness.checks.conformance picks its allowance by it
    return {
        "losses": np.asarray(losses, dtype=np.float64),
        "settings": settings,
        "precision": precision,
        **snaps,
        **extra,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.running.worker")
    parser.add_argument("mode", choices=("bench", "serve", "check", "probe", "libraries"))
    parser.add_argument("cell", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--snapshot", type=int, default=5)
    parser.add_argument("--fds", help="serve: the file descriptors of its command and reply pipes, IN,OUT")
    args = parser.parse_args(argv)
    cell = json.loads(args.cell.read_text())
    if args.mode == "check":  # {"cells": [...]}: one .npz per cell in the folder OUT
        for i, one in enumerate(cell["cells"]):
            np.savez(args.out / f"{i}.npz", **check(one, one.get("check_steps", args.steps), args.snapshot))  # type: ignore[arg-type]
        return 0
    if args.mode == "libraries":  # one step on the cell's device, then the CUDA libraries this process mapped
        from harness.measuring import cuda_libraries

        done = check(cell, 1, 0)
        found = {k: v.tolist() for k, v in done.items() if k in ("losses", "skipped", "device_failed")}
        args.out.write_text(json.dumps({**found, **cuda_libraries.this_process()}))
        return 0
    if args.mode == "probe":
        adapter = discover()[base_adapter(cell)].cls()
        args.out.write_text(json.dumps(writable({"versions": adapter.version(), "build": adapter.build_info()})))
        return 0
    t0 = time.perf_counter()
    record: Record | None
    try:
        if args.mode == "serve":
            record = resident.serve(cell, *(int(fd) for fd in args.fds.split(",")))
            if record is None:
                return 0  # the parent is gone: nothing to report to
        else:
            record = bench(cell)
    except timing.Diverged as exc:
        record = new_record(cell, "failed", str(exc))
    except Exception as exc:  # noqa: BLE001 - any failure of a cell becomes its record
        tail = processes.tail(traceback.format_exc())
        record = new_record(cell, "failed", f"{type(exc).__name__}: {exc}".strip(), stderr_tail=tail)
    # Taken here, outside the timed window, on the node that ran the cell (a cluster's nodes differ).
    where = {"node": platform.node(), "fingerprint": env.fingerprint()}
    record = amended(record, {"worker_s": time.perf_counter() - t0, **where})
    # Whole or not at all: a resident worker's parent takes the record as soon as it is there
    # and ends the worker without waiting for its interpreter to tear down.
    part = args.out.with_name(args.out.name + ".part")
    part.write_text(json.dumps(writable(record), allow_nan=False))
    part.replace(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
