"""The export task (python -m harness export, docs/export.md).

Harness logic first (no framework, no process): choosing paths and workloads, ONNX Runtime's
provider choice, the forward parity rule, the serving clock, a cell's verdict and the report.
Then one real run, shared by the framework tests (module-scoped): every framework family's own
path and ONNX Runtime on ``mlp``, ONNX on ``cnn`` (the NHWC-in-the-graph layout), each exported
and served in fresh processes, its logits held to the float64 reference.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess

import numpy as np
import pytest

from adapters import _export_onnx, discover
from adapters.base import Adapter, DeviceUnavailable
from adapters.exporting import IN_PROCESS, Exports
from harness import cli, export, records
from harness.checks.conformance import forward
from harness.measuring import serving
from harness.reporting import export as export_report
from harness.reporting import report
from harness.running import export_worker
from harness.running.plan import PlanError
from tests.conftest import ADAPTERS, REPO
from tests.fakes import fake_info, report_text
from workloads import get_workload
from workloads.spec import FixedForward

# ---------------------------------------------------------------- choosing what runs


def test_unknown_path_or_workload_names_the_bad_value_and_the_valid_ones():
    with pytest.raises(PlanError, match=r"unknown export path 'pt2'.*valid: all, in-process, .*torch-export"):
        export.select_paths("pt2", ADAPTERS)
    with pytest.raises(PlanError, match=r"unknown export workload 'rnn-caption'; valid: all, mlp, mlp-wide, cnn"):
        export.select_workloads("rnn-caption")
    assert export.select_workloads("all") == ["mlp", "mlp-wide", "cnn"]
    # the export families are those with a reference forward to hold the artifacts to
    assert all(isinstance(get_workload(n), FixedForward) for n in export.export_workloads())
    assert not isinstance(get_workload("rnn-caption"), FixedForward)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--path", "pt2"], "unknown export path 'pt2'"),
        (["--workload", "transformer"], "unknown export workload 'transformer'"),
        (["--framework", "mxnet"], "unknown framework or adapter 'mxnet'"),
    ],
)
def test_bad_export_input_exits_2_with_one_clear_line(capsys, tmp_path, args, message):
    code = cli.main(["export", *args, "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "valid:" in err and len(err.strip().splitlines()) == 1
    assert not list(tmp_path.iterdir())  # nothing started, no run folder


def test_an_export_run_folder_that_holds_results_or_cannot_be_written_is_refused(capsys, tmp_path):
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "results.jsonl").write_text("")
    assert cli.main(["export", "--framework", "torch-eager", "--out", str(tmp_path), "--run-id", "r"]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'r'} already holds results; resume it with --resume {tmp_path / 'r'}" in err
    (tmp_path / "file").write_text("")
    assert cli.main(["export", "--framework", "torch-eager", "--out", str(tmp_path / "file")]) == 2
    assert f"--out: cannot write to {tmp_path / 'file'}" in capsys.readouterr().err


def test_every_adapter_gets_an_in_process_row_and_one_row_per_declared_path():
    cells = export.plan(["mlp"], list(ADAPTERS), export.select_paths("all", ADAPTERS), ["cpu"], ADAPTERS)
    rows = {(c["adapter"], c["export_path"]) for c in cells}
    assert {(n, IN_PROCESS) for n in ADAPTERS} <= rows
    assert {("torch-eager", "torch-export"), ("tf-function", "tf-saved-model"), ("jax-jit", "jax-export")} <= rows
    assert {("flax-nnx", "jax-export"), ("keras-jax", "keras-file"), ("keras-torch", "onnx")} <= rows
    # one artifact per framework: a path belongs to one mode of each framework
    others = ("torch-compile", "tf-eager", "jax-eager", "flax-nnx-cached")
    assert not any(a in others and p != IN_PROCESS for a, p in rows)


def test_export_reasons_name_what_is_missing():
    torch_eager, compiled = ADAPTERS["torch-eager"].cls(), ADAPTERS["torch-compile"].cls()
    assert "fixed-shape forward" in torch_eager.export_reason("onnx", get_workload("rnn-caption"))
    assert torch_eager.export_reason("tf-saved-model", get_workload("mlp")).startswith("torch-eager has no export path")
    # one artifact per framework: torch-compile runs its forward in process, torch-eager exports
    assert compiled.export_reason("torch-export", get_workload("mlp")).endswith("(it has: none)")
    assert compiled.export_reason(IN_PROCESS, get_workload("mlp")) is None
    jax_onnx = ADAPTERS["jax-jit"].cls().export_reason("onnx", get_workload("mlp"))
    assert jax_onnx is None if importlib.util.find_spec("jax2onnx") else "jax2onnx not installed" in jax_onnx
    if importlib.util.find_spec("torch_xla") is None:
        keras_torch = ADAPTERS["keras-torch"].cls()
        assert "torch_xla" in keras_torch.export_reason("keras-saved-model", get_workload("mlp"))


def test_the_export_methods_are_an_optional_mixin_every_built_in_adapter_inherits():
    for member in ("export_paths", "in_process_forward", "export_reason", "forward", "export", "serve"):
        assert not hasattr(Adapter, member), member  # not the bench's contract
    built_in = {n: i.cls for n, i in discover().items() if i.source == "built-in"}
    assert all(issubclass(cls, Exports) for cls in built_in.values())
    declaring = {n for n, cls in built_in.items() if cls.export_paths}
    assert declaring == {"torch-eager", "tf-function", "jax-jit", "flax-nnx", "keras-jax", "keras-tf", "keras-torch"}


def test_an_adapter_without_exports_gets_one_skipped_in_process_row_not_a_crash(monkeypatch, tmp_path):
    adapters = {**ADAPTERS, "fake": fake_info("fake", "fake")}  # tests.fakes.FakeAdapter: no Exports
    assert export.all_paths(adapters) == export.all_paths(ADAPTERS)
    cells = export.plan(["mlp", "cnn"], ["fake"], export.all_paths(adapters), ["cpu", "cuda"], adapters)
    assert [(c["workload"], c["export_path"], c["device_requested"]) for c in cells] == [
        (w, IN_PROCESS, d) for w in ("mlp", "cnn") for d in ("cpu", "cuda")
    ]
    why = "fake does not take part in the export task: tests.fakes.FakeAdapter does not inherit "
    why += "adapters.exporting.Exports"
    for c in cells:
        rec = export.run_cell(adapters["fake"], c, {}, tmp_path, 1.0)
        assert (rec["status"], rec["reason"]) == ("skipped", why)
    # the worker refuses such an adapter with that error, should a cell reach it anyway
    monkeypatch.setenv("DLCOMPARE_EXTRA_ADAPTERS", "tests.fakes")
    (tmp_path / "job.json").write_text(json.dumps({**cells[0], "device": "cpu", "threads": 1}))
    assert export_worker.main([IN_PROCESS, str(tmp_path / "job.json"), str(tmp_path / "out.json")]) == 0
    result = json.loads((tmp_path / "out.json").read_text())
    assert not result["ok"] and "FakeAdapter does not inherit adapters.exporting.Exports" in result["error"]


# ---------------------------------------------------------------- ONNX Runtime's provider choice (CPU stand-ins)


def test_onnx_runtime_provider_choice():
    cpu, cuda = _export_onnx.CPU, _export_onnx.CUDA
    assert _export_onnx.providers("cpu", [cuda, cpu]) == [cpu]  # a CPU cell never touches the GPU
    assert _export_onnx.providers("cuda", [cuda, cpu]) == [(cuda, {"use_tf32": "0"}), cpu]  # full float32
    with pytest.raises(DeviceUnavailable, match="onnxruntime has no CUDAExecutionProvider.*onnxruntime-gpu"):
        _export_onnx.providers("cuda", ["AzureExecutionProvider", cpu])
    with pytest.raises(ValueError, match="'tpu'"):
        _export_onnx.providers("tpu", [cpu])
    # ORT falls back to the CPU quietly when the CUDA provider fails to load: refused, not timed
    with pytest.raises(DeviceUnavailable, match="could not start CUDAExecutionProvider"):
        _export_onnx.check_placed("cuda", [cpu])
    _export_onnx.check_placed("cuda", [cuda, cpu])
    _export_onnx.check_placed("cpu", [cpu])


class _StandInSession:
    """ONNX Runtime's InferenceSession where the CUDA provider started (the GPU this machine lacks)."""

    calls: list[str]

    def __init__(self, path, options, providers):
        self.calls.append("session")
        self.asked = providers

    def get_providers(self):
        return [p if isinstance(p, str) else p[0] for p in self.asked]

    def get_inputs(self):
        return [type("Input", (), {"name": "x"})()]


