"""The Method quotes the committed calibrations of the run's machine type (harness.reporting.calibration_note):
one versioned file, evidence/calibrations.json, counted from the calibration folders under evidence/,
and a user's own calibration only where passed. Every test builds its own files in tmp_path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.reporting import calibration_note


def _write(folder: Path, rounds: int, judged: bool = True, first_look: int | None = None) -> None:
    high = 1.05 if judged else None
    pairs = [
        {"effect": 0.0, "high": high, "different": False, "right_way": False, "ratio": 1.01},
        {"effect": 0.0, "high": high, "different": True, "right_way": False, "ratio": 1.08},
        {"effect": 0.1, "high": high, "different": True, "right_way": True, "ratio": 1.15},
    ]
    meta = {
        "adapter": "torch-eager,jax-jit",
        "workload": "mlp",
        "device": "cpu",
        "repeats": 2,
        "rounds": rounds,
        "twins": "0%, 10%",
        "level": 0.9706,
        "machine": "AMD EPYC",
        **({"first_look": first_look} if first_look else {}),
    }
    groups = [{"judged": judged, "leader_twins": 1, "family_false": False}]
    folder.mkdir(parents=True, exist_ok=True)
    span = f"{first_look}-to-{rounds}" if first_look else f"{rounds}"
    (folder / f"calibration-{span}-generations.json").write_text(
        json.dumps({"meta": meta, "pairs": pairs, "groups": groups})
    )


def _committed(tmp_path: Path) -> Path:
    """calibrations.json counted from the calibration folders under tmp_path/evidence, as --write counts them."""
    return calibration_note.write(tmp_path / "calibrations.json", tmp_path / "evidence")


def _recs(cpu: str = "AMD EPYC", rounds: int = 3, level: float = 0.95) -> list[dict]:
    return [
        {"status": "ok", "fingerprint": {"cpu": cpu}, "device": "cpu", "rounds_done": rounds, "verdict_level": level}
    ]


def test_the_calibration_of_the_runs_machine_is_quoted_with_its_rates_and_intervals(tmp_path):
    _write(tmp_path / "evidence" / "2026-11-25-calibration-mixed", 3)
    _write(tmp_path / "evidence" / "2026-11-25-calibration-mixed", 2, judged=False)  # nothing judged: never quoted
    (line,) = calibration_note.lines(_recs(), evidence=_committed(tmp_path))
    assert line.startswith("- Calibration (`evidence/2026-11-25-calibration-mixed`, AMD EPYC, cpu, torch-eager,jax-jit")
    assert "3 generations, 97.06%, 2 repeats" in line
    assert "identical cells called different in 1 of 2 pairs (50% [9, 91])" in line
    assert "a 10% slow-down (measured 1.15x, median) detected in 1 of 1 pairs (100% [21, 100])" in line
    assert "0 of 1 groups" in line


def test_of_several_judgings_the_one_closest_to_the_runs_generations(tmp_path):
    for rounds in (3, 4):
        _write(tmp_path / "evidence" / "cal", rounds)
    (line,) = calibration_note.lines(_recs(rounds=4), evidence=_committed(tmp_path))
    assert "4 generations" in line
    (line,) = calibration_note.lines(_recs(rounds=3), evidence=_committed(tmp_path))
    assert "3 generations" in line


def test_a_budgeted_run_quotes_the_judging_where_a_budgeted_run_stops_looking(tmp_path):
    """A budget looks again at an unsettled group (generation 4): the calibration judged the same way
    (``--looks``) is its match; a run of fixed rounds keeps the fixed judging of its generations."""
    for rounds in (3, 4):
        _write(tmp_path / "evidence" / "cal", rounds)
    _write(tmp_path / "evidence" / "cal", 4, first_look=3)
    (line,) = calibration_note.lines(_recs(rounds=3, level=0.9706), evidence=_committed(tmp_path))
    assert "3 generations, up to 4 where the group was unsettled (a budgeted run's looks), 97.06%" in line
    (line,) = calibration_note.lines(_recs(rounds=4), evidence=_committed(tmp_path))
    assert "beside twins 0%, 10%, 4 generations, 97.06%" in line


def test_a_calibration_of_slowed_twins_only_quotes_its_power_alone(tmp_path):
    _write(tmp_path / "evidence" / "cal", 3)
    path = tmp_path / "evidence" / "cal" / "calibration-3-generations.json"
    data = json.loads(path.read_text())
    data["pairs"] = [p for p in data["pairs"] if p["effect"]]
    data["groups"] = [{"judged": False, "any_pair_false": False, "leader_twins": 0, "family_false": False}]
    path.write_text(json.dumps(data))
    (line,) = calibration_note.lines(_recs(), evidence=_committed(tmp_path))
    assert line.endswith(
        "2 repeats): a 10% slow-down (measured 1.15x, median) detected in 1 of 1 pairs (100% [21, 100])."
    )


def test_another_machine_type_is_told_none_was_calibrated_there(tmp_path):
    _write(tmp_path / "evidence" / "cal", 3)
    (line,) = calibration_note.lines(_recs(cpu="Intel Xeon"), evidence=_committed(tmp_path))
    assert "no committed calibration was measured on this CPU model" in line and "make calibrate" in line


def test_a_rate_below_ten_percent_keeps_a_decimal_so_2_of_540_does_not_read_0():
    from harness.reporting.calibration_note import _rate

    assert _rate(2, 540, "pairs") == "2 of 540 pairs (0.4% [0.1, 1.3])"
    assert _rate(0, 12, "groups") == "0 of 12 groups (0.0% [0.0, 24.3])"
    assert _rate(1, 2, "pairs") == "1 of 2 pairs (50% [9, 91])"


def test_the_verdict_between_groups_quotes_the_calibrations_across_two_runs_of_the_machine(tmp_path):
    """``steady vs its exact`` judges cells of two groups by Welch's t: its line sums what the
    committed calibrations of the run's CPU model measured between two fresh runs
    (harness.calibrate.between), judged pairs only; nothing where none measured it."""
    _write(tmp_path / "evidence" / "2026-11-25-calibration-mixed", 3)
    assert calibration_note.across(_recs(), evidence=_committed(tmp_path)) == "", (
        "a calibration without pairs across runs"
    )
    for name, different in (("2026-11-26-a", False), ("2026-11-26-b", True)):
        _write(tmp_path / "evidence" / name, 3)
        path = tmp_path / "evidence" / name / "calibration-3-generations.json"
        data = json.loads(path.read_text())
        data["between"] = {
            "pairs": [
                {"effect": 0.0, "high": 1.4, "different": different, "right_way": False, "ratio": 1.2},
                {"effect": 0.0, "high": None, "different": False, "right_way": False, "ratio": 2.0},  # not judged
                {"effect": 0.1, "high": 1.5, "different": False, "right_way": False, "ratio": 1.1},
            ],
            "groups": [{"repeats": [1, 2], "judged": True, "any_pair_false": different}],
        }
        path.write_text(json.dumps(data))
    line = calibration_note.across(_recs(), evidence=_committed(tmp_path))
    assert line == (
        "Between two groups (`steady vs its exact`: Welch's t, nothing pairs their generations), calibrated "
        "between two fresh runs on this CPU model (`evidence/2026-11-26-a`, `evidence/2026-11-26-b`): "
        "identical cells called different in 1 of 2 pairs (50% [9, 91]), in 1 of 2 pairs of runs (50% [9, 91]); "
        "a 10% slow-down found in 0 of 2 pairs (0.0% [0.0, 65.8]). Identical code ran up to 1.20x slower in one "
        "run than in the other: the machine's speed drifts between groups, which this verdict does not model, so "
        "it separates only large differences, and a run whose speed shifted between its groups can separate "
        "identical code."
    )
    assert calibration_note.across(_recs(cpu="Intel Xeon"), evidence=_committed(tmp_path)) == ""
    # a folder's other judging of the same repeats (2 generations) does not count its pairs again
    again = json.loads(path.read_text())
    again["meta"]["rounds"] = 2
    again["between"]["pairs"][0]["different"] = False
    (path.parent / "calibration-2-generations.json").write_text(json.dumps(again))
    assert calibration_note.across(_recs(), evidence=_committed(tmp_path)) == line


def test_the_committed_calibrations_are_one_versioned_file_with_each_folders_machine_and_counts(tmp_path):
    """``--write`` counts every calibration folder under evidence/ into calibrations.json: the folder,
    the machine its repeats ran on, the command, and per judging the setting and the counts quoted."""
    folder = tmp_path / "evidence" / "2026-11-28-calibration-mixed"
    _write(folder, 4)
    _write(folder, 5)
    fingerprint = {"cpu": "AMD EPYC", "cores": 2, "driver": None, "gpus": []}
    (folder / "repeat-01").mkdir()
    (folder / "repeat-01" / "results.jsonl").write_text(json.dumps({"fingerprint": fingerprint}) + "\n")
    (folder / "calibration-run.json").write_text(json.dumps({"command": "python -m harness calibrate --rounds 5"}))
    (tmp_path / "evidence" / "2026-11-28-cpu-default").mkdir()  # a run, no calibration: not listed
    data = json.loads(_committed(tmp_path).read_text())
    assert data["schema_version"] == calibration_note.SCHEMA_VERSION
    (cal,) = data["calibrations"]
    assert cal["folder"] == "evidence/2026-11-28-calibration-mixed" and cal["machine"] == fingerprint
    assert cal["command"] == "python -m harness calibrate --rounds 5"
    assert [j["file"] for j in cal["judgings"]] == ["calibration-4-generations.json", "calibration-5-generations.json"]
    four = cal["judgings"][0]
    assert {k: four[k] for k in ("level", "generations", "first_look", "repeats", "machine", "device")} == {
        "level": 0.9706,
        "generations": 4,
        "first_look": 4,
        "repeats": 2,
        "machine": "AMD EPYC",
        "device": "cpu",
    }
    assert four["identical"] == {"pairs": 2, "different": 1} and four["family"] == {"groups": 1, "false": 0}
    assert four["slowdowns"] == [{"effect": 0.1, "pairs": 1, "detected": 1, "measured": 1.15}]
    assert "between" not in four, "measured no pairs across runs"


def test_a_calibration_in_reports_changes_no_report_unless_passed(tmp_path):
    """A user's own calibration (``harness calibrate`` into reports/) is not read beside the committed
    file; passed (a page or its folder), it is quoted after the committed ones, by the path given."""
    _write(tmp_path / "evidence" / "cal", 3)
    committed = _committed(tmp_path)
    mine = tmp_path / "reports" / "2026-12-01-calibration"
    _write(mine, 3)
    (line,) = calibration_note.lines(_recs(), evidence=committed)
    assert "`evidence/cal`" in line
    for given in (mine, mine / "calibration-3-generations.json"):
        first, second = calibration_note.lines(_recs(), given, evidence=committed)
        assert first == line and second.startswith(f"- Calibration (`{mine}`, AMD EPYC, cpu, torch-eager,jax-jit")
    (only,) = calibration_note.lines(_recs(), mine, evidence=tmp_path / "none.json")
    assert only.startswith(f"- Calibration (`{mine}`, ")
    none, elsewhere = calibration_note.lines(_recs(cpu="Intel Xeon"), mine, evidence=committed)
    assert "no committed calibration" in none
    assert (
        elsewhere
        == f"- Calibration (`{mine}`): measured on AMD EPYC, cpu, not on this run's CPU model and device: not quoted."
    )
    with pytest.raises(calibration_note.CalibrationError, match="no calibration page"):
        calibration_note.lines(_recs(), tmp_path / "reports")


def test_the_committed_file_is_read_by_name_and_its_version_checked(tmp_path):
    assert calibration_note.CALIBRATIONS == calibration_note.EVIDENCE / "calibrations.json"
    assert calibration_note.committed(tmp_path / "absent.json") == []
    path = tmp_path / "calibrations.json"
    path.write_text(json.dumps({"schema_version": calibration_note.SCHEMA_VERSION + 1, "calibrations": []}))
    with pytest.raises(calibration_note.CalibrationError, match="schema_version"):
        calibration_note.committed(path)
