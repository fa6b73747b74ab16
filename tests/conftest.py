"""Shared fixtures. Frameworks run only in worker processes, never in the pytest process."""

from __future__ import annotations

import os

# Runs started by tests take turns briefly (harness.measuring.timing.QUICK_TURN_S, read at import:
# set before any harness module is imported, here and in every worker). A test of contention
# detection, which reads the turns' CPU ticks, starts its run without it.
os.environ.setdefault("DLCOMPARE_QUICK_TURNS", "1")
# The suite keeps both cores busy, so an OpenMP thread waiting at a barrier for a descheduled
# sibling would spin through its time slice: OpenMP's threads in every process the suite starts
# sleep while they wait instead. A real run leaves the frameworks' own default (it times them as
# users run them); no test reads a time. Measured (2026-12-03, 2-core Xeon): a small fidelity run
# beside one busy core took 29-42 CPU-s spinning and 17 passive.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import atexit
import collections
import concurrent.futures
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from adapters import discover
from adapters._kit_common import SHARED_COMPILE_CACHE
from harness import env as machine_env
from harness.checks import conformance
from harness.install import variant
from harness.measuring import floors, limits_cache
from tests.cpu_time import CpuTime

REPO = Path(__file__).resolve().parent.parent
#: The committed example runs (kept as evidence of what the project measured): tests that check every
#: committed report read these, never reports/ (a user's own output, not committed).
EVIDENCE = REPO / "evidence"
#: Runs kept as test input, each folder holding only the files its tests read (tests/fixtures/runs/<run-id>/).
FIXTURE_RUNS = REPO / "tests" / "fixtures" / "runs"
# Runs started by tests measure the device's limits briefly (harness.measuring.peak, harness.measuring.floors): the
# code paths are the same, and tests assert no timing against them.
os.environ["DLCOMPARE_QUICK_LIMITS"] = "1"
# ... and measure them once per test session: a later run with the same inputs reuses what an
# earlier one measured (harness.measuring.limits_cache), instead of about 20 s of peaks and floors per run.
if limits_cache.ENV not in os.environ:
    os.environ[limits_cache.ENV] = tempfile.mkdtemp(prefix="dlcompare-limits-")
    atexit.register(shutil.rmtree, os.environ[limits_cache.ENV], True)
# ... and share compiler caches between its runs (SHARED_COMPILE_CACHE, adapters/_kit_common.py): a bench's
# workers compile cold (Inductor's caches off), which would make every torch.compile of the suite
# seconds slower; the folder is this session's own, so a fresh machine's first session compiles
# everything once.
if SHARED_COMPILE_CACHE not in os.environ:
    os.environ[SHARED_COMPILE_CACHE] = tempfile.mkdtemp(prefix="dlcompare-compile-cache-")
    atexit.register(shutil.rmtree, os.environ[SHARED_COMPILE_CACHE], True)
