"""Shared fixtures. Frameworks run only in worker processes, never in the pytest process."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from adapters import discover
from harness import runner
from workloads import WORKLOADS

ADAPTERS = discover()
CHECK_STEPS = 50
SNAPSHOT = 5
_cache: dict[tuple[str, str], dict[str, np.ndarray]] = {}


def check_cell(adapter: str, workload: str, device: str = "cpu") -> dict:
    info = ADAPTERS[adapter]
    return {
        "run_id": "test",
        "adapter": adapter,
        "framework": info.framework,
        "graph": info.graph,
        "workload": workload,
        "overrides": [],
        "device_requested": device,
        "profile": "quick",
        "threads": 2,
    }


@pytest.fixture(params=list(ADAPTERS), ids=str)
def adapter_name(request) -> str:
    return request.param


@pytest.fixture(params=list(WORKLOADS), ids=str)
def workload_name(request) -> str:
    return request.param


@pytest.fixture
def trained(adapter_name: str, workload_name: str, tmp_path_factory) -> dict[str, np.ndarray]:
    """Losses of CHECK_STEPS training steps and parameters after SNAPSHOT steps, computed by
    the adapter in a real worker process (once per adapter x workload for the session)."""
    info = ADAPTERS[adapter_name]
    if not info.available:
        pytest.skip(info.unavailable)
    key = (adapter_name, workload_name)
    if key not in _cache:
        out = tmp_path_factory.mktemp("check") / "out.npz"
        cell = check_cell(adapter_name, workload_name)
        extra = ["--steps", str(CHECK_STEPS), "--snapshot", str(SNAPSHOT)]
        proc = runner.run_worker(info, cell, "check", out, timeout_s=600, extra=extra)
        assert proc.returncode == 0, f"{adapter_name} worker failed:\n{proc.stderr[-4000:]}"
        with np.load(out) as data:
            _cache[key] = dict(data)
    return _cache[key]


@pytest.fixture
def python() -> str:
    return sys.executable


REPO = Path(__file__).resolve().parent.parent
