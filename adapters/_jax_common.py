"""Helpers shared by the JAX-based adapters: start-up environment, build and GPU visibility,
the GPU sync check, and trace and compile accounting from ``jax.monitoring``."""

from __future__ import annotations

import importlib.metadata
import os
import re
from collections import defaultdict
from typing import Any

from adapters.base import pick_device

CUDA_PLUGINS = ("jax-cuda13-plugin", "jax-cuda12-plugin")
# XLA's default GPU autotuning level, stated explicitly so every cell records what it ran with.
GPU_AUTOTUNE_LEVEL = 4


class CompileEvents:
    """Registers a duration listener; ``stats()`` counts traces and backend compiles and sums
    their seconds (tracing, lowering to MLIR, XLA compile)."""

    def __init__(self) -> None:
        import jax

        self._events: dict[str, list[float]] = defaultdict(list)
        jax.monitoring.register_event_duration_secs_listener(self._on_event)

    def _on_event(self, event: str, duration: float, **_: Any) -> None:
        self._events[event].append(duration)

    def _durations(self, event: str) -> list[float]:
        return self._events.get(f"/jax/core/compile/{event}_duration", [])

    def stats(self) -> dict[str, Any]:
        traces, lowers = self._durations("jaxpr_trace"), self._durations("jaxpr_to_mlir_module")
        compiles = self._durations("backend_compile")
        return {"traces": len(traces), "compiles": len(compiles), "compile_s": float(sum(traces + lowers + compiles))}


def jax_env(threads: int, device: str) -> dict[str, str]:
    """XLA reads these only at start-up: the platform the cell asked for (so a broken CUDA
    plugin fails with its own error instead of falling back to the CPU), GPU memory allocated
    on demand (honest memory figures), the CPU thread pool sized like every other framework's,
    and GPU autotuning at an explicit level."""
    flags = f"--xla_cpu_multi_thread_eigen=true intra_op_parallelism_threads={threads}"
    env = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    if device in ("cpu", "cuda"):
        env["JAX_PLATFORMS"] = device
    if device != "cpu":
        flags += f" --xla_gpu_autotune_level={GPU_AUTOTUNE_LEVEL}"
    env["XLA_FLAGS"] = flags
    return env


def gpu_autotune_level() -> int:
    """The level XLA was started with (its flag, else XLA's default)."""
    found = re.findall(r"--xla_gpu_autotune_level=(\d+)", os.environ.get("XLA_FLAGS", ""))
    return int(found[-1]) if found else GPU_AUTOTUNE_LEVEL


def cuda_devices() -> tuple[list[Any], str | None]:
    """JAX's CUDA devices, and JAX's own error when it has none."""
    import jax

    try:
        return jax.devices("cuda"), None
    except Exception as exc:  # noqa: BLE001 - JAX fails with RuntimeError or a bare assert, as it may
        return [], f"{type(exc).__name__}: {exc}".rstrip(": ")


def resolve_device(device: str, framework: str) -> str:
    if device == "cpu":
        return "cpu"
    devices, error = cuda_devices()
    plugins = [p for p in CUDA_PLUGINS if _installed(p)]
    why = error if plugins else f"no JAX CUDA plugin installed (jax {_version('jax')} runs on the CPU only)"
    return pick_device(device, bool(devices), framework, why)


def build_info() -> dict[str, Any]:
    plugins = [p for p in CUDA_PLUGINS if _installed(p)]
    info: dict[str, Any] = {"cuda": None, "cudnn": None, "gpus": [], "error": None}
    if not plugins:
        return info
    info["cuda"] = f"{plugins[0].split('-')[1][4:]} ({plugins[0]} {_version(plugins[0])})"
    devices, info["error"] = cuda_devices()
    info["gpus"] = [d.device_kind for d in devices]
    try:
        from jax._src.lib import cuda_versions  # the plugin's own version report

        info["cudnn"] = str(cuda_versions.cudnn_get_version()) if cuda_versions else None
    except Exception:  # noqa: BLE001 - a private module: the cuDNN version is optional
        pass
    return info


def device_busy(*trees: Any) -> bool | None:
    """Whether any array of ``trees`` is still being computed (False right after a real sync)."""
    import jax

    leaves = jax.tree.leaves(trees)
    if not leaves or next(iter(leaves[0].devices())).platform == "cpu":
        return None
    return not all(leaf.is_ready() for leaf in leaves)


def _installed(dist: str) -> bool:
    return _version(dist) is not None


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def peak_bytes(device: Any) -> int | None:
    """The device's peak allocation as JAX reports it; None on CPU, which reports none."""
    stats = device.memory_stats() if device.platform != "cpu" else None
    return stats.get("peak_bytes_in_use") if stats else None
