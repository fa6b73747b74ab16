"""Parity across Keras backends for a model file, before anything of it is timed.

A model file has no NumPy reference (harness.checks.conformance holds the built-in workloads to
one), so its backends are held to each other. Each Keras adapter's worker trains the model for
STEPS steps from the file's described weights and batches, twice: as described, and from
weights moved by one float32 ulp at random. The second run measures how far float32 rounding
alone carries this model's trajectory in this framework over these steps (rounding differs from
backend to backend as it does between those two runs). Then, at every step, each backend's loss
and each tensor's displacement from its start (p_t - p_0) is compared with the elementwise
median of all the backends':

* error = ||mine - median|| / ||median|| (for the loss, the relative difference);
* allowed = FACTOR x the largest relative difference any backend showed between its two runs,
  never below FLOOR.

A backend past its allowance anywhere is a failed cell whose reason names the step, the tensor
and both numbers; it is never timed. With two backends the median is their mean, so a real
disagreement fails both: the check cannot tell which one is wrong. Every backend's closest
approach to its allowance goes to the run's parity file (records.PARITY), which the report
quotes (a check that passed is stated, not only one that failed).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from adapters import AdapterInfo
from harness import records
from harness.records import Cell
from harness.running import runner
from workloads.model_file import ModelFile, is_model_file

#: Training steps compared (each one's parameters are kept).
STEPS = 5
#: Allowed error = FACTOR x the rounding spread (the built-in checks' factor, tolerance.FACTOR).
FACTOR = 10.0
#: No allowance below 256 float32 ulps of relative error (tolerance.FLOOR).
FLOOR = float(256 * np.finfo(np.float32).eps)
#: The seed of the one-ulp move of the second run's weights (cell key ``perturb_seed``).
PERTURB_SEED = 1
#: The outcome of a backend that is the only one to run a model (no other to compare with).
ALONE = {"reason": None, "of_allowance": None, "where": None}


def check_model_files(
    adapters: Mapping[str, AdapterInfo], cells: Sequence[Cell], results: Path, timeout_s: float
) -> None:
    """Before a run's rounds: each group of model-file cells (one workload, device and precision)
    checked for parity, one check per adapter (its data modes compute the same numbers); every
    cell of an adapter that fails gets its failed record in ``results`` now, so it is never
    timed (harness.running.rounds ends a cell with a record that is not ok)."""
    groups: dict[tuple, list[Cell]] = {}
    for cell in cells:
        if is_model_file(cell["workload"]):
            key = (cell["workload"], tuple(cell.get("overrides", [])), cell["device_requested"], cell.get("precision"))
            groups.setdefault(key, []).append(cell)
    for (workload, *_), group in groups.items():
        first: dict[str, Cell] = {}  # one cell per adapter that will run (the rounds record the skipped)
        for cell in group:
            if not runner.skip_reason(adapters[cell["adapter"]], cell):
                first.setdefault(cell["adapter"], cell)
        spec = records.spec_of(group[0])
        assert isinstance(spec, ModelFile)  # model-file cells (is_model_file)
        too_large = spec.too_large()
        if too_large:  # nothing to build, on any backend: every cell fails, naming what the model asked for
            print(f"{workload}: {too_large}", flush=True)
            for cell in group:
                records.append(results, records.new_record(cell, "failed", too_large, round=1))
            continue
        if len(first) < 2:  # nothing to hold one backend to: said so in the report, not trained
            _keep(results.parent / records.PARITY, workload, {a: ALONE for a in first})
            continue
        print(f"backend parity of {workload}: {', '.join(first)}, {STEPS} steps each, twice ...", flush=True)
        outcomes = run_parity(adapters, list(first.values()), timeout_s)
        _keep(results.parent / records.PARITY, workload, {a: outcomes[c["cell_id"]] for a, c in first.items()})
        failed = {a: outcomes[c["cell_id"]]["reason"] for a, c in first.items() if outcomes[c["cell_id"]]["reason"]}
        for adapter, reason in failed.items():
            print(f"  {adapter}: {reason}", flush=True)
        for cell in group:
            if cell["adapter"] in failed:
                records.append(results, records.new_record(cell, "failed", failed[cell["adapter"]], round=1))


def run_parity(adapters: Mapping[str, AdapterInfo], cells: list[Cell], timeout_s: float) -> dict[str, dict[str, Any]]:
    """Each cell's outcome, by cell id: ``reason`` None where its backend agrees with the others,
    else why it fails; ``of_allowance`` and ``where``, its largest error as a share of its
    allowance and where that was (None where its worker failed). ``cells``: one group of
    comparable model-file cells (one workload, device, precision), one per Keras adapter."""
    runs: dict[str, tuple[dict[str, np.ndarray], dict[str, np.ndarray]]] = {}
    out: dict[str, dict[str, Any]] = {}
    for cell in cells:
        try:
            runs[cell["cell_id"]] = _train_twice(adapters[cell["adapter"]], cell, timeout_s)
        except RuntimeError as exc:
            reason = f"backend parity: the check's worker failed: {exc}"
            out[cell["cell_id"]] = {"reason": reason, "of_allowance": None, "where": None}
    for name, (ratio, where) in margins(runs).items():
        out[name] = {"reason": _reason(ratio, where, len(runs)), "of_allowance": ratio, "where": where}
    return out


def _keep(path: Path, workload: str, outcomes: dict[str, dict[str, Any]]) -> None:
    """Add one workload's outcomes (by adapter) to the run's parity file (records.PARITY)."""
    kept = json.loads(path.read_text()) if path.is_file() else {}
    rule = {"steps": STEPS, "factor": FACTOR, "floor_ulps": round(FLOOR / float(np.finfo(np.float32).eps))}
    kept[workload] = {a: dict(o, ok=o["reason"] is None, **rule) for a, o in sorted(outcomes.items())}
    path.write_text(json.dumps(kept, indent=1) + "\n")


def _train_twice(
    info: AdapterInfo, cell: Cell, timeout_s: float
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    plain = dict(cell, check_steps=STEPS)
    moved = dict(plain, perturb_seed=PERTURB_SEED)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        proc = runner.run_worker(info, {"cells": [plain, moved]}, "check", out, timeout_s, ["--snapshot", str(STEPS)])
        if proc.returncode != 0:
            lines = proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"]
            raise RuntimeError(lines[-1][:400])
        found = []
        for i in range(2):
            with np.load(out / f"{i}.npz") as data:
                result = {k: data[k] for k in data.files}
            for key in ("skipped", "device_failed"):
                if key in result:
                    raise RuntimeError(f"{key.replace('_', ' ')}: {result[key]}")
            found.append(result)
    return found[0], found[1]


Runs = Mapping[str, tuple[Mapping[str, np.ndarray], Mapping[str, np.ndarray]]]


def judge(runs: Runs) -> dict[str, str | None]:
    """The verdict of each backend's (as described, one ulp moved) pair of check results against
    the others' (see the module docstring); None where it agrees. Fewer than two: nothing to hold
    them to, every one agrees."""
    return {n: _reason(ratio, where, len(runs)) for n, (ratio, where) in margins(runs).items()}


def _reason(ratio: float, where: str, backends: int) -> str | None:
    return None if ratio <= 1 else f"backend parity: differs from the median of {backends} Keras backends: {where}"


def margins(runs: Runs) -> dict[str, tuple[float, str]]:
    """Each backend's largest error as a share of its allowance (above 1: it fails) and where that
    was; (0.0, "") for all where fewer than two backends ran (nothing to hold them to)."""
    if len(runs) < 2:
        return {n: (0.0, "") for n in runs}
    names = sorted(runs)
    steps = min(len(r[0]["losses"]) for r in runs.values())
    keys = [k.split(":", 1)[1] for k in runs[names[0]][0] if k.startswith("param0:")]
    worst: dict[str, tuple[float, str]] = {n: (0.0, "") for n in names}

    def consider(what: str, mine: dict[str, np.ndarray], moved: dict[str, np.ndarray]) -> None:
        median = np.median(np.stack([mine[n] for n in names]), axis=0)
        spread = max(_relative(mine[n], moved[n], mine[n]) for n in names)
        allowed = max(FACTOR * spread, FLOOR)
        for n in names:
            error = _relative(mine[n], median, median)
            ratio = error / allowed
            if ratio > worst[n][0]:
                worst[n] = (ratio, f"{what} off by {error:.1e} (allowed {allowed:.1e})")

    for t in range(1, min(steps, STEPS) + 1):
        losses = {n: np.asarray(runs[n][0]["losses"][t - 1]) for n in names}
        moved = {n: np.asarray(runs[n][1]["losses"][t - 1]) for n in names}
        consider(f"the loss of step {t}", losses, moved)
        for key in keys:
            mine = {n: _moved_by(runs[n][0], key, t) for n in names}
            again = {n: _moved_by(runs[n][1], key, t) for n in names}
            consider(f"{key} after step {t}", mine, again)
    return worst


def _moved_by(result: Mapping[str, np.ndarray], key: str, t: int) -> np.ndarray:
    return np.asarray(result[f"param{t}:{key}"], np.float64) - np.asarray(result[f"param0:{key}"], np.float64)


def _relative(a: Any, b: Any, scale: Any) -> float:
    """||a - b|| / ||scale||; 0 where both are zero, infinite where only the difference is not."""
    diff = float(np.linalg.norm(np.asarray(a, np.float64) - np.asarray(b, np.float64)))
    norm = float(np.linalg.norm(np.asarray(scale, np.float64)))
    if diff == 0:
        return 0.0
    return diff / norm if norm > 0 else float("inf")
