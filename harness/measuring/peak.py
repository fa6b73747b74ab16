"""The device's measured limits: a large float32 matmul (GFLOP/s), a large copy (GB/s) and, on a
GPU, the host-to-device copy (GB/s, from pinned and from pageable host memory: ``H2D_FIELDS``).

Run once per device per run, in its own process (``python -m harness.measuring.peak DEVICE OUT [PRECISION]``)
so the parent imports no framework. On CPU the best of NumPy's BLAS, PyTorch (oneDNN/MKL), JAX
(XLA) and TensorFlow (oneDNN), whichever are installed here, counts: on the 2-core AMD EPYC VM
(Zen 5, full-width AVX-512) JAX's and TensorFlow's matmuls ran at about 520 GFLOP/s where NumPy's
and PyTorch's ran at 230-280, so a peak from those two alone understated the device by half and
flagged tf-function's `cnn` steps. On CUDA PyTorch, else JAX. Each plugin's kernels
(harness.measuring.floors.KernelsHook) time the same matmul where they make one: on CPU beside the
others in ``matmul_gflops_by``, on CUDA in place of PyTorch's or JAX's where faster; on a device a
plugin names (harness.running.devices) they alone make its peak, without a copy figure (``copy_gbs``
None). In the run's precision (``tf32`` runs are bounded by the TF32 matmul peak, ``fp32`` runs by
the full-precision one).
``bf16`` runs are bounded by the best of the bfloat16 matmul (PyTorch and JAX; NumPy has no
bfloat16 BLAS) and the float32 ones: a mixed-precision step runs both kinds, and where bfloat16
is emulated float32 is the faster. The
matmul is timed after a warm-up, best of repeats over at least MIN_S seconds, with a device sync;
the copy counts bytes read plus bytes written. The run measures both at its start and its end
and keeps the better (``best_of``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.measuring import floors
from harness.measuring.cpu_features import cpu_native_bf16

MATMUL_N = 2048
#: A GPU's host-to-device copy rates (GB/s, bytes moved once): from pinned and from pageable memory.
H2D_FIELDS = ("h2d_gbs", "h2d_pageable_gbs")
COPY_BYTES = 256 * 2**20
REPEATS = 5
#: Repeat for at least this long: a shared VM's capacity drifts by tens of percent within
#: seconds, and the peak is the best it offers (the run measures it again at its end).
MIN_S = 0.0 if os.environ.get("DLCOMPARE_QUICK_LIMITS") else 1.5  # the test suite's runs are tiny


def _best(fn: Callable[[], Any], sync: Callable[[Any], Any]) -> float:
    sync(fn())  # warm-up
    best = float("inf")
    start, n = time.perf_counter(), 0
    while n < REPEATS or time.perf_counter() - start < MIN_S:
        t0 = time.perf_counter()
        sync(fn())
        best = min(best, time.perf_counter() - t0)
        n += 1
    return best


def measure_cpu(bf16: bool = False) -> dict[str, Any]:
    """The CPU's peaks. A ``bf16`` run times the bfloat16 matmuls only where the CPU's flags say it
    has bfloat16 arithmetic: emulated, they run hundreds of times slower than float32 (minutes
    for one 2048^3 matmul) and float32 is the bound anyway; ``bf16_emulated`` then says why."""
    import numpy as np

    emulated = None
    if bf16:
        native, why = cpu_native_bf16()
        if native is False:
            bf16, emulated = False, why

    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((MATMUL_N, MATMUL_N), dtype=np.float32) for _ in range(2))
    flops = 2 * MATMUL_N**3
    by = {"numpy": flops / _best(lambda: a @ b, lambda r: r) / 1e9}
    if importlib.util.find_spec("torch"):
        import torch

        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        by["torch"] = flops / _best(lambda: ta @ tb, lambda r: r) / 1e9
        if bf16:
            ha, hb = ta.bfloat16(), tb.bfloat16()
            by["torch bf16"] = flops / _best(lambda: ha @ hb, lambda r: r) / 1e9
    if importlib.util.find_spec("jax"):
        by["jax"] = flops / _jax_matmul_s("cpu", "float32") / 1e9
        if bf16:
            by["jax bf16"] = flops / _jax_matmul_s("cpu", "bfloat16") / 1e9
    if importlib.util.find_spec("tensorflow"):
        by["tensorflow"] = flops / _tensorflow_matmul_s(a, b) / 1e9
    errors: dict[str, str] = {}
    by.update(plugin_gflops("cpu", "fp32", errors))
    if bf16:
        by.update({f"{name} bf16": g for name, g in plugin_gflops("cpu", "bf16", errors).items()})
    src = np.ones(COPY_BYTES // 4, np.float32)
    dst = np.empty_like(src)
    copy_gbs = 2 * COPY_BYTES / _best(lambda: np.copyto(dst, src), lambda r: r) / 1e9
    found = {"matmul_gflops": max(by.values()), "matmul_gflops_by": by, "copy_gbs": copy_gbs}
    found = {**found, "plugin_errors": errors} if errors else found
    return {**found, "bf16_emulated": emulated} if emulated else found


def plugin_gflops(device: str, precision: str, errors: dict[str, str]) -> dict[str, float]:
    """GFLOP/s of each plugin's MATMUL_N^3 matmul on ``device`` in ``precision`` (its kernels entry
    point, harness.measuring.floors), by the entry point's name; a plugin that makes no matmul there
    is left out, one whose hook fails is named in ``errors`` with why (the others still count)."""
    flops = 2 * MATMUL_N**3
    out = {}
    for name in floors.plugin_kernels():
        try:
            made = floors.kernels_of(name, device, precision)
            fn = None if made is None else made[0](("matmul", MATMUL_N, MATMUL_N, MATMUL_N))
            if made is not None and fn is not None:
                out[name] = flops / _best(fn, made[1]) / 1e9
        except Exception as exc:  # noqa: BLE001 - one plugin's failure leaves the device's other peaks standing
            errors[name] = f"{type(exc).__name__}: {exc}"[:300]
    return out


def _with_plugins(found: dict[str, Any], device: str, precision: str) -> dict[str, Any]:
    """A GPU's peak (``matmul_gflops_by`` one name) with the plugins' matmuls on ``device``: the
    fastest of them replaces it where faster."""
    errors: dict[str, str] = {}
    tf32_or_fp32 = "tf32" if precision == "tf32" else "fp32"
    by = plugin_gflops(device, tf32_or_fp32, errors)
    if precision == "bf16":  # the bfloat16 matmul, or float32 where that is faster (emulated bf16)
        for name, g in plugin_gflops(device, "bf16", errors).items():
            by[name] = max(by.get(name, 0.0), g)
    best = max(by, key=lambda name: by[name], default=None)
    out = dict(found)
    if best is not None and by[best] > (out.get("matmul_gflops") or 0.0):
        out["matmul_gflops"], out["matmul_gflops_by"] = by[best], best
    return {**out, "plugin_errors": errors} if errors else out


def measure_plugin_device(device: str, precision: str = "fp32") -> dict[str, Any]:
    """The peak of a device a plugin names: the plugins' matmuls alone (``matmul_gflops_by`` the
    fastest's name), no copy figure. Raises RuntimeError where none times a matmul there."""
    found = _with_plugins({"matmul_gflops": None, "matmul_gflops_by": None, "copy_gbs": None}, device, precision)
    if found["matmul_gflops"] is None:
        why = "; ".join(f"{k}: {v}" for k, v in found.get("plugin_errors", {}).items())
        raise RuntimeError(f"no plugin's kernels time a matmul on {device}" + (f" ({why})" if why else ""))
    return found


