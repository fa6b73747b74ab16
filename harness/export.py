"""The export task: ``python -m harness export`` (docs/export.md), from plan to report.

For each workload with a fixed-shape forward and each selected adapter, one cell per row:
the adapter's own forward in process (IN_PROCESS) and each export path it declares
(``Adapter.export_paths``). A path's cell runs in fresh processes (harness.running.export_worker):
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
from typing import Any

import numpy as np

from adapters import AdapterInfo, discover
from adapters.base import EXPORT_FAMILIES, IN_PROCESS
from harness import env, processes, records
from harness.checks.conformance import forward as parity
from harness.measuring.contention import OtherLoad
from harness.reporting import export as report
from harness.running import runner
from harness.running.plan import PlanError, select_adapters, select_devices, select_from
from harness.session import RUN_ID, fail, unwritable
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


def all_paths(adapters: dict[str, AdapterInfo]) -> list[str]:
    """IN_PROCESS and every export path some adapter declares, in discovery order."""
    found = [IN_PROCESS]
    for info in adapters.values():
        found += [p for p in info.cls.export_paths if p not in found]
    return found


def select_paths(expr: str, adapters: dict[str, AdapterInfo]) -> list[str]:
    """``all`` or a comma list of paths (IN_PROCESS included); PlanError naming the valid ones."""
    return select_from(expr, all_paths(adapters), "export path")


def plan(
    workloads: list[str], names: list[str], paths: list[str], devices: list[str], adapters: dict[str, AdapterInfo]
) -> list[dict[str, Any]]:
    """One cell per (workload, adapter, path, device): the adapter's in-process row (a skipped
    cell, with the reason, for an adapter without one) and each path it declares."""
    cells = []
    for workload in workloads:
        for device in devices:
            for name in names:
                info = adapters[name]
                for path in [IN_PROCESS, *info.cls.export_paths]:
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
) -> dict[str, Any]:
    """The record of one cell: skipped with the adapter's reason, failed with the step's error or
    the parity distance, or ok with every measurement."""
    spec = get_workload(c["workload"])
    if not info.available:
        return records.new_record(c, "skipped", info.unavailable or "")
    reason = info.cls().export_reason(c["export_path"], spec)
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
        np.savez(folder / f"{name}-params.npz", **params)
        np.savez(folder / f"{name}-inputs.npz", **data)
        shared["files"][name] = {
            "params": str(folder / f"{name}-params.npz"),
            "inputs": str(folder / f"{name}-inputs.npz"),
        }
        shared["inputs"][name], shared["params"][name] = data, params
        shared["allowed"][name] = parity.allowance(spec, params, data["parity"])
    return shared


def main(args: argparse.Namespace) -> int:
    """The ``export`` command: plan, run every cell, write records and the report."""
    adapters = discover()
    try:
        workloads = select_workloads(args.workload)
        names = select_adapters(args.framework, adapters)
        paths = select_paths(args.path, adapters)
        devices = select_devices(args.device, bool(env.gpus()))
    except PlanError as exc:
        return fail(str(exc))
    if args.run_id is not None and (not RUN_ID.fullmatch(args.run_id) or args.run_id in (".", "..")):
        return fail(f"--run-id {args.run_id!r} is not a name: letters, digits and - _ . only")
    cells = plan(workloads, names, paths, devices, adapters)
    if not cells:
        return fail("nothing to run: no selected adapter has a selected path")
    run_dir = args.out / (args.run_id or datetime.datetime.now().strftime("export-%Y%m%d-%H%M%S"))
    why = unwritable(run_dir)
    if why:
        return fail(f"--out: cannot write to {run_dir}: {why}")
    if (run_dir / records.RESULTS).exists():  # a second run would add rows the report cannot tell apart
        return fail(f"{run_dir} already holds export results; choose another --run-id or --out")
    threads = args.threads or env.default_threads()
    converters = {"onnxruntime", "onnx", "tf2onnx", "jax2onnx"}
    modules = sorted({m for n in names for m in adapters[n].cls.requires} | converters)
    records.write_json(run_dir / records.ENV, env.capture(threads, ["python", "-m", "harness", *sys.argv[1:]], modules))
    results = run_dir / records.RESULTS
    with tempfile.TemporaryDirectory(prefix="dlcompare-export-") as tmp:
        scratch = Path(tmp)
        shared = {**prepare(workloads, scratch, args.batch), "threads": threads, "budget_s": args.budget}
        for i, c in enumerate(cells, 1):
            print(
                f"[{i}/{len(cells)}] {c['workload']} {c['adapter']} {c['export_path']} ({c['device_requested']})",
                end=" ",
                flush=True,
            )
            rec = run_cell(adapters[c["adapter"]], c, shared, scratch, args.timeout)
            records.append(results, rec)
            print(rec["status"] + (f": {rec['reason'][:160]}" if rec["reason"] else ""), flush=True)
    path = report.write(run_dir)
    print(f"report: {path}")
    failed = sum(r["status"] == "failed" for r in records.load(results))
    return 1 if failed and args.strict else 0


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
