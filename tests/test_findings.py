"""'What this run found' (harness.reporting.findings): frameworks against each other, per workload,
with the tables' own numbers and links to the modules that ran."""

from __future__ import annotations

import re

from harness.reporting import findings, model
from harness.reporting.workload_tables import workload_table
from tests.conftest import FIXTURE_RUNS, REPO

DEFAULT = FIXTURE_RUNS / "2026-11-25-cpu-default"


def _default():
    recs, _ = model.load_runs([DEFAULT])
    return recs


def test_each_line_prints_the_leader_and_each_frameworks_best_as_its_table_does():
    recs = _default()
    lines = findings.section(recs)
    assert lines[0] == "## What this run found"
    body = [ln for ln in lines if ln.startswith("- ")]
    assert 1 <= len(body) <= findings.MAX_LINES
    cnn = next(ln for ln in body if ln.startswith("- **cnn**"))
    assert "tf-function (`adapters/tf_function.py`) leads at 8.81 ms/step (the fastest" in cnn
    table = workload_table([r for r in recs if r["workload"] == "cnn" and r.get("data", "resident") == "resident"])
    ratios = re.findall(r"\d+\.\d\d \[\d+\.\d\d, \d+\.\d\d\]", cnn)
    assert len(ratios) == 4  # torch, keras, flax and jax: each framework's best once
    assert all(r in table for r in ratios)
    # the largest separated gap first, and explained by the table's "vs its floor" texts
    assert body[0] == cnn and "Largest gap: jax-jit, its step is 5.6x kernels (vs its floor)" in cnn


def test_unresolved_rivals_keep_their_reason_and_no_gap_is_claimed():
    line = next(ln for ln in findings.section(_default()) if ln.startswith("- **rnn-decode**"))
    assert "unresolved (one process per cell)" in line
    assert "Largest gap" not in line and "(no other framework separated from it)" in line


def test_every_link_names_a_module_that_exists():
    for adapter in ("jax-jit", "flax-nnx-cached", "torch-eager~twin1", "keras-jax"):
        module = findings.module_of(adapter)
        assert module is not None and module.is_file()
    assert findings.module_of("paddle-dygraph") is None  # a plugin's module is not linked
    named = re.findall(r"`(adapters/[^`]+)`", "\n".join(findings.section(_default())))
    assert named and all((REPO / target).is_file() for target in named)


def test_a_run_of_one_framework_has_no_findings():
    recs = [r for r in _default() if r.get("framework") == "torch"]
    assert findings.section(recs) == []
