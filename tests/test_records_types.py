"""Typed cells and records (harness.records): the version upgrade every reader goes through,
``spec_of`` and ``pipeline_of``, the keys cells may hold, and what every workload declares."""

from __future__ import annotations

import json
import shutil
import typing

import pytest

from harness import records
from harness.reporting import report
from harness.running.plan import DEFAULT_STRATEGY, parse_sweep, plan, twins, variants
from tests.conftest import EVIDENCE, FIXTURE_RUNS
from tests.fakes import fake_info
from workloads import STRATEGIES, WORKLOADS, get_workload
from workloads.images import AUTOTUNE, PipelineSettings

COMMITTED = sorted(EVIDENCE.glob("**/" + records.RESULTS))
ADAPTERS = {"jax-jit": fake_info("jax-jit", "jax"), "torch-eager": fake_info("torch-eager", "torch")}


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_every_committed_record_is_read_upgraded_and_rebuilds_its_spec():
    assert len(COMMITTED) >= 20, "the committed runs were found"
    for path in COMMITTED:
        raw = _lines(path)
        read = records.load(path)
        assert read == [records.upgrade(dict(rec)) for rec in raw], path
        for rec, new in zip(raw, read, strict=True):
            assert new["schema_version"] == records.SCHEMA_VERSION
            for key, value in rec.items():  # an upgrade adds what the record meant, never changes what it says
                if key == "protocol":
                    assert value.items() <= new[key].items(), path
                elif key != "schema_version":
                    assert new[key] == value, (path, key)
            assert records.upgrade(dict(new)) == new, "a current record is read unchanged"
            if rec.get("kind") == "export":  # an export row names its workload, not a spec of overrides
                assert rec["export_path"] and rec["workload"], path
                continue
            assert json.loads(json.dumps(records.spec_of(rec).as_dict())) == rec["spec"], path


def test_a_record_of_a_newer_version_names_its_version_and_the_readable_ones(tmp_path):
    path = tmp_path / records.RESULTS
    newer = {**_lines(COMMITTED[0])[0], "schema_version": records.SCHEMA_VERSION + 1}
    path.write_text(json.dumps(_lines(COMMITTED[0])[0]) + "\n" + json.dumps(newer) + "\n")
    with pytest.raises(records.RecordError) as err:
        records.load(path)
    assert str(err.value) == (
        f"{path}:2: schema_version {records.SCHEMA_VERSION + 1} (written by a newer dlcompare): "
        f"this version reads {', '.join(map(str, range(1, records.SCHEMA_VERSION + 1)))}"
    )


@pytest.mark.parametrize("version", [0, None, "1", 1.5])
def test_a_record_of_a_version_no_step_reads_is_an_error_naming_it(version):
    readable = ", ".join(map(str, range(1, records.SCHEMA_VERSION + 1)))
    with pytest.raises(records.RecordError, match=rf"schema_version {version!r}: this version reads {readable}$"):
        records.upgrade({"schema_version": version, "adapter": "a"})


def test_upgrade_chains_the_steps_from_an_older_version(monkeypatch, tmp_path):
    """A synthetic next version (batch_size moved into the spec alone) read from real v1 records."""

    def to_2(rec):
        out = {k: v for k, v in rec.items() if k != "batch_size"}
        return {**out, "schema_version": 2}

    monkeypatch.setattr(records, "SCHEMA_VERSION", 2)
    monkeypatch.setattr(records, "UPGRADES", {1: to_2})
    path = tmp_path / records.RESULTS
    shutil.copy(FIXTURE_RUNS / "2026-11-25-cpu-mlp-batch1024" / records.RESULTS, path)
    read = records.load(path)
    assert read and all(r["schema_version"] == 2 and "batch_size" not in r for r in read)
    assert [r["spec"] for r in read] == [r["spec"] for r in _lines(path)], "the rest is kept"
    monkeypatch.setattr(records, "UPGRADES", {1: lambda rec: {**rec, "schema_version": 3}})
    with pytest.raises(AssertionError, match="from schema_version 1 must give 2"):
        records.load(path)


