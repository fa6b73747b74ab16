"""The GPU logic that needs no GPU: install-variant choice, lock files, device-status
classification with the real CPU builds, doctor, banner and --strict.

A stand-in ``nvidia-smi`` on PATH (a test double for the driver query only) plays a GPU machine;
everything else is real: the Makefile, pip's lock files, the frameworks' CPU builds in workers.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness import records
from harness.checks import doctor
from harness.install import lock, variant
from harness.measuring.gpu_util import cell_gpu
from harness.reporting import cells, sections, summary
from harness.running import runner
from harness.running.plan import select_devices
from tests.conftest import ADAPTERS, CPU_BUILDS, GPU_HERE, REPO, check_cell
from tests.fakes import report_text

STAND_IN = """#!/bin/sh
# Test double for nvidia-smi: one GPU, driver {driver}.
case "$*" in
  *name,driver_version,memory.total*) echo "NVIDIA H100 80GB HBM3, {driver}, 81559 MiB" ;;
  *driver_version*) echo "{driver}" ;;
  *) echo "NVIDIA-SMI stand-in, driver {driver}" ;;
esac
"""


def stand_in_path(tmp_path: Path, driver: str) -> str:
    """A PATH whose nvidia-smi reports one GPU with ``driver``."""
    folder = tmp_path / "fake-driver"
    folder.mkdir(exist_ok=True)
    exe = folder / "nvidia-smi"
    exe.write_text(STAND_IN.format(driver=driver))
    exe.chmod(0o755)
    return f"{folder}{os.pathsep}{os.environ['PATH']}"


def no_driver_path(tmp_path: Path) -> str:
    """PATH without any nvidia-smi. Where this machine has one, its folder (``/usr/bin`` on a
    standard driver install, beside ``make`` and ``sh``) is replaced by a folder of links to all
    of its other programs."""
    real = shutil.which("nvidia-smi")
    if real is None:
        return os.environ["PATH"]
    holder = Path(real).parent
    shadow = tmp_path / "no-driver-bin"
    shadow.mkdir(exist_ok=True)
    for entry in holder.iterdir():
        if entry.name != "nvidia-smi" and not (shadow / entry.name).exists():
            (shadow / entry.name).symlink_to(entry)
    return os.pathsep.join(str(shadow) if Path(p) == holder else p for p in os.environ["PATH"].split(os.pathsep))


@pytest.fixture
def gpu_machine(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", stand_in_path(tmp_path, "580.65.06"))


@pytest.fixture
def cpu_machine(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", no_driver_path(tmp_path))


# --- install variants -------------------------------------------------------------------


@pytest.mark.parametrize(
    "driver, expected",
    [
        (None, "cpu"),
        ("580.65.06", "cuda13"),
        ("590.1", "cuda13"),
        ("575.57.08", "cuda12"),
        ("525.60.13", "cuda12"),
        ("525.60", "cuda12"),
        ("525.53", "cpu"),
        ("470.256.02", "cpu"),
        ("not-a-version", "cpu"),
    ],
)
def test_variant_follows_the_driver(driver, expected):
    choice = variant.choose(driver, None if driver else "no nvidia-smi on PATH")
    assert choice.variant == expected
    assert choice.reason
    if expected == "cpu" and driver and driver[0].isdigit():
        assert "older than 525.60" in choice.reason


def run_make(tmp_path, path: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=path)
    env.pop("VARIANT", None)
    cmd = ["make", "-n", "--no-print-directory", f"VENV={tmp_path / 'venv'}", *args]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("driver, expected", [("580.65.06", "cuda13"), ("550.54.15", "cuda12"), (None, "cpu")])
@pytest.mark.workers
def test_make_install_chooses_the_variant_from_the_machine_and_says_why(tmp_path, driver, expected):
    path = stand_in_path(tmp_path, driver) if driver else no_driver_path(tmp_path)
    proc = run_make(tmp_path, path, "install")
    assert proc.returncode == 0, proc.stderr
    assert f"install variant: {expected} (" in proc.stderr
    assert (f"NVIDIA driver {driver}" if driver else "no NVIDIA driver") in proc.stderr
    assert f"-r locks/{expected}.txt" in proc.stdout
    # GPU variants make TensorFlow's CUDA 12 environment beside the main one, and record both.
    assert ("locks/$lock.txt" in proc.stdout and "tf:tf-cuda12" in proc.stdout) == (expected != "cpu")
    assert f"harness.install.environments --record {expected}" in proc.stdout


@pytest.mark.workers
def test_make_variant_override_and_a_bad_variant(tmp_path):
    proc = run_make(tmp_path, no_driver_path(tmp_path), "install", "VARIANT=cuda12")
    assert proc.returncode == 0 and "-r locks/cuda12.txt" in proc.stdout
    assert "install variant:" not in proc.stderr  # given, not chosen
    bad = run_make(tmp_path, no_driver_path(tmp_path), "install", "VARIANT=cuda11")
    assert bad.returncode != 0
    assert "VARIANT=cuda11 is not an install variant; valid: cpu cuda12 cuda13" in bad.stderr


PIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*==[\w.+!-]+$")


@pytest.mark.parametrize("name", variant.LOCK_NAMES)
def test_each_environment_has_a_lock_that_pins_what_its_in_file_asks_for(name):
    lines = (REPO / "locks" / f"{name}.txt").read_text().splitlines()
    body = [ln for ln in lines if ln and not ln.startswith("#")]
    options = [ln for ln in body if ln.startswith("--")]
    pins = [ln for ln in body if not ln.startswith("--")]
    assert all(PIN.match(p) for p in pins), [p for p in pins if not PIN.match(p)]
    names = [lock.requirement_name(p) for p in pins]
    assert len(names) == len(set(names)), "a package pinned twice"
    inputs = [ln for ln in (REPO / "locks" / f"{name}.in").read_text().splitlines() if ln and not ln.startswith("#")]
    assert options == [ln for ln in inputs if ln.startswith("--")]
    wanted = {lock.requirement_name(ln) for ln in inputs if not ln.startswith(("-", "#"))}
    assert wanted <= set(names)
    assert {"numpy", "pandas", "psutil", "nvidia-ml-py"} <= set(names)  # the harness's own, in every one
    environment = variant.lock_environment(name)
    frameworks = {"tensorflow", "keras"} if environment.frameworks else {"torch", "keras", "jax", "optax", "flax"}
    assert frameworks <= set(names)
    if name == "cpu":
        assert {"tensorflow-cpu", "pytest", "ruff"} <= set(names)
    elif not environment.frameworks:
        assert f"jax-cuda{environment.cuda}-plugin" in names and "tensorflow" not in names


def test_every_gpu_variant_keeps_one_cuda_major_per_environment():
    for name, environments in variant.ENVIRONMENTS.items():
        claimed = [f for e in environments for f in e.frameworks]
        assert len(claimed) == len(set(claimed)), name
        assert len([e for e in environments if not e.frameworks]) == 1, f"{name}: one environment takes the rest"
        assert {e.cuda for e in environments} == ({None} if name == "cpu" else {12, int(name[4:])} - {None})
        assert len({e.folder for e in environments}) == len(environments)
    proc = subprocess.run(
        [sys.executable, "-m", "harness.install.variant", "extra", "cuda13"], cwd=REPO, capture_output=True, text=True
    )
    assert proc.stdout.split() == ["tf:tf-cuda12"]


def test_lock_pins_keep_builds_portable():
    local = {
        "metadata": {"name": "torch", "version": "2.13.0+cpu"},
        "download_info": {"url": "file:///opt/wheels/t.whl"},
    }
    index = {"metadata": {"name": "torch", "version": "2.13.0+cu128"}, "download_info": {"url": "https://x/t.whl"}}
    assert lock.pin(local) == "torch==2.13.0"  # this machine's find-links choice is not the lock's
    assert lock.pin(index) == "torch==2.13.0+cu128"
    assert lock.registry_build("torch==2.13.0+cu128") == "torch==2.13.0"
    assert lock.requirement_name("tensorflow[and-cuda]==2.21.0") == "tensorflow"


@pytest.mark.skipif(
    variant.installed() is None and GPU_HERE, reason="make did not install here (a GPU image's own frameworks): no lock"
)
def test_the_installed_variants_lock_is_the_environment_the_suite_runs_in():
    """Same versions of the frameworks as the lock of the variant make installed here (its main
    environment: on a GPU variant TensorFlow is .venv-tf's, checked by its own workers)."""
    from importlib.metadata import version

    name = variant.ENVIRONMENTS[variant.installed() or "cpu"][0].lock
    pins = lock.pins_of(name)
    for dist in ("torch", "jax", "keras", "flax", "numpy", *(["tensorflow-cpu"] if name == "cpu" else [])):
        assert version(dist).split("+")[0] == pins[dist].split("+")[0], dist


# --- device status per cell, with the real CPU builds ---------------------------------------

FAMILIES = ["torch-eager", "tf-function", "jax-jit"]


@pytest.mark.frameworks
@pytest.mark.skipif(not CPU_BUILDS, reason="CUDA builds installed: no CPU-only build to catch")
@pytest.mark.parametrize("name", FAMILIES)
def test_cpu_only_build_on_a_gpu_machine_fails_with_the_install_command(name, gpu_machine):
    info = ADAPTERS[name]
    if not info.available:
        pytest.skip(info.unavailable)
    rec = runner.run_cell(info, check_cell(name, "mlp", "cuda") | {"cell_id": "x"}, timeout_s=300)
    assert rec["status"] == "failed", rec
    assert "CPU-only" in rec["reason"]
    assert "driver 580.65.06" in rec["reason"]
    assert "VARIANT=cuda13" in rec["reason"]


@pytest.mark.frameworks
@pytest.mark.skipif(GPU_HERE, reason="the stand-in hides nvidia-smi only: the frameworks would still see this GPU")
def test_no_gpu_on_the_machine_is_a_skip(cpu_machine):
    rec = runner.run_cell(ADAPTERS["torch-eager"], check_cell("torch-eager", "mlp", "cuda") | {"cell_id": "x"}, 300)
    assert rec["status"] == "skipped"
    assert rec["reason"].startswith("no NVIDIA GPU on this machine")


def test_auto_is_the_machines_gpu_for_every_adapter_alike():
    assert select_devices("auto", gpu_present=True) == ["cuda"]
    assert select_devices("auto", gpu_present=False) == ["cpu"]
    assert select_devices("auto,cpu", gpu_present=True) == ["cuda", "cpu"]


def test_nvml_samples_the_gpu_the_cell_was_given():
    assert cell_gpu({}) == ("index", "0")
    assert cell_gpu({"CUDA_VISIBLE_DEVICES": "3,1"}) == ("index", "3")
    assert cell_gpu({"CUDA_VISIBLE_DEVICES": "GPU-8f2c-aa,GPU-1"}) == ("uuid", "GPU-8f2c-aa")
    assert cell_gpu({"CUDA_VISIBLE_DEVICES": "MIG-5b1e"}) == ("uuid", "MIG-5b1e")
    gpu_env = runner.worker_env(ADAPTERS["torch-eager"], {"threads": 1, "device_requested": "cuda"})
    assert gpu_env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"  # framework index == NVML index
    assert int(gpu_env["CUDA_CACHE_MAXSIZE"]) >= 2**30  # TF's PTX, JIT-compiled once, stays cached
    cpu_env = runner.worker_env(ADAPTERS["torch-eager"], {"threads": 1, "device_requested": "cpu"})
    assert cpu_env["CUDA_VISIBLE_DEVICES"] == ""


def test_a_window_shorter_than_the_sampling_interval_still_gets_a_utilisation_sample(monkeypatch):
    """A stand-in for NVML (the one piece this machine lacks): a 2 ms window under a 1 s interval."""
    import types

    from harness.measuring.gpu_util import UtilSampler

    calls = []
    nvml = types.SimpleNamespace(
        nvmlInit=lambda: calls.append("init"),
        nvmlShutdown=lambda: calls.append("shutdown"),
        nvmlDeviceGetHandleByIndex=lambda i: f"gpu{i}",
        nvmlDeviceGetName=lambda h: "NVIDIA H100 80GB HBM3",
        nvmlDeviceGetUtilizationRates=lambda h: types.SimpleNamespace(gpu=97),
    )
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    sampler = UtilSampler(interval_s=1.0)
    for _ in range(2):  # a resident worker enters it around each block: samples add up
        with sampler:
            time.sleep(0.002)
    assert sampler.samples == [97, 97] and sampler.mean == 97
    assert sampler.gpu == "0: NVIDIA H100 80GB HBM3" and calls == ["init", "shutdown"] * 2
    assert UtilSampler().interval_s <= 0.01


def test_jax_platform_is_set_per_cell():
    jax = ADAPTERS["jax-jit"].cls
    assert jax.worker_env(2, "cpu")["JAX_PLATFORMS"] == "cpu"
    assert jax.worker_env(2, "cuda")["JAX_PLATFORMS"] == "cuda"
    assert "--xla_gpu_autotune_level=4" in jax.worker_env(2, "cuda")["XLA_FLAGS"]
    assert ADAPTERS["keras-jax"].cls.worker_env(2, "cuda")["JAX_PLATFORMS"] == "cuda"


# --- doctor -------------------------------------------------------------------------------


def test_doctor_next_steps():
    gpu, old, none = variant.choose("580.65.06"), variant.choose("470.1"), variant.choose(None, "no nvidia-smi")
    cpu_build = {"versions": {"torch": "2.13.0+cpu"}, "build": {"cuda": None, "gpus": []}}
    cuda_build = {"build": {"cuda": "13.0", "cudnn": "9.20.0", "gpus": ["NVIDIA H100"], "error": None}}
    broken = {"build": {"cuda": "13.0", "gpus": [], "error": "RuntimeError: driver too old (found 12080)"}}
    assert doctor.next_step(cpu_build, none) == "ok (no GPU here)"
    assert doctor.next_step(cpu_build, gpu) == "CPU-only build on a GPU machine: " + variant.INSTALL_HINT.format(
        variant="cuda13"
    )
    assert "update the driver" in doctor.next_step(cpu_build, old)
    assert doctor.next_step(cuda_build, gpu) == "ok"
    assert doctor.next_step(broken, gpu) == "CUDA build sees no GPU: RuntimeError: driver too old (found 12080)"
    assert doctor.next_step({"error": "not installed: x"}, gpu) == "not installed: x"
    assert doctor.build_text(cuda_build["build"]) == "CUDA 13.0, cuDNN 9.20.0"
    assert doctor.build_text(cpu_build["build"]) == "CPU-only"


@pytest.mark.frameworks
@pytest.mark.skipif(not CPU_BUILDS, reason="CUDA builds installed: make gpu-check runs the doctor on the GPU")
def test_doctor_asks_the_real_build_and_names_the_fix(gpu_machine):
    found = doctor.diagnose(ADAPTERS, 1, ["torch-eager"])
    (row,) = found["frameworks"]
    assert row["framework"] == "torch" and row["build"] == "CPU-only"
    assert row["versions"]["torch"].startswith("2.13.0")
    assert row["next_step"] == "CPU-only build on a GPU machine: " + variant.INSTALL_HINT.format(variant="cuda13")
    assert found["gpus"][0]["driver"] == "580.65.06" and found["variant_for_machine"] == "cuda13"
    assert not doctor.healthy(found)
    text = doctor.render(found)
    assert "GPUs: NVIDIA H100 80GB HBM3 (driver 580.65.06" in text
    assert re.search(r"torch \(torch-eager\)\s+torch 2\.13\.0\S*\s+CPU-only", text)


# --- reports and --strict -------------------------------------------------------------------


def _rec(adapter, device, status="ok", median=0.01, reason=""):
    rec = {"adapter": adapter, "workload": "mlp", "device_requested": device, "status": status, "reason": reason}
    if status == "ok":
        rec |= {"device": device, "median_s": median, "ci_low_s": median * 0.99, "ci_high_s": median * 1.01}
    return rec


def test_summary_and_banner_name_who_is_missing():
    recs = [
        _rec("torch-eager", "cuda", median=0.002),
        _rec("jax-jit", "cuda", median=0.004),
        _rec("tf-function", "cuda", "failed", reason="no CUDA device visible to tensorflow: CPU-only build"),
        _rec("tf-eager", "cuda", "failed", reason="no CUDA device visible to tensorflow: CPU-only build"),
        _rec("torch-eager", "cpu", median=0.01),
    ]
    (sentence,) = [s for s in summary.winner_sentences(recs) if s.startswith("On cuda")]
    assert "torch-eager on mlp (2 ms/step, 2.00x ahead of jax-jit)" in sentence
    (gap,) = summary.missing_sentences(recs)
    assert "failed: tf-eager and tf-function on mlp" in gap
    assert cells.missing_pairs(recs) == [
        ("cuda", ["tf-eager", "tf-function"], "failed: no CUDA device visible to tensorflow: CPU-only build")
    ]
    text = "\n".join(sections.banner(recs))
    assert text.startswith("> **Not in this comparison:** 2 requested adapter x device pairs produced no result.")
    assert "> - **tf-eager, tf-function** on cuda: failed: no CUDA device visible" in text
    assert sections.banner([_rec("torch-eager", "cpu")]) == []


def bench(python, tmp_path, path, *args):
    env = dict(os.environ, DLCOMPARE_EXTRA_ADAPTERS="tests.fault_adapters", PATH=path)
    cmd = [python, "-m", "harness", "bench", "--out", str(tmp_path / "runs"), "--run-id", "r", "--profile", "quick"]
    cmd += ["--workload", "mlp", *args]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


def test_strict_fails_when_a_gpu_is_there_but_unusable_and_the_report_says_so(python, tmp_path):
    gpu = bench(python, tmp_path / "gpu", stand_in_path(tmp_path, "580.65.06"), "--framework", "fault-ok")
    assert gpu.returncode == 0, gpu.stderr
    run = tmp_path / "gpu" / "runs" / "r"
    (rec,) = records.load(run / records.RESULTS)
    assert rec["device_requested"] == "cuda"  # auto on a GPU machine means the GPU
    assert rec["status"] == "failed" and "driver 580.65.06" in rec["reason"]
    assert "> **Not in this comparison:**" in report_text(run)
    env = json.loads((run / records.ENV).read_text())
    assert env["doctor"]["gpus"][0]["driver"] == "580.65.06"
    assert env["doctor"]["frameworks"][0]["adapter"] == "fault-ok"
    gpu_path = stand_in_path(tmp_path, "580.65.06")
    assert bench(python, tmp_path / "gpu2", gpu_path, "--framework", "fault-ok", "--strict").returncode == 1

    cpu = bench(python, tmp_path / "cpu", no_driver_path(tmp_path), "--framework", "fault-ok", "--device", "cuda")
    (rec,) = records.load(tmp_path / "cpu" / "runs" / "r" / records.RESULTS)
    assert rec["status"] == "skipped" and rec["reason"].startswith("no NVIDIA GPU on this machine")
    assert cpu.returncode == 0


def test_a_sync_that_leaves_gpu_work_queued_fails_the_cell(python, tmp_path):
    """Harness side of the sync check: a stand-in adapter whose device reports queued work
    after sync (the real-GPU proof is tests/test_cuda.py's fault-gpu-nosync)."""
    proc = bench(python, tmp_path, no_driver_path(tmp_path), "--framework", "fault-busy", "--device", "cuda")
    assert proc.returncode == 0, proc.stderr
    (rec,) = records.load(tmp_path / "runs" / "r" / records.RESULTS)
    assert rec["status"] == "failed"
    assert rec["reason"] == "fault-busy.sync() returned while the GPU still had queued work; its step times read low"


@pytest.mark.frameworks
def test_tensorflow_places_integer_inputs_as_int64():
    """TF keeps int32 tensors placed on a GPU in host memory; labels must not be int32."""
    script = (
        "from adapters.tf_function import TfFunction; from adapters.base import Options; "
        "from workloads import get_workload; spec = get_workload('rnn-caption'); a = TfFunction(); "
        "a.setup(spec, spec.init_params(), 'cpu', Options(threads=1)); "
        "print(sorted({str(t.dtype.name) for t in a.to_device(spec.batches()[0]).values()}))"
    )
    env = dict(os.environ, **ADAPTERS["tf-function"].cls.worker_env(1, "cpu"))
    python = runner.interpreter(ADAPTERS["tf-function"], {})  # TensorFlow's environment on a GPU variant
    out = subprocess.run([python, "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "int32" not in out.stdout and "int64" in out.stdout


def test_peak_is_measured_in_the_runs_precision(tmp_path, monkeypatch):
    """The peak's process (``python -m harness.measuring.peak DEVICE OUT PRECISION``) times TF32
    matmuls on CUDA only for a tf32 run, bfloat16 ones only for a bf16 run, and writes the
    precision beside its figures. The timing is stood in for: every bench's peak process times
    it for real (test_cli's asserts each library's matmul)."""
    from harness.measuring import peak

    asked = []
    monkeypatch.setattr(peak, "measure_cpu", lambda bf16: asked.append(("cpu", bf16)) or {"matmul_gflops": 1.0})
    monkeypatch.setattr(
        peak, "measure_cuda", lambda tf32, bf16: asked.append(("cuda", tf32, bf16)) or {"matmul_gflops": 2.0}
    )
    for device, precision in (("cpu", "tf32"), ("cuda", "tf32"), ("cuda", "fp32"), ("cpu", "bf16")):
        out = tmp_path / f"{device}-{precision}.json"
        assert peak.main([device, str(out), precision]) == 0
        assert json.loads(out.read_text())["precision"] == precision
    assert asked == [("cpu", False), ("cuda", True, False), ("cuda", False, False), ("cpu", True)]


@pytest.mark.workers
def test_variant_script_runs_without_the_environment(tmp_path):
    """The Makefile calls it with the system Python before any install: standard library only."""
    env = dict(os.environ, PATH=stand_in_path(tmp_path, "560.35.03"))
    proc = subprocess.run(
        [sys.executable, "-S", "-m", "harness.install.variant", "choose"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "cuda12"


# --- the CUDA libraries a worker mapped -------------------------------------------------------

SITE = "/opt/env/lib/python3.11/site-packages"
MAPS = f"""\
7f00-7f01 r-xp 00000000 08:01 11 {SITE}/torch/lib/libtorch_cuda.so
7f01-7f02 r-xp 00000000 08:01 12 {SITE}/nvidia/cu13/lib/libcudart.so.13
7f02-7f03 r--p 00001000 08:01 12 {SITE}/nvidia/cu13/lib/libcudart.so.13
7f03-7f04 r-xp 00000000 08:01 13 {SITE}/nvidia/cusparse/lib/libcusparse.so.12
7f04-7f05 r-xp 00000000 08:01 14 /usr/lib/x86_64-linux-gnu/libcuda.so.580.65.06
7f05-7f06 rw-p 00000000 00:00 0
7f06-7f07 r-xp 00000000 08:01 15 /usr/local/cuda-12.8/lib64/libcublasLt.so.12
"""


def test_mapped_cuda_libraries_and_their_majors():
    from harness.measuring import cuda_libraries as cl

    paths = cl.mapped(MAPS)
    assert paths == [
        f"{SITE}/nvidia/cu13/lib/libcudart.so.13",
        f"{SITE}/nvidia/cusparse/lib/libcusparse.so.12",
        "/usr/local/cuda-12.8/lib64/libcublasLt.so.12",
    ]  # the driver and the framework's own libraries are no CUDA major's
    assert cl.cuda_major(paths[0], "nvidia-cuda-runtime") == 13
    # the same soname in both majors: the wheel that installed it decides
    assert cl.cuda_major(paths[1], "nvidia-cusparse-cu12") == 12
    assert cl.cuda_major(paths[1], "nvidia-cusparse") == 13
    assert cl.cuda_major(paths[2], None) == 12
    assert cl.cuda_major("/somewhere/libcudnn.so.9", None) is None


def test_library_owners_come_from_the_installed_records(tmp_path, monkeypatch):
    from harness.measuring import cuda_libraries as cl

    site = tmp_path / "site"
    info = site / "nvidia_cusparse_cu12-12.5.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: nvidia-cusparse-cu12\nVersion: 12.5\n")
    (info / "RECORD").write_text("nvidia/cusparse/lib/libcusparse.so.12,,\n")
    lib = site / "nvidia/cusparse/lib/libcusparse.so.12"
    lib.parent.mkdir(parents=True)
    lib.write_bytes(b"")
    monkeypatch.setattr(sys, "path", [str(site)])
    found = cl.report(f"7f00-7f01 r-xp 00000000 08:01 13 {lib}\n")
    assert found == {"libraries": [{"path": str(lib), "owner": "nvidia-cusparse-cu12", "cuda": 12}], "majors": [12]}


@pytest.mark.frameworks
@pytest.mark.skipif(GPU_HERE, reason="a GPU is here: tests/test_cuda.py maps the libraries for real")
def test_the_libraries_worker_on_a_machine_without_a_gpu_says_why_it_mapped_nothing():
    (row,) = doctor.library_maps(ADAPTERS, 1, ["torch-eager"])
    assert row["libraries"] == [] and row["majors"] == []
    assert row["verdict"].startswith("no step on the GPU: no NVIDIA GPU on this machine")
    assert "/proc/self/maps" in doctor.MAPS_WOULD


@pytest.mark.frameworks
@pytest.mark.skipif(GPU_HERE, reason="a GPU is here: make gpu-check runs every step for real")
def test_gpu_check_runs_without_a_gpu_and_says_what_it_would_verify(python, tmp_path):
    from harness.checks import gpu_check

    env = dict(os.environ, PATH=no_driver_path(tmp_path))
    out = tmp_path / "gpu-check"
    proc = subprocess.run(
        [python, "-m", "harness.checks.gpu_check", str(out)], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = (out / "summary.md").read_text()
    assert summary.startswith("# make gpu-check: no NVIDIA GPU on this machine")
    for step in gpu_check.STEPS:  # one line per step: run here, or what it would verify on a GPU
        prefix = "- ok " if not step.gpu_only else "- would verify "
        assert f"{prefix}{step.name}: {step.verifies}" in summary
    assert {"install.json", "ownership.txt", "doctor.txt"} <= {p.name for p in out.iterdir()}
    assert "0 paths owned twice" in (out / "ownership.txt").read_text()


def test_the_no_driver_path_hides_nvidia_smi_and_keeps_every_other_program(tmp_path, monkeypatch):
    """On a GPU machine nvidia-smi sits in /usr/bin beside make: hiding it must not hide make."""
    bin_dir = tmp_path / "usr-bin"
    bin_dir.mkdir()
    for name in ("nvidia-smi", "make"):
        (bin_dir / name).write_text("#!/bin/sh\nexit 0\n")
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    path = no_driver_path(tmp_path)
    assert shutil.which("nvidia-smi", path=path) is None
    assert shutil.which("make", path=path) == str(tmp_path / "no-driver-bin" / "make")
