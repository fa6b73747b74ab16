"""Speed of light per cell: two floors a step cannot go below.

kernel floor: the step's own matmuls and convolutions (``Workload.kernels``), each timed alone
    at the fastest library's speed, summed with their counts. Measured once per run and device,
    each library in a fresh process of its own (``python -m harness.measuring.floors LIBRARY DEVICE
    KERNELS.json OUT PRECISION``, with the worker environment of an adapter of that framework):
    NumPy's BLAS (CPU matmuls), PyTorch, JAX (XLA) and TensorFlow, whichever are installed, and
    each plugin's kernels (an entry point of ENTRY_POINT_GROUP named after its framework, a
    ``KernelsHook``; docs/adding-an-adapter.md, section 9); a kernel's floor is the fastest of them.
    On a device a plugin names (harness.running.devices) only the plugins' kernels are timed.
    Each kernel is timed after a warm-up, best of REPEATS runs of enough back-to-back calls to
    last MIN_TIME_S, synced on the last; a call's dispatch cost is included, so for the smallest
    kernels the floor errs high. PyTorch's kernels on a GPU are timed on the device's own clock
    instead (``_device_best``: calls replayed from a CUDA graph between CUDA events), so there the
    floor is the kernels' device time, and the dispatch floor below is all of the launch cost. A
    step whose batches differ (caption lengths) gets the mean over its batches, as its steady time
    is a mean over a pass.
dispatch floor: the same step structure on tiny tensors (``Workload.tiny``), timed by the worker
    through the adapter itself (harness.running.worker): what the framework and adapter cost per step
    when there is no arithmetic to speak of.

Kernels are timed in the run's precision: TF32 allowed for ``tf32`` runs; bfloat16 operands for
``bf16`` runs (PyTorch, JAX and TensorFlow; NumPy has no bfloat16 BLAS and times none of them).

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
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from adapters import PluginError, hooks, load_hook
from harness import processes
from harness.install.environments import family_python
from harness.measuring import limits_cache
from harness.records import Cell, spec_of

#: Names the built-in libraries (of LIBRARIES, comma-separated) that time the kernel floors; unset,
#: all of them. Only the test suite sets it (tests/conftest.py: NumPy and PyTorch, which time every
#: kernel kind; JAX's and TensorFlow's processes cost its runs about 13 CPU-s a new kernel set),
#: and the report says which it left out: a floor from fewer libraries errs high. Plugins' kernels
#: are always timed.
LIBRARIES_ENV = "DLCOMPARE_FLOOR_LIBRARIES"
#: Seconds one library's process may take to time its kernels.
LIBRARY_TIMEOUT_S = 1200
REPEATS = 2 if os.environ.get("DLCOMPARE_QUICK_LIMITS") else 5  # the test suite's runs are tiny
MIN_TIME_S = 0.002


def _key(kernel: tuple) -> str:
    return json.dumps(list(kernel))


def cell_kernels(cell: Cell) -> list[list[tuple[tuple, int]]] | None:
    """Per batch of the cell's workload, its kernels and counts; None where it states none."""
    spec = spec_of(cell)
    per_batch = [spec.kernels(b) for b in spec.batches()]
    return None if any(k is None for k in per_batch) else cast("list[list[tuple[tuple, int]]]", per_batch)


def _best(fn: Callable[[], Any], sync: Callable[[Any], Any]) -> float:
    """Seconds per call of ``fn``: calls issued back to back, ``sync`` on the last result."""
    sync(fn())
    t0 = time.perf_counter()
    sync(fn())
    calls = max(1, int(MIN_TIME_S / max(time.perf_counter() - t0, 1e-9)))
    best = float("inf")
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        for _ in range(calls):
            out = fn()
        sync(out)
        best = min(best, (time.perf_counter() - t0) / calls)
    return best


#: Calls of one kernel captured in one CUDA graph to time it on the GPU's own clock (PyTorch on cuda).
GRAPH_CALLS = 20


def _device_best(fn: Callable[[], Any], sync: Callable[[Any], Any]) -> float:
    """Seconds per call of ``fn`` on the GPU's own clock, without the per-call launch from Python
    (the dispatch floor measures that): GRAPH_CALLS calls captured in one CUDA graph
    (``torch.cuda.graph``, after a warm-up on a side stream as PyTorch's documentation asks),
    replayed between two CUDA events, best of REPEATS. Where capture fails (no CUDA, a kernel
    that cannot be captured), the back-to-back timing of ``_best``, launches included, says so
    on stderr and is used instead."""
    import torch

    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(GRAPH_CALLS):
                fn()
        graph.replay()
        torch.cuda.synchronize()
        best = float("inf")
        for _ in range(REPEATS):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            best = min(best, start.elapsed_time(end) / 1e3 / GRAPH_CALLS)  # elapsed_time: ms
        return best
    except Exception as exc:  # noqa: BLE001 - any capture failure: time it as every other library does
        print(f"floors: CUDA graph capture failed ({type(exc).__name__}: {exc}); timed with launches", file=sys.stderr)
        return _best(fn, sync)


