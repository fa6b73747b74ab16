"""The export task: ``python -m harness export`` (docs/export.md), from plan to report.

For each workload with a fixed-shape forward and each selected adapter, one cell per row:
the adapter's own forward in process (IN_PROCESS) and each export path it declares
(``Exports.export_paths``; an adapter without the mixin adapters.exporting.Exports has one row,
skipped with that reason). A path's cell runs in fresh processes (harness.running.export_worker):
one exports the artifact from the workload's canonical initial parameters, shared by every
framework; a second, that has imported nothing of a framework, loads and serves it. The parent
then holds the served logits to the float64 reference forward (harness.checks.conformance.forward):
an artifact that loads but disagrees is a ``failed`` cell with the distance in its reason. Every
cell becomes one record (harness.records, ``kind: export``), written as it ends; a skipped or
failed cell never stops the others. The report is harness.reporting.export.
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, cast

import numpy as np

from adapters import AdapterInfo, discover
from adapters.exporting import EXPORT_FAMILIES, IN_PROCESS, Exports
from harness import env, processes, records, run_folder
from harness.checks.conformance import forward as parity
from harness.measuring.contention import OtherLoad
from harness.reporting import export as report
from harness.run_folder import fail
from harness.running import runner
from harness.running.plan import PlanError, select_adapters, select_devices, select_from
from workloads import WORKLOADS, Workload, get_workload

#: The record ``kind`` of an export cell.
KIND = "export"
DEFAULT_WORKLOADS = "mlp,cnn"
#: Batch-1 requests timed (cycled) and rows of the parity inputs.
REQUESTS = 16
PARITY_ROWS = 16
DEFAULT_BATCH = 256
MODULE = "harness.running.export_worker"


def export_workloads() -> list[str]:
    """The named workloads the export task runs: those of a fixed-shape forward family."""
    return [name for name, spec in WORKLOADS.items() if spec.family in EXPORT_FAMILIES]


def select_workloads(expr: str) -> list[str]:
    """``all`` or a comma list of export workloads; PlanError naming the valid ones."""
    return select_from(expr, export_workloads(), "export workload")


def export_paths(info: AdapterInfo) -> tuple[str, ...]:
    """The export paths an adapter declares: none where it does not inherit Exports."""
    return info.cls.export_paths if issubclass(info.cls, Exports) else ()


def not_exporting(info: AdapterInfo) -> str:
    """The reason of the one row of an adapter without Exports (a plugin, a test's fake)."""
    cls = info.cls
    return (
        f"{info.name} does not take part in the export task: "
        f"{cls.__module__}.{cls.__name__} does not inherit adapters.exporting.Exports"
    )


def all_paths(adapters: dict[str, AdapterInfo]) -> list[str]:
    """IN_PROCESS and every export path some adapter declares, in discovery order."""
    found = [IN_PROCESS]
    for info in adapters.values():
        found += [p for p in export_paths(info) if p not in found]
    return found


def select_paths(expr: str, adapters: dict[str, AdapterInfo]) -> list[str]:
    """``all`` or a comma list of paths (IN_PROCESS included); PlanError naming the valid ones."""
    return select_from(expr, all_paths(adapters), "export path")


def plan(
    workloads: list[str], names: list[str], paths: list[str], devices: list[str], adapters: dict[str, AdapterInfo]
) -> list[dict[str, Any]]:
    """One cell per (workload, adapter, path, device): the adapter's in-process row (a skipped
    cell, with the reason, for an adapter without one or without Exports) and each path it declares."""
    cells = []
    for workload in workloads:
        for device in devices:
            for name in names:
                info = adapters[name]
                for path in [IN_PROCESS, *export_paths(info)]:
                    if path in paths:
                        cells.append(cell(info, workload, path, device))
    return cells


def cell(info: AdapterInfo, workload: str, path: str, device: str) -> dict[str, Any]:
    return {
        "kind": KIND,
        "adapter": info.name,
        "framework": info.framework,
        "graph": info.graph,
        "workload": workload,
        "export_path": path,
        "device_requested": device,
        "cell_id": records.cell_id(f"{info.name}/{path}", workload, device, []),
    }


def inputs(spec: Workload, batch: int) -> dict[str, np.ndarray]:
    """Requests for the batch-1 window, the throughput batch (``batch`` rows, the workload's data
    repeated as needed) and the parity inputs, all from the workload's own data."""
    xs = np.concatenate([b["x"] for b in spec.batches()])
    many = np.resize(xs, (batch, *xs.shape[1:])).astype(np.float32)
    return {"one": xs[:REQUESTS], "many": many, "parity": xs[-PARITY_ROWS:]}


def _step(info: AdapterInfo, job: dict[str, Any], mode: str, timeout_s: float) -> dict[str, Any]:
    """One worker process; its result, or ``{"ok": False, "error": ...}`` for a crash or timeout."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = Path(f.name)
    load = OtherLoad() if mode != "export" else None  # a busy machine is detected, not measured
    try:
        proc = runner.run_worker(info, {**job, "script": MODULE}, mode, out, timeout_s, load=load)
        text = out.read_text() if out.stat().st_size else ""
        if not text:
            return {
                "ok": False,
                "error": f"{mode} worker exited with {proc.returncode}, no result",
                "stderr_tail": processes.tail(proc.stderr),
            }
        result = json.loads(text)
        if load is not None and load.cores is not None:
            result.update(other_cpu_cores=load.cores, contended=load.cores > records.CONTENDED_CORES)
        return result
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"{mode} worker timed out after {timeout_s:g} s"}
    finally:
        out.unlink(missing_ok=True)


def run_cell(
    info: AdapterInfo, c: dict[str, Any], shared: dict[str, Any], scratch: Path, timeout_s: float
) -> records.Record:
    """The record of one cell: skipped with the adapter's reason, failed with the step's error or
    the parity distance, or ok with every measurement."""
    spec = get_workload(c["workload"])
    cls = info.cls
    if not issubclass(cls, Exports):  # checked first: installing the framework would not change it
        return records.new_record(c, "skipped", not_exporting(info))
    if not info.available:
        return records.new_record(c, "skipped", info.unavailable or "")
    reason = cls().export_reason(c["export_path"], spec)
    if reason:
        return records.new_record(c, "skipped", reason)
    job = {**c, "device": c["device_requested"], "threads": shared["threads"], **shared["files"][c["workload"]]}
    job["budget_s"] = shared["budget_s"]
    fields: dict[str, Any] = {"threads": shared["threads"], "params": "initial"}
    mode = IN_PROCESS
    if c["export_path"] != IN_PROCESS:
        job["directory"] = str(scratch / c["workload"] / c["device_requested"] / info.name / c["export_path"])
        done = _step(info, job, "export", timeout_s)
        if not done.pop("ok"):
            return records.new_record(c, "failed", f"export: {done['error']}", **fields, **done)
        fields.update(export_s=done["export_s"], artifact_bytes=done["artifact_bytes"])
        fields["export_runtimes"] = done["runtimes"]
        job["artifact"] = done["artifact"]
        mode = "serve"
    served = _step(info, job, mode, timeout_s)
    if not served.pop("ok"):
        return records.new_record(c, "failed", f"{mode}: {served['error']}", **fields, **served)
    logits = np.asarray(served.pop("parity_logits"))
    x = shared["inputs"][c["workload"]]["parity"]
    check = parity.check(spec, shared["params"][c["workload"]], x, logits, shared["allowed"][c["workload"]])
    fields.update(parity_error=check.error, parity_worst_row=check.worst_row, parity_allowed=check.allowed)
    return records.new_record(c, "ok" if check.ok else "failed", check.reason(), **fields, **served)


def prepare(workloads: list[str], folder: Path, batch: int) -> dict[str, Any]:
    """The shared canonical parameters and inputs of each workload, as files every worker reads,
    and the parity allowance of each."""
    shared: dict[str, Any] = {"files": {}, "inputs": {}, "params": {}, "allowed": {}}
    for name in workloads:
        spec = get_workload(name)
        params, data = spec.init_params(), inputs(spec, batch)
        # cast: numpy's stub reads any keyword as its allow_pickle flag
        np.savez(folder / f"{name}-params.npz", **cast(dict[str, Any], params))
        np.savez(folder / f"{name}-inputs.npz", **cast(dict[str, Any], data))
        shared["files"][name] = {
            "params": str(folder / f"{name}-params.npz"),
            "inputs": str(folder / f"{name}-inputs.npz"),
        }
        shared["inputs"][name], shared["params"][name] = data, params
        shared["allowed"][name] = parity.allowance(spec, params, data["parity"])
    return shared


RESUME = "python -m harness export --resume"
#: What an export run's plan.json holds, besides its task.
PLAN_KEYS = ("workloads", "threads", "batch", "budget_s", "timeout_s", "cells")


def new_plan(args: argparse.Namespace, adapters: dict[str, AdapterInfo]) -> tuple[Path, dict[str, Any]]:
    """A new export run from the options: its folder and plan (``plan.json``'s content). Raises
    PlanError naming the bad value; writes nothing."""
    workloads = select_workloads(args.workload)
    names = select_adapters(args.framework, adapters)
    paths = select_paths(args.path, adapters)
    devices = select_devices(args.device, bool(env.gpus()))
    bad_name = run_folder.run_id_error(args.run_id)
    if bad_name:
        raise PlanError(bad_name)
    cells = plan(workloads, names, paths, devices, adapters)
    if not cells:
        raise PlanError("nothing to run: no selected adapter has a selected path")
    run_dir = args.out / (args.run_id or datetime.datetime.now().strftime("export-%Y%m%d-%H%M%S"))
    if (run_dir / records.RESULTS).exists():  # a second run would add rows the report cannot tell apart
        raise PlanError(
            f"{run_dir} already holds results; resume it with --resume {run_dir} or choose another --run-id"
        )
    saved = {
        "task": KIND,
        "workloads": workloads,
        "threads": args.threads or env.default_threads(),
        "batch": args.batch,
        "budget_s": args.budget,
        "timeout_s": args.timeout,
        "cells": cells,
    }
    return run_dir, saved


def resumed_plan(run_dir: Path) -> dict[str, Any]:
    """The plan of an earlier export run; PlanError where ``run_dir`` holds none."""
    path = run_dir / run_folder.PLAN
    if not path.is_file():
        raise PlanError(f"{run_dir} is not a run folder (no {run_folder.PLAN}); valid: a folder written by export")
    try:
        saved = json.loads(path.read_text())
    except ValueError as exc:
        raise PlanError(f"{path} is damaged ({exc}); start the run again") from None
    if not isinstance(saved, dict):
        raise PlanError(f"{path} is damaged (not a plan); start the run again")
    if saved.get("task") != KIND:
        raise PlanError(f"{run_dir} is a bench run; resume it with: python -m harness bench --resume {run_dir}")
    missing = [k for k in PLAN_KEYS if k not in saved]
    if missing:
        raise PlanError(f"{path} is damaged (it lacks {', '.join(missing)}); start the run again")
    return saved


def todo(saved: dict[str, Any], results: Path) -> list[dict[str, Any]]:
    """The plan's cells without a record in ``results`` yet, in plan order."""
    done = {r["cell_id"] for r in records.load(results)} if results.exists() else set()
    return [c for c in saved["cells"] if c["cell_id"] not in done]


def main(args: argparse.Namespace) -> int:
    """The ``export`` command: plan (or resume) a run, then, holding its folder's lock, run every
    cell without a record and write the report. The exit code: 0; 1 under --strict with a failed
    cell; 2 for an error; 130 interrupted (finished cells kept, ``--resume`` goes on)."""
    adapters = discover()
    try:
        if args.resume:
            run_dir, saved = args.resume, resumed_plan(args.resume)
        else:
            run_dir, saved = new_plan(args, adapters)
    except (PlanError, records.RecordError) as exc:
        return fail(str(exc))
    why = run_folder.unwritable(run_dir)
    if why:
        return fail(f"{'--resume' if args.resume else '--out'}: cannot write to {run_dir}: {why}")
    held = run_folder.lock(run_dir)
    if held is None:
        return fail(run_folder.in_use(run_dir, "export"))
    with held:
        try:
            return _run(run_dir, saved, adapters, started=bool(args.resume), strict=args.strict)
        except records.RecordError as exc:
            return fail(str(exc))
        except OSError as exc:  # a full disk, a quota, an I/O error: one line, exit 2
            if not run_folder.storage_failure(exc):
                raise
            return run_folder.write_failed(exc, run_dir, RESUME)


def _run(run_dir: Path, saved: dict[str, Any], adapters: dict[str, AdapterInfo], started: bool, strict: bool) -> int:
    results = run_dir / records.RESULTS
    if not started:
        if results.exists():  # written since the plan, by a run that has let go of the folder
            return fail(f"{run_dir} already holds results; resume it with --resume {run_dir}")
        names = sorted({c["adapter"] for c in saved["cells"]})
        converters = {"onnxruntime", "onnx", "tf2onnx", "jax2onnx"}
        modules = sorted({m for n in names for m in adapters[n].cls.requires} | converters)
        command = ["python", "-m", "harness", *sys.argv[1:]]
        records.write_json(run_dir / records.ENV, env.capture(saved["threads"], command, modules))
        records.write_json(run_dir / run_folder.PLAN, saved, indent=1)
    cells = todo(saved, results)
    unknown = sorted({c["adapter"] for c in cells} - set(adapters))
    if unknown:
        return fail(f"adapters of that run are not installed here: {', '.join(unknown)}")
    print(f"export {run_dir.name}: {len(saved['cells'])} cells, {len(cells)} to run, writing {run_dir}", flush=True)
    interrupted = False
    try:
        with processes.terminated_as_interrupt(), tempfile.TemporaryDirectory(prefix="dlcompare-export-") as tmp:
            scratch = Path(tmp)
            # only what the cells left to run need: a resumed run may have one workload's rows to go, or none
            wanted = [w for w in saved["workloads"] if any(c["workload"] == w for c in cells)]
            shared = {
                **prepare(wanted, scratch, saved["batch"]),
                "threads": saved["threads"],
                "budget_s": saved["budget_s"],
            }
            for i, c in enumerate(cells, 1):
                where = f"{c['workload']} {c['adapter']} {c['export_path']} ({c['device_requested']})"
                print(f"[{i}/{len(cells)}] {where}", end=" ", flush=True)
                rec = run_cell(adapters[c["adapter"]], c, shared, scratch, saved["timeout_s"])
                records.append(results, rec)
                print(rec["status"] + (f": {rec['reason'][:160]}" if rec["reason"] else ""), flush=True)
    except KeyboardInterrupt:
        interrupted = True
    found = records.load(results) if results.exists() else []  # read once: the report and the exit code
    if found:
        print(f"report: {report.write(run_dir, raw=found)}")
    if interrupted:
        print(f"interrupted; finished cells are kept. Resume with: {RESUME} {run_dir}")
        return 130
    failed = sum(r["status"] == "failed" for r in found)
    return 1 if failed and strict else 0


def _positive(kind: type) -> Any:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or value <= 0:
            raise argparse.ArgumentTypeError(f"{text!r} is not a positive {kind.__name__}")
        return value

    return parse


def add_arguments(p: argparse.ArgumentParser, default_out: Path) -> None:
    p.add_argument(
        "--workload", default=DEFAULT_WORKLOADS, help=f"all, or a comma list of: {', '.join(export_workloads())}"
    )
    p.add_argument("--framework", default="all", help="all, an adapter, a framework family, or a comma list")
    p.add_argument("--path", default="all", help=f"all, or a comma list of export paths ({IN_PROCESS} included)")
    p.add_argument("--device", default="cpu", help="cpu, cuda, auto, all, or a comma list (default: cpu)")
    p.add_argument("--batch", type=_positive(int), default=DEFAULT_BATCH, help="batch size of the throughput window")
    p.add_argument(
        "--budget", type=_positive(float), default=2.0, help="seconds of synced batch-1 calls per cell (default 2)"
    )
    p.add_argument(
        "--threads", type=_positive(int), default=None, help="intra-op threads for every framework (default: all)"
    )
    p.add_argument("--timeout", type=_positive(float), default=600.0, help="seconds per worker process (default 600)")
    p.add_argument("--out", type=Path, default=default_out, help="parent folder of run folders")
    p.add_argument("--run-id", default=None, help="run folder name (default: export-<timestamp>)")
    p.add_argument("--strict", action="store_true", help="exit 1 if any cell failed")
    p.add_argument(
        "--resume",
        type=Path,
        default=None,
        metavar="RUN_DIR",
        help="run only the export run's cells without a record",
    )
