"""The devices a cell may ask for, and why a cell could not use the one it asked for.

Built in: ``cpu`` and ``cuda``. A plugin names another (``metal``) as an entry point of
ENTRY_POINT_GROUP whose value is a ``DeviceHook`` (docs/adding-an-adapter.md, section 9); its
adapters' ``resolve_device`` receive that name, and only the plugins' kernels time its peak
(harness.measuring.peak). Why a GPU cell could not run: the three cases a user must tell apart.

- The machine has no NVIDIA GPU: ``skipped`` (nothing to fix).
- It has one, but the installed build of the framework is CPU-only: ``failed``, with the
  command that installs the GPU variant.
- A GPU build that cannot start (driver too old, a library missing): ``failed``, with the
  framework's own message.

A plugin's device: ``skipped`` with its hook's reason where this machine has none, else
``failed`` with the framework's message.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, cast

from adapters import PluginError, hooks, load_hook
from harness.install import variant

#: The devices every run knows.
BUILT_IN = ("cpu", "cuda")
#: A plugin's device: an entry point of this group, named after the device.
ENTRY_POINT_GROUP = "dlcompare.devices"
#: What a device's entry point names: called with nothing, it returns None where this machine has
#: the device, else why not (a cell asking for it is skipped with that reason). It starts no
#: framework: it runs in the parent at planning.
DeviceHook = Callable[[], str | None]


def plugin_devices() -> dict[str, Any]:
    """The devices plugins name, by name (nothing imported); PluginError for a built-in name
    or one two packages register."""
    found = hooks(ENTRY_POINT_GROUP)
    if set(found) & set(BUILT_IN):
        name = sorted(set(found) & set(BUILT_IN))[0]
        raise PluginError(f"{ENTRY_POINT_GROUP} entry point {name!r} ({found[name].value}) is a built-in device")
    return found


def names() -> list[str]:
    """Every device a cell may ask for: the built-in ones, then the plugins'."""
    return [*BUILT_IN, *plugin_devices()]


def plugin_reason(device: str) -> str | None:
    """For a plugin's ``device``: None where this machine has it, else its hook's reason (a
    hook that fails, with why). Not a plugin's device: None."""
    found = plugin_devices()
    if device not in found:
        return None
    try:
        reason = cast(DeviceHook, load_hook(found[device]))()
    except Exception as exc:  # noqa: BLE001 - a hook that fails makes the device unusable, not the run
        return f"{device}: its plugin's device check failed: {type(exc).__name__}: {exc}"[:300]
    return None if reason is None else str(reason)


def no_gpu_reason(device: str) -> str | None:
    """For a cell asking for ``device``: the skip reason when it is "cuda" and this machine has
    no NVIDIA driver (nvidia-smi), or when it is a plugin's device this machine does not have,
    as the worker would record it; None otherwise. Starts no framework: whether a framework can
    use a GPU that is present is known only in its worker."""
    if device == "cpu":
        return None
    if device != "cuda":
        return plugin_reason(device)
    machine = variant.detect()
    return f"no NVIDIA GPU on this machine ({machine.reason})" if machine.driver is None else None


def verdict(adapter: Any, message: str, device: str = "cuda") -> tuple[str, str]:
    """(status, reason) for a cell asking for ``device`` whose adapter raised DeviceUnavailable
    with ``message``."""
    if device not in BUILT_IN:
        absent = plugin_reason(device)
        return ("skipped", absent) if absent else ("failed", f"{message}; this machine has {device}")
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
