"""The adapter-author API: what an adapter needs to run on the same footing as the built-in ones.

Every built-in adapter imports its shared helpers from here and from ``adapters.base`` only, so
these names are exercised by the whole test suite and cannot drift from what the harness expects.
A third-party adapter should use the same names; nothing else under ``adapters/`` is public (the
underscore modules hold model code private to their adapters).

Nothing here imports a framework at module level: each helper imports, or takes, the framework
it works on when called, so an adapter module that imports this one stays cheap to discover.

Sections, by the adapter method that uses them:

- ``resolve_device``: ``pick_device`` (shared rule), ``jax_resolve_device``,
  ``torch_resolve_device``, ``tf_resolve_device``; ``build_info``: ``jax_build_info``,
  ``torch_build_info``, ``tf_build_info``.
- ``worker_env``: ``threads_env`` (what ``Adapter.worker_env`` returns), ``jax_env``,
  ``tf_env``, ``keras_env``. Overriding ``worker_env`` replaces the base settings unless you
  merge them: ``{**super().worker_env(threads, device), **jax_env(threads, device)}``.
- ``setup``, precision (``options.tf32``): ``jax_precision``, ``torch_precision``,
  ``tf_precision``; placement: ``jax_place`` (committed device arrays; see its docstring).
- ``compile_stats``: ``JaxCompileEvents``, ``torch_compile_stats``, ``tf_compile_stats``.
- ``device_memory_peak``: ``jax_peak_bytes``, ``torch_peak_bytes``, ``tf_peak_bytes``.
- ``device_busy``: ``jax_device_busy``, ``torch_device_busy``.
- ``settings``: ``jax_settings``, ``torch_settings``.
- ``setup``, mixed precision (``options.bf16``): ``torch_autocast``, ``keras_policy``,
  ``tf_mixed_loss``, ``jax_mixed_loss``, ``flax_mixed_loss``; ``settings``: ``mixed_precision``.
- Canonical layouts: ``hwio_to_oihw``, ``oihw_to_hwio``, ``swap_rz_gates``; Adam:
  ``adam_eps_hat`` (the epsilon that makes an "epsilon before bias correction" kernel run the
  workloads' Algorithm 1), ``ADAM_BETA1``, ``ADAM_BETA2``, ``ADAM_EPS``.
"""

from __future__ import annotations

import functools
import importlib.metadata
import math
import os
import re
from collections import defaultdict
from typing import Any

import numpy as np

from adapters.base import Adapter, DeviceUnavailable, Options, no_cuda, pick_device
from workloads.optim import ADAM_BETA1, ADAM_BETA2, ADAM_EPS

__all__ = [
    "ADAM_BETA1",
    "ADAM_BETA2",
    "ADAM_EPS",
    "Adapter",
    "DeviceUnavailable",
    "JaxCompileEvents",
    "Options",
    "adam_eps_hat",
    "gpu_autotune_level",
    "hwio_to_oihw",
    "jax_build_info",
    "jax_device_busy",
    "jax_env",
    "jax_peak_bytes",
    "jax_place",
    "jax_precision",
    "jax_resolve_device",
    "jax_settings",
    "flax_mixed_loss",
    "jax_mixed_loss",
    "keras_env",
    "keras_policy",
    "mixed_precision",
    "no_cuda",
    "oihw_to_hwio",
    "pick_device",
    "swap_rz_gates",
    "tf_build_info",
    "tf_compile_stats",
    "tf_env",
    "tf_mixed_loss",
    "tf_peak_bytes",
    "tf_precision",
    "tf_resolve_device",
    "threads_env",
    "torch_build_info",
    "torch_compile_stats",
    "torch_autocast",
    "torch_device_busy",
    "torch_peak_bytes",
    "torch_precision",
    "torch_resolve_device",
    "torch_settings",
]

# --------------------------------------------------------------------------- worker environments


def threads_env(threads: int) -> dict[str, str]:
    """OpenMP/MKL pool sizes: the base of every adapter's ``worker_env``."""
    return {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}


#: XLA's default GPU autotuning level, stated explicitly so every cell records what it ran with.
GPU_AUTOTUNE_LEVEL = 4


