"""Shared fixtures. Frameworks run only in worker processes, never in the pytest process."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from adapters import discover
from harness import runner
from harness.plan import variants
from workloads import STRATEGIES, WORKLOADS, get_workload, override

REPO = Path(__file__).resolve().parent.parent
ADAPTERS = discover()
CHECK_STEPS = 50
SNAPSHOT = 5
#: Every workload variant the conformance suite runs: each workload, each loop strategy.
VARIANTS = [(w, tuple(o)) for w in WORKLOADS for o in variants(w, [], list(STRATEGIES))]
TRAIN_VARIANTS = [v for v in VARIANTS if getattr(get_workload(v[0]), "task", "train") == "train"]
INFER_VARIANTS = [v for v in VARIANTS if v not in TRAIN_VARIANTS]
_cache: dict[tuple, dict[str, np.ndarray]] = {}


def variant_id(variant: tuple[str, tuple[str, ...]]) -> str:
    workload, overrides = variant
    return "-".join([workload, *(o.split("=")[1] for o in overrides)])


def check_cell(adapter: str, workload: str, device: str = "cpu", overrides: tuple[str, ...] = ()) -> dict:
    info = ADAPTERS[adapter]
    return {
        "run_id": "test",
        "adapter": adapter,
        "framework": info.framework,
        "graph": info.graph,
        "workload": workload,
        "overrides": list(overrides),
        "device_requested": device,
        "profile": "quick",
        "threads": 2,
    }


@pytest.fixture(params=list(ADAPTERS), ids=str)
def adapter_name(request) -> str:
    return request.param


@pytest.fixture(params=VARIANTS, ids=variant_id)
def variant(request) -> tuple[str, tuple[str, ...]]:
    return request.param


@pytest.fixture
def spec(variant):
    return override(get_workload(variant[0]), list(variant[1]))


@pytest.fixture
def trained(adapter_name, variant, spec, tmp_path_factory) -> dict[str, np.ndarray]:
    """What the adapter computes in a real worker process (once per adapter x variant): for
    training, the losses of CHECK_STEPS steps and the parameters after SNAPSHOT steps; for
    inference, its outputs on the first batch. Skips where the adapter declines the variant."""
    info = ADAPTERS[adapter_name]
    if not info.available:
        pytest.skip(info.unavailable)
    reason = info.cls().supports(spec)
    if reason:
        pytest.skip(reason)
    key = (adapter_name, variant)
    if key not in _cache:
        out = tmp_path_factory.mktemp("check") / "out.npz"
        cell = check_cell(adapter_name, variant[0], overrides=variant[1])
        extra = ["--steps", str(CHECK_STEPS), "--snapshot", str(SNAPSHOT)]
        proc = runner.run_worker(info, cell, "check", out, timeout_s=600, extra=extra)
        assert proc.returncode == 0, f"{adapter_name} worker failed:\n{proc.stderr[-4000:]}"
        with np.load(out) as data:
            _cache[key] = dict(data)
    assert "skipped" not in _cache[key], str(_cache[key].get("skipped"))
    return _cache[key]


@pytest.fixture
def python() -> str:
    return sys.executable