def _jax_matmul_s(device: str, dtype: str) -> float:
    """Seconds of JAX's best MATMUL_N^3 matmul in ``dtype`` on ``device`` (XLA's own kernels,
    or oneDNN's where XLA calls it)."""
    import jax
    import jax.numpy as jnp

    dev = jax.devices(device)[0]
    a, b = (jax.device_put(jnp.ones((MATMUL_N, MATMUL_N), dtype), dev) for _ in range(2))
    matmul = jax.jit(lambda x, y: x @ y)
    return _best(lambda: matmul(a, b), jax.block_until_ready)


def _tensorflow_matmul_s(a: Any, b: Any) -> float:
    """Seconds of TensorFlow's best float32 matmul of ``a`` and ``b`` on CPU (oneDNN where TF uses
    it): its kernels, not NumPy's BLAS, are what TF adapters' steps run on."""
    import tensorflow as tf

    with tf.device("/CPU:0"):
        ta, tb = tf.constant(a), tf.constant(b)
        return _best(lambda: tf.linalg.matmul(ta, tb), lambda r: r.numpy())


def measure_cuda(tf32: bool = False, bf16: bool = False) -> dict[str, Any]:
    """The GPU's peaks: PyTorch's, else JAX's, and the plugins' matmuls where faster."""
    precision = "bf16" if bf16 else "tf32" if tf32 else "fp32"
    return _with_plugins(_measure_cuda_built_in(tf32, bf16), "cuda", precision)


