"""Why a cell could not use the GPU it asked for: the three cases a user must tell apart.

- The machine has no NVIDIA GPU: ``skipped`` (nothing to fix).
- It has one, but the installed build of the framework is CPU-only: ``failed``, with the
  command that installs the GPU variant.
- A GPU build that cannot start (driver too old, a library missing): ``failed``, with the
  framework's own message.
"""

from __future__ import annotations

import os
from typing import Any

from harness.install import variant


def no_gpu_reason(device: str) -> str | None:
    """For a cell asking for ``device``: the skip reason when it is "cuda" and this machine has
    no NVIDIA driver (nvidia-smi), as the worker would record it; None otherwise. Starts no
    framework: whether a framework can use a GPU that is present is known only in its worker."""
    if device != "cuda":
        return None
    machine = variant.detect()
    return f"no NVIDIA GPU on this machine ({machine.reason})" if machine.driver is None else None


def verdict(adapter: Any, message: str) -> tuple[str, str]:
    """(status, reason) for a cell whose adapter raised DeviceUnavailable with ``message``."""
    no_gpu = no_gpu_reason("cuda")
    if no_gpu:
        return "skipped", no_gpu
    machine = variant.detect()
    try:
        build = adapter.build_info()
    except Exception as exc:  # noqa: BLE001 - the build query itself may fail to start
        build = {"error": f"{type(exc).__name__}: {exc}"}
    where = f"this machine has an NVIDIA GPU (driver {machine.driver})"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        where += f", CUDA_VISIBLE_DEVICES={visible!r}"
    if build and "cuda" in build and build["cuda"] is None:
        if machine.variant == "cpu":
            fix = f"{machine.reason}: update the NVIDIA driver, then make install"
        else:
            fix = f"install the GPU variant: {variant.INSTALL_HINT.format(variant=machine.variant)}"
        installed = variant.installed() or "unknown"
        return "failed", f"{message}; {where}, but the installed build is CPU-only (variant {installed}); {fix}"
    return "failed", f"{message}; {where}"