def jax_env(threads: int, device: str) -> dict[str, str]:
    """What XLA reads only at start-up: the platform the cell asked for (``JAX_PLATFORMS``, so a
    broken CUDA plugin fails with its own error instead of falling back to the CPU), GPU memory
    allocated on demand (``XLA_PYTHON_CLIENT_PREALLOCATE=false``: honest memory figures), the CPU
    thread pool sized like every other framework's, and GPU autotuning at an explicit level."""
    flags = f"--xla_cpu_multi_thread_eigen=true intra_op_parallelism_threads={threads}"
    env = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    if device in ("cpu", "cuda"):
        env["JAX_PLATFORMS"] = device
    if device != "cpu":
        flags += f" --xla_gpu_autotune_level={GPU_AUTOTUNE_LEVEL}"
    env["XLA_FLAGS"] = flags
    return env


def tf_env(threads: int, device: str) -> dict[str, str]:
    """TensorFlow's start-up settings: its intra-op pool, GPU memory growth (honest memory
    figures), cuDNN autotuning stated, and a log level that keeps CUDA loading warnings visible
    on GPU cells (they name the library TensorFlow could not load)."""
    return {
        "TF_NUM_INTRAOP_THREADS": str(threads),
        "TF_CPP_MIN_LOG_LEVEL": "2" if device == "cpu" else "1",
        "TF_FORCE_GPU_ALLOW_GROWTH": "true",
        "TF_CUDNN_USE_AUTOTUNE": "1",
    }


def keras_env(backend: str, threads: int, device: str) -> dict[str, str]:
    """Keras picks its backend once per process (``KERAS_BACKEND``), plus that backend's own
    start-up settings (torch needs none beyond ``threads_env``)."""
    extra = {"jax": jax_env, "tensorflow": tf_env}.get(backend)
    return {**(extra(threads, device) if extra else {}), "KERAS_BACKEND": backend}


# --------------------------------------------------------------------------------------- JAX


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

    def _on_event(self, event: str, duration: float, **_: Any) -> None:
        self._events[event].append(duration)

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
        "matmul_precision": jax.config.jax_default_matmul_precision,
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "gpu_autotune_level": gpu_autotune_level(),
    }


# ------------------------------------------------------------------------------------- PyTorch


def torch_build_info() -> dict[str, Any]:
    """``build_info`` for a torch-based adapter (``torch.cuda.init``'s own error included)."""
    import torch

    info: dict[str, Any] = {"cuda": torch.version.cuda, "cudnn": None, "gpus": [], "error": None}
    if torch.version.cuda is None:
        return info
    try:
        torch.cuda.init()  # raises with torch's own reason (driver too old, no device, ...)
        info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        v = torch.backends.cudnn.version()
        info["cudnn"] = f"{v // 10000}.{v // 100 % 100}.{v % 100}" if v else None
    except Exception as exc:  # noqa: BLE001 - the message is the diagnosis
        info["error"] = f"{type(exc).__name__}: {exc}"
    return info


def torch_resolve_device(device: str, framework: str = "torch") -> str:
    """``resolve_device`` for a torch-based adapter; ``framework`` names it in the error."""
    import torch

    if device == "cpu" or torch.cuda.is_available():
        return pick_device(device, torch.cuda.is_available(), framework)
    build = torch_build_info()
    why = build["error"] or (f"torch {torch.__version__} is a CPU-only build" if build["cuda"] is None else None)
    return pick_device(device, False, framework, why)


def torch_precision(torch: Any, tf32: bool) -> None:
    """Equal footing with the other frameworks: TF32 only where the run asks for it (PyTorch's
    per-backend ``fp32_precision`` API), and cuDNN autotuning on, as TensorFlow's and XLA's are
    by default. Call ``torch.set_num_threads(options.threads)`` beside it."""
    precision = "tf32" if tf32 else "ieee"
    torch.backends.cuda.matmul.fp32_precision = precision
    torch.backends.cudnn.conv.fp32_precision = precision
    torch.backends.cudnn.rnn.fp32_precision = precision
    torch.backends.cudnn.benchmark = True


def torch_settings(torch: Any) -> dict[str, Any]:
    """The settings as torch reports them back, for ``settings()``."""
    return {
        "fp32_precision_matmul": torch.backends.cuda.matmul.fp32_precision,
        "fp32_precision_conv": torch.backends.cudnn.conv.fp32_precision,
        "cudnn_autotune": torch.backends.cudnn.benchmark,
        "intra_op_threads": torch.get_num_threads(),
    }


def torch_device_busy(torch: Any, device: Any) -> bool | None:
    """``device_busy``: whether the device's current stream still has queued work."""
    if torch.device(device).type != "cuda":
        return None
    return not torch.cuda.current_stream(device).query()


