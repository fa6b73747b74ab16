"""The run's environment, captured in the parent without importing any framework."""

from __future__ import annotations

import functools
import importlib.metadata
import os
import platform
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import psutil

PACKAGES = ("numpy", "torch", "tensorflow", "tensorflow-cpu", "keras", "jax", "jaxlib", "optax", "pandas")


def _run(cmd: list[str]) -> str | None:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


#: Where the CPU's flags are read; ``DLCOMPARE_CPUINFO`` names another file (a stand-in for tests,
#: or a cluster node's cpuinfo saved beside the run).
CPUINFO_ENV = "DLCOMPARE_CPUINFO"

#: The flags the frameworks' CPU kernels (oneDNN, XLA, Eigen, MKL, OpenBLAS) dispatch on: x86
#: vector and matrix extensions (every AVX-512 subset, AMX, AVX-VNNI, FMA, F16C), arm64 SIMD, SVE,
#: SME and the dot-product and bfloat16 features. Others (``constant_tsc``, ``nopl``) vary between
#: hypervisors without changing a kernel, and would call two like machines different.
KERNEL_FLAGS = re.compile(
    r"(avx.*|amx.*|fma|fma4|f16c|sse4_1|sse4_2|sse4a|xop"  # x86
    r"|asimd.*|sve.*|sme(\d.*|[a-z]\d.*|fa64|_.*)?|bf16|i8mm|fphp|dotprod|ebf16)"  # arm64 (not x86 smep)
)

#: cpuinfo keys of one CPU's identity: x86 (``vendor_id``, ...) and arm64 (``CPU implementer``,
#: ...), each under the fingerprint's name. arm64's variant and revision make its stepping.
_X86_KEYS = {"vendor_id": "vendor", "cpu family": "family", "model": "model", "stepping": "stepping"}
_ARM_KEYS = {"cpu implementer": "vendor", "cpu architecture": "family", "cpu part": "model"}


def _first_block(cpuinfo: str) -> dict[str, str]:
    """The first processor's ``key: value`` lines (keys lower-cased), up to the blank line that
    ends its block: the other CPUs of a machine read the same."""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        if not line.strip() and fields:
            break
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip().lower(), value.strip())
    return fields


def cpuinfo_flags(cpuinfo: str) -> set[str]:
    """Every word of the ``flags`` (x86) and ``Features`` (arm64) lines of a cpuinfo text."""
    words: set[str] = set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() in ("flags", "features"):
            words.update(value.split())
    return words


def _number(text: str | None) -> int | str | None:
    """cpuinfo's decimal numbers as ints (x86 family 25, model 17); others (arm64's 0xd40) as written."""
    if text is None or text == "":
        return None
    return int(text) if text.isdigit() else text


def cpu_identity(cpuinfo: str) -> dict[str, Any]:
    """The CPU as the text of ``/proc/cpuinfo`` names it: ``vendor``, ``family``, ``model``,
    ``stepping``, ``model_name``, ``microcode``, ``cache`` (as written, e.g. ``512 KB``),
    ``flags`` (the sorted KERNEL_FLAGS present) and ``virtualised`` (the x86 ``hypervisor`` flag;
    None where the text cannot say, as on arm64). A field the text lacks is None; an empty
    text gives all None and no flags. Pure: the same text, the same answer."""
    fields = _first_block(cpuinfo)
    words = cpuinfo_flags(cpuinfo)
    arm = "cpu implementer" in fields
    keys = _ARM_KEYS if arm else _X86_KEYS
    found: dict[str, Any] = {name: _number(fields.get(key)) for key, name in keys.items()}
    if arm:
        variant, revision = fields.get("cpu variant"), fields.get("cpu revision")
        found["stepping"] = f"{variant} r{revision}" if variant and revision else None
    x86 = "vendor_id" in fields
    return {
        **found,
        "model_name": fields.get("model name") or None,
        "microcode": fields.get("microcode") or None,
        "cache": fields.get("cache size") or None,
        "flags": sorted(f for f in words if KERNEL_FLAGS.fullmatch(f)),
        "virtualised": ("hypervisor" in words) if x86 else None,
    }


def cpuinfo_path() -> Path:
    """``/proc/cpuinfo``, or the file ``DLCOMPARE_CPUINFO`` names."""
    return Path(os.environ.get(CPUINFO_ENV, "/proc/cpuinfo"))


def read_cpuinfo() -> str | None:
    """The text of ``cpuinfo_path()``; None where there is none (macOS, Windows) or it is unreadable."""
    try:
        return cpuinfo_path().read_text()
    except OSError:
        return None


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpus() -> list[dict[str, str]]:
    """NVIDIA GPUs as nvidia-smi reports them; empty when there is none."""
    if not shutil.which("nvidia-smi"):
        return []
    out = _run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"])
    if not out:
        return []
    rows = [line.split(", ") for line in out.splitlines()]
    return [{"name": r[0], "driver": r[1], "memory": r[2]} for r in rows if len(r) == 3]


@functools.cache
def fingerprint() -> dict[str, Any]:
    """The hardware a timing depends on, of the machine this process runs on: CPU model, logical
    cores, GPU models (all of the node's, whatever CUDA_VISIBLE_DEVICES says) and NVIDIA driver.
    Records with equal fingerprints ran on comparable machines; the host name is not part of it,
    so the identical nodes of a cluster compare with each other."""
    found = gpus()
    return {
        "cpu": cpu_model(),
        "cores": psutil.cpu_count(logical=True),
        "gpus": [g["name"] for g in found],
        "driver": found[0]["driver"] if found else None,
    }


