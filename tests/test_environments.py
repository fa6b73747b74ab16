"""Framework versions as an axis: ``--env NAME=PYTHON`` runs every adapter in another Python
environment too, side by side in one run (a real second environment with another numpy here)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from harness import records
from harness.install import environments
from harness.running.plan import PlanError, parse_envs
from tests.conftest import REPO
from tests.fakes import report_text

FAST = ["--workload", "mlp", "--device", "cpu", "--set", "hidden=8", "--set", "input_shape=4,4"]
FAST += ["--set", "num_batches=2", "--run-id", "r"]


def bench(python, out, *args):
    env = dict(os.environ, DLCOMPARE_EXTRA_ADAPTERS="tests.fault_adapters")
    cmd = [python, "-m", "harness", "bench", "--out", str(out), *FAST, *args]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


def test_bad_environments_are_refused_by_name(python, tmp_path):
    for expr, message in [
        ("next", "expected NAME=PYTHON"),
        ("=x", "expected NAME=PYTHON"),
        ("a b=python3", "expected NAME=PYTHON"),
        (f"next={tmp_path / 'nope'}", "is not an executable Python interpreter"),
    ]:
        with pytest.raises(PlanError, match=message):
            parse_envs([expr])
    with pytest.raises(PlanError, match="given twice"):
        parse_envs([f"a={python}", f"a={python}"])
    proc = bench(python, tmp_path, "--framework", "fault-ok", "--env", "next")
    assert proc.returncode == 2 and "--env 'next': expected NAME=PYTHON" in proc.stderr


def test_two_versions_of_a_package_are_cells_of_one_run(python, tmp_path):
    twin = environments.create("np23", ["numpy==2.3.5"], root=tmp_path)
    proc = bench(python, tmp_path, "--framework", "fault-ok", "--env", f"np23={twin}")
    assert proc.returncode == 0, proc.stderr
    run = tmp_path / "r"
    recs = {r["adapter"]: r for r in records.load(run / records.RESULTS)}
    assert set(recs) == {"fault-ok", "fault-ok@np23"}
    assert all(r["status"] == "ok" for r in recs.values())
    base_numpy = recs["fault-ok"]["versions"]["numpy"]
    assert recs["fault-ok@np23"]["versions"]["numpy"] == "2.3.5" != base_numpy
    assert recs["fault-ok@np23"]["env"] == "np23" and recs["fault-ok@np23"]["base_adapter"] == "fault-ok"
    report = report_text(run)
    assert "| fault-ok@np23 " in report and "| fault-ok " in report
    doctor = json.loads((run / records.ENV).read_text())["doctor"]["frameworks"]
    assert {row["adapter"]: row["versions"]["numpy"] for row in doctor} == {
        "fault-ok": base_numpy,
        "fault-ok@np23": "2.3.5",
    }


# --- a GPU variant's family environments ----------------------------------------------------


@pytest.mark.workers  # the doctor imports TensorFlow and torch in two environments' processes
def test_a_recorded_family_environment_runs_its_frameworks_workers(tmp_path):
    """Two real environments laid out as `make install VARIANT=cuda13` lays them out (here both
    layered over this one, so both can import every framework): TensorFlow's workers, asked from
    the main one, run under .venv-main-tf's interpreter and env.json's doctor says so; so do
    keras-tf's, whose framework is keras but whose environment is TensorFlow's."""
    main = environments.create("main", [], root=tmp_path)
    tf = environments.create("main-tf", [], root=tmp_path)
    proc = subprocess.run(
        [str(main), "-m", "harness.install.environments", "--record", "cuda13"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    recorded = json.loads((tmp_path / ".venv-main" / environments.RECORD).read_text())
    assert recorded["environments"]["tf"]["python"] == str(tf.absolute())
    assert recorded["environments"]["tf"]["frameworks"] == ["tensorflow"]
    assert environments.family_python("tensorflow", str(tmp_path / ".venv-main")) == str(tf.absolute())
    assert environments.family_python("torch", str(tmp_path / ".venv-main")) is None
    script = (
        "from adapters import discover; from harness.checks import doctor; import json\n"
        "rows = doctor.diagnose(discover(), 1, ['tf-function', 'keras-tf', 'torch-eager'])['frameworks']\n"
        "print(json.dumps({r['adapter']: [r['python'], r['versions'].get('tensorflow')] for r in rows}))\n"
    )
    out = subprocess.run([str(main), "-c", script], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = json.loads(out.stdout.strip().splitlines()[-1])
    assert rows["tf-function"][0] == str(tf.absolute()) and rows["tf-function"][1]  # TF answered from there
    assert rows["keras-tf"][0] == str(tf.absolute()) and rows["keras-tf"][1]
    assert rows["torch-eager"][0] == str(main.absolute())  # the rest run here


def test_recording_refuses_an_unknown_variant_and_a_missing_environment(tmp_path):
    main = environments.create("main", [], root=tmp_path)
    with pytest.raises(ValueError, match="variant 'cuda11': valid: cpu, cuda12, cuda13"):
        environments.record("cuda11", tmp_path / ".venv-main")
    with pytest.raises(ValueError, match="environment tf: no interpreter at"):
        environments.record("cuda13", tmp_path / ".venv-main")
    assert environments.record("cpu", tmp_path / ".venv-main")["environments"]["main"]["python"] == str(main)