def torch_peak_bytes(torch: Any, device: Any) -> int | None:
    """``device_memory_peak``: torch's peak allocation on a CUDA device; None on CPU."""
    return torch.cuda.max_memory_allocated(device) if torch.device(device).type == "cuda" else None


def torch_compile_stats() -> dict[str, Any]:
    """``compile_stats`` for ``torch.compile``: frames TorchDynamo traced, graphs it compiled,
    seconds spent compiling (its own counters, cumulative for the process)."""
    from torch._dynamo.utils import compilation_time_metrics, counters

    seconds = compilation_time_metrics.get("_compile.compile_inner", [])
    return {
        "traces": int(counters["frames"].get("ok", 0)),
        "compiles": int(counters["stats"].get("unique_graphs", 0)),
        "compile_s": float(sum(seconds)),
    }


# ---------------------------------------------------------------------------------- TensorFlow


def tf_build_info() -> dict[str, Any]:
    """``build_info`` for a TensorFlow-based adapter."""
    import tensorflow as tf

    build = tf.sysconfig.get_build_info()
    cuda = build.get("cuda_version") if build.get("is_cuda_build") else None
    gpus = tf.config.list_physical_devices("GPU")
    names = [tf.config.experimental.get_device_details(g).get("device_name", g.name) for g in gpus]
    error = None
    if cuda and not gpus:
        error = "TensorFlow's CUDA build found no usable GPU; its log (stderr) names what it could not load"
    return {"cuda": cuda, "cudnn": build.get("cudnn_version"), "gpus": names, "error": error}


def tf_resolve_device(device: str, framework: str = "tensorflow") -> str:
    """``resolve_device`` for a TensorFlow-based adapter."""
    if device == "cpu":
        return "cpu"
    build = tf_build_info()
    cpu_only = f"tensorflow {_version('tensorflow') or _version('tensorflow-cpu')} is a CPU-only build"
    why = build["error"] or (None if build["cuda"] else cpu_only)
    return pick_device(device, bool(build["gpus"]), framework, why)


def tf_precision(tf: Any, tf32: bool, threads: int) -> None:
    """TF32 as ``options.tf32`` says, and the intra-op pool (also set by ``tf_env``; setting it
    here makes it readable back once the runtime has started)."""
    tf.config.experimental.enable_tensor_float_32_execution(tf32)
    try:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
    except RuntimeError:
        pass  # the runtime is already initialised with TF_NUM_INTRAOP_THREADS


def tf_compile_stats(functions: list[Any], trace_s: float | None = None) -> dict[str, Any]:
    """``compile_stats`` for ``tf.function``s: their tracing count (TensorFlow exposes no
    compile count; Grappler's optimisation lands in the first call), and the seconds spent
    tracing when the adapter measured them."""
    stats: dict[str, Any] = {"traces": sum(int(f.experimental_get_tracing_count()) for f in functions)}
    if trace_s is not None:
        stats["compile_s"] = trace_s
    return stats


def tf_peak_bytes(tf: Any, device: str) -> int | None:
    """``device_memory_peak``: TensorFlow's peak on ``"cuda"`` (its GPU:0); None on CPU."""
    return int(tf.config.experimental.get_memory_info("GPU:0")["peak"]) if device == "cuda" else None


# ------------------------------------------------------------------ canonical layouts, optimisers


def hwio_to_oihw(kernel: np.ndarray) -> np.ndarray:
    """A canonical conv kernel (H, W, in, out) in PyTorch's (out, in, H, W) order."""
    return np.ascontiguousarray(kernel.transpose(3, 2, 0, 1))


def oihw_to_hwio(kernel: np.ndarray) -> np.ndarray:
    """The inverse of ``hwio_to_oihw``."""
    return np.ascontiguousarray(kernel.transpose(2, 3, 1, 0))


def swap_rz_gates(a: np.ndarray) -> np.ndarray:
    """GRU gate blocks along the last axis, canonical (r, z, n) <-> Keras's (z, r, n); the swap
    is its own inverse."""
    r, z, n = np.split(a, 3, axis=-1)
    return np.concatenate([z, r, n], axis=-1)