def test_a_cuda_session_preloads_onnx_runtimes_cuda_libraries_first(monkeypatch):
    """The real (CPU) onnxruntime module, its provider list and session stand-ins: on cuda,
    ``preload_dlls`` runs before the InferenceSession is made; on the CPU never; an onnxruntime
    without it (before 1.21) makes the session all the same."""
    ort = pytest.importorskip("onnxruntime")
    calls: list[str] = []
    monkeypatch.setattr(_StandInSession, "calls", calls, raising=False)
    monkeypatch.setattr(ort, "get_available_providers", lambda: [_export_onnx.CUDA, _export_onnx.CPU])
    monkeypatch.setattr(ort, "InferenceSession", _StandInSession)
    monkeypatch.setattr(ort, "preload_dlls", lambda *a, **k: calls.append("preload_dlls"), raising=False)
    _export_onnx.serve(REPO / "model.onnx", "cuda", 1)
    assert calls == ["preload_dlls", "session"]
    calls.clear()
    _export_onnx.serve(REPO / "model.onnx", "cpu", 1)
    assert calls == ["session"]
    calls.clear()
    monkeypatch.delattr(ort, "preload_dlls")
    _export_onnx.serve(REPO / "model.onnx", "cuda", 1)
    assert calls == ["session"]


def test_the_missing_cuda_provider_names_the_environment_whose_lock_has_onnxruntime_gpu():
    from harness.install.lock import pins_of

    assert "onnxruntime-gpu" in pins_of("tf-cuda12")
    assert all("onnxruntime-gpu" not in pins_of(lock) for lock in ("cpu", "cuda12", "cuda13"))
    with pytest.raises(DeviceUnavailable) as caught:
        _export_onnx.providers("cuda", [_export_onnx.CPU])
    assert ".venv-tf (locks/tf-cuda12.in)" in str(caught.value) and "cuda12 install variant" not in str(caught.value)
    page = (REPO / "docs" / "export.md").read_text()
    assert "`locks/tf-cuda12.in`" in page and "preload_dlls" in page


