"""Records (and env.json) upgraded by schema (harness.records.UPGRADES, ENV_UPGRADES): what an old
record meant is filled in once, on load, so that no reader downstream branches on a date; each step
fills what it promises, and upgrading is idempotent and applied once per record."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from harness import records
from harness.reporting import breakeven, hardware, report, run_time
from harness.stats.cells import combine
from tests.conftest import FIXTURE_RUNS, REPO

#: A phrase that keys code or its comments to a date ("before 2026-11-27", "records of 2026"), the
#: words apart across a line break, a comment's ``#:`` or a string split in two.
_GAP = r"(?:\s|#:?|\"\s*\n\s*[rf]?\")+"
DATED = re.compile(
    rf"\b(?:before|since|until|after){_GAP}20\d\d-\d\d-\d\d|\brecords?{_GAP}(?:of|from){_GAP}20\d\d", re.I
)

#: A run of schema 1 with every meaning a later schema made explicit: judged at Pocock's level
#: without ``budget_s`` (the looks protocol), floors timed in the workers' start, blocks sized by each process.
OLD_RUN = FIXTURE_RUNS / "2026-11-26-cpu-default-30m"


def _cell() -> dict:
    return {"adapter": "a", "workload": "mlp", "device_requested": "cpu", "threads": 1}


def _v1(**fields) -> dict:
    return {"schema_version": 1, **_cell(), "status": "ok", **fields}


def _write(path: Path, recs: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def test_no_module_outside_records_keys_code_or_comments_to_a_date():
    found = []
    for path in sorted((REPO / "harness").rglob("*.py")):
        if path == REPO / "harness" / "records.py":
            continue
        text = path.read_text()
        for m in DATED.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            found.append(f"{path.relative_to(REPO)}:{line}: {' '.join(m.group(0).split())}")
    assert not found, "a date-keyed phrase (an upgrade step in harness.records, or say why):\n" + "\n".join(found)


def test_the_date_pattern_finds_phrases_across_lines_and_comment_markers():
    assert DATED.search("# records before 2026-11-26 kept")
    assert DATED.search("a budget. Until\n    #: 2026-11-27 a budget")
    assert DATED.search('"in runs since "\n            "2026-11-23, at its end"')
    assert DATED.search("records from 2026 had")
    assert not DATED.search("the default run of 2026-11-27 (f)") and not DATED.search("reports/2026-11-24-calibration")


def test_schema_1_floors_timed_in_the_start_say_none_of_it_was_timed_after():
    old = records.upgrade(_v1(dispatch_floor_s=1e-3, dispatch_floor_wall_s=30.0, ready_s=50.0))
    assert old["dispatch_floor_timed_s"] == 0.0 and old["dispatch_floor_wall_s"] == 30.0
    late = records.upgrade(_v1(dispatch_floor_s=1e-3, dispatch_floor_wall_s=30.0, dispatch_floor_timed_s=2.0))
    assert late["dispatch_floor_timed_s"] == 2.0, "a schema-1 record that says it keeps it"
    assert "dispatch_floor_timed_s" not in records.upgrade(_v1()), "no floor, nothing to say"
    procs = [{**old, "round": 1, "wall_s": 100.0}]
    text = "\n".join(run_time.section(procs))
    assert "a dispatch floor where one is timed), then they take turns" in text, "timed in the start, as it ran"
    text = "\n".join(run_time.section([{**procs[0], "dispatch_floor_timed_s": 2.0}]))
    assert "then each floor is timed, one worker at a time" in text


def test_schema_1_records_judged_at_pococks_level_had_a_budget_of_unkept_size():
    looks = records.upgrade(_v1(verdict_level=0.9706, rounds=3))
    assert "budget_s" in looks and looks["budget_s"] is None
    assert "budget_s" not in records.upgrade(_v1(verdict_level=0.95)), "95%: no budget said"
    assert records.upgrade(_v1(verdict_level=0.95, budget_s=1800.0))["budget_s"] == 1800.0
    assert "budget_s" not in records.upgrade(_v1()), "a record of no generation"
    cell = {**looks, "group_generations": [1, 2]}
    (line, _) = report.generations_note([cell])
    assert "the run's time budget ran out" in line
    (line, _) = report.generations_note(
        [{**records.upgrade(_v1(verdict_level=0.95, rounds=3)), "group_generations": [1, 2]}]
    )
    assert "(see Status)" in line


def test_schema_2_turns_protocols_say_each_process_sized_its_blocks():
    turns = {"mode": "turns", "block_s": 0.03}
    rec = records.upgrade({**_v1(), "schema_version": 2, "protocol": turns})
    assert rec["protocol"] == {**turns, "blocks_sized": "each process"} and turns == {"mode": "turns", "block_s": 0.03}
    sized = {**turns, "blocks_sized": "round 1"}
    assert records.upgrade({**_v1(), "schema_version": 2, "protocol": sized})["protocol"] == sized
    assert records.upgrade(_v1(protocol={"mode": "steps"}))["protocol"] == {"mode": "steps"}, "no turns, no blocks"
    assert "protocol" not in records.upgrade(_v1())


def test_a_committed_schema_1_run_is_read_with_every_meaning_filled_in():
    raw = [json.loads(line) for line in (OLD_RUN / records.RESULTS).read_text().splitlines() if line.strip()]
    read = records.load(OLD_RUN / records.RESULTS)
    assert {r["schema_version"] for r in raw} == {1} and {r["schema_version"] for r in read} == {records.SCHEMA_VERSION}
    assert all("budget_s" in r and r["budget_s"] is None for r in read), "Pocock's level: the looks protocol"
    floors = [r for r in read if "dispatch_floor_wall_s" in r]
    assert floors and all(r["dispatch_floor_timed_s"] == 0.0 for r in floors)
    assert {r["protocol"]["blocks_sized"] for r in read} == {"each process"}


def test_the_break_even_reads_each_processs_cold_flag_from_records_of_any_schema(tmp_path):
    steps = {"step_times_s": [1e-3] * 3, "median_s": 1e-3, "batch_size": 8, "cold_s": 0.1}
    # round 2's record is of a worker that measured no load beside its cold window: no flag
    runs = [_v1(round=1, cold_times_s=[0.1], cold_contended=True, **steps), _v1(round=2, cold_times_s=[0.2], **steps)]
    rec = combine(records.load(_write(tmp_path / records.RESULTS, runs)))
    assert rec["round_cold_contended"] == [True, False]
    assert breakeven.process_windows(rec) == ([[0.2]], 1, False)
    lone = {**rec, "round_cold_times_s": [], "cold_times_s": [0.1], "cold_contended": True}
    assert breakeven.process_windows(lone) == ([[0.1]], 0, True), "a record without per-process windows: its own"


def test_schema_1_env_peaks_measured_once_say_their_figures_are_the_starts(tmp_path):
    once = {"matmul_gflops": 200.0, "matmul_gflops_by": "numpy", "copy_gbs": 15.0}
    both = {**once, "matmul_gflops_start": 180.0, "matmul_gflops_end": 200.0, "copy_gbs_start": 15.0}
    failed = {"error": "RuntimeError: no GPU"}
    (tmp_path / records.ENV).write_text(json.dumps({"cpu": "x", "peaks": {"cpu": once, "cuda": failed, "gpu1": both}}))
    env = records.load_env(tmp_path)
    assert env["schema_version"] == records.ENV_SCHEMA_VERSION and env["cpu"] == "x"
    assert env["peaks"]["cpu"] == {**once, "matmul_gflops_start": 200.0, "copy_gbs_start": 15.0}
    assert env["peaks"]["cuda"] == failed and env["peaks"]["gpu1"] == both
    (row,) = hardware._peak_rows("", {"cpu": env["peaks"]["cpu"]})
    assert row[4] == "200" and row[5] == "—", "measured at the start alone: no end figure"
    assert records.load_env(tmp_path / "none") == {}
    assert records.upgrade_env({}) == {"schema_version": records.ENV_SCHEMA_VERSION}, "version 1 where none is said"
    (tmp_path / records.ENV).write_text(json.dumps({"schema_version": records.ENV_SCHEMA_VERSION + 1}))
    newer = rf"env\.json: schema_version {records.ENV_SCHEMA_VERSION + 1} \(written by a newer dlcompare\)"
    with pytest.raises(records.RecordError, match=newer):
        records.load_env(tmp_path)


def test_upgrades_are_idempotent_and_never_change_the_record_given():
    olds = [
        _v1(verdict_level=0.9706, dispatch_floor_s=1e-3, dispatch_floor_wall_s=3.0, protocol={"mode": "turns"}),
        _v1(
            verdict_level=0.95,
            budget_s=60.0,
            dispatch_floor_timed_s=1.0,
            protocol={"mode": "turns", "blocks_sized": "round 1"},
        ),
        _v1(),
    ]
    for old in olds:
        given = json.loads(json.dumps(old))
        once = records.upgrade(old)
        assert old == given, "the record given is left as it was"
        assert records.upgrade(once) == once and once["schema_version"] == records.SCHEMA_VERSION
    complete = records.upgrade(olds[1])
    assert complete == {**olds[1], "schema_version": records.SCHEMA_VERSION}, (
        "a record that says it all: only its version"
    )
    env = {"peaks": {"cpu": {"matmul_gflops": 1.0, "copy_gbs": 2.0}}}
    assert records.upgrade_env(records.upgrade_env(env)) == records.upgrade_env(env)
    assert env == {"peaks": {"cpu": {"matmul_gflops": 1.0, "copy_gbs": 2.0}}}


def test_load_applies_each_step_once_per_record(monkeypatch, tmp_path):
    calls: dict[int, int] = {}

    def counted(version, step):
        def run(rec):
            calls[version] = calls.get(version, 0) + 1
            return step(rec)

        return run

    monkeypatch.setattr(records, "UPGRADES", {v: counted(v, s) for v, s in records.UPGRADES.items()})
    path = _write(
        tmp_path / records.RESULTS, [_v1(), {**_v1(), "schema_version": 2}, records.new_record(_cell(), "ok")]
    )
    read = records.load(path)
    assert [r["schema_version"] for r in read] == [records.SCHEMA_VERSION] * 3
    assert calls == {1: 1, 2: 2}, "version 1 through every step, 2 through the last, the current through none"
    assert records.new_record(_cell(), "ok")["schema_version"] == records.SCHEMA_VERSION == max(records.UPGRADES) + 1
