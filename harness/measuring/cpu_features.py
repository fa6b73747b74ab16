"""What the CPU's flags say it can do natively, read from ``/proc/cpuinfo`` (no timing: a shared
machine's load cannot change the answer).

- x86: bfloat16 arithmetic with the ``avx512_bf16`` or ``amx_bf16`` instructions; arm64: with the
  ``bf16`` feature (ARMv8.6 BF16, ``Features`` in ``/proc/cpuinfo``).

The text itself is read and parsed in harness.env (``read_cpuinfo``, ``cpu_identity``), which the
machine fingerprint of env.json needs below this package.
"""

from __future__ import annotations

from harness.env import CPUINFO_ENV, cpuinfo_flags, cpuinfo_path, read_cpuinfo

__all__ = ["CPUINFO_ENV", "CPU_BF16_FLAGS", "cpu_bf16", "cpu_native_bf16"]

#: /proc/cpuinfo flags of bfloat16 arithmetic: x86 (AVX512-BF16, AMX-BF16), arm64 (FEAT_BF16).
CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")


def cpu_bf16(cpuinfo: str) -> tuple[bool, str]:
    """(native, what says so) from the text of ``/proc/cpuinfo``."""
    words = cpuinfo_flags(cpuinfo)
    found = [f for f in CPU_BF16_FLAGS if f in words]
    if found:
        return True, f"the CPU has {', '.join(found)}"
    return False, f"the CPU has no bfloat16 instructions ({' / '.join(CPU_BF16_FLAGS[:2])} not in /proc/cpuinfo flags)"


def cpu_native_bf16() -> tuple[bool | None, str]:
    """(native, why) for bfloat16 on this machine's CPU; None where its cpuinfo is unreadable."""
    text = read_cpuinfo()
    if text is None:
        return None, f"{cpuinfo_path()} is unreadable"
    return cpu_bf16(text)
