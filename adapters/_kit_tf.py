"""adapters.kit's TensorFlow helpers: start-up settings, devices, precision, tracing, peak memory, bf16.

Private: adapters import these names from ``adapters.kit``. Nothing here imports TensorFlow at
module level: each helper imports it, or takes it as an argument, when called (``adapters.kit``
must stay cheap to import).
"""

from __future__ import annotations

from typing import Any

from adapters._kit_common import _version
from adapters.base import pick_device


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
    # The GPU code the wheel ships ("sm_89", "compute_90" PTX): harness.running.kernel_jit reads it.
    archs = list(build.get("cuda_compute_capabilities") or []) if cuda else []
    return {"cuda": cuda, "cudnn": build.get("cudnn_version"), "gpus": names, "error": error, "kernel_archs": archs}


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
