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
    path = Path(folder) / (hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20] + ".json")
    if path.is_file():
        return json.loads(path.read_text())
    value = measure()
    if "error" not in value:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as f:
            json.dump(value, f)
        os.replace(f.name, path)  # atomic: concurrent runs read a whole file or none
    return value
