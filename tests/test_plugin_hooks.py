"""A plugin needs no file outside itself: every hook a package registers (docs/adding-an-adapter.md,
section 9) is picked up by the part of the harness that reads it.

The plugin is tests/plugin_example (``tinynp``, a NumPy stand-in framework), installed as ``pip
install --target`` lays a package out (the package beside a dist-info holding its pyproject's
entry points: what importlib.metadata reads) into a folder put on sys.path. tests/test_third_party.py
installs the guide's example with pip itself. Registries are read in this process; one test starts
the few processes that run hooks outside it (a script twin, a floors library, a device's peak).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import shutil
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

import adapters
from adapters import PluginError, discover
from harness import cli, records, session
from harness.checks import fidelity
from harness.measuring import floors, peak, profilers
from harness.running import cell_work, devices, runner
from harness.running.plan import plan
from harness.stats import taxonomy
from tests.conftest import REPO

PLUGIN = REPO / "tests" / "plugin_example"
HOST = "tinynp-host"


def install(site: Path, pyproject: str | None = None, package: str | None = "tinynp") -> Path:
    """The plugin installed into ``site`` as pip lays it out: ``package`` copied from
    tests/plugin_example and a dist-info with the entry points of ``pyproject`` (default: the
    plugin's own pyproject.toml)."""
    project = tomllib.loads(pyproject or (PLUGIN / "pyproject.toml").read_text())["project"]
    if package:
        shutil.copytree(PLUGIN / package, site / package, ignore=shutil.ignore_patterns("__pycache__"))
    info = site / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n")
    (info / "top_level.txt").write_text(f"{package or ''}\n")
    groups = project["entry-points"]
    lines = [f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()) for group, eps in groups.items()]
    (info / "entry_points.txt").write_text("\n".join(lines))
    return site


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """tinynp on sys.path (and on workers' PYTHONPATH) for one test; forgotten afterwards."""
    site = install(tmp_path / "site")
    monkeypatch.syspath_prepend(str(site))
    # workers find it as an installed package's: processes.repo_env puts the repository before it
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])))
    yield site
    for name in [m for m in sys.modules if m == "tinynp" or m.startswith("tinynp.")]:
        del sys.modules[name]


def _cell() -> dict:
    """A small mlp cell of tinynp-eager on the CPU, as a run plans it."""
    (cell,) = plan(discover(), "tinynp-eager", "mlp", "cpu", ["batch_size=8", "num_batches=2"], "quick", 1, "t")
    return cell


def test_every_hook_group_is_read_by_the_harness_and_used_by_the_plugin():
    readers = {
        profilers.ENTRY_POINT_GROUP,
        fidelity.ENTRY_POINT_GROUP,
        floors.ENTRY_POINT_GROUP,
        devices.ENTRY_POINT_GROUP,
    }
    assert set(adapters.HOOK_GROUPS) == readers and len(readers) == 4
    registered = tomllib.loads((PLUGIN / "pyproject.toml").read_text())["project"]["entry-points"]
    assert set(registered) == {adapters.ENTRY_POINT_GROUP, *readers}


def test_without_plugins_the_harness_is_as_before(monkeypatch):
    """No hook installed: today's profilers, libraries, devices and scripts."""
    real = importlib.metadata.entry_points
    none = importlib.metadata.EntryPoints(())
    monkeypatch.setattr(
        importlib.metadata, "entry_points", lambda **kw: none if kw.get("group") in adapters.HOOK_GROUPS else real(**kw)
    )
    assert profilers.profiler_of(("mxnet",)) is None
    assert floors.libraries() == list(floors.LIBRARIES) == ["numpy", "torch", "jax", "tensorflow"]
    assert devices.names() == ["cpu", "cuda"] and devices.no_gpu_reason("cpu") is None
    assert all(module.startswith("fidelity.") for module in fidelity.scripts().values())


def test_the_profiler_of_an_adapter_is_its_plugins_and_runs_in_the_cell(plugin, tmp_path):
    assert profilers.profiler_of(("tinynp",)) == "tinynp"
    assert profilers.profiler_of(("torch", "tinynp")) == "torch"  # a built-in profiler comes first
    cell = {**_cell(), "profile_ops": str(tmp_path), "round": 1}
    s = cell_work.start(cell)
    # the call the worker makes after a cell's timing (cell_work.ops_profile), its adapter's requires
    found = cell_work.ops_profile(cell, s, {"status": "ok", "median_s": 0.001})["ops_profile"]
    assert found["status"] == "ok", found.get("reason")
    assert found["profiler"] == "tinynp" and found["steps"] == profilers.MAX_STEPS
    assert found["shares"][taxonomy.MATMUL] > 0 and found["shares"][taxonomy.OPTIMIZER] > 0
    assert {op["name"] for op in found["top_ops"]} == {"loss and gradients", "update"}
    assert (tmp_path / found["trace"]).is_file() and found["trace"].startswith(profilers.TRACES)