def _numpy(device: str, precision: str) -> Callable[[tuple], Callable[[], Any] | None]:
    import numpy as np

    rng = np.random.default_rng(0)

    def make(kernel: tuple) -> Callable[[], Any] | None:
        if device != "cpu" or kernel[0] != "matmul" or precision == "bf16":
            return None
        _, m, k, n = kernel
        a, b = rng.standard_normal((m, k), np.float32), rng.standard_normal((k, n), np.float32)
        return lambda: a @ b

    return make


def _torch(device: str, precision: str) -> Callable[[tuple], Callable[[], Any] | None]:
    import functools

    import torch
    from torch.nn import grad

    tf32 = precision == "tf32"
    dev = torch.device(device)
    randn = functools.partial(torch.randn, device=dev, dtype=torch.bfloat16 if precision == "bf16" else None)
    torch.set_grad_enabled(False)
    if device == "cuda":
        torch.backends.cuda.matmul.fp32_precision = "tf32" if tf32 else "ieee"
        torch.backends.cudnn.conv.fp32_precision = "tf32" if tf32 else "ieee"  # type: ignore[attr-defined]
        torch.backends.cudnn.benchmark = True

    def make(kernel: tuple) -> Callable[[], Any] | None:
        if kernel[0] == "matmul":
            _, m, k, n = kernel
            a, b = randn(m, k), randn(k, n)
            return lambda: a @ b
        _, bs, h, w, cin, cout, role = kernel
        x, wt = randn(bs, cin, h, w), randn(cout, cin, 3, 3)
        y = randn(bs, cout, h, w)
        return {
            "forward": lambda: torch.nn.functional.conv2d(x, wt, padding=1),
            "input_grad": lambda: grad.conv2d_input(x.shape, wt, y, padding=1),
            "kernel_grad": lambda: grad.conv2d_weight(x, wt.shape, y, padding=1),
        }[role]

    return make


def _jax(device: str, precision: str) -> Callable[[tuple], Callable[[], Any] | None]:
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_default_matmul_precision", "tensorfloat32" if precision == "tf32" else "highest")
    dev = jax.devices(device)[0]
    key = jax.random.PRNGKey(0)
    dtype = jnp.bfloat16 if precision == "bf16" else jnp.float32

    def conv(x: Any, w: Any) -> Any:
        return jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))

    def make(kernel: tuple) -> Callable[[], Any] | None:
        if kernel[0] == "matmul":
            _, m, k, n = kernel
            a, b = (jax.device_put(jax.random.normal(key, s, dtype), dev) for s in ((m, k), (k, n)))
            f = jax.jit(jnp.matmul)
            return lambda: f(a, b)
        _, bs, h, w, cin, cout, role = kernel
        x, wt, y = (
            jax.device_put(jax.random.normal(key, s, dtype), dev)
            for s in ((bs, h, w, cin), (3, 3, cin, cout), (bs, h, w, cout))
        )
        if role == "forward":
            f = jax.jit(conv)
            return lambda: f(x, wt)
        if role == "input_grad":
            f = jax.jit(lambda x, w, g: jax.vjp(lambda x: conv(x, w), x)[1](g)[0])
        else:
            f = jax.jit(lambda x, w, g: jax.vjp(lambda w: conv(x, w), w)[1](g)[0])
        return lambda: f(x, wt, y)

    return make


def _tensorflow(device: str, precision: str) -> Callable[[tuple], Callable[[], Any] | None]:
    import functools

    import tensorflow as tf

    tf.config.experimental.enable_tensor_float_32_execution(precision == "tf32")
    normal = functools.partial(tf.random.normal, dtype=tf.bfloat16 if precision == "bf16" else tf.float32)
    tf.config.threading.set_intra_op_parallelism_threads(int(os.environ.get("TF_NUM_INTRAOP_THREADS", "0")))
    place = tf.device("/GPU:0" if device == "cuda" else "/CPU:0")

    def make(kernel: tuple) -> Callable[[], Any] | None:
        with place:
            if kernel[0] == "matmul":
                _, m, k, n = kernel
                a, b = normal((m, k)), normal((k, n))
                return lambda: tf.linalg.matmul(a, b)
            _, bs, h, w, cin, cout, role = kernel
            x, wt, y = (
                normal((bs, h, w, cin)),
                normal((3, 3, cin, cout)),
                normal((bs, h, w, cout)),
            )
            ops = {
                "forward": lambda: tf.nn.conv2d(x, wt, 1, "SAME"),
                "input_grad": lambda: tf.raw_ops.Conv2DBackpropInput(
                    input_sizes=x.shape, filter=wt, out_backprop=y, strides=[1, 1, 1, 1], padding="SAME"
                ),
                "kernel_grad": lambda: tf.raw_ops.Conv2DBackpropFilter(
                    input=x, filter_sizes=wt.shape, out_backprop=y, strides=[1, 1, 1, 1], padding="SAME"
                ),
            }
        return ops[role]  # eager ops run where their inputs live

    return make