# (Under pytest-xdist both folders are made once: the controller loads this file before it starts
# the test processes, which inherit its environment.)
# ... and time kernel floors with NumPy and PyTorch only (harness.measuring.floors.LIBRARIES_ENV),
# which time every kernel kind: JAX's and TensorFlow's processes cost about 13 CPU-s a new set of
# kernels (2026-12-04, 2-core AMD EPYC), across the suite's dozens of small runs; the runs' reports
# say which libraries they left out, and test_floors times all four.
os.environ.setdefault(floors.LIBRARIES_ENV, "numpy,torch")
ADAPTERS = discover()
VARIANTS = conformance.all_variants()
TRAIN_VARIANTS = [v for v in VARIANTS if conformance.is_training(conformance.spec_of(v))]
INFER_VARIANTS = [v for v in VARIANTS if v not in TRAIN_VARIANTS]
# Conformance runs on every device this machine has: the CPU, and the GPU where there is one.
DEVICES = ["cpu", "cuda"] if variant.detect().driver else ["cpu"]
#: An NVIDIA driver on this machine, and whether make installed CPU builds here (the cpu variant,
#: or an environment make did not install): tests that assume either are gated on them.
GPU_HERE = shutil.which("nvidia-smi") is not None
# Frameworks make did not install are CPU builds only where no GPU is here (a GPU image's own are not).
CPU_BUILDS = variant.installed() == "cpu" or (variant.installed() is None and not GPU_HERE)
# Conformance worker processes, two at a time, each with half the cores: each runs every variant
# of one adapter on one device and is mostly framework import and compilation, so two overlap
# well; two workers of every core's threads would each wait at OpenMP barriers for threads the
# other displaced (this doubled the conformance tests' time on 2 cores).
# Only the (adapter, device) pairs the collected tests use are started, at the first one's use.
_POOL = 2
_THREADS = max(1, (os.cpu_count() or 1) // _POOL)
_pool = concurrent.futures.ThreadPoolExecutor(max_workers=_POOL)
_wanted: list[tuple[str, str]] = []
_results: dict[tuple[str, str], concurrent.futures.Future] = {}


#: Fixtures whose tests start processes: ``trained`` a framework's conformance worker, ``python`` a
#: subprocess (``python -m harness ...``). Other such tests carry their mark in their module.
_MARKED_BY_FIXTURE = {"trained": "frameworks", "python": "workers"}


class _Marks:
    """Marks each test by the fixtures it uses, as a plugin of its own: this module's
    ``pytest_collection_modifyitems`` must run after deselection, this before it."""

    @pytest.hookimpl(tryfirst=True)  # before -m deselects by marker (``make test-fast``)
    def pytest_collection_modifyitems(self, items) -> None:
        for item in items:
            for fixture, mark in _MARKED_BY_FIXTURE.items():
                if fixture in getattr(item, "fixturenames", ()):
                    item.add_marker(mark)


def pytest_configure(config) -> None:
    config.pluginmanager.register(_Marks(), "dlcompare-marks")
    config.pluginmanager.register(CpuTime(), "dlcompare-cpu-time")  # where the suite's CPU goes, by file


@pytest.hookimpl(trylast=True)  # after -k and -m have deselected what will not run
def pytest_collection_modifyitems(items) -> None:
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if "trained" in getattr(item, "fixturenames", ()) and "adapter_name" in params:
            key = (params["adapter_name"], params.get("device", "cpu"))
            if key not in _wanted:
                _wanted.append(key)
    _wanted.sort(key=_pool_order(_wanted))


def _pool_order(keys: list[tuple[str, str]]):
    """The pool's queue: one adapter of each framework before a second of any, so a framework's
    second adapter (flax-nnx-cached after flax-nnx: the same XLA programs) starts once its first
    has filled the session's compiler cache instead of compiling the same programs beside it
    (measured: flax-nnx-cached's worker alone 35 s cold, 12 s after flax-nnx's); within each
    round static graphs first, the longest workers (torch-compile's alone about 2 minutes here),
    so that the last to end is a short one and the other lane is not left idle meanwhile."""
    seen: collections.Counter = collections.Counter()
    rank = {}
    for i, (adapter, device) in enumerate(keys):
        info = ADAPTERS[adapter]
        family = (info.framework, device)
        rank[adapter, device] = (seen[family], info.graph != "static", i)
        seen[family] += 1
    return rank.__getitem__


def pytest_sessionfinish() -> None:
    _pool.shutdown(wait=False, cancel_futures=True)  # an aborted session (-x) waits for none


def _conformance(adapter: str, device: str) -> dict:
    """The adapter's results for every variant on the device; starts every wanted worker once."""
    if (adapter, device) not in _results:
        for key in [(adapter, device), *_wanted]:
            info = ADAPTERS[key[0]]
            if key not in _results and info.available:
                _results[key] = _pool.submit(conformance.run_adapter, info, VARIANTS, device=key[1], threads=_THREADS)
    return _results[adapter, device].result()


def check_cell(adapter: str, workload: str, device: str = "cpu", overrides: tuple[str, ...] = ()) -> dict:
    return conformance.check_cell(ADAPTERS[adapter], (workload, tuple(overrides)), device)


@pytest.fixture(autouse=True)
def _fingerprint_of_this_machine():
    """The machine's fingerprint is cached per process (harness.env.fingerprint); a test that plays
    another machine (a stand-in nvidia-smi on PATH) must not leave its fingerprint to the tests
    after it, whichever file they are in."""
    yield
    machine_env.fingerprint.cache_clear()


@pytest.fixture(params=list(ADAPTERS), ids=str)
def adapter_name(request) -> str:
    return request.param


@pytest.fixture(params=VARIANTS, ids=conformance.variant_id)
def variant(request):
    return request.param


@pytest.fixture
def spec(variant):
    return conformance.spec_of(variant)


@pytest.fixture(params=DEVICES, ids=str)
def device(request) -> str:
    return request.param


@pytest.fixture
def trained(adapter_name, variant, device) -> dict:
    """What the adapter computed for the variant on the device, in a real worker process: one
    process per adapter and device runs all its variants on first use. Skips where the adapter
    declines the variant; a GPU it cannot use comes back as a failing ``device`` check."""
    info = ADAPTERS[adapter_name]
    if not info.available:
        pytest.skip(info.unavailable)
    result = _conformance(adapter_name, device)[variant]
    if "device_failed" in result:
        pytest.fail(result["device_failed"])
    if "skipped" in result:
        pytest.skip(result["skipped"])
    return result


@pytest.fixture
def python() -> str:
    return sys.executable
