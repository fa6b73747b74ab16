"""Kernel JIT before timing (harness.running.kernel_jit): which builds ship only PTX for a GPU, the
driver that can compile it, the doctor's advice, the untimed warm-up and the report's sentence.
Stand-ins play the GPU (a compute capability, a driver version); the warm-up runs a real worker."""

from __future__ import annotations

import pytest

from adapters import discover
from harness.checks import doctor
from harness.install.variant import Choice
from harness.reporting import hardware
from harness.running import kernel_jit, runner

#: TensorFlow 2.21's wheel (tf.sysconfig.get_build_info()["cuda_compute_capabilities"], CUDA 12.5.1).
TF_221 = ["sm_60", "sm_70", "sm_75", "sm_80", "sm_89", "compute_90"]
#: A torch CUDA 13 wheel (torch.cuda.get_arch_list()).
TORCH_CU130 = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]
H100 = (9, 0)
NEED_H100 = {"gpu": "sm_90", "sass_newest": "sm_89", "ptx": "compute_90"}


@pytest.mark.parametrize(
    ("archs", "capability", "expected"),
    [
        (TF_221, H100, NEED_H100),  # the case: sm_89 SASS cannot run on sm_90
        (TF_221, (8, 0), None),  # A100: its own SASS
        (TF_221, (8, 6), None),  # sm_80 SASS runs on 8.6 (same major, older minor)
        (TF_221, (8, 9), None),  # L4, L40: sm_89
        (TF_221, (10, 0), {"gpu": "sm_100", "sass_newest": "sm_89", "ptx": "compute_90"}),  # PTX runs forward
        (TF_221, (7, 0), None),  # V100: sm_70
        (["sm_80", "compute_80"], (7, 5), {"gpu": "sm_75", "sass_newest": "sm_80", "ptx": None}),  # nothing runs
        (["sm_90a"], H100, None),  # an arch-specific build on its own GPU
        (["sm_90a"], (10, 0), {"gpu": "sm_100", "sass_newest": "sm_90", "ptx": None}),  # and nowhere else
        (TORCH_CU130, H100, None),
        ([], H100, None),  # the build does not say: nothing to judge
    ],
)
def test_a_build_needs_the_driver_to_jit_only_where_no_machine_code_runs_on_the_gpu(archs, capability, expected):
    assert kernel_jit.needed(archs, capability) == expected


def test_the_driver_floor_is_the_oldest_driver_of_the_toolkit_that_made_the_ptx():
    assert kernel_jit.driver_floor("12.5.1") == "555.42.02"  # TensorFlow 2.21's PTX
    assert kernel_jit.driver_floor("12.7") == "560.28.03"  # no 12.7 row: the newest below it
    assert kernel_jit.driver_floor("13.0") == "580.65.06"
    assert kernel_jit.driver_floor("11.2") is None and kernel_jit.driver_floor(None) is None


def test_a_driver_older_than_the_ptxs_toolkit_is_named_with_the_driver_to_install():
    said = kernel_jit.problem(NEED_H100, "12.5.1", "550.54.14")
    assert "driver 550.54.14 cannot JIT the build's CUDA 12.5.1 PTX (compute_90) for sm_90" in said
    assert "555.42.02 or newer" in said
    assert kernel_jit.problem(NEED_H100, "12.5.1", "580.65.06") is None
    nothing = {"gpu": "sm_75", "sass_newest": "sm_80", "ptx": None}
    assert "no machine code or PTX that runs on sm_75" in kernel_jit.problem(nothing, "12.5.1", "580.65.06")


def test_the_doctor_says_the_jit_happens_before_timing_or_which_driver_it_needs():
    result = {"build": {"cuda": "12.5.1", "gpus": ["NVIDIA H100 80GB HBM3"], "kernel_archs": TF_221}}
    new, old = Choice("cuda13", "driver >= 580", "580.65.06"), Choice("cuda12", "driver >= 525.60", "550.54.14")
    assert doctor.next_step(result, new, NEED_H100) == (
        "ok (no machine code for sm_90 (newest sm_89): the driver JIT-compiles its compute_90 PTX at first use, "
        "before timing)"
    )
    assert doctor.next_step(result, old, NEED_H100).startswith("driver 550.54.14 cannot JIT")
    assert doctor.next_step(result, new, None) == "ok"


def test_only_builds_the_driver_can_compile_are_warmed_up():
    rows = [
        {"framework": "tensorflow", "adapter": "tf-eager", "python": "/tf/python", "next_step": "ok (no ...)"},
        {"framework": "torch", "adapter": "torch-eager", "python": "/main/python", "next_step": "ok"},
        {"framework": "jax", "adapter": "jax-eager", "python": "/main/python", "next_step": "driver 550 cannot JIT"},
        {"framework": "flax", "adapter": "flax-nnx", "python": "/main/python", "next_step": "ok"},
    ]
    for row, need in zip(rows, [NEED_H100, None, NEED_H100, {**NEED_H100, "ptx": None}], strict=True):
        row["kernel_jit"] = need
    assert kernel_jit.needs_of(rows) == {"tf-eager": {"python": "/tf/python", "need": NEED_H100}}