# ---------------------------------------------------------------- parity and the serving clock


@pytest.mark.parametrize("workload", ["mlp", "cnn"])
def test_forward_parity_passes_float32_rounding_and_fails_a_wrong_model(workload):
    spec = get_workload(workload)
    params, x = spec.init_params(), spec.batches()[0]["x"][:8]
    allowed = forward.allowance(spec, params, x)
    assert forward.FLOOR <= allowed < 1e-3
    right = spec.reference_logits(params, x)  # float32 arithmetic: rounding only
    assert forward.check(spec, params, x, right, allowed).ok
    one_row = right.copy()
    one_row[3] *= 1.001  # a 0.1% error on one sample
    bad = forward.check(spec, params, x, one_row, allowed)
    assert not bad.ok and "differ from the float64 reference" in bad.reason()
    assert not forward.check(spec, params, x, right[:, ::-1], allowed).ok  # classes swapped
    assert not forward.check(spec, params, x, right[:4], allowed).ok  # wrong shape
    assert not forward.check(spec, params, x, np.full_like(right, np.nan), allowed).ok


def test_serving_clock_keeps_raw_calls_and_reads_p50_p99():
    calls = []

    def fwd(x):
        calls.append(len(x))
        return x.sum(axis=1)

    got = serving.measure(fwd, [np.ones((1, 3), np.float32)] * 2, [np.ones((8, 3), np.float32)], budget_s=0.05)
    assert len(got["latency_times_s"]) >= serving.MIN_CALLS
    assert 0 < got["p50_s"] <= got["p99_s"]
    assert got["throughput_batch"] == 8 and got["throughput_per_s"] > 0 and got["throughput_block_times_s"]
    assert set(calls) == {1, 8}