def test_a_plugins_profiler_that_breaks_the_contract_skips_the_breakdown_with_why(plugin, tmp_path, monkeypatch):
    import tinynp.hooks

    def wrong(step, sync, inputs, out_dir, steps):
        events, trace, times = real(step, sync, inputs, out_dir, steps)
        return [*events, profilers.Event("op", "x", 0.0, 1.0, "host", "gemm")], trace, times

    real = tinynp.hooks.profile
    monkeypatch.setattr(tinynp.hooks, "profile", wrong)
    found = profilers.profile_cell(("tinynp",), lambda b: 1.0, float, [0], tmp_path / "t", tmp_path, None)
    assert found["status"] == "skipped" and found["profiler"] == "tinynp"
    assert "category 'gemm', not one of matmul/conv" in found["reason"]


def test_the_fidelity_planner_finds_the_plugins_script(plugin, tmp_path):
    assert fidelity.scripts()["tinynp-eager"] == "tinynp.loop"
    assert "tinynp-eager" not in fidelity.scripts(plugins=False)
    argv = f"fidelity --framework tinynp --sweep batch_size=8,16 --device cpu --out {tmp_path}".split()
    _, run = session.new_run(cli.parser().parse_args(argv), discover())
    scripts = [(c["adapter"], c.get("script")) for c in run.cells]
    assert scripts == [("tinynp-eager", None), ("tinynp-eager", "tinynp.loop")] * 2  # the script runs in the last test


def test_the_plugins_matmul_counts_in_the_cpu_peak_and_makes_its_devices(plugin, tmp_path, monkeypatch):
    monkeypatch.setattr(peak, "MATMUL_N", 64)
    monkeypatch.setattr(peak, "COPY_BYTES", 2**20)
    monkeypatch.setattr(peak, "MIN_S", 0.0)
    real_find_spec = importlib.util.find_spec
    # a machine with NumPy and the plugin alone: no framework is imported into the test process
    frameworks = ("torch", "jax", "tensorflow")
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n in frameworks else real_find_spec(n, *a))
    cpu = peak.measure_cpu()
    assert set(cpu["matmul_gflops_by"]) == {"numpy", "tinynp"} and "plugin_errors" not in cpu
    assert cpu["matmul_gflops"] == max(cpu["matmul_gflops_by"].values())
    assert set(peak.measure_cpu(bf16=True)["matmul_gflops_by"]) <= {"numpy", "tinynp"}  # it has no bfloat16 matmul
    host = peak.measure_plugin_device(HOST)
    assert host["matmul_gflops_by"] == "tinynp" and host["matmul_gflops"] > 0 and host["copy_gbs"] is None
    merged = peak.best_of({HOST: host}, {HOST: {**host, "matmul_gflops": 1e9}})[HOST]
    assert merged["matmul_gflops"] == 1e9 and merged["copy_gbs"] is None
    with pytest.raises(RuntimeError, match="no plugin's kernels time a matmul on cuda"):
        peak.measure_plugin_device("cuda")  # tinynp has no CUDA matmul (peak.main takes cuda to measure_cuda)


def test_the_plugins_kernels_time_the_floors_it_makes(plugin):
    assert floors.libraries() == ["numpy", "torch", "jax", "tensorflow", "tinynp"]
    kernels = [("matmul", 8, 16, 4), ("conv3x3", 2, 4, 4, 1, 2, "forward")]
    seconds = floors.measure("tinynp", "cpu", kernels)
    assert seconds[floors._key(kernels[0])] > 0 and seconds[floors._key(kernels[1])] is None  # no convolutions
    assert set(floors.measure("tinynp", "cpu", kernels, "bf16").values()) == {None}
    assert floors._installed("tinynp", HOST) and not floors._installed("torch", HOST)


