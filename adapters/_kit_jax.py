"""adapters.kit's JAX helpers (Flax's included): start-up settings, devices, compiles, placement, bf16.

Private: adapters import these names from ``adapters.kit``. Nothing here imports JAX at module
level: each helper imports it, or takes it as an argument, when called (``adapters.kit`` must
stay cheap to import).
"""

from __future__ import annotations

import functools
import os
import re
from collections import defaultdict
from typing import Any

from adapters._kit_common import _version, shared_compile_cache, suite_compile_cache
from adapters.base import pick_device

#: XLA's default GPU autotuning level, stated explicitly so every cell records what it ran with.
GPU_AUTOTUNE_LEVEL = 4
#: Seconds of XLA compile from which a run's cache of a cell (harness.running.turns) keeps an executable.
RUN_CACHE_MIN_COMPILE_S = 0.1


def jax_env(threads: int, device: str) -> dict[str, str]:
    """What XLA reads only at start-up: the platform the cell asked for (``JAX_PLATFORMS``, so a
    broken CUDA plugin fails with its own error instead of falling back to the CPU), GPU memory
    allocated on demand (``XLA_PYTHON_CLIENT_PREALLOCATE=false``: honest memory figures), the CPU
    thread pool sized like every other framework's, GPU autotuning at an explicit level, and the
    persistent compilation cache off (``JAX_ENABLE_COMPILATION_CACHE``) even where a user set a
    cache folder: compiles are cold (a cache hit still fires ``backend_compile``, with the
    seconds of reading the cache, so ``JaxCompileEvents`` would report a compile that took none).
    Under SHARED_COMPILE_CACHE (the test suite) or a run's cache of the cell (RUN_COMPILE_CACHE,
    harness.running.turns: empty for its first process) the cache is on, in that folder."""
    flags = f"--xla_cpu_multi_thread_eigen=true intra_op_parallelism_threads={threads}"
    env = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false", "JAX_ENABLE_COMPILATION_CACHE": "false"}
    folder = shared_compile_cache("jax")
    if folder:
        env.update(JAX_ENABLE_COMPILATION_CACHE="true", JAX_COMPILATION_CACHE_DIR=folder)
        # the suite's compiles are small, all cached; a run caches those of RUN_CACHE_MIN_COMPILE_S
        # or more: a jitted step's compiles (rnn-caption's, one per length, take 0.5-2 s on a 2-core
        # VM, under JAX's default 1 s), not jax-eager's hundreds of per-op ones, whose writing would
        # lengthen the cold first process's window
        env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = (
            "0" if suite_compile_cache() else str(RUN_CACHE_MIN_COMPILE_S)
        )
    if device in ("cpu", "cuda"):
        env["JAX_PLATFORMS"] = device
    if device != "cpu":
        flags += f" --xla_gpu_autotune_level={GPU_AUTOTUNE_LEVEL}"
    env["XLA_FLAGS"] = flags
    return env


class JaxCompileEvents:
    """Counts JAX's traces and backend compiles from ``jax.monitoring`` duration events, with
    their seconds (tracing, lowering to MLIR, XLA compile). Create it in ``setup`` before the
    first jitted call and return ``stats()`` from ``compile_stats``: the counts are cumulative,
    as the harness expects. Every jitted function of the process is counted, eager JAX ops
    included (each op is compiled once per shape)."""

    def __init__(self) -> None:
        import jax

        self._events: dict[str, list[float]] = defaultdict(list)
        jax.monitoring.register_event_duration_secs_listener(self._on_event)

    def _on_event(self, event: str, duration_secs: float, **_: Any) -> None:
        self._events[event].append(duration_secs)

    def _durations(self, event: str) -> list[float]:
        return self._events.get(f"/jax/core/compile/{event}_duration", [])

    def stats(self) -> dict[str, Any]:
        """``{"traces", "compiles", "compile_s"}``, cumulative since construction."""
        traces, lowers = self._durations("jaxpr_trace"), self._durations("jaxpr_to_mlir_module")
        compiles = self._durations("backend_compile")
        return {"traces": len(traces), "compiles": len(compiles), "compile_s": float(sum(traces + lowers + compiles))}


def jax_precision(tf32: bool) -> str:
    """Set JAX's default matmul precision for ``options.tf32`` and return it: "highest" keeps
    float32 matmuls and convolutions in full precision on GPU (TF32 off); "tensorfloat32"
    allows TF32, as ``--precision tf32`` does in every framework."""
    import jax

    value = "tensorfloat32" if tf32 else "highest"
    jax.config.update("jax_default_matmul_precision", value)
    return value


def jax_place(tree: Any, device: Any) -> Any:
    """``tree``'s arrays placed on ``device`` (a ``jax.Device``, or "cpu"/"cuda"), committed, and
    ready. Place the initial state this way, not with ``jnp.asarray``: an uncommitted array and
    the committed output of a jitted step are different inputs to ``jax.jit``'s cache, so a step
    fed its own outputs compiles a second time on step 2 (``harness check`` fails that)."""
    import jax

    if isinstance(device, str):
        device = jax.devices(device)[0]
    return jax.block_until_ready(jax.device_put(tree, device))


CUDA_PLUGINS = ("jax-cuda13-plugin", "jax-cuda12-plugin")


