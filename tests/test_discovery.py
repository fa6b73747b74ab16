"""Adapter discovery and the adapter contract's shared parts."""

from __future__ import annotations

import pytest

from adapters import discover
from adapters.base import Adapter, DeviceUnavailable, pick_device
from tests.fakes import FakeAdapter


def test_the_four_adapters_are_discovered_with_their_metadata():
    found = discover()
    assert {"torch-eager", "tf-function", "keras-torch", "jax-jit"} <= set(found)
    for info in found.values():
        assert info.graph in ("static", "dynamic")
        assert issubclass(info.cls, Adapter) and info.module.startswith("adapters.")


def test_missing_framework_names_the_pip_extra():
    class Ghost(FakeAdapter):
        name, requires, extra = "ghost", ("surely_not_a_module_xyz",), "ghost"

    assert Ghost.unavailable_reason() == "surely_not_a_module_xyz not installed: pip install 'dlcompare[ghost]'"
    assert FakeAdapter.unavailable_reason() is None


def test_device_resolution():
    assert pick_device("cpu", True, "torch") == "cpu"
    assert pick_device("auto", True, "torch") == "cuda"
    assert pick_device("auto", False, "torch") == "cpu"
    assert pick_device("cuda", True, "torch") == "cuda"
    with pytest.raises(DeviceUnavailable, match="^no CUDA device visible to jax$"):
        pick_device("cuda", False, "jax")


def test_worker_env_sets_threads_before_import():
    env = discover()["jax-jit"].cls.worker_env(3)
    assert env["OMP_NUM_THREADS"] == "3" and "intra_op_parallelism_threads=3" in env["XLA_FLAGS"]
    assert discover()["keras-torch"].cls.worker_env(1)["KERAS_BACKEND"] == "torch"
    assert discover()["tf-function"].cls.worker_env(2)["TF_NUM_INTRAOP_THREADS"] == "2"