def _shared(workload: str) -> dict:
    spec = get_workload(workload)
    data = export.inputs(spec, 16)
    params = spec.init_params()
    return {
        "files": {workload: {}},
        "inputs": {workload: data},
        "params": {workload: params},
        "allowed": {workload: forward.allowance(spec, params, data["parity"])},
        "threads": 1,
        "budget_s": 0.01,
    }


def test_an_artifact_that_loads_but_disagrees_is_a_failed_cell(monkeypatch, tmp_path):
    spec = get_workload("mlp")
    shared = _shared("mlp")
    want = spec.reference_logits(shared["params"]["mlp"], shared["inputs"]["mlp"]["parity"])
    steps = []

    def fake_step(info, job, mode, timeout_s):  # stands in for the worker processes
        steps.append(mode)
        if mode == "export":
            return {"ok": True, "export_s": 1.0, "artifact": "a", "artifact_bytes": 10, "runtimes": {}}
        return {"ok": True, "p50_s": 1e-4, "p99_s": 2e-4, "parity_logits": (want * 1.01).tolist()}

    monkeypatch.setattr(export, "_step", fake_step)
    cell = export.cell(ADAPTERS["torch-eager"], "mlp", "torch-export", "cpu")
    rec = export.run_cell(ADAPTERS["torch-eager"], cell, shared, tmp_path, 60)
    assert steps == ["export", "serve"]
    assert rec["status"] == "failed" and "differ from the float64 reference" in rec["reason"]
    assert rec["parity_error"] > rec["parity_allowed"] and rec["export_s"] == 1.0

    def crashing(info, job, mode, timeout_s):
        return {"ok": False, "error": "RuntimeError: no kernel"}

    monkeypatch.setattr(export, "_step", crashing)
    rec = export.run_cell(ADAPTERS["torch-eager"], cell, shared, tmp_path, 60)
    assert rec["status"] == "failed" and rec["reason"] == "export: RuntimeError: no kernel"