#: Each library's kernels, timed in a process of its own (its module name -> how to make a kernel).
LIBRARIES: dict[str, Callable[[str, str], Callable[[tuple], Callable[[], Any] | None]]] = {
    "numpy": _numpy,
    "torch": _torch,
    "jax": _jax,
    "tensorflow": _tensorflow,
}


#: The devices the built-in libraries time kernels on; a device a plugin names has the plugins' alone.
BUILT_IN_DEVICES = ("cpu", "cuda")
#: A plugin's kernels: an entry point of this group, named after its adapters' ``framework``.
ENTRY_POINT_GROUP = "dlcompare.kernels"
#: ``make(kernel)``: a zero-argument callable running ``kernel`` once (a ``Workload.kernels`` tuple,
#: or the device peak's ("matmul", n, n, n)), its operands made up front; None for one it does not time.
Make = Callable[[tuple], Callable[[], Any] | None]
#: What a plugin's kernels entry point is called with: (device, precision). It returns (make, sync),
#: ``sync(result)`` waiting for one call's result (the device's queue, a lazy array's evaluation),
#: or None where it times nothing on ``device``. It imports its framework when called.
KernelsHook = Callable[[str, str], tuple[Make, Callable[[Any], Any]] | None]


def plugin_kernels() -> dict[str, Any]:
    """The plugins' kernels entry points, by name (nothing imported); PluginError for a name that
    is a built-in library's or that two packages register."""
    found = hooks(ENTRY_POINT_GROUP)
    clash = sorted(set(found) & set(LIBRARIES))
    if clash:
        ep = found[clash[0]]
        raise PluginError(f"{ENTRY_POINT_GROUP} entry point {ep.name!r} ({ep.value}) is a built-in library's name")
    return found


def libraries() -> list[str]:
    """Every library whose kernels may be timed: the built-in ones, then the plugins'."""
    return [*LIBRARIES, *plugin_kernels()]


def left_out() -> list[str]:
    """The built-in libraries ``LIBRARIES_ENV`` leaves out (none when unset); ValueError naming
    the bad value and the valid ones where it names a library that is not built in."""
    named = os.environ.get(LIBRARIES_ENV)
    if named is None:
        return []
    chosen = [n.strip() for n in named.split(",") if n.strip()]
    bad = [n for n in chosen if n not in LIBRARIES]
    if bad or not chosen:
        raise ValueError(
            f"{LIBRARIES_ENV}={named!r}: {bad[0] if bad else 'no library'!r} is not a built-in kernel library; "
            f"valid: {', '.join(LIBRARIES)}, comma-separated"
        )
    return [lib for lib in LIBRARIES if lib not in chosen]


def kernels_of(library: str, device: str, precision: str) -> tuple[Make, Callable[[Any], Any]] | None:
    """(make, sync) of ``library`` on ``device`` in ``precision`` (a built-in library, or a plugin's
    KernelsHook, loaded now); None where it times nothing there."""
    if library in LIBRARIES:
        return LIBRARIES[library](device, precision), _sync(library, device)
    return cast(KernelsHook, load_hook(plugin_kernels()[library]))(device, precision)


def _sync(library: str, device: str) -> Callable[[Any], Any]:
    """Wait for a result: NumPy and TF on CPU run synchronously; JAX blocks on the array; torch
    and TF on CUDA synchronise the device."""
    if library == "jax":
        return lambda r: r.block_until_ready()
    if device == "cuda" and library == "torch":
        import torch

        return lambda r: torch.cuda.synchronize()
    if device == "cuda" and library == "tensorflow":
        import tensorflow as tf

        return lambda r: tf.test.experimental.sync_devices()
    return lambda r: r


def measure(library: str, device: str, kernels: list[tuple], precision: str = "fp32") -> dict[str, float | None]:
    """Seconds per call of each kernel with one library in ``precision``, keyed by ``_key`` (None
    where it has none)."""
    made = kernels_of(library, device, precision)
    if made is None:
        return {_key(kernel): None for kernel in kernels}
    make, sync = made
    timer = _device_best if (library, device) == ("torch", "cuda") else _best
    out = {}
    for kernel in kernels:
        fn = make(tuple(kernel))
        out[_key(kernel)] = None if fn is None else timer(fn, sync)
    return out


