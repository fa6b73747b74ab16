"""Adapter discovery: every module in this package that defines an Adapter subclass.

Adding a framework means adding one module here; no list of adapter names exists elsewhere.
Modules whose name starts with an underscore are helpers, not adapters, and so are ``base``
(the contract), ``exporting`` (the export task's optional mixin) and ``kit`` (the adapter-author
API). Two more sources:

- the entry-point group ``dlcompare.adapters``: an installed package outside this repository
  registers ``name = "package.module"`` (a module holding Adapter subclasses) in it;
- the environment variable ``DLCOMPARE_EXTRA_ADAPTERS`` (comma-separated module paths), for
  local experiments and the test suite's fault-injection adapters; workers inherit it.

A plugin's optional hooks are entry points too, one group per part of the harness that reads
them (HOOK_GROUPS; docs/adding-an-adapter.md, section 9): ``hooks`` lists a group and
``load_hook`` loads one. An absent hook leaves the harness as it is without plugins.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import os
import pkgutil
from dataclasses import dataclass
from typing import Any

from adapters.base import Adapter, DeviceUnavailable
from harness.install.environments import family_python

ENTRY_POINT_GROUP = "dlcompare.adapters"
#: The hook groups, each read by one part of the harness: a framework's profiler for --profile-ops
#: (harness.measuring.profilers), an idiomatic script (harness.checks.fidelity), its kernels for the
#: device peaks and kernel floors (harness.measuring.peak, harness.measuring.floors), a device name
#: (harness.running.devices).
HOOK_GROUPS = ("dlcompare.profilers", "dlcompare.fidelity", "dlcompare.kernels", "dlcompare.devices")


@dataclass(frozen=True)
class AdapterInfo:
    name: str
    framework: str
    graph: str
    module: str
    cls: type[Adapter]
    unavailable: str | None  # None when its framework is importable here or in its family's environment
    source: str = "built-in"

    @property
    def environment(self) -> str:
        """The framework family whose environment the adapter's workers run in."""
        return self.cls.environment or self.framework

    @property
    def available(self) -> bool:
        return self.unavailable is None


class PluginError(RuntimeError):
    """An adapter source outside this package that cannot be loaded: one line naming where it was
    named (the entry point or DLCOMPARE_EXTRA_ADAPTERS) and why."""


def discover() -> dict[str, AdapterInfo]:
    """All adapters found in this package, by name, sorted by framework then name. Raises
    PluginError for a plugin module that does not import or an adapter name defined twice."""
    found: dict[str, AdapterInfo] = {}
    sources = [
        (f"{__name__}.{m.name}", "built-in")
        for m in pkgutil.iter_modules(__path__)
        if not m.name.startswith("_") and m.name not in ("base", "exporting", "kit")
    ]
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = f"{ep.dist.name} {ep.dist.version}" if ep.dist else "?"
        sources.append((ep.value, f"entry point of {dist}"))
    for name in os.environ.get("DLCOMPARE_EXTRA_ADAPTERS", "").split(","):
        if name.strip():
            sources.append((name.strip(), "DLCOMPARE_EXTRA_ADAPTERS"))
    for name, source in sources:
        try:
            module = importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - any failure of a plugin's import is the same error to its user
            if source == "built-in":
                raise
            raise PluginError(f"{source} names {name!r}, which does not import: {type(exc).__name__}: {exc}") from exc
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, Adapter) and not inspect.isabstract(cls) and cls.__module__ == module.__name__:
                if cls.name in found:
                    raise PluginError(f"adapter name {cls.name!r} defined twice ({module.__name__}, from {source})")
                reason = cls.unavailable_reason()
                if reason and family_python(cls.environment or cls.framework):
                    reason = None  # installed in its family's environment (a GPU variant's .venv-tf), where it runs
                found[cls.name] = AdapterInfo(cls.name, cls.framework, cls.graph, module.__name__, cls, reason, source)
    return dict(sorted(found.items(), key=lambda kv: (kv[1].framework, kv[0])))


def _package(ep: importlib.metadata.EntryPoint) -> str:
    return f"{ep.dist.name} {ep.dist.version}" if ep.dist else "an unnamed package"


def hooks(group: str) -> dict[str, importlib.metadata.EntryPoint]:
    """The entry points installed packages register in ``group``, by name, sorted; nothing is
    imported. Raises PluginError for a name two packages register with different values."""
    found: dict[str, importlib.metadata.EntryPoint] = {}
    for ep in importlib.metadata.entry_points(group=group):
        if ep.name in found and found[ep.name].value != ep.value:
            first = found[ep.name]
            raise PluginError(
                f"{group} entry point {ep.name!r} registered twice: {first.value!r} by {_package(first)}, "
                f"{ep.value!r} by {_package(ep)}"
            )
        found[ep.name] = ep
    return dict(sorted(found.items()))


def load_hook(ep: importlib.metadata.EntryPoint) -> Any:
    """The object ``ep`` names (imported now); PluginError, one line naming the package, the
    group and why, where it does not load."""
    try:
        return ep.load()
    except Exception as exc:  # noqa: BLE001 - any failure of a plugin's import is the same error to its user
        raise PluginError(
            f"entry point {ep.name!r} of {_package(ep)} in {ep.group} names {ep.value!r}, which does not load: "
            f"{type(exc).__name__}: {exc}"
        ) from exc


__all__ = [
    "HOOK_GROUPS",
    "Adapter",
    "AdapterInfo",
    "DeviceUnavailable",
    "PluginError",
    "discover",
    "hooks",
    "load_hook",
]
