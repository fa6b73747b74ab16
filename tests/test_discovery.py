"""Adapter discovery and the adapter contract's shared parts."""

from __future__ import annotations

import importlib.metadata
import re

import pytest

from adapters import discover
from adapters.base import Adapter, DeviceUnavailable, pick_device
from tests.fakes import FakeAdapter


def test_the_built_in_adapters_are_discovered_with_their_metadata():
    """Built-in adapters come from adapters/; any other (an installed plugin's entry point, or
    DLCOMPARE_EXTRA_ADAPTERS) says where it came from: the suite passes with plugins present."""
    found = discover()
    assert {"torch-eager", "tf-function", "keras-torch", "jax-jit", "flax-nnx"} <= set(found)
    for info in found.values():
        assert info.graph in ("static", "dynamic")
        assert issubclass(info.cls, Adapter) and info.cls.name == info.name
        if info.source == "built-in":
            assert info.module.startswith("adapters.")
        else:
            assert info.source.startswith(("entry point of ", "DLCOMPARE_EXTRA_ADAPTERS")), info.source
        assert info.available or "not installed: " in info.unavailable


def test_missing_framework_names_the_install_command():
    class Ghost(FakeAdapter):
        name, requires, extra = "ghost", ("surely_not_a_module_xyz",), "ghost"

    class BuiltIn(Ghost):
        pass

    class Plugin(Ghost):
        install_hint = "pip install 'ghost-adapter[gpu]'"

    BuiltIn.__module__ = "adapters.ghost"  # as if it lived in adapters/
    assert BuiltIn.unavailable_reason() == "surely_not_a_module_xyz not installed: pip install 'dlcompare[ghost]'"
    assert Plugin.unavailable_reason() == "surely_not_a_module_xyz not installed: pip install 'ghost-adapter[gpu]'"
    # a plugin without a hint is not told to install one of dlcompare's extras
    assert "dlcompare[" not in Ghost.unavailable_reason() and "sets no install_hint" in Ghost.unavailable_reason()
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
    keras_tf = discover()["keras-tf"]
    assert keras_tf.cls.worker_env(2)["KERAS_BACKEND"] == "tensorflow"
    assert keras_tf.cls.worker_env(2)["TF_NUM_INTRAOP_THREADS"] == "2"
    # framework keras (FRAMEWORK=keras selects it), workers in TensorFlow's environment
    assert (keras_tf.framework, keras_tf.environment) == ("keras", "tensorflow")
    assert discover()["keras-torch"].environment == "keras"


def test_env_json_lists_every_adapters_framework_packages():
    """``env.json``'s packages come from each adapter's ``requires`` (module -> distribution), so
    a plugin's framework is listed with its version, not only in its cells' settings."""
    from harness import env

    adapters = discover()
    found = env.package_versions([m for info in adapters.values() for m in info.cls.requires])
    provided = importlib.metadata.packages_distributions()
    listed = {re.sub(r"[-_.]+", "-", name).lower() for name in found}
    for info in adapters.values():
        if info.available:  # the package behind every module it requires is listed
            for module in info.cls.requires:
                assert {re.sub(r"[-_.]+", "-", d).lower() for d in provided[module]} & listed, (info.name, module)
    assert "flax" in found or not adapters["flax-nnx"].available
    assert "PyYAML" in env.package_versions(["yaml"])  # the module's name is not the package's


def test_a_plugin_that_does_not_import_is_one_line_and_exit_2(python, tmp_path):
    """DLCOMPARE_EXTRA_ADAPTERS naming a module that does not import: one line naming the variable
    and the module, exit 2, no traceback (it was a ModuleNotFoundError traceback, exit 1)."""
    import os
    import subprocess

    from tests.conftest import REPO

    env = dict(os.environ, DLCOMPARE_EXTRA_ADAPTERS="surely_no_such_plugin_xyz")
    proc = subprocess.run([python, "-m", "harness", "list"], cwd=REPO, env=env, capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: DLCOMPARE_EXTRA_ADAPTERS names 'surely_no_such_plugin_xyz', which does not import: "
        "ModuleNotFoundError: No module named 'surely_no_such_plugin_xyz'"
    ]


def test_an_adapter_without_an_inference_step_skips_decoding_with_its_reason():
    """An adapter that lists an inference family but lacks ``infer_step`` is a skipped cell with
    its reason, not a TypeError in the middle of a check."""
    from workloads import get_workload

    class NoDecode(FakeAdapter):
        name, families = "no-decode", ("mlp", "rnn-caption")  # rnn-decode decodes the caption model

    adapter = object.__new__(NoDecode)  # supports() reads the class alone: no set-up needed
    reason = adapter.supports(get_workload("rnn-decode"))
    assert reason == "no-decode has no inference step (infer_step), which rnn-decode needs"
    assert adapter.supports(get_workload("mlp")) is None and adapter.supports(get_workload("rnn-caption")) is None
