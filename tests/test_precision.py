"""The precision axis: native-bf16 detection (CPU flags, GPU compute capability), bf16 cells
skipped with their reason unless forced, and the bf16 tolerance derivation.

Stand-ins play other machines: a cpuinfo file (``DLCOMPARE_CPUINFO``) for a CPU without bfloat16
instructions, an ``nvidia-smi`` on PATH for GPUs of a given compute capability (as
tests/test_gpu_setup.py does for the driver)."""

from __future__ import annotations

import json
import os
import subprocess

import ml_dtypes
import numpy as np
import pytest

from adapters import discover
from harness import records
from harness.checks import conformance
from harness.measuring import cpu_features
from harness.running import precision
from harness.stats.cells import combine_all
from tests.conftest import REPO
from tests.fakes import report_text

TORCH = discover()["torch-eager"]

#: /proc/cpuinfo excerpts: the AMD EPYC of the issue (no bfloat16), a Sapphire Rapids Xeon, a Graviton3.
EPYC = "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse2 avx2 avx512f avx512_vnni\n"
XEON = "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) 8480+\nflags\t\t: avx512f avx512_bf16 amx_bf16 amx_tile\n"
GRAVITON3 = "processor\t: 0\nFeatures\t: fp asimd sve i8mm bf16 svebf16\nCPU implementer\t: 0x41\n"

SMI = """#!/bin/sh
# Test double for nvidia-smi: one GPU of compute capability {cap}.
case "$*" in
  *compute_cap*) echo "{cap}, {name}" ;;
  *) echo "NVIDIA-SMI stand-in" ;;
esac
"""


def test_native_bf16_on_the_cpu_follows_its_flags():
    native, why = cpu_features.cpu_bf16(EPYC)
    assert not native and "avx512_bf16" in why and "/proc/cpuinfo" in why
    assert cpu_features.cpu_bf16(XEON) == (True, "the CPU has avx512_bf16, amx_bf16")
    assert cpu_features.cpu_bf16(GRAVITON3) == (True, "the CPU has bf16")


@pytest.mark.parametrize(
    ("cap", "name", "native"),
    [("8.0", "NVIDIA A100-SXM4-80GB", True), ("9.0", "NVIDIA H100 80GB HBM3", True), ("7.5", "Tesla T4", False)],
)
@pytest.mark.workers
def test_native_bf16_on_a_gpu_follows_its_compute_capability(tmp_path, monkeypatch, cap, name, native):
    exe = tmp_path / "nvidia-smi"
    exe.write_text(SMI.format(cap=cap, name=name))
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    precision._cuda_native.cache_clear()
    try:
        found, why = precision.native("bf16", "cuda")
        assert found is native and name in why and cap in why
        cell = {"precision": "bf16", "device_requested": "cuda"}
        reason = precision.skip_reason(cell, conformance.spec_of(("mlp", ())))
        assert (reason is None) is native
        if not native:
            assert "below 8.0" in reason and "--force-precision" in reason
    finally:
        precision._cuda_native.cache_clear()
    assert precision.parse_compute_cap("") == (None, "the GPU")
    assert precision.cuda_bf16(None)[0] is None, "unknown support runs (and the record says what ran)"


def test_skip_rules(tmp_path, monkeypatch):
    (tmp_path / "cpuinfo").write_text(EPYC)
    monkeypatch.setenv(cpu_features.CPUINFO_ENV, str(tmp_path / "cpuinfo"))
    mlp, decode = conformance.spec_of(("mlp", ())), conformance.spec_of(("rnn-decode", ()))
    cell = {"precision": "bf16", "device_requested": "cpu"}
    assert "emulated here, not native: the CPU has no bfloat16" in precision.skip_reason(cell, mlp)
    assert precision.skip_reason({**cell, "force_precision": True}, mlp) is None
    assert "inference step runs float32" in precision.skip_reason({**cell, "force_precision": True}, decode)
    assert precision.skip_reason({**cell, "precision": "fp32"}, mlp) is None
    (tmp_path / "cpuinfo").write_text(XEON)
    assert precision.skip_reason(cell, mlp) is None