def test_an_interrupted_export_resumes_its_missing_cells_under_the_folders_lock(monkeypatch, capsys, tmp_path):
    """The export run's folder is a run folder like a bench's: plan.json, the lock, ``--resume``
    running just the cells without a record; bench and export each refuse the other's folder."""
    spec = get_workload("mlp")
    calls: list[tuple[str, str]] = []

    def fake_step(info, job, mode, timeout_s):  # stands in for the worker processes
        calls.append((job["export_path"], mode))
        if len(calls) == 3 and not resumed:
            raise KeyboardInterrupt  # Ctrl-C while the second cell serves
        if mode == "export":
            return {"ok": True, "export_s": 1.0, "artifact": "a", "artifact_bytes": 10, "runtimes": {}}
        params = np.load(job["params"])
        x = np.load(job["inputs"])["parity"]
        logits = spec.reference_logits({k: params[k] for k in params.files}, x)
        served = {"p50_s": 1e-4, "p99_s": 2e-4, "cold_load_s": 0.1, "throughput_per_s": 1e4, "throughput_batch": 256}
        return {"ok": True, **served, "parity_logits": logits.tolist()}

    monkeypatch.setattr(export, "_step", fake_step)
    run_dir = tmp_path / "r"
    args = ["export", "--framework", "torch-eager", "--workload", "mlp", "--path", "in-process,torch-export,onnx"]
    resumed = False
    assert cli.main([*args, "--out", str(tmp_path), "--run-id", "r"]) == 130
    out = capsys.readouterr().out
    assert f"interrupted; finished cells are kept. Resume with: python -m harness export --resume {run_dir}" in out
    saved = json.loads((run_dir / "plan.json").read_text())
    assert saved["task"] == "export" and [c["export_path"] for c in saved["cells"]] == [
        "in-process",
        "torch-export",
        "onnx",
    ]
    assert [r["export_path"] for r in records.load(run_dir / records.RESULTS)] == ["in-process"]
    assert (run_dir / "report.md").is_file()  # what finished is reported

    assert cli.main(["bench", "--resume", str(run_dir)]) == 2
    assert f"{run_dir} is an export run; resume it with: python -m harness export --resume {run_dir}" in (
        capsys.readouterr().err
    )
    from harness import run_folder

    held = run_folder.lock(run_dir)
    assert cli.main(["export", "--resume", str(run_dir)]) == 2
    assert f"{run_dir} is in use by another export" in capsys.readouterr().err
    held.close()

    resumed, calls[:] = True, []
    assert cli.main(["export", "--resume", str(run_dir)]) == 0
    assert calls == [("torch-export", "export"), ("torch-export", "serve"), ("onnx", "export"), ("onnx", "serve")]
    recs = records.load(run_dir / records.RESULTS)
    assert [r["export_path"] for r in recs] == ["in-process", "torch-export", "onnx"]
    assert all(r["status"] == "ok" for r in recs), [r["reason"] for r in recs]
    prepared: list[list[str]] = []
    real_prepare = export.prepare
    monkeypatch.setattr(export, "prepare", lambda wanted, *a: prepared.append(wanted) or real_prepare(wanted, *a))
    calls[:] = []
    assert cli.main(["export", "--resume", str(run_dir)]) == 0  # nothing left: no inputs built, no worker
    assert prepared == [[]] and calls == []
    assert cli.main(["export", "--resume", str(tmp_path)]) == 2
    assert f"{tmp_path} is not a run folder (no plan.json)" in capsys.readouterr().err


