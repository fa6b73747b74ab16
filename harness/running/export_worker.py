"""The export task's worker process: ``python -m harness.running.export_worker MODE JOB OUT``.

One fresh process per step of a cell (harness.export starts them), JSON out:

``export``: build the model from the shared canonical parameters and write its artifact through
    the cell's export path; reports the export's seconds (the framework's import included: this
    process starts cold, as a shipping job does) and the artifact's bytes on disk.
``serve``: the cold start of a served model (import the runtime, load the artifact, first call),
    then the serving windows (harness.measuring.serving) and the logits of the parity inputs.
``in-process``: the same for the adapter's own forward, built in this process: its cold start is
    import + build + first call (compile included), so it reads against a served path's.

Nothing of a framework is imported before the cold clock starts (``framework_preloaded`` in
the result says otherwise). Any failure becomes a result with the error and the traceback's tail.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np

from adapters import discover
from adapters.base import Options
from adapters.exporting import Exports
from harness import processes
from harness.measuring import serving
from harness.records import spec_of, writable

#: Modules whose presence in ``sys.modules`` before the cold clock means a framework was preloaded.
FRAMEWORK_MODULES = ("torch", "tensorflow", "jax", "keras", "onnxruntime")


def artifact_bytes(path: Path) -> int:
    """Bytes of a file, or of every file under a folder (a SavedModel, an artifact's cell folder)."""
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def loaded_versions() -> dict[str, str]:
    """The versions of the frameworks and runtimes this process imported (what served the cell)."""
    return {m: str(getattr(sys.modules[m], "__version__", "?")) for m in FRAMEWORK_MODULES if m in sys.modules}


def _inputs(job: dict[str, Any]) -> dict[str, np.ndarray]:
    with np.load(job["inputs"]) as data:
        return dict(data)


def run(mode: str, job: dict[str, Any]) -> dict[str, Any]:
    """One step of a cell (module docstring); raises on failure."""
    cls = discover()[job["adapter"]].cls
    if not issubclass(cls, Exports):  # harness.export plans no step for such an adapter
        raise TypeError(f"{cls.__module__}.{cls.__name__} does not inherit adapters.exporting.Exports")
    spec = spec_of(job)
    device, threads = job["device"], job["threads"]
    if mode == "export":
        with np.load(job["params"]) as data:
            params = dict(data)
        directory = Path(job["directory"])
        directory.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        artifact = cls().export(job["export_path"], spec, params, device, directory)
        export_s = time.perf_counter() - t0
        # The whole folder: an exporter may write side files (ONNX external data) beside the artifact.
        found = {"artifact": str(artifact), "artifact_bytes": artifact_bytes(directory), "runtimes": loaded_versions()}
        return {"export_s": export_s, **found}

    inputs = _inputs(job)
    one = [inputs["one"][i : i + 1] for i in range(len(inputs["one"]))]
    preloaded = sorted(m for m in FRAMEWORK_MODULES if m in sys.modules)
    t0 = time.perf_counter()
    if mode == "serve":
        forward = cls.serve(job["export_path"], Path(job["artifact"]), device, threads)
    else:
        with np.load(job["params"]) as data:
            params = dict(data)
        adapter = cls()
        forward = adapter.forward(spec, params, device, Options(threads=threads))
    load_s = time.perf_counter() - t0
    first = forward(one[0])
    cold_s = time.perf_counter() - t0
    if not np.all(np.isfinite(first)):
        raise ValueError("the first call returned non-finite logits")
    measured = serving.measure(forward, one, [inputs["many"]], job["budget_s"])
    parity = np.asarray(forward(inputs["parity"]))
    return {
        "load_s": load_s,
        "first_call_s": cold_s - load_s,
        "cold_load_s": cold_s,
        "framework_preloaded": preloaded,
        "runtimes": loaded_versions(),
        "parity_logits": parity.astype(np.float64).tolist(),
        **measured,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.running.export_worker")
    parser.add_argument("mode", choices=("export", "serve", "in-process"))
    parser.add_argument("job", type=Path)
    parser.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    job = json.loads(args.job.read_text())
    started = time.perf_counter()
    try:
        result = {"ok": True, **run(args.mode, job)}
    except Exception as exc:  # noqa: BLE001 - any failure of a step becomes its result
        tail = processes.tail(traceback.format_exc())
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}".strip()[:2000], "stderr_tail": tail}
    result["worker_s"] = time.perf_counter() - started
    args.out.write_text(json.dumps(writable(result), allow_nan=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