def _cells(adapter: str, workloads: list[str], device: str = "cpu") -> list[dict]:
    info = discover()[adapter]
    base = {"adapter": adapter, "framework": info.framework, "graph": info.graph, "device_requested": device}
    return [base | {"threads": 1, "workload": w, "overrides": [], "precision": "fp32"} for w in workloads]


def _doctor_rows(names: list[str]) -> list[dict]:
    """The doctor's rows (harness.checks.doctor.diagnose) on an H100 with a CUDA 13 driver, one per
    named adapter, each build's kernel archs a stand-in: TensorFlow 2.21's wheel for the adapters
    that run TensorFlow (tf-eager, keras-tf), a CUDA 13 torch's for torch, none said for JAX."""
    adapters, machine = discover(), Choice("cuda13", "driver >= 580", "580.65.06")
    archs = {"tensorflow": TF_221, "torch": TORCH_CU130, "jax": []}
    rows = []
    for name in names:
        info = adapters[name]
        build = {
            "cuda": "12.5.1",
            "gpus": ["NVIDIA H100 80GB HBM3"],
            "kernel_archs": archs[kernel_jit.kernel_library(info)],
        }
        need = kernel_jit.needed(build["kernel_archs"], H100)
        python = runner.interpreter(info, {})
        row = {"framework": info.framework, "adapter": name, "python": python, "kernel_jit": need}
        rows.append(row | {"next_step": doctor.next_step({"build": build}, machine, need)})
    return rows


def test_each_adapter_runs_the_kernels_of_the_library_it_requires():
    adapters = discover()
    libraries = {name: kernel_jit.kernel_library(adapters[name]) for name in ("keras-tf", "keras-jax", "keras-torch")}
    assert libraries == {"keras-tf": "tensorflow", "keras-jax": "jax", "keras-torch": "torch"}
    assert kernel_jit.kernel_library(adapters["flax-nnx"]) == "jax"
    assert kernel_jit.kernel_library(adapters["tf-eager"]) == kernel_jit.kernel_library(adapters["tf-function"])
    # keras-tf's worker runs under TensorFlow's interpreter (a GPU variant's .venv-tf), as tf-eager's does
    assert kernel_jit.build_of(adapters["keras-tf"], {}) == kernel_jit.build_of(adapters["tf-eager"], {})


def test_a_keras_selection_plans_tensorflows_warm_up_through_keras_tf():
    """FRAMEWORK=keras: the doctor's rows are keras-jax's, keras-tf's and keras-torch's; only
    keras-tf's build (TensorFlow's) ships PTX alone for sm_90. Its warm-up runs keras-tf on
    TensorFlow's interpreter, not keras-jax (the framework's first adapter)."""
    names = ["keras-jax", "keras-tf", "keras-torch"]
    cells = [c for n in names for c in _cells(n, ["mlp", "cnn"], "cuda")]
    needs = kernel_jit.needs_of(_doctor_rows(names))
    assert list(needs) == ["keras-tf"]
    (planned,) = kernel_jit.plan(discover(), cells, needs)
    tf_python = runner.interpreter(discover()["keras-tf"], {})
    assert planned["adapter"] == "keras-tf" and planned["framework"] == "keras"
    assert planned["build"] == {"python": tf_python, "library": "tensorflow"}
    assert planned["need"] == NEED_H100 and planned["workloads"] == ["mlp", "cnn"]
    assert {c["adapter"] for c in planned["cells"]} == {"keras-tf"}
    assert {c["device_requested"] for c in planned["cells"]} == {"cuda"}


def test_tensorflows_need_found_through_tf_eager_warms_keras_tf_of_a_keras_run():
    """The need is the build's, whichever adapter the doctor asked: a TensorFlow row (tf-eager)
    covers keras-tf, which runs the same TensorFlow."""
    needs = kernel_jit.needs_of(_doctor_rows(["tf-eager", "torch-eager"]))
    cells = _cells("keras-jax", ["mlp"], "cuda") + _cells("keras-tf", ["mlp"], "cuda")
    assert [p["adapter"] for p in kernel_jit.plan(discover(), cells, needs)] == ["keras-tf"]