def _measure_cuda_built_in(tf32: bool = False, bf16: bool = False) -> dict[str, Any]:
    flops = 2 * MATMUL_N**3
    if importlib.util.find_spec("torch"):
        import torch

        if torch.cuda.is_available():
            torch.backends.cuda.matmul.fp32_precision = "tf32" if tf32 else "ieee"
            a, b = (torch.randn(MATMUL_N, MATMUL_N, device="cuda") for _ in range(2))
            src = torch.ones(COPY_BYTES // 4, device="cuda")
            dst = torch.empty_like(src)

            def sync(_: Any) -> None:
                torch.cuda.synchronize()

            seconds = _best(lambda: a @ b, sync)
            if bf16:  # the bfloat16 matmul, or float32 where that is faster (emulated bf16)
                ha, hb = a.bfloat16(), b.bfloat16()
                seconds = min(seconds, _best(lambda: ha @ hb, sync))
            host = torch.ones(COPY_BYTES // 4)
            pinned = host.pin_memory()
            return {
                "matmul_gflops": flops / seconds / 1e9,
                "matmul_gflops_by": "torch",
                "copy_gbs": 2 * COPY_BYTES / _best(lambda: dst.copy_(src), sync) / 1e9,
                # host to device, bytes moved once: from page-locked memory (asynchronous, the
                # fastest a loader's pinned batches get) and from ordinary pageable memory
                "h2d_gbs": COPY_BYTES / _best(lambda: dst.copy_(pinned, non_blocking=True), sync) / 1e9,
                "h2d_pageable_gbs": COPY_BYTES / _best(lambda: dst.copy_(host), sync) / 1e9,
            }
    import jax
    import jax.numpy as jnp
    import numpy as np

    jax.config.update("jax_default_matmul_precision", "tensorfloat32" if tf32 else "highest")
    dev = jax.devices("cuda")[0]
    a, b = (jax.device_put(jnp.ones((MATMUL_N, MATMUL_N), jnp.float32), dev) for _ in range(2))
    matmul = jax.jit(lambda x, y: x @ y)
    copy = jax.jit(lambda x: x + 0)
    src = jax.device_put(jnp.ones(COPY_BYTES // 4, jnp.float32), dev)
    host_array = np.ones(COPY_BYTES // 4, np.float32)
    seconds = _best(lambda: matmul(a, b), jax.block_until_ready)
    if bf16:
        seconds = min(seconds, _jax_matmul_s("cuda", "bfloat16"))
    return {
        "matmul_gflops": flops / seconds / 1e9,
        "matmul_gflops_by": "jax",
        "copy_gbs": 2 * COPY_BYTES / _best(lambda: copy(src), jax.block_until_ready) / 1e9,
        # host to device from a NumPy array (pageable: JAX pins no host memory of its own)
        "h2d_pageable_gbs": COPY_BYTES / _best(lambda: jax.device_put(host_array, dev), jax.block_until_ready) / 1e9,
    }


def best_of(start: dict[str, Any], end: dict[str, Any]) -> dict[str, Any]:
    """Per device, the start's measurement with the better matmul and copy figures of the two
    (each kept as measured in ``matmul_gflops_start/_end``): the device's limits are the best it
    was seen to do, so a step at a fast moment is not mistaken for a missing sync."""
    out = {}
    for device, first in start.items():
        last = end.get(device, {})
        if "error" in first or "error" in last:
            out[device] = first if "error" not in first else last
            continue
        merged = dict(first)
        for field in ("matmul_gflops", "copy_gbs", *(f for f in H2D_FIELDS if f in first or f in last)):
            merged[f"{field}_start"], merged[f"{field}_end"] = first.get(field), last.get(field)
            # None: not measured (a plugin's device has no copy figure)
            merged[field] = max((v for v in (first.get(field), last.get(field)) if v is not None), default=None)
        if last["matmul_gflops"] > first["matmul_gflops"]:
            merged["matmul_gflops_by"] = last["matmul_gflops_by"]
        out[device] = merged
    return out


def main(argv: list[str]) -> int:
    device, out, *rest = argv
    precision = rest[0] if rest else "fp32"
    bf16 = precision == "bf16"
    if device == "cpu":
        result = measure_cpu(bf16)
    elif device == "cuda":
        result = measure_cuda(tf32=precision == "tf32", bf16=bf16)
    else:  # a device a plugin names (harness.running.devices)
        result = measure_plugin_device(device, precision)
    Path(out).write_text(json.dumps({"device": device, "precision": precision, **result}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
