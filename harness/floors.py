"""Speed of light per cell: two floors a step cannot go below.

kernel floor: the step's own matmuls and convolutions (``Workload.kernels``), each timed alone
    at the library's best speed, summed with their counts. Measured once per run and device in a
    fresh process (``python -m harness.floors DEVICE KERNELS.json OUT PRECISION``), as the peak
    is: on CPU the best of NumPy's BLAS and PyTorch (oneDNN/MKL) for a matmul and PyTorch for a
    convolution; on CUDA PyTorch. Each kernel is timed after a warm-up, best of REPEATS runs of
    enough back-to-back calls to last MIN_TIME_S, with a device sync. A step whose batches differ
    (caption lengths) gets the mean over its batches, as its steady time is a mean over a pass.
dispatch floor: the same step structure on tiny tensors (``Workload.tiny``), timed by the worker
    through the adapter itself (harness.worker): what the framework and adapter cost per step
    when there is no arithmetic to speak of.

A cell's limit is the larger of the two: compute-bound when it is the kernel floor,
overhead-bound when it is the dispatch floor; the report shows the step time as a multiple of it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from workloads import get_workload, override

REPO = Path(__file__).resolve().parent.parent
REPEATS = 2 if os.environ.get("DLCOMPARE_QUICK_LIMITS") else 5  # the test suite's runs are tiny
MIN_TIME_S = 0.002


def _key(kernel: tuple) -> str:
    return json.dumps(list(kernel))


def cell_kernels(cell: dict[str, Any]) -> list[list[tuple[tuple, int]]] | None:
    """Per batch of the cell's workload, its kernels and counts; None where it states none."""
    spec = override(get_workload(cell["workload"]), cell.get("overrides", []))
    per_batch = [spec.kernels(b) for b in spec.batches()]
    return None if any(k is None for k in per_batch) else per_batch


def _best(fn: Callable[[], Any], sync: Callable[[], None]) -> float:
    fn()
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    calls = max(1, int(MIN_TIME_S / max(time.perf_counter() - t0, 1e-9)))
    best = float("inf")
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        best = min(best, (time.perf_counter() - t0) / calls)
    return best


def _timers(device: str, tf32: bool) -> list[Callable[[tuple], float | None]]:
    """Functions timing one kernel with each library present (None: that library cannot)."""
    import numpy as np

    rng = np.random.default_rng(0)
    timers = []
    if device == "cpu":

        def with_numpy(kernel: tuple) -> float | None:
            if kernel[0] != "matmul":
                return None
            _, m, k, n = kernel
            a, b = rng.standard_normal((m, k), np.float32), rng.standard_normal((k, n), np.float32)
            return _best(lambda: a @ b, lambda: None)

        timers.append(with_numpy)
    if importlib.util.find_spec("torch"):
        import torch
        from torch.nn import grad

        dev = torch.device(device)
        if device == "cuda":
            torch.backends.cuda.matmul.fp32_precision = "tf32" if tf32 else "ieee"
            torch.backends.cudnn.conv.fp32_precision = "tf32" if tf32 else "ieee"
            torch.backends.cudnn.benchmark = True

        def sync() -> None:
            if device == "cuda":
                torch.cuda.synchronize()

        def with_torch(kernel: tuple) -> float | None:
            with torch.no_grad():
                if kernel[0] == "matmul":
                    _, m, k, n = kernel
                    a, b = torch.randn(m, k, device=dev), torch.randn(k, n, device=dev)
                    return _best(lambda: a @ b, sync)
                _, bs, h, w, cin, cout, role = kernel
                x = torch.randn(bs, cin, h, w, device=dev)
                wt = torch.randn(cout, cin, 3, 3, device=dev)
                y = torch.randn(bs, cout, h, w, device=dev)
                fn = {
                    "forward": lambda: torch.nn.functional.conv2d(x, wt, padding=1),
                    "input_grad": lambda: grad.conv2d_input(x.shape, wt, y, padding=1),
                    "kernel_grad": lambda: grad.conv2d_weight(x, wt.shape, y, padding=1),
                }[role]
                return _best(fn, sync)

        timers.append(with_torch)
    return timers


def measure(device: str, kernels: list[tuple], tf32: bool = False) -> dict[str, float | None]:
    """Seconds of each kernel at the fastest library's speed, keyed by ``_key``."""
    timers = _timers(device, tf32)
    out = {}
    for kernel in kernels:
        times = [t for t in (timer(tuple(kernel)) for timer in timers) if t is not None]
        out[_key(kernel)] = min(times) if times else None
    return out


def floor_s(per_batch: list[list[tuple[tuple, int]]], seconds: dict[str, float | None]) -> float | None:
    """A step's kernel floor: per batch the sum of count x seconds, averaged over batches."""
    totals = []
    for kernels in per_batch:
        times = [seconds.get(_key(k)) for k, _ in kernels]
        if any(t is None for t in times):
            return None
        totals.append(sum(t * count for t, (_, count) in zip(times, kernels, strict=True)))
    return sum(totals) / len(totals)


def kernel_floors(cells: list[dict[str, Any]], devices: list[str], threads: int, precision: str) -> dict[str, Any]:
    """Each cell's kernel floor (seconds per step, keyed by cell id; None where its workload
    states no kernels or the device could not be measured) and, per device, an error if its
    measurement failed."""
    wanted = {c["cell_id"]: cell_kernels(c) for c in cells}
    shapes = sorted({tuple(k) for per_batch in wanted.values() if per_batch for b in per_batch for k, _ in b})
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    seconds: dict[str, dict[str, float | None]] = {}
    errors: dict[str, str] = {}
    for device in devices:
        with tempfile.TemporaryDirectory() as tmp:
            src, out = Path(tmp) / "kernels.json", Path(tmp) / "floors.json"
            src.write_text(json.dumps(shapes))
            cmd = [sys.executable, "-m", "harness.floors", device, str(src), str(out), precision]
            proc = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=1200)
            if proc.returncode == 0 and out.is_file():
                seconds[device] = json.loads(out.read_text())
            else:
                errors[device] = (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
    floors = {}
    for c in cells:
        device = c["device_requested"]
        per_batch = wanted[c["cell_id"]]
        floors[c["cell_id"]] = floor_s(per_batch, seconds[device]) if per_batch and device in seconds else None
    return {"floors": floors, "errors": errors, "kernels": len(shapes)}


def main(argv: list[str]) -> int:
    device, src, out, *rest = argv
    precision = rest[0] if rest else "fp32"
    kernels = json.loads(Path(src).read_text())
    Path(out).write_text(json.dumps(measure(device, kernels, tf32=precision == "tf32")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