def _jax_cuda_devices() -> tuple[list[Any], str | None]:
    """JAX's CUDA devices, and JAX's own error when it has none."""
    import jax

    try:
        return jax.devices("cuda"), None
    except Exception as exc:  # noqa: BLE001 - JAX fails with RuntimeError or a bare assert, as it may
        return [], f"{type(exc).__name__}: {exc}".rstrip(": ")


def jax_resolve_device(device: str, framework: str = "jax") -> str:
    """``resolve_device`` for a JAX-based adapter; ``framework`` names it in the error."""
    if device == "cpu":
        return "cpu"
    devices, error = _jax_cuda_devices()
    plugins = [p for p in CUDA_PLUGINS if _version(p)]
    why = error if plugins else f"no JAX CUDA plugin installed (jax {_version('jax')} runs on the CPU only)"
    return pick_device(device, bool(devices), framework, why)


def jax_build_info() -> dict[str, Any]:
    """``build_info`` for a JAX-based adapter: the CUDA plugin, cuDNN, the GPUs JAX sees."""
    plugins = [p for p in CUDA_PLUGINS if _version(p)]
    info: dict[str, Any] = {"cuda": None, "cudnn": None, "gpus": [], "error": None}
    if not plugins:
        return info
    info["cuda"] = f"{plugins[0].split('-')[1][4:]} ({plugins[0]} {_version(plugins[0])})"
    devices, info["error"] = _jax_cuda_devices()
    info["gpus"] = [d.device_kind for d in devices]
    try:
        from jax._src.lib import cuda_versions  # the plugin's own version report

        info["cudnn"] = str(cuda_versions.cudnn_get_version()) if cuda_versions else None
    except Exception:  # noqa: BLE001 - a private module: the cuDNN version is optional
        pass
    return info


def jax_device_busy(*trees: Any) -> bool | None:
    """``device_busy``: whether any array of ``trees`` is still being computed (False right
    after a real sync); None on the CPU, where JAX cannot tell."""
    import jax

    leaves = jax.tree.leaves(trees)
    if not leaves or next(iter(leaves[0].devices())).platform == "cpu":
        return None
    return not all(leaf.is_ready() for leaf in leaves)


def jax_peak_bytes(device: Any) -> int | None:
    """``device_memory_peak``: the device's peak allocation as JAX reports it; None on CPU."""
    stats = device.memory_stats() if device.platform != "cpu" else None
    return stats.get("peak_bytes_in_use") if stats else None


def gpu_autotune_level() -> int:
    """The XLA GPU autotuning level this process started with (its flag, else XLA's default)."""
    found = re.findall(r"--xla_gpu_autotune_level=(\d+)", os.environ.get("XLA_FLAGS", ""))
    return int(found[-1]) if found else GPU_AUTOTUNE_LEVEL


def jax_settings() -> dict[str, Any]:
    """The JAX settings every JAX-based cell records."""
    import jax

    return {
        "matmul_precision": jax.config.jax_default_matmul_precision,  # type: ignore[attr-defined]
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "gpu_autotune_level": gpu_autotune_level(),
        "persistent_compile_cache": bool(jax.config.jax_enable_compilation_cache),  # type: ignore[attr-defined]
        "persistent_cache_min_compile_s": float(
            jax.config.jax_persistent_cache_min_compile_time_secs  # type: ignore[attr-defined]
        ),
    }


# ------------------------------------------------------------ mixed precision (``--precision bf16``)


def _to_bf16(jnp: Any, a: Any) -> Any:
    return a.astype(jnp.bfloat16) if jnp.issubdtype(a.dtype, jnp.floating) else a


def jax_mixed_loss(loss: Any, enabled: bool) -> Any:
    """``loss(params, batch)`` computing in bfloat16 when ``enabled``: the parameter tree and the
    batch's float arrays cast at entry, the loss returned as float32; gradients with respect to
    the float32 parameters come back float32 through the casts."""
    if not enabled:
        return loss
    import jax
    import jax.numpy as jnp

    def mixed(params: Any, batch: Any) -> Any:
        cast = functools.partial(_to_bf16, jnp)
        return loss(jax.tree.map(cast, params), jax.tree.map(cast, batch)).astype(jnp.float32)

    return mixed


def flax_mixed_loss(nnx: Any, loss: Any, enabled: bool) -> Any:
    """``loss(model, batch)`` for an nnx module, computing in bfloat16 when ``enabled``: the
    module's state cast (``nnx.split``, cast, ``nnx.merge``) and the batch's float arrays cast at
    entry, the loss returned as float32. A layer that fixed its computation ``dtype`` when built
    (``nnx.Embed`` takes its table's, float32) computes in bfloat16 in that copy too, or it would
    promote everything after it back to float32."""
    if not enabled:
        return loss
    import jax
    import jax.numpy as jnp

    def mixed(model: Any, batch: Any) -> Any:
        cast = functools.partial(_to_bf16, jnp)
        graphdef, state = nnx.split(model)
        mixed_model = nnx.merge(graphdef, jax.tree.map(cast, state))
        for _, node in nnx.iter_graph(mixed_model):
            if isinstance(node, nnx.Module) and getattr(node, "dtype", None) is not None:
                node.dtype = jnp.bfloat16
        return loss(mixed_model, jax.tree.map(cast, batch)).astype(jnp.float32)

    return mixed