def test_new_records_are_the_current_version():
    cell = plan(ADAPTERS, "jax", "mlp", "cpu", [], "quick", 2, "r")[0]
    assert records.new_record(cell, "ok")["schema_version"] == records.SCHEMA_VERSION


def _keys(typed: type) -> set[str]:
    return set(typed.__required_keys__) | set(typed.__optional_keys__)


def test_planned_cells_hold_only_keys_the_cell_type_declares(tmp_path):
    python = shutil.which("python3")
    cells = plan(ADAPTERS, "all", "all", "cpu", ["batch_size=8"], "quick", 2, "r", precision="bf16", envs=[])
    cells += plan(ADAPTERS, "jax", "cnn", "cpu", [], "quick", 2, "r", data="loader", sweep="workers=0,autotune")
    cells += plan(ADAPTERS, "jax", "mlp", "cpu", [], "quick", 2, "r", force_precision=True, envs=[f"next={python}"])
    cells += twins(cells[:2], [0.0, 0.1])
    declared = _keys(records.Cell)
    for cell in cells:
        assert set(cell) <= declared, set(cell) - declared
        assert set(records.Cell.__required_keys__) <= set(cell)
    assert _keys(records.Cell) <= _keys(records.Record)
    hints = typing.get_type_hints(records.Record)
    assert hints["schema_version"] is int and "spec" in hints


def test_pipeline_settings_are_parsed_once_by_the_plan_and_read_as_recorded():
    assert parse_sweep("workers=0, 2,autotune") == ("workers", [0, 2, AUTOTUNE])
    assert parse_sweep("batch_size=16,32") == ("batch_size", ["16", "32"])
    cells = plan(ADAPTERS, "jax", "cnn", "cpu", ["prefetch=3"], "quick", 2, "r", data="loader", sweep="workers=0,1")
    assert [c["pipeline"] for c in cells] == [{"prefetch": 3, "workers": 0}, {"prefetch": 3, "workers": 1}]
    assert [c["sweep"]["value"] for c in cells] == [0.0, 1.0]
    assert records.pipeline_of(cells[1]) == PipelineSettings(workers=1, prefetch=3)
    assert records.pipeline_of(plan(ADAPTERS, "jax", "mlp", "cpu", [], "quick", 2, "r")[0]) == PipelineSettings()


def test_every_workload_declares_what_the_harness_reads():
    for name in WORKLOADS:
        spec = get_workload(name)
        assert spec.task in ("train", "decode") and spec.strategy in STRATEGIES and spec.attention in ("naive", "fused")
        assert set(spec.strategies) <= set(STRATEGIES) and all(spec.plan_axes.values())
    assert [n for n in WORKLOADS if get_workload(n).strategies] == ["rnn-caption", "rnn-decode", "transformer"]
    assert "task" not in get_workload("mlp").as_dict(), "a declared default is no spec field"
    assert variants("mlp", [], list(STRATEGIES)) == [[]]
    assert variants("rnn-decode", [], list(STRATEGIES)) == [[]], "decoding has no loop strategies"
    assert variants("rnn-caption", [], [DEFAULT_STRATEGY]) == [["strategy=exact"]]
    assert variants("transformer", [], ["graph-loop", "padded"]) == [
        ["strategy=padded", "attention=naive"],
        ["strategy=padded", "attention=fused"],
    ]


def test_committed_reports_rebuild_identically_from_their_records(tmp_path):
    """Small committed runs (their plots are quick to draw): report.md and report.html as committed."""
    for name in ("2026-11-25-cpu-mlp-batch1024", "2026-11-24-cpu-mlp-rerun/a", "2026-11-25-cpu-input-workers"):
        src, run = FIXTURE_RUNS / name, tmp_path / name
        run.mkdir(parents=True)
        for part in (records.RESULTS, records.ENV, "plan.json"):
            shutil.copy(src / part, run / part)
        report.write(run)
        for page in ("report.md", "report.html"):
            assert (run / page).read_text() == (src / page).read_text(), f"{name}/{page}"