def test_every_adapter_on_tensorflows_build_is_warmed_by_that_tensorflow():
    """FRAMEWORK=all: tf-eager and tf-function are one kind (one worker), keras-tf another, all three
    on TensorFlow's build; keras-jax and torch ship machine code for sm_90 and get none."""
    names = ["keras-jax", "keras-tf", "tf-eager", "tf-function", "torch-eager"]
    rows = _doctor_rows(["keras-jax", "keras-tf", "tf-eager", "torch-eager"])  # one per (framework, requires)
    cells = [c for n in names for c in _cells(n, ["mlp"], "cuda")]
    planned = kernel_jit.plan(discover(), cells, kernel_jit.needs_of(rows))
    assert [p["adapter"] for p in planned] == ["keras-tf", "tf-eager"]
    assert {p["build"]["library"] for p in planned} == {"tensorflow"}
    assert len({p["build"]["python"] for p in planned}) == 1


def test_a_named_environments_build_is_warmed_in_that_environment():
    """``--env next=PYTHON``: the doctor's row torch-eager@next names its interpreter; only that
    environment's cells are warmed, under that interpreter."""
    cells = _cells("torch-eager", ["mlp"], "cuda")
    named = [
        c | {"adapter": "torch-eager@next", "base_adapter": "torch-eager", "python": "/next/python"} for c in cells
    ]
    needs = {"torch-eager@next": {"python": "/next/python", "need": NEED_H100}}
    (planned,) = kernel_jit.plan(discover(), cells + named, needs)
    assert planned["build"] == {"python": "/next/python", "library": "torch"}
    assert [c["python"] for c in planned["cells"]] == ["/next/python"]
    assert [c["base_adapter"] for c in planned["cells"]] == ["torch-eager"]


@pytest.mark.frameworks
def test_the_warm_up_takes_one_untimed_step_of_each_workload_in_a_real_worker(capsys):
    """On this CPU machine the worker runs on the CPU: what is checked is the plumbing (one worker,
    every workload of the framework's cells, the record) that on an H100 pays TensorFlow's JIT."""
    cells = _cells("torch-eager", ["mlp", "cnn", "mlp"]) + _cells("jax-jit", ["mlp"])
    needs = {"torch-eager": {"python": None, "need": NEED_H100}}
    (warmed,) = kernel_jit.warm_up(discover(), cells, needs)
    assert warmed["framework"] == "torch" and warmed["adapter"] == "torch-eager"
    assert warmed["build"]["library"] == "torch"
    assert warmed["status"] == "ok" and warmed["reason"] is None, warmed
    assert warmed["workloads"] == ["mlp", "cnn"] and warmed["seconds"] > 0
    assert warmed["what"] == "no machine code for sm_90 (newest sm_89): the driver JIT-compiles its compute_90 PTX"
    assert "torch-eager (torch): no machine code for sm_90" in capsys.readouterr().out  # said before the long wait


@pytest.mark.frameworks
def test_a_warm_up_that_does_not_end_is_recorded_failed_and_the_run_goes_on():
    needs = {"torch-eager": {"python": None, "need": NEED_H100}}
    (warmed,) = kernel_jit.warm_up(discover(), _cells("torch-eager", ["mlp"]), needs, timeout_s=0.05)
    assert warmed["status"] == "failed" and warmed["reason"] == "no end within 0.05 s"
    tf_only = {"tf-eager": {"python": None, "need": NEED_H100}}
    assert kernel_jit.warm_up(discover(), _cells("torch-eager", ["mlp"]), tf_only) == []


def test_the_report_says_the_jit_happened_before_timing_and_how_long_it_took():
    warmed = {"framework": "tensorflow", "adapter": "tf-function", **NEED_H100, "workloads": ["mlp", "cnn"]}
    warmed |= {"what": kernel_jit.summary(NEED_H100), "seconds": 312.4, "status": "ok", "reason": None}
    text = "\n".join(hardware.hardware([], {"peaks": {}, "kernel_jit": [warmed]}))
    assert "## How close to the hardware" in text
    assert (
        "- **tensorflow** (tf-function): no machine code for sm_90 (newest sm_89): the driver JIT-compiles its "
        "compute_90 PTX. It did so before timing, in 312 s: one untimed step of mlp, cnn, process start included."
    ) in text
    failed = warmed | {"status": "failed", "reason": "no end within 3600 s"}
    text = "\n".join(hardware.hardware([], {"peaks": {}, "kernel_jit": [failed]}))
    assert "The warm-up failed (no end within 3600 s)" in text
    assert hardware.hardware([], {"peaks": {}}) == []  # a CPU run: no section from this


def test_the_bench_says_what_the_warm_up_took_of_the_budget_that_counts_it():
    from harness import session

    said = session.warm_up_note(540.4, 1800.0)
    assert said.startswith("kernel JIT warm-up: 540 s before the first cell, 30% of the 30-minute budget")
    assert "which counts it" in said and "compute cache keeps these kernels" in said
    assert (
        session.warm_up_note(12.0, None)
        == "kernel JIT warm-up: 12 s before the first cell (no budget: the rounds are fixed)"
    )
