"""Adapter discovery: every module in this package that defines an Adapter subclass.

Adding a framework means adding one module here; no list of adapter names exists elsewhere.
Modules whose name starts with an underscore are helpers, not adapters. Modules named in the
environment variable ``DLCOMPARE_EXTRA_ADAPTERS`` (comma-separated import paths) are scanned
too; the test suite's fault-injection adapters arrive that way, and worker processes inherit it.
"""

from __future__ import annotations

import importlib
import inspect
import os
import pkgutil
from dataclasses import dataclass

from adapters.base import Adapter, DeviceUnavailable


@dataclass(frozen=True)
class AdapterInfo:
    name: str
    framework: str
    graph: str
    module: str
    cls: type[Adapter]
    unavailable: str | None  # None when its framework is importable

    @property
    def available(self) -> bool:
        return self.unavailable is None


def discover() -> dict[str, AdapterInfo]:
    """All adapters found in this package, by name, sorted by framework then name."""
    found: dict[str, AdapterInfo] = {}
    names = [f"{__name__}.{m.name}" for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")]
    names += [n.strip() for n in os.environ.get("DLCOMPARE_EXTRA_ADAPTERS", "").split(",") if n.strip()]
    for name in names:
        if name == f"{__name__}.base":
            continue
        module = importlib.import_module(name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, Adapter) and not inspect.isabstract(cls) and cls.__module__ == module.__name__:
                if cls.name in found:
                    raise RuntimeError(f"adapter name {cls.name!r} defined twice ({module.__name__})")
                found[cls.name] = AdapterInfo(
                    cls.name, cls.framework, cls.graph, module.__name__, cls, cls.unavailable_reason()
                )
    return dict(sorted(found.items(), key=lambda kv: (kv[1].framework, kv[0])))


__all__ = ["Adapter", "AdapterInfo", "DeviceUnavailable", "discover"]