def adam_eps_hat(step: int) -> float:
    """The epsilon that makes an Adam kernel adding epsilon *before* the bias correction (Keras,
    TensorFlow's ``ResourceApplyAdam``) run the workloads' Algorithm 1 at ``step`` (1-based):
    ``eps * sqrt(1 - beta2^step)``. optax's and torch's Adam need no correction."""
    return ADAM_EPS * math.sqrt(1.0 - ADAM_BETA2**step)


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


# ------------------------------------------------------------ mixed precision (``--precision bf16``)
#
# ``options.bf16``: float32 master weights and optimiser state, bfloat16 compute in the training
# step's forward and backward, loss in float32. Each framework's own mechanism, applied to the
# whole step or model, never layer by layer, so a new workload family gets it with no edit:
#
# - PyTorch: ``torch.autocast(device_type, dtype=torch.bfloat16)`` around forward and loss
#   (``torch_autocast``); the backward runs outside it, as torch's AMP docs teach.
# - Keras: the ``mixed_bfloat16`` dtype policy, set before the model's layers are built
#   (``keras_policy``): float32 variables, bfloat16 layer compute, losses in float32.
# - TensorFlow without Keras: mixed-precision *policies* are a Keras concept (TensorFlow's mixed
#   precision guide is ``tf.keras.mixed_precision``); a raw-TF step casts explicitly
#   (``tf_mixed_loss``): the variables and float inputs to bfloat16 at the loss function's
#   entry, the loss back to float32; gradients flow through the casts into the float32 variables.
# - JAX and Flax: the same explicit casts (``jax_mixed_loss``, ``flax_mixed_loss``), the usual way
#   in JAX (jmp, the "mixed precision" pattern of the JAX/Flax docs). nnx layers take
#   ``dtype``/``param_dtype`` arguments, but only layer by layer; casting the module's state at the
#   loss's entry does the same for every layer of every family.
#
# ``MIXED_PRECISION`` names each mechanism as records keep it (settings()["mixed_precision"]).

MIXED_PRECISION = {
    "torch": "torch.autocast(bfloat16) around forward and loss; float32 master weights, backward outside autocast",
    "keras": "keras.mixed_precision policy mixed_bfloat16 (float32 variables, bfloat16 compute, float32 loss)",
    "tensorflow": "explicit tf.cast of variables and float inputs to bfloat16 at the loss's entry, float32 "
    "loss; float32 variables and optimiser slots (no Keras policy in a raw-TF step)",
    "jax": "explicit astype(bfloat16) of the parameter tree and float inputs at the loss's entry, float32 "
    "loss; float32 master parameters and optax state",
    "flax": "explicit astype(bfloat16) of the nnx module's state and float inputs at the loss's entry "
    "(nnx.split/merge), float32 loss; float32 nnx.Param and optax state",
}


def mixed_precision(framework: str, options: Options) -> str:
    """``settings()["mixed_precision"]``: the mechanism that ran (``MIXED_PRECISION``), or "off"."""
    return MIXED_PRECISION[framework] if options.bf16 else "off"


def torch_autocast(torch: Any, device: Any, enabled: bool) -> Any:
    """The context to run forward and loss in: bfloat16 autocast on ``device``'s type when
    ``enabled`` (``options.bf16``), a no-op otherwise."""
    return torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16, enabled=enabled)


def keras_policy(keras: Any, bf16: bool) -> str:
    """Set Keras's global dtype policy for the model about to be built (``mixed_bfloat16`` or
    ``float32``) and return its name. Set it on every ``setup``: the policy is global to the
    process, and a conformance worker builds fp32 and bf16 models one after another."""
    name = "mixed_bfloat16" if bf16 else "float32"
    keras.mixed_precision.set_global_policy(name)
    return name


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


def tf_mixed_loss(tf: Any, build: Any, variables: dict[str, Any], enabled: bool) -> Any:
    """The loss ``build(params)`` returns (a function of the batch, reading ``params[name]`` when
    called), computing in bfloat16 when ``enabled``: each call reads the float32 ``variables``
    cast to bfloat16 and the batch's float tensors cast, and returns the loss as float32."""
    if not enabled:
        return build(variables)
    view = dict(variables)
    loss = build(view)

    def mixed(batch: dict[str, Any]) -> Any:
        view.update({k: tf.cast(v, tf.bfloat16) for k, v in variables.items()})
        cast = {k: tf.cast(x, tf.bfloat16) if x.dtype.is_floating else x for k, x in batch.items()}
        return tf.cast(loss(cast), tf.float32)

    return mixed
