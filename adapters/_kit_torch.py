"""adapters.kit's PyTorch helpers: devices, precision and settings, busy and peak memory, compiles, autocast.

Private: adapters import these names from ``adapters.kit``. Nothing here imports torch at module
level: each helper imports it, or takes it as an argument, when called (``adapters.kit`` must
stay cheap to import).
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

from adapters._kit_common import shared_compile_cache
from adapters.base import pick_device


def torch_build_info() -> dict[str, Any]:
    """``build_info`` for a torch-based adapter (``torch.cuda.init``'s own error included)."""
    import torch

    info: dict[str, Any] = {"cuda": torch.version.cuda, "cudnn": None, "gpus": [], "error": None}
    if torch.version.cuda is None:
        return info
    info["kernel_archs"] = torch.cuda.get_arch_list()  # the GPU code the wheel ships (harness.running.kernel_jit)
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


def torch_env(threads: int, device: str) -> dict[str, str]:
    """What ``torch.compile`` reads at start-up: Inductor's caches off, so every compile is cold as
    on a fresh machine. Its on-disk FX-graph, AOTAutograd and autotune caches (under /tmp) outlive
    a run and would make the next run's compile several times cheaper than a user's first (a
    small MLP's first compiled training step on the 2-core CI VM: 10.6 s with them off, 1.5 s
    with them warm). Under SHARED_COMPILE_CACHE (the test suite) or a run's cache of the cell
    (RUN_COMPILE_CACHE, empty for its first process) they are on, in that folder.
    Triton's kernel cache (GPU) is not Inductor's to disable: it lives under Inductor's default
    folder in /tmp and outlives a run, so it gets the cell's folder too, or where compiles are
    cold an empty folder of its own per worker.
    ``threads`` and ``device`` change nothing: the signature is every ``*_env``'s."""
    folder = shared_compile_cache("inductor")
    if folder:
        return {"TORCHINDUCTOR_CACHE_DIR": folder, "TRITON_CACHE_DIR": os.path.join(folder, "triton")}
    cold = tempfile.mkdtemp(prefix="dlcompare-triton-cold-")
    return {"TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1", "TRITON_CACHE_DIR": cold}


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


def torch_autocast(torch: Any, device: Any, enabled: bool) -> Any:
    """The context to run forward and loss in: bfloat16 autocast on ``device``'s type when
    ``enabled`` (``options.bf16``), a no-op otherwise."""
    return torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16, enabled=enabled)
