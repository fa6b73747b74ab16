"""Measured device limits (peaks, kernel floors) reused within one test session.

A run measures the device's limits in fresh processes at its start (and its peaks again at its
end). The test suite starts dozens of small runs on one machine in a few minutes; measuring the
same limits each time would cost about 20 s per run. When ``DLCOMPARE_LIMITS_CACHE`` names a
folder (tests/conftest.py sets one per session), a measurement is stored there under its inputs
and later runs with the same inputs reuse it. Users never set it: a real run measures afresh,
since a shared machine's capacity drifts within the hour.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

ENV = "DLCOMPARE_LIMITS_CACHE"


def cached(key: dict[str, Any], measure: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``measure()``, or its stored result for the same ``key`` when the cache is on. A result
    holding ``error`` is never stored, so a failure is retried by the next run."""
    folder = os.environ.get(ENV)
    if not folder:
        return measure()
    path = _path(folder, key)
    if path.is_file():
        return json.loads(path.read_text())
    value = measure()
    if "error" not in value:
        _store(path, value)
    return value


def cached_each(
    key: dict[str, Any], names: list[str], measure: Callable[[list[str]], dict[str, Any]], field: str
) -> dict[str, Any]:
    """``measure(names)``: {field: {name: value}} or {"error": ...}. When the cache is on, each
    name's value is stored apart under ``key``, and a later call measures only the names no
    earlier one did (runs of different workloads share most of their kernels). An error is never
    stored."""
    folder = os.environ.get(ENV)
    if not folder:
        return measure(names)
    paths = {name: _path(folder, {**key, "name": name}) for name in names}
    known = {name: json.loads(path.read_text()) for name, path in paths.items() if path.is_file()}
    missing = [name for name in names if name not in known]
    if missing:
        found = measure(missing)
        if "error" in found:
            return found
        for name in missing:
            known[name] = found[field].get(name)
            _store(paths[name], known[name])
    return {field: {name: known[name] for name in names}}


def _path(folder: str, key: dict[str, Any]) -> Path:
    return Path(folder) / (hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20] + ".json")


def _store(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as f:
        json.dump(value, f)
    os.replace(f.name, path)  # atomic: concurrent runs read a whole file or none
