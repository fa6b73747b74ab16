"""Helpers shared by the torch-based adapters (torch-eager, torch-compile, keras-torch): the
build and device check, the precision and autotune settings every torch cell applies the same
way, and the GPU sync check."""

from __future__ import annotations

from typing import Any

from adapters.base import pick_device


def build_info() -> dict[str, Any]:
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


def resolve_device(device: str, framework: str) -> str:
    import torch

    if device == "cpu" or torch.cuda.is_available():
        return pick_device(device, torch.cuda.is_available(), framework)
    build = build_info()
    why = build["error"] or (f"torch {torch.__version__} is a CPU-only build" if build["cuda"] is None else None)
    return pick_device(device, False, framework, why)


def apply_settings(torch: Any, tf32: bool) -> None:
    """Equal footing with the other frameworks: TF32 only where the run asks for it (PyTorch's
    current per-backend precision API), and cuDNN autotuning on, as TensorFlow's and XLA's are
    by default."""
    precision = "tf32" if tf32 else "ieee"
    torch.backends.cuda.matmul.fp32_precision = precision
    torch.backends.cudnn.conv.fp32_precision = precision
    torch.backends.cudnn.rnn.fp32_precision = precision
    torch.backends.cudnn.benchmark = True


def settings(torch: Any) -> dict[str, Any]:
    """The settings as torch reports them back."""
    return {
        "fp32_precision_matmul": torch.backends.cuda.matmul.fp32_precision,
        "fp32_precision_conv": torch.backends.cudnn.conv.fp32_precision,
        "cudnn_autotune": torch.backends.cudnn.benchmark,
        "intra_op_threads": torch.get_num_threads(),
    }


def device_busy(torch: Any, device: Any) -> bool | None:
    """Whether the device's current stream still has queued work (False right after a real sync)."""
    if torch.device(device).type != "cuda":
        return None
    return not torch.cuda.current_stream(device).query()
