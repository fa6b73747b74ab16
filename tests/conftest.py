"""Shared fixtures. Frameworks run only in worker processes, never in the pytest process."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from adapters import discover
from harness import conformance

REPO = Path(__file__).resolve().parent.parent
ADAPTERS = discover()
VARIANTS = conformance.all_variants()
TRAIN_VARIANTS = [v for v in VARIANTS if conformance.is_training(conformance.spec_of(v))]
INFER_VARIANTS = [v for v in VARIANTS if v not in TRAIN_VARIANTS]
_results: dict[str, dict] = {}


def check_cell(adapter: str, workload: str, device: str = "cpu", overrides: tuple[str, ...] = ()) -> dict:
    return conformance.check_cell(ADAPTERS[adapter], (workload, tuple(overrides)), device)


@pytest.fixture(params=list(ADAPTERS), ids=str)
def adapter_name(request) -> str:
    return request.param


@pytest.fixture(params=VARIANTS, ids=conformance.variant_id)
def variant(request):
    return request.param


@pytest.fixture
def spec(variant):
    return conformance.spec_of(variant)


@pytest.fixture
def trained(adapter_name, variant) -> dict:
    """What the adapter computed for the variant, in a real worker process: one process per
    adapter runs all its variants on first use. Skips where the adapter declines the variant."""
    info = ADAPTERS[adapter_name]
    if not info.available:
        pytest.skip(info.unavailable)
    if adapter_name not in _results:
        _results[adapter_name] = conformance.run_adapter(info, VARIANTS)
    result = _results[adapter_name][variant]
    if "skipped" in result:
        pytest.skip(result["skipped"])
    return result


@pytest.fixture
def python() -> str:
    return sys.executable
