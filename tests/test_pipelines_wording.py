"""The native loaders' section says only what its runs show: one heading per section, no
"every value tried" where one value ran, and TensorFlow's loader named for what it is."""

from __future__ import annotations

from harness.reporting import model, pipelines, report
from tests.conftest import FIXTURE_RUNS

PIPELINES = FIXTURE_RUNS / "2026-11-25-cpu-input-pipelines"  # every adapter at workers=2 only
WORKERS = FIXTURE_RUNS / "2026-11-25-cpu-input-workers"  # workers=0,1,2,4


def _section(run) -> str:
    recs, _ = model.load_runs([run])
    return "\n".join(pipelines.section(recs, None))


def test_each_section_heading_appears_once():
    md = report.build(PIPELINES)
    headings = [line for line in md.splitlines() if line.startswith("## ")]
    assert len(headings) == len(set(headings)), headings
    assert "## Input pipeline" in headings, "the data modes' section keeps its name"


def test_one_value_tried_is_not_every_value():
    text = _section(PIPELINES)
    assert "every workers value tried" not in text
    assert "- tf-function: " in text
    assert "input-bound at workers=2 (waits 82% of the step), the only workers value tried" in text
    assert "compute-bound at workers=2 (waits 3% of the step), the only workers value tried" in text
    assert "tf-function: tf.data" in _section(WORKERS) and "input-bound at every workers value tried" in _section(
        WORKERS
    ), "four values ran there"


def test_tensorflow_loader_is_worded_as_this_projects_loader_through_numpy_function():
    text = _section(PIPELINES)
    mlp = text.split("### mlp on cpu")[1]
    assert "this project's per-sample Python function" in mlp and "`tf.numpy_function`" in mlp
    assert "GIL" in mlp and "not the speed of a tf.data pipeline" in mlp
    assert "67.7-69.3 batches/s at workers=2 against 140-150 for the others" in mlp
    resident = "\n".join(
        pipelines.section([r for r in model.load_runs([PIPELINES])[0] if "tf" not in r["adapter"]], None)
    )
    assert "numpy_function`" not in resident, "no TensorFlow loader, no note"
