"""Whether a cell's precision runs natively on its device, known in the parent before any worker.

``--precision bf16`` times bfloat16 compute (adapters.kit, mixed-precision section). Where the
device has no bfloat16 arithmetic the frameworks emulate it, and a timing then measures the
emulation (a 2048^3 bfloat16 matmul in torch ran at 0.3 GFLOP/s against 86 in float32 on a CPU
without it): such a cell is *skipped* with that reason unless the run forces it
(``--force-precision``). The conformance checks still check bfloat16 correctness there.

- x86 CPU: native with the ``avx512_bf16`` or ``amx_bf16`` instructions (``/proc/cpuinfo`` flags);
  arm64: with the ``bf16`` feature (ARMv8.6 BF16, ``Features`` in ``/proc/cpuinfo``).
- NVIDIA GPU: native from compute capability 8.0 (Ampere), as ``nvidia-smi --query-gpu=compute_cap``
  reports it (the capability ``torch.cuda.get_device_capability`` returns).

Inference workloads (``task`` other than ``train``) have no bf16 path: the mechanisms wrap the
training step's loss, so a bf16 decode cell would time float32; it is skipped, forced or not.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from typing import Any

from harness.measuring.cpu_features import cpu_native_bf16
from harness.measuring.gpu_util import cell_gpu
from harness.records import Cell

#: The first NVIDIA compute capability with bfloat16 tensor-core arithmetic (Ampere).
CUDA_BF16_CAPABILITY = (8, 0)
FORCE_HINT = "force it with --force-precision (make bench FORCE=1) to time the emulation"


def cuda_bf16(capability: tuple[int, int] | None, name: str = "the GPU") -> tuple[bool | None, str]:
    """(native, what says so) for a GPU of compute ``capability``; None when it is unknown."""
    if capability is None:
        return None, f"the compute capability of {name} is unknown"
    cc = ".".join(map(str, capability))
    if tuple(capability) >= CUDA_BF16_CAPABILITY:
        return True, f"{name} has compute capability {cc}"
    need = ".".join(map(str, CUDA_BF16_CAPABILITY))
    return False, f"{name} has compute capability {cc}, below {need} (no bfloat16 arithmetic)"


def parse_compute_cap(text: str) -> tuple[tuple[int, int] | None, str]:
    """(capability, GPU name) from ``nvidia-smi --query-gpu=compute_cap,name --format=csv,noheader``
    output (its first line)."""
    first = text.strip().splitlines()[0] if text.strip() else ""
    cap, _, name = first.partition(",")
    try:
        major, minor = (int(part) for part in cap.strip().split("."))
    except ValueError:
        return None, name.strip() or "the GPU"
    return (major, minor), name.strip() or "the GPU"


def query_compute_cap() -> tuple[tuple[int, int] | None, str]:
    """The cell's GPU's compute capability and name, from nvidia-smi; (None, why) if unreadable."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None, "the GPU (no nvidia-smi)"
    kind, gpu = cell_gpu()
    try:
        out = subprocess.run(
            [exe, "--query-gpu=compute_cap,name", "--format=csv,noheader", f"--id={gpu}"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"the GPU (nvidia-smi failed: {exc})"
    return parse_compute_cap(out.stdout) if out.returncode == 0 else (None, f"GPU {kind} {gpu}")


def native(precision: str, device: str) -> tuple[bool | None, str]:
    """(native, why) for ``precision`` on this machine's ``device``; fp32/tf32 are always native."""
    if precision != "bf16":
        return True, f"{precision} is native everywhere"
    if device == "cpu":
        return cpu_native_bf16()
    return _cuda_native()


@functools.cache  # one nvidia-smi call per process, not one per cell
def _cuda_native() -> tuple[bool | None, str]:
    return cuda_bf16(*query_compute_cap())


def skip_reason(cell: Cell, spec: Any) -> str | None:
    """Why a cell's precision makes it a skipped cell, or None. A bf16 inference cell is
    skipped (no bf16 path); a bf16 cell on a device without bfloat16 arithmetic is skipped
    unless the cell is forced (``force_precision``). Unknown support (no /proc/cpuinfo, a GPU
    nvidia-smi cannot describe) runs: the record says what ran."""
    precision = cell.get("precision", "fp32")
    if precision != "bf16":
        return None
    if spec.task != "train":
        return f"bf16 applies to training steps (the loss function); {spec.name}'s inference step runs float32"
    if cell.get("force_precision"):
        return None
    ok, why = native(precision, cell["device_requested"])
    if ok is False:
        return f"bf16 is emulated here, not native: {why}; timing it would time the emulation ({FORCE_HINT})"
    return None
