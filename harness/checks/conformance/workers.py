"""Running an adapter's variants: one worker process computes every variant, the parent reads back.

One worker process runs every variant of one adapter (one framework import, one warm
compiler), writing what it computed to one ``.npz`` per variant; ``check_cell`` is the cell
each variant is sent as.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from adapters import AdapterInfo
from harness.checks.conformance.variants import SNAPSHOT, Variant, check_steps, overrides_of, precision_of, spec_of
from harness.records import Cell
from harness.running import runner


def run_adapter(
    info: AdapterInfo, chosen: list[Variant], timeout_s: float = 1800, device: str = "cpu", threads: int = 2
) -> dict[Variant, dict]:
    """What the adapter computes for each variant on ``device``, all in one worker process of
    ``threads`` threads (a caller running several workers at once gives each its share of the
    cores: OpenMP threads waiting at a barrier for a descheduled sibling slow a step manyfold).
    Variants the adapter declines come back as {"skipped": reason}, a GPU it cannot use as
    {"device_failed": reason}; a crash raises RuntimeError."""
    results: dict[Variant, dict] = {}
    cells = []
    for variant in chosen:
        adapter = info.cls()
        reason = adapter.supports(spec_of(variant)) or adapter.precision_reason(precision_of(variant))
        if reason:
            results[variant] = {"skipped": reason}
        else:
            steps = check_steps(spec_of(variant), precision_of(variant))
            cell = check_cell(info, variant, device) | {"check_steps": steps, "threads": threads}
            cells.append((variant, cell))
    if not cells:
        return results
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        extra = ["--snapshot", str(SNAPSHOT)]
        batch = {"cells": [cell for _, cell in cells]}
        proc = runner.run_worker(info, batch, "check", out, timeout_s, extra)
        if proc.returncode != 0:
            raise RuntimeError(f"{info.name} worker failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
        for i, (variant, _) in enumerate(cells):
            with np.load(out / f"{i}.npz") as data:
                results[variant] = {k: data[k] for k in data.files}
                for key in ("skipped", "device_failed"):
                    if key in results[variant]:
                        results[variant] = {key: str(results[variant][key])}
    return results


def check_cell(info: AdapterInfo, variant: Variant, device: str = "cpu") -> Cell:
    return {
        "run_id": "check",
        "adapter": info.name,
        "framework": info.framework,
        "graph": info.graph,
        "workload": variant[0],
        "overrides": overrides_of(variant),
        "precision": precision_of(variant),
        "device_requested": device,
        "profile": "quick",
        "threads": 2,
    }
