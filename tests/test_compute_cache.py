"""One compute-cache setting for every process the harness starts (harness.processes.compute_cache_env):
the kernel JIT warm-up, the device peaks, the kernel floors, the doctor's probes and the cells'
workers (a resident one's too) find what another process compiled. No process is started: a
stand-in for harness.processes.run keeps each launcher's environment."""

from __future__ import annotations

import subprocess

import pytest

from harness import processes
from harness.checks import doctor
from harness.measuring import floors, limits_cache
from harness.running import kernel_jit, runner
from tests.conftest import ADAPTERS

NEED = {"gpu": "sm_90", "sass_newest": "sm_89", "ptx": "compute_90"}


def _launched(monkeypatch, tmp_path) -> dict[str, dict[str, str]]:
    """Each launcher's environment, by launcher, its process replaced by a stand-in that fails."""
    started: dict[str, dict[str, str]] = {}
    launcher = {"name": ""}

    def run(args, env, timeout_s, load=None):
        started[launcher["name"]] = dict(env)
        return subprocess.CompletedProcess(list(args), 1, "", "stand-in: not started")

    monkeypatch.setattr(processes, "run", run)
    monkeypatch.setattr(limits_cache, "cached", lambda key, measure: measure())  # measured, not read back
    torch = ADAPTERS["torch-eager"]
    cell = {"adapter": "torch-eager", "framework": "torch", "graph": "dynamic", "threads": 1, "workload": "mlp"}
    for device in ("cpu", "cuda"):
        launcher["name"] = f"cell worker on {device}"
        runner.run_worker(torch, cell | {"device_requested": device}, "bench", tmp_path / "record.json", 10)
    launcher["name"] = "kernel JIT warm-up"
    needs = {"torch-eager": {"python": None, "need": NEED}}
    kernel_jit.warm_up(ADAPTERS, [cell | {"device_requested": "cuda", "overrides": [], "precision": "fp32"}], needs)
    launcher["name"] = "doctor's probe"
    doctor.probe(torch, 1)
    for device in ("cpu", "cuda"):
        launcher["name"] = f"device peak on {device}"
        runner.measure_peaks([device], 1)
        launcher["name"] = f"kernel floors on {device}"
        floors._run_library("numpy", device, [["matmul", 2, 2, 2]], 1, "fp32")
    started["resident worker (its environment)"] = runner.worker_env(torch, cell | {"device_requested": "cuda"})
    started["gpu-check's steps (repo_env)"] = processes.repo_env()
    return started


def test_every_launcher_starts_its_process_with_the_one_compute_cache_setting(monkeypatch, tmp_path):
    monkeypatch.delenv("CUDA_CACHE_MAXSIZE", raising=False)
    started = _launched(monkeypatch, tmp_path)
    assert len(started) == 10, sorted(started)
    setting = processes.compute_cache_env()
    assert setting == {"CUDA_CACHE_MAXSIZE": str(4 << 30)}  # the driver's most: TF's PTX stays cached
    for launcher, env in started.items():
        assert {k: env.get(k) for k in setting} == setting, launcher


@pytest.mark.parametrize("size", ["1073741824"])
def test_a_compute_cache_size_set_by_the_user_is_every_processs(monkeypatch, tmp_path, size):
    monkeypatch.setenv("CUDA_CACHE_MAXSIZE", size)
    for launcher, env in _launched(monkeypatch, tmp_path).items():
        assert env["CUDA_CACHE_MAXSIZE"] == size, launcher
