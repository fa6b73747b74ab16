"""What the CPU's flags say it can do natively, read from ``/proc/cpuinfo`` (no timing: a shared
machine's load cannot change the answer).

- x86: bfloat16 arithmetic with the ``avx512_bf16`` or ``amx_bf16`` instructions; arm64: with the
  ``bf16`` feature (ARMv8.6 BF16, ``Features`` in ``/proc/cpuinfo``).
"""

from __future__ import annotations

import os
from pathlib import Path

#: Where the CPU's flags are read; ``DLCOMPARE_CPUINFO`` names another file (a stand-in for tests,
#: or a cluster node's cpuinfo saved beside the run).
CPUINFO_ENV = "DLCOMPARE_CPUINFO"
#: /proc/cpuinfo flags of bfloat16 arithmetic: x86 (AVX512-BF16, AMX-BF16), arm64 (FEAT_BF16).
CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")


def cpu_bf16(cpuinfo: str) -> tuple[bool, str]:
    """(native, what says so) from the text of ``/proc/cpuinfo``."""
    words: set[str] = set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() in ("flags", "features"):
            words.update(value.split())
    found = [f for f in CPU_BF16_FLAGS if f in words]
    if found:
        return True, f"the CPU has {', '.join(found)}"
    return False, f"the CPU has no bfloat16 instructions ({' / '.join(CPU_BF16_FLAGS[:2])} not in /proc/cpuinfo flags)"


def cpu_native_bf16() -> tuple[bool | None, str]:
    """(native, why) for bfloat16 on this machine's CPU; None where its cpuinfo is unreadable."""
    path = Path(os.environ.get(CPUINFO_ENV, "/proc/cpuinfo"))
    try:
        return cpu_bf16(path.read_text())
    except OSError:
        return None, f"{path} is unreadable"
