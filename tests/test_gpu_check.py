"""make gpu-check's own logic: the steps it plans (INSTALL=0, the bench's budget) and a summary that
survives a run stopped part-way. The whole check on a machine without a GPU is in test_gpu_setup."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from harness.checks import gpu_check


def test_no_install_lists_this_interpreters_frameworks_and_judges_neither_way(tmp_path):
    ok, found = gpu_check.check_preinstalled(tmp_path)
    assert ok is None  # no lock put them there: "not checked", neither ok nor failed
    assert found.startswith(f"not checked (INSTALL=0): {sys.executable}")
    written = json.loads((tmp_path / "install.json").read_text())
    assert written["python"] == sys.executable and written["frameworks"] == gpu_check.frameworks_here()
    assert "torch" in written["frameworks"]  # this suite's environment holds torch


def test_the_steps_carry_the_benchs_budget_and_the_no_install_checks():
    made = {s.name: s for s in gpu_check.steps("2m", install=True)}
    image = {s.name: s for s in gpu_check.steps("2m", install=False)}
    assert list(made) == list(image) == [s.name for s in gpu_check.STEPS]
    assert "(budget 2m)" in made["bench"].verifies and gpu_check.BENCH_BUDGET not in made["bench"].verifies
    assert made["install"].run is gpu_check.check_install
    assert image["install"].run is gpu_check.check_preinstalled
    assert image["doctor"].run is not gpu_check.check_doctor  # absent frameworks listed, not failed
    assert [s.gpu_only for s in made.values()] == [s.gpu_only for s in image.values()]


def test_the_summary_is_written_after_every_step_so_a_stopped_run_keeps_what_it_finished(tmp_path, monkeypatch):
    seen = []

    def first(out: Path) -> tuple[bool, str]:
        return True, "fine"

    def second(out: Path) -> tuple[bool, str]:
        seen.append((out / "summary.md").read_text())  # what a run stopped here would leave
        raise KeyboardInterrupt  # the run is killed part-way

    steps = (
        gpu_check.Step("first", "does one thing", first, gpu_only=False),
        gpu_check.Step("second", "does another", second, gpu_only=False),
    )
    monkeypatch.setattr(gpu_check, "steps", lambda budget, install: steps)
    with pytest.raises(KeyboardInterrupt):
        gpu_check.run(tmp_path, gpu=False)
    (summary,) = seen
    assert "- ok first: does one thing. Found: fine" in summary
    assert "- not reached second: does another" in summary
    after = (tmp_path / "summary.md").read_text()
    assert "- ok first: does one thing. Found: fine" in after
    assert "- interrupted second: does another" in after and "not reached second" not in after


def test_a_step_not_checked_counts_as_neither_passed_nor_failed(tmp_path, monkeypatch):
    steps = (
        gpu_check.Step("install", "is in place", lambda out: (None, "not checked (INSTALL=0)"), gpu_only=False),
        gpu_check.Step("doctor", "is healthy", lambda out: (False, "not ok: x"), gpu_only=False),
    )
    monkeypatch.setattr(gpu_check, "steps", lambda budget, install: steps)
    assert gpu_check.run(tmp_path, gpu=False) == 1
    summary = (tmp_path / "summary.md").read_text()
    assert "- not checked install: is in place. Found: not checked (INSTALL=0)" in summary
    assert "- FAILED doctor: is healthy. Found: not ok: x" in summary
    monkeypatch.setattr(gpu_check, "steps", lambda budget, install: steps[:1])
    assert gpu_check.run(tmp_path, gpu=False) == 0


def test_an_image_without_tensorflow_lists_keras_tf_absent_and_still_checks_the_other_keras_adapters(
    tmp_path, monkeypatch
):
    """INSTALL=0 on an image without TensorFlow: the libraries step names the absent adapters (by
    adapter, not framework) and maps the others', keras-torch and keras-jax among them."""
    from types import SimpleNamespace

    adapters = {
        "keras-torch": SimpleNamespace(available=True),
        "keras-jax": SimpleNamespace(available=True),
        "keras-tf": SimpleNamespace(available=False),
        "tf-function": SimpleNamespace(available=False),
    }
    asked: list[list[str]] = []

    def maps(found, threads, names):
        asked.append(list(names))
        return [{"adapter": n, "verdict": "ok"} for n in names]

    monkeypatch.setattr(gpu_check, "discover", lambda: adapters)
    monkeypatch.setattr(gpu_check.doctor, "library_maps", maps)
    monkeypatch.setattr(gpu_check.doctor, "render_maps", lambda rows: "")
    ok, said = gpu_check.check_libraries(tmp_path, installed_only=True)
    assert asked == [["keras-torch", "keras-jax"]]
    assert (
        ok
        and said == "2 framework builds, one CUDA major each; not installed here: keras-tf, tf-function (libraries.txt)"
    )
    # after the install step (no INSTALL=0) the locks put every framework there: every adapter takes the step
    ok, said = gpu_check.check_libraries(tmp_path, installed_only=False)
    assert asked[-1] == list(adapters) and "not installed here" not in said


def test_steps_runs_only_the_named_steps_and_lists_the_others_as_left_out(tmp_path, monkeypatch, capsys):
    ran = []
    steps = tuple(
        gpu_check.Step(n, f"checks {n}", lambda out, n=n: (ran.append(n), (True, "fine"))[1], gpu_only=False)
        for n in ("doctor", "cuda-tests", "bench")
    )
    monkeypatch.setattr(gpu_check, "steps", lambda budget, install: steps)
    stopped = []

    def stop(out: Path) -> tuple[bool, str]:
        stopped.append((out / "summary.md").read_text())  # what a run stopped here would leave
        raise KeyboardInterrupt

    stopping = (steps[0], gpu_check.Step("kernel-jit", "k", stop, gpu_only=False), *steps[1:])
    with monkeypatch.context() as m:
        m.setattr(gpu_check, "steps", lambda budget, install: stopping)
        with pytest.raises(KeyboardInterrupt):
            gpu_check.run(tmp_path, gpu=False, only=["doctor", "kernel-jit", "bench"])
    assert stopped[0].splitlines()[-4:] == [
        "- ok doctor: checks doctor. Found: fine",
        "- not reached kernel-jit: k",
        "- left out cuda-tests (not in --steps): checks cuda-tests",
        "- not reached bench: checks bench",
    ]
    ran.clear()
    assert gpu_check.run(tmp_path, gpu=False, only=["bench", "doctor"]) == 0
    assert ran == ["doctor", "bench"]  # the planned order, whatever order --steps names them in
    summary = (tmp_path / "summary.md").read_text()
    assert "- left out cuda-tests (not in --steps): checks cuda-tests" in summary
    assert "- ok bench: checks bench. Found: fine" in summary
    with pytest.raises(SystemExit) as exited:
        gpu_check.main([str(tmp_path / "x"), "--steps", "bench,tests"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "--steps 'bench,tests': no step named tests" in err and "cuda-tests, bench, compute-cache" in err
    assert not (tmp_path / "x").exists()  # rejected before any step ran
