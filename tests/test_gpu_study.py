"""``make gpu-study`` (issue 70, item 5): the GPU user's first answer in one command. Without a GPU
it refuses in words and its dry run prints the four commands; with a stand-in driver and stand-in
runs (committed run folders copied where each step's run would write), the summary and NOTES.md
say what each step settled. Nothing here reads a clock."""

from __future__ import annotations

import datetime
import json
import shutil
from pathlib import Path

import pytest

from harness import env, gpu_study, records
from harness.checks import gpu_check
from harness.install import variant
from tests.conftest import REPO

CROSSOVER = REPO / "evidence" / "gpu-crossover-h200-20261128" / "crossover"
BENCH = REPO / "tests" / "fixtures" / "runs" / "2026-11-26-cpu-default-30m"
PIPELINES = REPO / "tests" / "fixtures" / "runs" / "2026-11-25-cpu-input-workers"
H100 = [{"name": "NVIDIA H100 80GB HBM3", "driver": "580.65.06", "memory": "81559 MiB"}]


def test_the_dry_run_prints_the_four_commands_in_order(capsys):
    assert gpu_study.main(["--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split(":")[0] for ln in lines] == ["crossover", "bench", "pipelines", "tests"]
    assert "--device cuda --workload mlp,cnn,rnn-caption --budget 20m" in lines[1]
    assert "--data loader --sweep workers=0,1,2,4" in lines[2]
    assert gpu_study.main(["--dry-run", "--steps", "bench", "--bench-budget", "30m"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "bench: python -m harness bench --framework all --device cuda --workload mlp,cnn,rnn-caption --budget 30m"
    ]


def test_a_step_not_in_the_study_is_named_with_the_valid_ones(capsys):
    with pytest.raises(SystemExit) as exc:
        gpu_study.main(["--steps", "bench,profile"])
    assert exc.value.code == 2
    assert "no step named profile; steps: crossover, bench, pipelines, tests" in capsys.readouterr().err


def test_a_machine_without_a_gpu_is_told_so_and_nothing_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(variant, "detect", lambda: variant.Choice("cpu", "no nvidia-smi on PATH", None))
    assert gpu_study.main(["--out", str(tmp_path / "study")]) == 2
    assert "gpu-study: no NVIDIA GPU on this machine" in capsys.readouterr().err
    assert not (tmp_path / "study").exists()


@pytest.mark.parametrize(
    ("name", "folder"),
    [("NVIDIA H100 80GB HBM3", "gpu-study-h100-20261201"), ("NVIDIA H200", "gpu-study-h200-20261201"),
     ("Tesla V100-SXM2-16GB", "gpu-study-v100-20261201"), ("Some GPU", "gpu-study-gpu-20261201")],
)  # fmt: skip
def test_the_study_folder_is_named_by_the_gpu_and_day(name, folder):
    day = datetime.date(2026, 12, 1)
    assert gpu_study.default_out([{"name": name}], day) == Path("evidence") / folder


def test_each_step_says_what_its_run_settled_and_notes_say_what_ran(tmp_path, monkeypatch):
    """Stand-ins for the GPU's part alone: the driver, nvidia-smi's GPU list and the commands' runs
    (a committed run folder copied where the step's run would write it); every other part is real."""
    monkeypatch.setattr(variant, "detect", lambda: variant.Choice("cuda13", "stand-in driver", "580.65.06"))
    monkeypatch.setattr(env, "gpus", lambda: H100)
    ran: list[list[str]] = []
    runs = {"crossover": CROSSOVER, "bench": BENCH, "pipelines": PIPELINES}

    def command(out: Path, name: str, args: list[str]) -> tuple[bool, str]:
        ran.append(args)
        if name in runs:
            shutil.copytree(runs[name], out / name)
        if name == "bench":  # one process ran beside other load: the bench's aim is a quiet GPU report
            recs = records.load(out / name / records.RESULTS)
            recs[0]["contended"] = True
            (out / name / records.RESULTS).write_text("".join(json.dumps(r) + "\n" for r in recs))
        (out / f"{name}.txt").write_text("stand-in\n")
        return True, f"exit 0: done ({name}.txt)"

    monkeypatch.setattr(gpu_check, "run_command", command)
    out = tmp_path / "study"
    assert gpu_study.main(["--out", str(out), "--no-install"]) == 1, "the stand-in bench ran beside other load"
    assert [a[1] if a[1] == "pytest" else a[2] for a in ran] == ["crossover", "bench", "sweep", "pytest"]
    assert all(a[-4:-2] == ["--out", str(out)] for a in ran[:3]), "each run into the study's folder"
    summary = (out / "summary.md").read_text()
    assert summary.startswith("# make gpu-study: NVIDIA H100 80GB HBM3")
    lines = {ln.split()[2].rstrip(":"): ln for ln in summary.splitlines() if ln.startswith("- ")}
    assert set(lines) == {"crossover", "bench", "pipelines", "tests"}
    assert (
        lines["crossover"].startswith("- ok crossover:")
        and "the GPU is faster from hidden=1024 on" in lines["crossover"]
    )
    assert (
        lines["bench"].startswith("- FAILED bench:")
        and "pairs settled; generations: cnn 3, mlp 4, rnn-caption 1" in lines["bench"]
    )
    assert "; 1 contended cells" in lines["bench"] and " cells ran; " in lines["pipelines"]
    assert lines["pipelines"].startswith("- ok pipelines:") and lines["tests"].startswith("- ok tests:")
    notes = (out / "NOTES.md").read_text()
    assert "GPUs: NVIDIA H100 80GB HBM3; driver 580.65.06" in notes
    assert "the machine image's own" in notes and "not the locks (INSTALL=0)" in notes
    assert all(f"- {'ok' if n != 'bench' else 'FAILED'} {n}:" in notes for n in lines)
