"""The command line end to end, with real worker processes (torch-eager: the fastest to start)."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from adapters import discover
from adapters._kit_common import SHARED_COMPILE_CACHE
from harness import cli, records
from harness.reporting import hardware
from harness.running import resident, runner
from harness.stats.cells import combine_all
from tests.conftest import CPU_BUILDS, GPU_HERE, REPO, check_cell
from tests.fakes import report_text

TORCH = discover()["torch-eager"]
needs_torch = pytest.mark.skipif(not TORCH.available, reason=str(TORCH.unavailable))


def harness(python, *args, check=False):
    return subprocess.run([python, "-m", "harness", *args], cwd=REPO, capture_output=True, text=True, check=check)


def harness_here(capsys, *args: str) -> tuple[int, str]:
    """``python -m harness ARGS`` in this process, for input rejected before any worker starts (a
    subprocess would add only its imports; test_help_and_list runs the module itself): the exit
    code and stderr."""
    try:
        code = cli.main(list(args))
    except SystemExit as exc:  # argparse rejects its own options this way
        code = exc.code
    return code, capsys.readouterr().err


def test_help_and_list(python):
    assert "bench" in harness(python, "--help", check=True).stdout
    out = harness(python, "list", check=True).stdout
    for name in discover():
        assert name in out
    assert "266,610" in out and "3,623,600" in out


@needs_torch
def test_bench_writes_records_env_and_report_and_rebuilds_it(python, tmp_path):
    proc = harness(
        python, "bench", "--framework", "torch-eager", "--workload", "mlp", "--device", "cpu,cuda",
        "--data", "resident", "--set", "num_batches=4", "--rounds", "2", "--out", str(tmp_path), "--run-id", "e2e",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    run = tmp_path / "e2e"
    raw = records.load(run / records.RESULTS)
    # each round of a cell is a record of its own; a cuda cell that cannot run (no GPU, or torch's
    # CPU build) runs no second round; with a GPU and CUDA builds it runs both
    cuda_runs = GPU_HERE and not CPU_BUILDS
    ok_rounds = sorted((r["device_requested"], r["round"]) for r in raw if r["status"] == "ok")
    assert ok_rounds == [("cpu", 1), ("cpu", 2), *([("cuda", 1), ("cuda", 2)] if cuda_runs else [])]
    recs = sorted(combine_all(raw), key=lambda r: r["device_requested"])
    cpu, cuda = recs
    assert cpu["status"] == "ok" and cpu["rounds_done"] == 2 and len(cpu["round_medians_s"]) == 2
    # the geometric mean of its processes' levels, the estimator every ratio is built on
    assert cpu["median_s"] == pytest.approx(math.exp(sum(cpu["process_levels"].values()) / 2))
    assert cpu["device"] == "cpu" and cpu["steps"] >= 60 and len(cpu["step_times_s"]) == cpu["steps"]
    assert cpu["median_s"] > 0 and cpu["versions"]["torch"].startswith("2.13")
    assert cpu["loss_last"] < cpu["loss_first"]
    if not GPU_HERE:
        assert cuda["status"] == "skipped" and cuda["reason"].startswith("no NVIDIA GPU on this machine")
    elif cuda_runs:
        assert cuda["status"] == "ok" and cuda["device"] == "cuda" and cuda["rounds_done"] == 2
    env = json.loads((run / records.ENV).read_text())
    assert env["threads"] >= 1 and "torch" in env["packages"]
    # the run's own start and close, timed in the bench process (harness.session.timed)
    own = ["start-up and plan", "doctor", "kernel JIT warm-up", "device peaks", "kernel floors", "device peaks again"]
    assert list(env["phases_s"]) == own and all(s >= 0 for s in env["phases_s"].values())
    assert env["report_at_s"] > sum(env["phases_s"].values()), "the run's whole length holds its phases"
    peak = env["peaks"]["cpu"]["matmul_gflops"]
    assert peak > 1 and env["peaks"]["cpu"]["copy_gbs"] > 0
    # every installed library's matmul counts (NumPy's BLAS alone ran at half of JAX's and TF's on AMD Zen 5)
    by = env["peaks"]["cpu"]["matmul_gflops_by"]
    libraries = ("numpy", "torch", "jax", "tensorflow")
    assert set(by) == {lib for lib in libraries if importlib.util.find_spec(lib)} and peak == max(by.values())
    # physics: the achieved rate is real work over synced time, below what the device can do
    assert 0 < cpu["gflops"] <= cpu["gflops_max_step"] <= hardware.PEAK_SLACK * peak
    # throughput: blocks of steps with one sync each, in the cell's first process only (the later
    # ones are there for the verdicts), under the same physics check
    assert cpu["pipelined_s"] > 0 and cpu["round_pipelined_s"] == [by_round_cpu(raw)[1]["pipelined_s"]]
    assert by_round_cpu(raw)[2]["pipelined_s"] is None
    assert cpu["synced_block_s"] == by_round_cpu(raw)[1]["synced_block_s"], "set against the same process"
    # speed of light: the kernel floor from the parent, the dispatch floor from the last planned
    # generation's worker only (the generations before it are what the verdicts need)
    assert 0 < cpu["kernel_floor_s"] and 0 < cpu["dispatch_floor_s"]
    # the suite times floors with NumPy and PyTorch only (tests/conftest.py), and the run says so
    assert env["kernel_floors"]["left_out"] == ["jax", "tensorflow"]
    by_round = by_round_cpu(raw)
    assert "dispatch_floor_s" in by_round[2] and "dispatch_floor_s" not in by_round[1]
    assert env["peaks"]["cpu"]["matmul_gflops"] == max(
        env["peaks"]["cpu"]["matmul_gflops_start"], env["peaks"]["cpu"]["matmul_gflops_end"]
    ), "the peak is measured at the run's start and end, the better kept"
    assert 0 < cpu["pipelined_gflops_max"] <= hardware.PEAK_SLACK * peak
    # blocks sized once per process and used by both windows (the sizing from a step time is
    # test_turns's: a time measured here would read another process's load on a busy machine)
    assert all(
        r.get("pipelined_block_steps", r["turn_block_steps"]) == r["turn_block_steps"]
        and resident.MIN_BLOCK_STEPS <= r["turn_block_steps"] <= resident.MAX_BLOCK_STEPS
        for r in raw
        if r["status"] == "ok"
    )
    assert hardware.physics_violations(recs, env) == []
    assert cpu["host_peak_rss_bytes"] > 50 * 2**20 and cpu["device_peak_bytes"] is None
    assert "ci_low_s" not in cpu, "two processes: no interval on one degree of freedom"
    first = report_text(run)
    assert "| torch-eager " in first and f"report: {run / 'report.md'}" in proc.stdout
    assert "pipelined (ms/step)" in first and "Rounds: each cell ran in 2 fresh processes" in first
    assert "timing no jax or tensorflow kernels, so a floor errs high where they are faster" in first
    (run / "report.md").unlink()
    assert harness(python, "report", str(run)).returncode == 0
    assert report_text(run) == first, "the report is rebuilt from records alone"


def by_round_cpu(raw: list[dict]) -> dict[int, dict]:
    return {r["round"]: r for r in raw if r["status"] == "ok" and r["device_requested"] == "cpu"}


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["bench", "--framework", "troch-eager"],
            "unknown framework or adapter 'troch-eager' (did you mean 'torch-eager'?)",
        ),
        (["bench", "--workload", "mlp-wdie"], "unknown workload 'mlp-wdie' (did you mean 'mlp-wide'?)"),
        (["bench", "--device", "gpu"], "unknown device 'gpu' (did you mean 'cuda'?)"),
        (["bench", "--set", "batch_size=0"], "batch_size must be > 0, got 0"),
        (["bench", "--set", "learning_rate=nan"], "learning_rate must be a finite number > 0, got nan"),
        (["bench", "--set", "learning_rate=inf"], "learning_rate must be a finite number > 0, got inf"),
        (["bench", "--set", "learning_rate=-1e-3"], "learning_rate must be a finite number > 0, got -0.001"),
        (["bench", "--sweep", "learning_rate=0.1,nan"], "value 'nan' is not a finite number"),
        (["bench", "--sweep", "learning_rate=0.1,-inf"], "value '-inf' is not a finite number"),
        (["bench", "--sweep", "batch_size=16,0"], "batch_size must be > 0, got 0"),
        (["bench", "--workload", "rnn-decode", "--set", "hidden=2"], "hidden must be >= 3 for decoding"),
        (["bench", "--threads", "0"], "--threads must be >= 1"),
        (["bench", "--rounds", "0"], "--rounds must be >= 1, got 0"),
        (["bench", "--profile", "fast"], "invalid choice: 'fast'"),
        (["bench", "--precision", "fp16"], "invalid choice: 'fp16' (choose from 'fp32', 'tf32', 'bf16')"),
        (["fidelity", "--precision", "bf16"], "the idiomatic scripts (fidelity/) train in float32"),
        (["report", "/nonexistent/run"], "no such results file"),
        (["bench", "--calibration", "/nonexistent/cal.json"], "/nonexistent/cal.json: no calibration page"),
        (["report", "/nonexistent/run", "--calibration", "/nonexistent"], "/nonexistent: no calibration page"),
    ],
)
def test_bad_input_exits_2_with_one_clear_line(capsys, args, message, tmp_path):
    code, stderr = (
        harness_here(capsys, *args, "--out", str(tmp_path)) if args[0] == "bench" else harness_here(capsys, *args)
    )
    assert code == 2
    assert message in stderr
    assert "Traceback" not in stderr
    assert not list(tmp_path.iterdir()), "nothing is written for rejected input"


def test_compare_across_two_machines_exits_2_unless_asked_for(capsys, tmp_path):
    """Runs on one VM type whose hosts differ in microcode: no verdicts, no page, one clear line
    naming the difference and the option; with the option, the page under a warning."""
    from tests import test_machine_fingerprint as fp
    from tests.test_summary_compare_sweep import AFTER, BEFORE, compare_run, machine_envs

    env_a, env_b = machine_envs(fp.machine(fp.ZEN4), fp.machine(fp.ZEN4.replace("0xa10113e", "0xa101148")))
    a, b = compare_run(tmp_path / "before", BEFORE, env_a), compare_run(tmp_path / "after", AFTER, env_b)
    code, stderr = harness_here(capsys, "compare", str(a), str(b))
    assert code == 2 and stderr.count("\n") == 1 and "Traceback" not in stderr
    assert stderr.startswith(
        "error: before (A) and after (B) ran on different machines: microcode 0xa10113e vs 0xa101148."
    )
    assert "--across-machines writes the comparison anyway" in stderr
    assert not (b / "compare-before.md").exists(), "nothing is written for a refused comparison"
    assert harness_here(capsys, "compare", str(a), str(b), "--across-machines") == (0, "")
    text = (b / "compare-before.md").read_text()
    assert "**Different machines: microcode 0xa10113e vs 0xa101148.** The verdicts below were asked for" in text
    assert "2 matching cells: 1 faster, 0 slower, 1 the same speed within 5%, 0 unresolved." in text


def test_a_cell_with_a_bad_spec_is_a_failed_record():
    """A cell from a damaged plan.json (resume) fails alone; planning catches it otherwise."""
    cell = check_cell("torch-eager", "mlp") | {"overrides": ["no_such_field=1"], "cell_id": "x"}
    rec = runner.run_cell(TORCH, cell, timeout_s=120)
    assert rec["status"] == "failed"
    assert rec["reason"].startswith("SpecError: unknown field 'no_such_field'")


def test_an_unsupported_pair_is_skipped_without_starting_a_worker():
    cell = check_cell("torch-eager", "rnn-caption", overrides=("strategy=graph-loop",)) | {"cell_id": "x"}
    rec = runner.run_cell(TORCH, cell, timeout_s=0.001)  # a started worker would time out
    assert rec["status"] == "skipped" and "has no loop inside a graph" in rec["reason"]


@needs_torch
@pytest.mark.workers
def test_a_cell_past_its_timeout_is_a_failed_record():
    rec = runner.run_cell(TORCH, check_cell("torch-eager", "mlp") | {"cell_id": "x"}, timeout_s=0.2)
    assert rec["status"] == "failed" and rec["reason"] == "timeout after 0.2 s"


def test_unavailable_adapter_is_skipped_with_the_pip_extra():
    from tests.fakes import fake_info

    info = fake_info("ghost", "ghost", unavailable="ghost not installed: pip install 'dlcompare[ghost]'")
    rec = runner.run_cell(info, check_cell("torch-eager", "mlp") | {"adapter": "ghost"}, timeout_s=1)
    assert rec["status"] == "skipped" and "pip install 'dlcompare[ghost]'" in rec["reason"]


def test_native_input_pipelines_feed_real_training(python, tmp_path):
    """The image pipelines, one worker each (torch DataLoader, tf.data, Grain), end to end: real
    training, the same first batch everywhere, the wait and the pipeline's own rate recorded."""
    names = [n for n in ("torch-eager", "tf-function", "jax-jit") if discover()[n].available]
    proc = harness(
        python, "bench", "--framework", ",".join(names), "--workload", "mlp", "--device", "cpu", "--data", "loader",
        "--set", "num_batches=2", "--set", "workers=1", "--rounds", "1", "--out", str(tmp_path), "--run-id", "loader",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    recs = records.load(tmp_path / "loader" / records.RESULTS)
    assert [r["status"] for r in recs] == ["ok"] * len(names), [r.get("reason") for r in recs]
    # Augmented batches make the last step's loss noisy: finite, not necessarily below the first.
    assert all(r["data"] == "loader" and np.isfinite(r["loss_last"]) for r in recs)
    assert all(r["pipeline"] == {"workers": 1, "prefetch": 2} and r["loader_kind"] for r in recs)
    assert all(0 <= r["input_bound_share"] <= 1 and r["pipeline_batches_per_s"] > 0 for r in recs)
    assert all(len(r["wait_times_s"]) == r["steps"] + r["steady_recompiles"] for r in recs)
    assert max(r["loss_first"] for r in recs) - min(r["loss_first"] for r in recs) < 1e-4  # the same batch


def test_compiles_are_cold_even_where_the_user_keeps_a_compiler_cache(python, tmp_path, monkeypatch):
    """A cell's first process compiles into an empty cache of the run's own (harness.running.turns
    .compile_cache), never a user's: a warm cache from an earlier run would shrink the compile a
    report shows (a JAX cache hit still fires the compile event). The user's JAX cache folder
    stays empty, and the run's caches are gone when it ends."""
    names = [n for n in ("torch-compile", "jax-jit") if discover()[n].available]
    cache = tmp_path / "jax-cache"
    cache.mkdir()
    monkeypatch.delenv(SHARED_COMPILE_CACHE)  # as a user runs it: the suite's shared caches off
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(cache))
    monkeypatch.setenv("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    proc = harness(
        python, "bench", "--framework", ",".join(names), "--workload", "mlp", "--device", "cpu", "--data", "resident",
        "--set", "hidden=8", "--set", "input_shape=4,4", "--set", "num_batches=2", "--rounds", "1",
        "--out", str(tmp_path), "--run-id", "cold",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    recs = {r["adapter"]: r for r in records.load(tmp_path / "cold" / records.RESULTS)}
    assert all(r["status"] == "ok" and r["compiles"] >= 1 for r in recs.values()), recs
    assert all(
        r["warm_compiles"] is False and "dlcompare-compile-cache-" in r["compile_cache_dir"] for r in recs.values()
    )
    assert not any(Path(r["compile_cache_dir"]).exists() for r in recs.values()), "removed at the run's end"
    if "jax-jit" in recs:
        assert not any(cache.iterdir()), "nothing written to the user's JAX cache"


def test_a_record_json_cannot_hold_becomes_a_failed_record_and_the_file_stays_readable(tmp_path):
    """The parent never dies on a record: NaN (or anything JSON cannot hold) in a worker's
    result is written as a failed record naming the fields, and the next record still lands."""
    results = tmp_path / records.RESULTS
    cell = check_cell("torch-eager", "mlp") | {"cell_id": "a", "spec": {"learning_rate": float("nan")}}
    records.append(results, records.new_record(cell, "ok", loss_first=float("inf"), median_s=0.001))
    records.append(results, records.new_record(check_cell("torch-eager", "mlp") | {"cell_id": "b"}, "skipped", "x"))
    first, second = records.load(results)
    assert first["status"] == "failed" and second["status"] == "skipped"
    assert "spec.learning_rate=nan" in first["reason"] and "loss_first=inf" in first["reason"]
    assert first["median_s"] == 0.001, "what was measured is kept"


def test_dry_run_says_which_cells_will_be_skipped_and_why(python, tmp_path):
    """Reasons known without starting a framework: supports() (an eager adapter under
    graph-loop), no GPU on this machine for cuda cells; the strategy and data mode are listed."""
    from tests.test_gpu_setup import no_driver_path

    cmd = [python, "-m", "harness", "bench", "--framework", "jax-eager,jax-jit", "--workload", "rnn-caption",
           "--strategy", "graph-loop", "--device", "cpu,cuda", "--dry-run", "--out", str(tmp_path)]  # fmt: skip
    env = {**os.environ, "PATH": no_driver_path(tmp_path)}
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, check=True)
    rows = {tuple(line.split()[:5]): line for line in proc.stdout.splitlines()[2:-1]}
    assert "has no loop inside a graph" in rows["jax-eager", "rnn-caption", "graph-loop", "resident", "cpu"]
    assert "no NVIDIA GPU on this machine" in rows["jax-jit", "rnn-caption", "graph-loop", "resident", "cuda"]
    assert rows["jax-jit", "rnn-caption", "graph-loop", "resident", "cpu"].split()[5:] == ["-"]
    assert "4 cells planned (3 will be skipped)" in proc.stdout
    assert not list(tmp_path.iterdir())


def test_the_dlcompare_command_is_the_harness_command_line():
    """``dlcompare`` (pyproject's script) runs ``python -m harness``'s main; the packages are found
    in the checkout, which the workers run from (no wheel installed elsewhere is claimed)."""
    import tomllib

    from harness import cli

    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    module, _, function = project["project"]["scripts"]["dlcompare"].partition(":")
    assert (module, function) == ("harness.cli", "main") and getattr(cli, function) is cli.main
    assert "wheel installs too" not in (REPO / "pyproject.toml").read_text()