def floor_s(per_batch: list[list[tuple[tuple, int]]], seconds: Mapping[str, float | None]) -> float | None:
    """A step's kernel floor: per batch the sum of count x seconds, averaged over batches."""
    totals = []
    for kernels in per_batch:
        times = [seconds.get(_key(k)) for k, _ in kernels]
        if any(t is None for t in times):
            return None
        totals.append(sum(cast(float, t) * count for t, (_, count) in zip(times, kernels, strict=True)))
    return sum(totals) / len(totals)


def _library_env(library: str, device: str, threads: int) -> dict[str, str]:
    """The environment a library's process runs with: the worker environment of an adapter of
    that framework (the same threads and platform settings its cells get), or just the threads."""
    from adapters import discover

    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    for info in discover().values():
        if info.framework == library:
            env.update(info.cls.worker_env(threads, device))
            break
    if device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    return processes.repo_env(env)


def _run_library(library: str, device: str, shapes: list, threads: int, precision: str) -> dict[str, Any]:
    """One library's seconds per kernel, timed in a fresh process: {"seconds": {...}} or {"error": last line}."""
    with tempfile.TemporaryDirectory() as tmp:
        src, out = Path(tmp) / "kernels.json", Path(tmp) / "floors.json"
        src.write_text(json.dumps(shapes))
        # The library's own environment where a GPU variant keeps it apart (TensorFlow's .venv-tf).
        python = family_python(library) or sys.executable
        cmd = [python, "-m", "harness.measuring.floors", library, device, str(src), str(out), precision]
        try:
            proc = processes.run(cmd, _library_env(library, device, threads), LIBRARY_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return {"error": f"timeout after {LIBRARY_TIMEOUT_S} s"}
        if proc.returncode != 0 or not out.is_file():
            return {"error": processes.tail(proc.stderr, 1) or f"exit {proc.returncode}"}
        return {"seconds": json.loads(out.read_text())}


def _installed(library: str, device: str = "cpu") -> bool:
    """Whether ``library`` can be timed on ``device``: a plugin's where its entry point is
    installed; a built-in one on the built-in devices, installed in this environment or in its own
    (TensorFlow's .venv-tf on the GPU variants, harness.install.environments)."""
    if library not in LIBRARIES:
        return library in plugin_kernels()
    if device not in BUILT_IN_DEVICES:
        return False
    return importlib.util.find_spec(library) is not None or family_python(library) is not None


def kernel_floors(cells: Sequence[Cell], devices: list[str], threads: int, precision: str) -> dict[str, Any]:
    """Each cell's kernel floor (seconds per step, keyed by cell id; None where its workload
    states no kernels or nothing could time them), the library that was fastest per kernel
    count, each library x device whose process failed, with its last line of stderr, and the
    built-in libraries ``LIBRARIES_ENV`` left out (``left_out``)."""
    skipped = left_out()
    wanted = {c["cell_id"]: cell_kernels(c) for c in cells}
    shapes = sorted({tuple(k) for per_batch in wanted.values() if per_batch for b in per_batch for k, _ in b})
    by_key = {_key(s): s for s in shapes}
    best: dict[str, dict[str, float]] = {d: {} for d in devices}
    winners: dict[str, dict[str, str]] = {d: {} for d in devices}
    errors: dict[str, str] = {}
    for device in devices:
        for library in libraries():
            if not shapes or library in skipped or not _installed(library, device):
                continue
            inputs = {"floors": library, "device": device, "threads": threads, "precision": precision}
            found = limits_cache.cached_each(
                inputs,
                list(by_key),
                cast(
                    "Callable[[list[str]], dict[str, Any]]",
                    lambda keys, lib=library, dev=device: _run_library(
                        lib, dev, [by_key[k] for k in keys], threads, precision
                    ),
                ),
                "seconds",
            )
            if "error" in found:
                errors[f"{library} on {device}"] = found["error"]
                continue
            for key, t in found["seconds"].items():
                if t is not None and t < best[device].get(key, float("inf")):
                    best[device][key] = t
                    winners[device][key] = library
    floors = {}
    for c in cells:
        per_batch, device = wanted[c["cell_id"]], c["device_requested"]
        floors[c["cell_id"]] = floor_s(per_batch, best[device]) if per_batch and best.get(device) else None
    fastest = {d: {lib: list(w.values()).count(lib) for lib in set(w.values())} for d, w in winners.items()}
    return {"floors": floors, "errors": errors, "kernels": len(shapes), "fastest_library": fastest, "left_out": skipped}


def main(argv: list[str]) -> int:
    library, device, src, out, *rest = argv
    precision = rest[0] if rest else "fp32"
    kernels = json.loads(Path(src).read_text())
    Path(out).write_text(json.dumps(measure(library, device, kernels, precision)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