def test_a_plugin_device_is_listed_and_a_machine_without_it_skips_its_cells(plugin, monkeypatch):
    assert devices.names() == ["cpu", "cuda", HOST]
    assert devices.no_gpu_reason(HOST) is None and devices.no_gpu_reason("not-a-device") is None
    adapter = discover()["tinynp-eager"].cls()
    assert adapter.resolve_device(HOST) == HOST
    assert devices.verdict(adapter, "tinynp cannot start", HOST) == (
        "failed",
        f"tinynp cannot start; this machine has {HOST}",
    )
    monkeypatch.setenv("TINYNP_NO_HOST", "1")
    absent = "no tinynp host on this machine (TINYNP_NO_HOST is set)"
    assert devices.no_gpu_reason(HOST) == absent
    assert devices.verdict(adapter, "tinynp cannot start", HOST) == ("skipped", absent)


def test_hooks_that_clash_or_do_not_load_are_one_line_errors(plugin, tmp_path, monkeypatch):
    other = tmp_path / "other"
    clash = """
[project]
name = "other-plugin"
version = "2"
[project.entry-points."dlcompare.devices"]
tinynp-host = "other.hooks:host"
[project.entry-points."dlcompare.kernels"]
torch = "other.hooks:kernels"
[project.entry-points."dlcompare.profilers"]
broken = "surely_not_a_module_xyz:profile"
[project.entry-points."dlcompare.fidelity"]
missing = "surely_not_a_module_xyz.loop"
"""
    monkeypatch.syspath_prepend(str(install(other, clash, package=None)))
    with pytest.raises(PluginError, match=r"dlcompare.devices entry point 'tinynp-host' registered twice: "):
        devices.names()
    with pytest.raises(PluginError, match=r"'torch' \(other.hooks:kernels\) is a built-in library's name"):
        floors.libraries()
    with pytest.raises(PluginError, match=r"'missing' names 'surely_not_a_module_xyz.loop': "):
        fidelity.scripts()
    found = profilers.profile_cell(("broken",), lambda b: 1.0, float, [0], tmp_path / "t", tmp_path, None)
    why = "entry point 'broken' of other-plugin 2 in dlcompare.profilers names 'surely_not_a_module_xyz:profile'"
    assert found["status"] == "skipped" and why in found["reason"]


def test_the_harness_runs_the_plugins_hooks_in_its_own_processes(plugin, tmp_path, monkeypatch):
    """The processes that run hooks outside the parent, each started as a run starts it: the
    script twin, the plugin's floors library on its device, and that device's peak."""
    monkeypatch.setenv("DLCOMPARE_FIDELITY_QUICK", "1")
    monkeypatch.setenv("DLCOMPARE_LIMITS_CACHE", str(tmp_path / "limits"))
    info = discover()["tinynp-eager"]
    adapter_cell = _cell()
    (_, twin) = fidelity.with_scripts([adapter_cell], fidelity.scripts())
    proc = runner.run_worker(info, twin, "bench", tmp_path / "r.json", timeout_s=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rec = json.loads((tmp_path / "r.json").read_text())
    assert rec["status"] == "ok" and rec["kind"] == records.IDIOMATIC and rec["versions"] == {"tinynp": "0.1"}
    spec = records.spec_of(adapter_cell)
    params = {k: v.astype(np.float64) for k, v in spec.init_params().items()}
    assert rec["loss_first"] == pytest.approx(spec.reference_loss_and_grads(params, spec.batches()[0])[0], rel=1e-6)

    on_host = {**adapter_cell, "device_requested": HOST}  # as a run asking for --device tinynp-host plans it
    found = floors.kernel_floors([on_host], [HOST], threads=1, precision="fp32")
    assert found["errors"] == {} and found["fastest_library"] == {HOST: {"tinynp": found["kernels"]}}
    assert found["floors"][on_host["cell_id"]] > 0
    peaks = runner.measure_peaks([HOST], threads=1)
    assert peaks[HOST]["matmul_gflops_by"] == "tinynp" and peaks[HOST]["matmul_gflops"] > 0, peaks


# Append to tests/test_plugin_hooks.py once /tmp/plugin-devices.patch is applied (uses its imports and fixture).
def test_the_device_flag_plans_a_plugin_device_and_its_peak(plugin, monkeypatch):
    from harness.running.plan import select_devices

    assert select_devices(HOST) == [HOST] and select_devices("all") == ["cpu", "cuda", HOST]
    (cell,) = plan(discover(), "tinynp-eager", "mlp", HOST, [], "quick", 1, "t")
    assert cell["device_requested"] == HOST
    assert session._peak_devices([cell], {"gpus": []}) == [HOST]
    monkeypatch.setenv("TINYNP_NO_HOST", "1")
    assert session._peak_devices([cell], {"gpus": []}) == []