@pytest.mark.skipif(not TORCH.available, reason=str(TORCH.unavailable))
def test_bench_skips_emulated_bf16_unless_forced(python, tmp_path):
    """A real bench of torch-eager on mlp as if on the issue's EPYC: skipped with the reason; with
    --force-precision it runs, in bf16, and its record names autocast."""
    (tmp_path / "cpuinfo").write_text(EPYC)
    env = dict(os.environ, **{cpu_features.CPUINFO_ENV: str(tmp_path / "cpuinfo")})
    base = ["-m", "harness", "bench", "--framework", "torch-eager", "--workload", "mlp", "--device", "cpu"]
    base += ["--precision", "bf16", "--set", "num_batches=4", "--rounds", "1", "--out", str(tmp_path)]

    def bench(*extra: str) -> dict:
        proc = subprocess.run([python, *base, *extra], cwd=REPO, env=env, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr[-3000:]
        (record,) = combine_all(records.load(tmp_path / extra[-1] / records.RESULTS))
        return record

    skipped = bench("--run-id", "emulated")
    assert skipped["status"] == "skipped" and skipped["precision"] == "bf16"
    assert "bf16 is emulated here, not native" in skipped["reason"] and "--force-precision" in skipped["reason"]
    forced = bench("--force-precision", "--run-id", "forced")
    assert forced["status"] == "ok" and forced["precision"] == "bf16", forced.get("reason")
    assert forced["settings"]["mixed_precision"].startswith("torch.autocast(bfloat16)")
    assert forced["loss_last"] < forced["loss_first"]
    env_json = json.loads((tmp_path / "forced" / records.ENV).read_text())
    peak = env_json["peaks"]["cpu"]
    assert env_json["precision"] == "bf16" and "torch" in peak["matmul_gflops_by"]
    # the CPU's flags say bfloat16 is emulated: its matmul is not timed (minutes), float32 bounds the cells
    assert "torch bf16" not in peak["matmul_gflops_by"] and "no bfloat16 instructions" in peak["bf16_emulated"]
    report = report_text(tmp_path / "forced")
    assert "`bf16`: mixed precision" in report and "This run was forced" in report
    assert "float32 (bfloat16 not timed: emulated here, the CPU has no bfloat16 instructions" in report


@pytest.mark.slow
def test_bf16_allowance_is_derived_from_bf16_runs_of_the_reference():
    """The bf16 allowance is FACTOR x the spread of the reference trained in bfloat16 compute
    from float32 master weights (conformance.bf16_train), never below FLOOR; and it still fails
    a trajectory whose master weights are kept in bfloat16."""
    spec = conformance.spec_of(("mlp", tuple(conformance.CHECK_OVERRIDES)))
    runs = conformance.float32_runs(spec, "bf16")
    assert len(runs) == len(conformance.BF16_RUNS) == len(conformance.FLOAT32_RUNS)
    measured = [conformance.shadow(spec, losses, trajectory) for losses, trajectory in runs]
    allowed = conformance.allowance(spec, "bf16")
    worst_loss = max(float(np.max(m.loss_errors)) for m in measured)
    assert allowed.loss == pytest.approx(max(conformance.FLOOR, conformance.FACTOR * worst_loss))
    worst_step = max(m.step_error for m in measured)
    assert allowed.step == pytest.approx(max(conformance.FLOOR, conformance.FACTOR * worst_step))
    fp32 = conformance.allowance(spec)
    assert all(allowed.updates[k] > fp32.updates[k] for k in fp32.updates), "bf16 rounds coarser than float32"
    assert all(s.dtype == np.float32 for s in runs[0][1][-1].values()), "float32 master weights"

    # The same training with the master weights rounded to bfloat16 after every update fails.
    p0, data = spec.init_params(), spec.batches()
    losses, trajectory = conformance.bf16_train(spec, p0, conformance.SNAPSHOT, data)
    rounded = [{k: v.astype(ml_dtypes.bfloat16).astype(np.float32) for k, v in snap.items()} for snap in trajectory]
    rounded[0] = trajectory[0]
    result = conformance.as_result(losses, rounded) | {"precision": np.asarray("bf16")}
    verdicts = {c.name: c for c in conformance.evaluate(spec, result)}
    assert not verdicts["parameter updates of the first 5 steps"].passed
    good = conformance.as_result(losses, trajectory) | {"precision": np.asarray("bf16")}
    assert all(c.passed for c in conformance.evaluate(spec, good) if not c.name.startswith("loss falls"))


def test_bf16_variants_are_one_constant_and_run_in_the_float32_workers():
    chosen = conformance.all_variants()
    bf16 = [v for v in chosen if conformance.precision_of(v) == "bf16"]
    assert [v[0] for v in bf16] == list(conformance.BF16_WORKLOADS)
    assert [conformance.variant_id(v) for v in bf16] == [f"{w}-bf16" for w in conformance.BF16_WORKLOADS]
    cell = conformance.check_cell(TORCH, bf16[0])
    assert cell["precision"] == "bf16" and not any(o.startswith("precision=") for o in cell["overrides"])
    small = (*conformance.CHECK_OVERRIDES, *conformance.BF16_OVERRIDES)
    assert conformance.spec_of(bf16[0]) == conformance.spec_of((bf16[0][0], small))


def test_an_adapter_without_a_bf16_mechanism_is_skipped_not_run_in_float32():
    class NoMixedPrecision(TORCH.cls):
        precisions = ("fp32", "tf32")

    assert NoMixedPrecision().precision_reason("bf16") == "torch-eager has no bf16 mechanism (it runs fp32, tf32)"
    assert TORCH.cls().precision_reason("bf16") is None and NoMixedPrecision().precision_reason("fp32") is None


#: Each framework's own TF32 switch, read inside the worker after ``setup``: True on, False off.
TF32_READERS = {
    "torch": "import torch; b = torch.backends; m, c = b.cuda.matmul.fp32_precision, b.cudnn.conv.fp32_precision\n"
    "flag = {('tf32', 'tf32'): True, ('ieee', 'ieee'): False}.get((m, c), (m, c))",
    "jax": "import jax; p = jax.config.jax_default_matmul_precision\n"
    "flag = {'tensorfloat32': True, 'highest': False}.get(p, p)",
    "tensorflow": "import tensorflow as tf; flag = tf.config.experimental.tensor_float_32_execution_enabled()",
}


def _tf32_backend(info) -> str:
    """The framework whose switch an adapter sets: Keras's and Flax's are their backend's."""
    env = info.cls.worker_env(1, "cpu")
    return {"keras": env.get("KERAS_BACKEND", "tensorflow"), "flax": "jax"}.get(info.framework, info.framework)


@pytest.mark.frameworks
def test_tf32_is_on_for_precision_tf32_and_off_for_fp32_in_every_adapter():
    """Options(precision=...) through each adapter's setup, then the framework's own switch read in
    its worker environment: fp32 turns TF32 off (also after tf32 turned it on in that process)."""
    from harness.running import runner

    groups: dict[tuple, list[str]] = {}
    for name, info in discover().items():
        if info.available and "tf32" in info.cls.precisions:
            env = tuple(sorted(info.cls.worker_env(1, "cpu").items()))
            groups.setdefault((runner.interpreter(info, {}), env), []).append(name)
    assert {_tf32_backend(discover()[n]) for names in groups.values() for n in names} >= {"torch", "jax"}
    found = {}
    for (python, env), names in groups.items():
        script = ["import json; from adapters import discover; from adapters.base import Options",
                  "from workloads import get_workload; spec = get_workload('mlp'); found = {}"]  # fmt: skip
        for name in names:
            reader = TF32_READERS[_tf32_backend(discover()[name])].replace("\n", "\n    ")
            script += [
                "for p in ('fp32', 'tf32', 'fp32'):",
                f"    a = discover()[{name!r}].cls()",
                "    a.setup(spec, spec.init_params(), 'cpu', Options(threads=1, precision=p))",
                f"    {reader}",
                f"    found.setdefault({name!r}, []).append(flag)",
            ]
        script.append("print(json.dumps(found))")
        proc = subprocess.run(
            [python, "-c", "\n".join(script)], cwd=REPO, env=dict(os.environ, **dict(env)),
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        found.update(json.loads(proc.stdout.strip().splitlines()[-1]))
    assert found and all(flags == [False, True, False] for flags in found.values()), found
