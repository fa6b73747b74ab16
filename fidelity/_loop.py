"""What every idiomatic script shares: its command line, the workload's weights and data, and
the clock. The model, the optimiser and the training step are each script's own, written as its
framework's documentation teaches.

A script is started like a harness worker (``python -m fidelity.<name> bench CELL.json OUT``,
with the adapter's worker environment: the same thread counts and backend) and writes one result
record to OUT. It trains the cell's workload from the spec's initial weights on the spec's
batches, in order, and times its own loop:

latency: after one untimed pass over the data (compiles happen there), each step followed by
    reading the loss on the host, timed one by one, for at least LATENCY_S and MIN_STEPS steps;
throughput: blocks of steps issued back to back with one read of the loss per block, a block
    lasting about BLOCK_S at the latency's pace, MIN_BLOCKS blocks (a user's loop logs rarely).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from harness.records import Cell, new_record, spec_of, writable
from workloads import Batch, Params, Workload

LATENCY_S = 0.5
MIN_STEPS = 30
BLOCK_S = 0.2
MIN_BLOCKS = 5
if os.environ.get("DLCOMPARE_FIDELITY_QUICK"):  # the test suite checks the scripts, not their times
    LATENCY_S, MIN_STEPS, BLOCK_S, MIN_BLOCKS = 0.02, 5, 0.01, 2


def cell() -> tuple[dict[str, Any], Path]:
    """The cell this script runs and where its record goes, from the worker-style command line."""
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=("bench",))
    p.add_argument("cell", type=Path)
    p.add_argument("out", type=Path)
    args = p.parse_args()
    return json.loads(args.cell.read_text()), args.out


def workload(cell: Cell) -> tuple[Workload, Params, list[Batch]]:
    spec = spec_of(cell)
    return spec, spec.init_params(), spec.batches()


def device(cell: Cell) -> str:
    """``cpu`` or ``cuda`` (``auto`` is the GPU where the framework sees one; scripts take it as asked)."""
    return "cuda" if cell["device_requested"] == "cuda" else "cpu"


def measure(step: Callable[[Any], Any], sync: Callable[[Any], float], batches: list[Any]) -> dict[str, Any]:
    """Time ``step`` (one training step on a batch, returning the loss as the framework holds
    it) and ``sync`` (the loss as a Python float, waiting for the device) as the module says."""
    loss_first = sync(step(batches[0]))
    for b in batches[1:]:  # the rest of the first pass, untimed
        sync(step(b))
    times: list[float] = []
    t_end = time.perf_counter() + LATENCY_S
    i = 0
    while len(times) < MIN_STEPS or time.perf_counter() < t_end:
        batch = batches[i % len(batches)]
        t0 = time.perf_counter()
        sync(step(batch))
        times.append(time.perf_counter() - t0)
        i += 1
    k = max(1, round(BLOCK_S / float(np.median(times))))
    blocks = []
    for _ in range(MIN_BLOCKS):
        t0 = time.perf_counter()
        for _ in range(k):
            loss = step(batches[i % len(batches)])
            i += 1
        sync(loss)
        blocks.append((time.perf_counter() - t0) / k)
    return result(times, blocks, k, loss_first)


def result(step_times: list[float], block_per_step: list[float], block_steps: int, loss_first: float) -> dict[str, Any]:
    """The measured fields of a record: latency (synced steps), throughput (per step in blocks)."""
    return {
        "step_times_s": step_times,
        "median_s": float(np.median(step_times)),
        "pipelined_s": float(np.median(block_per_step)),
        "pipelined_blocks_s": [t * block_steps for t in block_per_step],
        "pipelined_block_steps": block_steps,
        "loss_first": float(loss_first),
    }


def write(cell: Cell, out: Path, versions: dict[str, str], measured: dict[str, Any]) -> None:
    batch_size = int(cell["spec"]["batch_size"])
    record = new_record(
        cell,
        "ok",
        versions=versions,
        batch_size=batch_size,
        device=device(cell),
        steps=len(measured["step_times_s"]),
        protocol={"latency_s": LATENCY_S, "min_steps": MIN_STEPS, "block_s": BLOCK_S, "min_blocks": MIN_BLOCKS},
        **measured,
    )
    out.write_text(json.dumps(writable(record), allow_nan=False))
