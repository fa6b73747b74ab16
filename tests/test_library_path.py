"""A CUDA library folder of the wrong major on LD_LIBRARY_PATH: found by the doctor
(harness.checks.doctor.library_path_problems over harness.measuring.cuda_libraries), and a bench
with GPU cells refuses to start (harness.session). Stand-ins: a folder of empty files named as
CUDA's libraries, and the environments a GPU variant records."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.checks import doctor
from harness.measuring import cuda_libraries
from harness.running import executors
from harness.running.rounds import Run
from harness.session import Session
from tests.conftest import ADAPTERS

#: The cuda13 variant's environments, as harness.install.environments.describe gives them.
CUDA13 = {
    "main": {"folder": "/repo/.venv", "python": "/repo/.venv/bin/python", "cuda": 13, "frameworks": []},
    "tf": {"folder": "/repo/.venv-tf", "python": "/repo/.venv-tf/bin/python", "cuda": 12, "frameworks": ["tensorflow"]},
}
CPU = {"main": {"folder": "/repo/.venv", "python": "/repo/.venv/bin/python", "cuda": None, "frameworks": []}}


def _folder(root: Path, *names: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name in names:
        (root / name).write_bytes(b"")
    return root


def test_the_folders_on_the_path_and_the_cuda_major_of_their_libraries(tmp_path):
    runtime12 = _folder(tmp_path / "lib12", "libcudart.so.12", "libcudnn.so.9", "libz.so.1")
    toolkit13 = _folder(tmp_path / "cuda-13.0" / "lib64", "libcublas.so.13")
    unknown = _folder(tmp_path / "other", "libcudnn.so.9")  # cuDNN's soname says no CUDA major
    path = f"{runtime12}::{tmp_path / 'absent'}:{toolkit13}:{unknown}:{runtime12}"
    assert cuda_libraries.library_path_majors(path) == {
        str(runtime12): {"libraries": ["libcudart.so.12", "libcudnn.so.9"], "majors": [12]},
        str(toolkit13): {"libraries": ["libcublas.so.13"], "majors": [13]},
        str(unknown): {"libraries": ["libcudnn.so.9"], "majors": []},
    }


def test_a_cuda_12_runtime_on_the_path_is_wrong_for_the_cuda_13_environment(tmp_path):
    fake = _folder(tmp_path / "lib", "libcudart.so.12")
    (line,) = doctor.library_path_problems(f"/nowhere:{fake}", CUDA13)
    assert line.startswith(f"LD_LIBRARY_PATH holds {fake}, CUDA 12 libraries (libcudart.so.12)")
    assert "the main environment (/repo/.venv) expects CUDA 13" in line
    assert line.endswith(f"remove {fake} from LD_LIBRARY_PATH")
    toolkit13 = _folder(tmp_path / "cuda-13.0" / "lib64", "libcublas.so.13")
    (line,) = doctor.library_path_problems(str(toolkit13), CUDA13)  # wrong for TensorFlow's CUDA 12
    assert "the tf environment (/repo/.venv-tf) expects CUDA 12" in line
    assert doctor.library_path_problems(str(fake), CPU) == []  # CPU builds load no CUDA library
    assert doctor.library_path_problems("", CUDA13) == []


def test_the_doctor_lists_the_folder_and_fails(monkeypatch, tmp_path):
    fake = _folder(tmp_path / "lib", "libcudart.so.12")
    monkeypatch.setenv("LD_LIBRARY_PATH", str(fake))
    monkeypatch.setattr(doctor.environments, "describe", lambda: CUDA13)
    found = doctor.diagnose(ADAPTERS, 1, names=[])  # no framework row: the path alone
    assert found["frameworks"] == [] and len(found["library_path"]) == 1
    assert not doctor.healthy(found)
    assert found["library_path"][0] in doctor.render(found)
    monkeypatch.delenv("LD_LIBRARY_PATH")
    assert doctor.healthy(doctor.diagnose(ADAPTERS, 1, names=[]))


def _session(tmp_path: Path, device: str) -> Session:
    cell = {"adapter": "torch-eager", "framework": "torch", "workload": "mlp", "device_requested": device}
    cell |= {"run_id": "r", "cell_id": f"torch-eager|mlp|{device}", "threads": 1, "overrides": []}
    return Session(tmp_path / "r", Run([cell], 1, 60.0), ADAPTERS, resumed=False)


def _no_executor(run_dir: Path):
    raise executors.ExecutorError("stopped before the rounds (the test's executor)")


@pytest.mark.parametrize("device", ["cuda", "auto"])
def test_a_gpu_bench_refuses_to_start_naming_the_folder_and_the_major(monkeypatch, capsys, tmp_path, device):
    fake = _folder(tmp_path / "lib", "libcudart.so.12")
    monkeypatch.setenv("LD_LIBRARY_PATH", str(fake))
    monkeypatch.setattr(doctor.environments, "describe", lambda: CUDA13)
    assert _session(tmp_path, device).execute(_no_executor) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: LD_LIBRARY_PATH holds {fake}, CUDA 12 libraries") and "expects CUDA 13" in err
    assert "stopped before the rounds" not in err  # refused before the executor, before anything ran
    assert not (tmp_path / "r" / "env.json").exists()


def test_a_cpu_bench_warns_and_goes_on(monkeypatch, capsys, tmp_path):
    fake = _folder(tmp_path / "lib", "libcudart.so.12")
    monkeypatch.setenv("LD_LIBRARY_PATH", str(fake))
    monkeypatch.setattr(doctor.environments, "describe", lambda: CUDA13)
    assert _session(tmp_path, "cpu").execute(_no_executor) == 2  # the test's executor stops it there
    err = capsys.readouterr().err
    assert f"warning: LD_LIBRARY_PATH holds {fake}" in err and "stopped before the rounds" in err