def machine_fingerprint(
    cpuinfo: str | None,
    *,
    kernel: str | None = None,
    architecture: str | None = None,
    hypervisor_type: str | None = None,
    dmi_vendor: str | None = None,
    product: str | None = None,
    cpu_name: str | None = None,
    cores: int | None = None,
    physical_cores: int | None = None,
    memory_bytes: int | None = None,
    gpus: Sequence[str] = (),
    driver: str | None = None,
) -> dict[str, Any]:
    """The machine kind a run's timings belong to, from raw texts (pure: recorded samples test
    it). ``cpuinfo``: the text of /proc/cpuinfo (None where there is none: macOS); ``kernel``: the
    OS release; ``hypervisor_type``: /sys/hypervisor/type; ``dmi_vendor``, ``product``:
    /sys/class/dmi/id/sys_vendor and product_name; ``cpu_name``: the CPU's name where cpuinfo
    gives none.

    Its fields: ``cpu_identity``'s (``virtualised`` aside), ``architecture``, ``cores``,
    ``physical_cores``, ``memory_gib``, ``hypervisor``, ``kernel``, ``gpus`` and ``driver``, which
    harness.reporting.compare compares; ``product`` is for the reader (a VM's instance type, not
    compared: a renamed type can be the same hardware). A field nothing here tells is None,
    unknown. ``hypervisor``: /sys/hypervisor/type, else the DMI vendor of a CPU whose flags say
    it is virtualised (``unknown vendor`` without one), ``none`` where they say it is not."""
    found = cpu_identity(cpuinfo) if cpuinfo else {}
    virtualised = found.get("virtualised")
    if hypervisor_type:
        hypervisor: str | None = hypervisor_type
    elif virtualised is None:
        hypervisor = None
    else:
        hypervisor = (dmi_vendor or "unknown vendor") if virtualised else "none"
    return {
        "vendor": found.get("vendor"),
        "model_name": found.get("model_name") or cpu_name,
        "family": found.get("family"),
        "model": found.get("model"),
        "stepping": found.get("stepping"),
        "microcode": found.get("microcode"),
        "cache": found.get("cache"),
        "flags": found.get("flags"),
        "architecture": architecture,
        "cores": cores,
        "physical_cores": physical_cores,
        "memory_gib": round(memory_bytes / 2**30, 1) if memory_bytes else None,
        "hypervisor": hypervisor,
        "product": product,
        "kernel": kernel,
        "gpus": list(gpus),
        "driver": driver,
    }


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip() or None
    except OSError:
        return None


def machine_kind() -> dict[str, Any]:
    """This machine's fingerprint (``machine_fingerprint``), for env.json: finer than
    ``fingerprint`` (vendor, model, stepping, microcode, instruction sets, hypervisor, kernel),
    so that two VMs sold under one CPU name come apart."""
    fp = fingerprint()
    name = cpu_model()
    if sys.platform == "darwin":  # no /proc/cpuinfo; platform.processor() says only "arm"
        name = _run(["sysctl", "-n", "machdep.cpu.brand_string"]) or name
    return machine_fingerprint(
        read_cpuinfo(),
        kernel=platform.release() or None,
        architecture=platform.machine() or None,
        hypervisor_type=_read("/sys/hypervisor/type"),
        dmi_vendor=_read("/sys/class/dmi/id/sys_vendor"),
        product=_read("/sys/class/dmi/id/product_name"),
        cpu_name=name,
        cores=psutil.cpu_count(logical=True),
        physical_cores=psutil.cpu_count(logical=False),
        memory_bytes=psutil.virtual_memory().total,
        gpus=fp["gpus"],
        driver=fp["driver"],
    )


def package_versions(modules: Iterable[str] = ()) -> dict[str, str]:
    """Versions of PACKAGES and of the distributions that provide ``modules`` (every adapter's
    ``requires``, so a plugin's framework is listed too), by distribution name; what is not
    installed is left out."""
    provided = importlib.metadata.packages_distributions()
    names = list(PACKAGES) + [dist for m in modules for dist in provided.get(m.split(".")[0], [])]
    versions: dict[str, str] = {}
    seen: set[str] = set()
    for name in names:
        key = re.sub(r"[-_.]+", "-", name).lower()  # tensorflow_cpu and tensorflow-cpu are one
        if key in seen:
            continue
        seen.add(key)
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


def capture(threads: int, argv: list[str], modules: Iterable[str] = ()) -> dict[str, Any]:
    """The run's environment; ``modules`` are the adapters' ``requires``, whose packages'
    versions go into ``packages``."""
    repo = Path(__file__).resolve().parent.parent
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "hostname": platform.node(),
        "cpu": cpu_model(),
        "cpu_logical": psutil.cpu_count(logical=True),
        "cpu_physical": psutil.cpu_count(logical=False),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "gpus": gpus(),
        "fingerprint": fingerprint(),
        "machine_kind": machine_kind(),
        "threads": threads,
        "packages": package_versions(modules),
        "git_sha": _run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"]),
        "git_dirty": bool(_run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"])),
        "command": " ".join(argv),
    }


def default_threads() -> int:
    """All cores given to this process (its CPU affinity), the same for every framework."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1
