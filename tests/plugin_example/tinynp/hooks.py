"""tinynp's hooks, each registered in tests/plugin_example/pyproject.toml: its profiler
(``dlcompare.profilers``), its kernels (``dlcompare.kernels``) and its device (``dlcompare.devices``).
Its idiomatic script is tinynp.loop (``dlcompare.fidelity``)."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from harness.measuring.profilers import STEP, Event, timed_steps

#: ``make(kernel)``: a call running ``kernel`` once, or None for a kernel tinynp does not time.
Make = Callable[[tuple], Callable[[], Any] | None]


def profile(
    step: Callable[[Any], Any], sync: Callable[[Any], float], inputs: Sequence[Any], out_dir: Path, steps: int
) -> tuple[list[Event], Path, list[float]]:
    """``steps`` steps under tinynp's op recorder: each step's window and each op as Events (in
    microseconds), and the trace as Chrome trace JSON in ``out_dir``."""
    import tinynp

    windows: list[tuple[float, float]] = []

    @contextlib.contextmanager
    def annotate() -> Iterator[None]:
        t0 = time.perf_counter()
        yield
        windows.append((t0, time.perf_counter()))

    tinynp.recorded = []
    try:
        times = timed_steps(step, sync, inputs, steps, annotate)
        ops = tinynp.recorded
    finally:
        tinynp.recorded = None
    events = [Event("step", STEP, a * 1e6, b * 1e6, "host") for a, b in windows]
    events += [Event("op", name, a * 1e6, b * 1e6, "host", category) for name, category, a, b in ops]
    trace = out_dir / "trace.json"
    rows = [{"ph": "X", "pid": 1, "tid": 1, "name": e.name, "ts": e.start, "dur": e.end - e.start} for e in events]
    trace.write_text(json.dumps({"traceEvents": rows}))
    return events, trace, times


def kernels(device: str, precision: str) -> tuple[Make, Callable[[Any], Any]] | None:
    """NumPy's float32 matmul on the host (``cpu`` or ``tinynp-host``): no TF32 switch (tf32 runs
    float32, as on any CPU), no bfloat16 BLAS (None), no convolutions (None)."""
    import numpy as np

    if device not in ("cpu", "tinynp-host") or precision == "bf16":
        return None
    rng = np.random.default_rng(0)

    def make(kernel: tuple) -> Callable[[], Any] | None:
        if kernel[0] != "matmul":
            return None
        _, m, k, n = kernel
        a, b = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
        return lambda: a @ b

    return make, lambda result: result  # NumPy returns once the product is there


def host_device() -> str | None:
    """Every machine has a host: None, unless TINYNP_NO_HOST plays one without it."""
    return "no tinynp host on this machine (TINYNP_NO_HOST is set)" if os.environ.get("TINYNP_NO_HOST") else None