def test_a_bench_folder_is_not_resumed_as_an_export(capsys, tmp_path):
    (tmp_path / "plan.json").write_text(json.dumps({"cells": [], "timeout_s": 60, "rounds": 1}))
    assert cli.main(["export", "--resume", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path} is a bench run; resume it with: python -m harness bench --resume {tmp_path}" in err


# ---------------------------------------------------------------- the report, from records alone


def _rec(adapter: str, path: str, status: str = "ok", p50_ms: float = 1.0, **extra) -> dict:
    rec = records.new_record(
        export.cell(ADAPTERS[adapter], "mlp", path, "cpu"),
        status,
        "" if status == "ok" else "why not",
    )
    if status == "ok":
        rec.update(p50_s=p50_ms / 1e3, p99_s=2 * p50_ms / 1e3, cold_load_s=0.5, throughput_per_s=1e4)
        rec.update(throughput_batch=256, parity_error=1e-7, parity_allowed=3e-5, artifact_bytes=2_000_000)
        rec.update(export_s=None if path == IN_PROCESS else 3.0)
    return {**rec, **extra}


def test_report_has_the_section_the_table_the_plot_and_the_fastest_served_path(tmp_path):
    recs = [
        _rec("jax-jit", IN_PROCESS, p50_ms=0.05),
        _rec("torch-eager", "onnx", p50_ms=0.03),
        _rec("torch-eager", "torch-export", p50_ms=0.1),
        _rec("tf-function", "tf-saved-model", status="failed"),
        _rec("jax-jit", "onnx", status="skipped"),
    ]
    for r in recs:
        records.append(tmp_path / records.RESULTS, r)
    path = report.write(tmp_path)  # `harness report RUN_DIR` of an export run: the export report
    text = path.read_text()
    assert "## Export and serve: mlp (cpu)" in text
    table = [line for line in text.splitlines() if line.startswith("| ")]
    assert all(line.count("|") - 1 <= 10 for line in table)
    assert table[1].startswith("| onnx (torch-eager) |")  # fastest first
    assert (
        "- `mlp` on cpu: ONNX Runtime serves one request in 0.03 ms p50 (0.06 ms p99); the fastest in-process "
        "forward, jax-jit in-process, is slower at 0.05 ms. The lowest other served path: torch-export (torch-eager), "
        "0.1 ms.\n" in text
    )
    assert "- tf-saved-model (tf-function): failed: why not" in text
    assert (tmp_path / "export-mlp-cpu.png").is_file() and (tmp_path / "report.html").is_file()


def test_the_headline_is_onnx_runtime_against_in_process_with_the_exporters_as_detail():
    recs = [
        _rec("torch-eager", "onnx", p50_ms=0.0216),
        _rec("tf-function", "onnx", p50_ms=0.0235),  # 8.8% slower: the same runtime, within drift
        _rec("torch-eager", "torch-export", p50_ms=0.0240),
        _rec("torch-eager", IN_PROCESS, p50_ms=0.0614),
    ]
    text = export_report.fastest_sentence("mlp", "cpu", recs)
    assert text == (
        "`mlp` on cpu: ONNX Runtime serves one request in 0.0216 ms p50 (0.0432 ms p99); the fastest in-process "
        "forward, torch-eager in-process, is slower at 0.0614 ms. Its graphs from 2 exporters (torch-eager, "
        "tf-function) serve in 0.0216-0.0235 ms, unresolved against each other (within 10%, one process each). "
        "The lowest other served path: torch-export (torch-eager), 0.024 ms."
    )
    assert "fastest served" not in text and "tie" not in text  # one process per path: no verdict


def test_without_onnx_the_lowest_served_path_leads_and_rows_within_drift_are_named_beside_it():
    recs = [
        _rec("torch-eager", "torch-export", p50_ms=0.0216),
        _rec("tf-function", "tf-saved-model", p50_ms=0.0235),  # within drift: named beside it
        _rec("jax-jit", "jax-export", p50_ms=0.0240),  # 11% slower: not
        _rec("jax-jit", IN_PROCESS, p50_ms=0.0230),  # within drift of the served one: unresolved
    ]
    text = export_report.fastest_sentence("mlp", "cpu", recs)
    assert text.startswith("`mlp` on cpu: the lowest served p50 is torch-export (torch-eager)'s, 0.0216 ms")
    assert "unresolved against the fastest in-process forward, jax-jit in-process (0.023 ms)." in text
    assert text.endswith("one process each): tf-saved-model (tf-function).")


def test_fastest_sentence_when_nothing_was_served():
    text = export_report.fastest_sentence("cnn", "cuda", [_rec("jax-jit", IN_PROCESS)])
    assert text == "`cnn` on cuda: no served path ran to the end (see the table for why)."


# ---------------------------------------------------------------- real frameworks, real processes and files

#: Each framework family's own path on mlp, ONNX Runtime beside them, one in-process row, and cnn's
#: ONNX graphs of torch (it computes NCHW, the artifact takes NHWC) and of JAX (jax2onnx).
#: AOTInductor (30 s of C++ compile here) and the other rows run in `make export`.
FRAMEWORK_PATHS = "torch-export,onnx,tf-saved-model,jax-export,keras-file"
FRAMEWORKS = "torch-eager,tf-function,jax-jit,keras-jax,flax-nnx"


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> dict[tuple[str, str, str], dict]:
    """Real export runs (mlp: FRAMEWORK_PATHS over FRAMEWORKS, jax-jit's in-process row; cnn:
    torch's and JAX's ONNX), their records by (workload, adapter, path)."""
    import sys

    out = tmp_path_factory.mktemp("export")
    base = [sys.executable, "-m", "harness", "export", "--out", str(out), "--budget", "0.05", "--batch", "32"]
    runs = [
        ["--workload", "mlp", "--framework", FRAMEWORKS, "--path", FRAMEWORK_PATHS, "--run-id", "mlp"],
        ["--workload", "mlp", "--framework", "jax-jit", "--path", IN_PROCESS, "--run-id", "in-process"],
        ["--workload", "cnn", "--framework", "torch-eager,jax-jit", "--path", "onnx", "--run-id", "cnn"],
    ]
    # The three runs at once: each is mostly one process at a time (export, then serve), and no
    # assertion here reads a time (a row beside another is flagged contended, never retaken).
    procs = [
        subprocess.Popen([*base, *args], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for args in runs
    ]
    found = {}
    for args, proc in zip(runs, procs, strict=True):
        _, stderr = proc.communicate(timeout=600)
        assert proc.returncode == 0, stderr[-3000:]
        for rec in records.load(out / args[-1] / records.RESULTS):
            found[(rec["workload"], rec["adapter"], rec["export_path"])] = rec
    found["report"] = report_text(out / "mlp")
    return found


@pytest.mark.frameworks
@pytest.mark.workers
@pytest.mark.parametrize(
    ("adapter", "path"),
    [
        ("torch-eager", "torch-export"),
        ("torch-eager", "onnx"),
        ("tf-function", "tf-saved-model"),
        ("tf-function", "onnx"),
        ("jax-jit", "jax-export"),
        ("jax-jit", "onnx"),
        ("keras-jax", "keras-file"),
        ("flax-nnx", "jax-export"),
    ],
)
def test_each_framework_exports_reloads_in_a_fresh_process_and_matches_the_reference(exported, adapter, path):
    rec = exported[("mlp", adapter, path)]
    if not ADAPTERS[adapter].available:
        pytest.skip(ADAPTERS[adapter].unavailable)
    assert rec["status"] == "ok", rec["reason"]
    assert rec["parity_error"] <= rec["parity_allowed"]
    assert rec["export_s"] > 0 and rec["artifact_bytes"] > 4 * get_workload("mlp").param_count()  # the weights
    # served in a process that imported nothing of a framework before its cold clock started
    assert rec["framework_preloaded"] == [] and rec["cold_load_s"] >= rec["load_s"] > 0
    if path == "onnx":
        assert list(rec["runtimes"]) == ["onnxruntime"]  # ONNX Runtime alone serves it
    assert 0 < rec["p50_s"] <= rec["p99_s"] and len(rec["latency_times_s"]) >= serving.MIN_CALLS
    assert rec["throughput_batch"] == 32 and rec["throughput_per_s"] > 0


@pytest.mark.frameworks
@pytest.mark.workers
def test_in_process_rows_skips_and_the_cnn_layout(exported):
    rec = exported[("mlp", "jax-jit", IN_PROCESS)]
    assert rec["status"] == "ok" and "export_s" not in rec and rec["parity_error"] <= rec["parity_allowed"]
    cnn = exported[("cnn", "torch-eager", "onnx")]
    assert cnn["status"] == "ok", cnn["reason"]  # NHWC in, as the workload's data, through torch's NCHW graph
    jax_cnn = exported[("cnn", "jax-jit", "onnx")]  # jax2onnx's conv and pooling, through ONNX Runtime
    assert jax_cnn["status"] == "ok" and jax_cnn["parity_error"] <= jax_cnn["parity_allowed"], jax_cnn["reason"]
    assert "## Export and serve: mlp (cpu)" in exported["report"]
    assert "`mlp` on cpu: ONNX Runtime serves one request in" in exported["report"]  # the headline
    json.dumps(cnn, allow_nan=False)  # records stay strict JSON
