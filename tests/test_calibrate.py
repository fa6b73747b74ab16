"""Calibration (harness.calibrate): false differences and power by true effect, judged as reports
judge them, across two runs, apart under contention, and where a budgeted bench stops looking."""

from __future__ import annotations

import json

import pytest

from harness import calibrate, records
from harness.stats import verdicts
from tests.test_turns import _turn_records


def test_calibration_counts_false_differences_and_power_by_true_effect():
    assert calibrate.wilson(0, 60) == (0.0, pytest.approx(0.0602, abs=1e-3))
    aa = _turn_records("a", 1.0, noise=0.01) + _turn_records("a~twin1", 1.0, noise=0.01, seed=1)
    slow = _turn_records("a~slow25", 1.25, noise=0.01, seed=2)
    other = _turn_records("b", 0.5, noise=0.01, seed=3)  # another adapter: no known ratio, no pair
    for r in aa[3:] + slow:
        r["base_adapter"] = "a"
    for r in slow:
        r["slowdown"] = 0.25
    pairs, group = calibrate.judge(aa + slow + other, 0.95)
    assert sorted(p["effect"] for p in pairs) == [0.0, 0.25, 0.25]
    assert all(p["right_way"] for p in pairs if p["effect"]) and not any(
        p["different"] for p in pairs if not p["effect"]
    )
    text = calibrate.table(pairs)
    assert "| 0%" in text and "0 false differences" in text and "2 detected" in text
    row = next(line for line in text.splitlines() if line.startswith("| 25%"))
    assert float(row.split("|")[-2]) == pytest.approx(1.25, abs=0.01), "the effect the pairs measured"
    # b leads the group; no cell identical to it, so the family-wise count skips this repeat
    assert group == {"judged": True, "any_pair_false": False, "leader": "b", "leader_twins": 0, "family_false": False}
    _, group = calibrate.judge(aa + slow, 0.95)
    assert group["leader"] in ("a", "a~twin1") and group["leader_twins"] == 1 and not group["family_false"]
    rows = calibrate.group_table([group, {**group, "family_false": True, "any_pair_false": True}]).splitlines()
    assert "| 2 | 1 | 50.0%" in rows[2].replace("  ", " ") or "50.0%" in rows[3]


def test_twins_slowed_alike_in_one_group_are_judged_as_identical_code():
    """``--twins 0,99,99``: the two twins slowed alike are a known ratio of 1 (slow cells against
    each other); across two runs, and for twins slowed unalike, no pair."""
    from harness.running.plan import twins

    cell = {"adapter": "a", "cell_id": "a|mlp|cpu", "run_id": "r"}
    assert [c["adapter"] for c in twins([cell], [0, 99, 99, 0.1])] == ["a", "a~twin1", "a~slow9900-2",
                                                                      "a~slow9900-3", "a~slow10"]  # fmt: skip
    recs = _turn_records("a", 1.0, noise=0.01)
    for i, (name, slow) in enumerate((("a~slow9900-2", 99.0), ("a~slow9900-3", 99.0), ("a~slow10", 0.1))):
        more = _turn_records(name, 100.0 if slow == 99.0 else 1.1, noise=0.01, seed=i + 1)
        for r in more:
            r.update(base_adapter="a", slowdown=slow)
        recs += more
    pairs, _ = calibrate.judge(recs, 0.95)
    alike = [p for p in pairs if {p["a"], p["b"]} == {"a~slow9900-2", "a~slow9900-3"}]
    assert len(alike) == 1 and alike[0]["effect"] == 0.0 and alike[0]["right_way"] is None
    assert not any({p["a"], p["b"]} == {"a~slow9900-2", "a~slow10"} for p in pairs), "slowed unalike: no known ratio"
    assert sorted(p["effect"] for p in pairs) == [0.0, 0.1, 99.0, 99.0]
    other = [{**r, "run_id": "other"} for r in recs]
    a2, b2 = calibrate.ok_cells(recs)[1], calibrate.ok_cells(other)[2]
    assert {a2["adapter"], b2["adapter"]} == {"a~slow9900-2", "a~slow9900-3"}
    assert calibrate.known_pair(a2, b2, 0.95) is None, "across two runs: as before"


def test_twins_waiting_alike_are_judged_as_identical_code_and_against_nothing_else():
    """``--twins 0,50ms,50ms,20ms``: the two 50 ms twins are a known ratio of 1; a waiting twin
    against its base or a twin waiting otherwise has no known ratio (it depends on the step's
    time), and a waiting twin is never counted as identical to the leader."""
    recs = _turn_records("a", 1.0, noise=0.01) + _turn_records("a~twin1", 1.0, noise=0.01, seed=9)
    for i, (name, wait) in enumerate((("a~wait50-2", 0.05), ("a~wait50-3", 0.05), ("a~wait20", 0.02))):
        more = _turn_records(name, 10.0 if wait == 0.05 else 5.0, noise=0.01, seed=i + 1)
        for r in more:
            r.update(base_adapter="a", wait_s=wait)
        recs += more
    for r in recs:
        r.setdefault("base_adapter", "a")
    pairs, group = calibrate.judge(recs, 0.95)
    assert sorted({p["a"], p["b"]} == {"a", "a~twin1"} or {p["a"], p["b"]} == {"a~wait50-2", "a~wait50-3"}
                  for p in pairs) == [True, True]  # fmt: skip
    assert all(p["effect"] == 0.0 and p["right_way"] is None and not p["different"] for p in pairs)
    assert group["leader"] in ("a", "a~twin1") and group["leader_twins"] == 1
    faster = [{**r, "wait_s": 0.05, "base_adapter": "a"} for r in _turn_records("a~wait50-4", 0.5, noise=0.01)]
    _, group = calibrate.judge(recs + faster, 0.95)
    assert group["leader"] == "a~wait50-4" and group["leader_twins"] == 0, "no cell is identical to a waiting leader"


def _repeat(run_id: str, seed: int) -> list[dict]:
    """A calibration repeat's records: ``a``, an identical twin and a twin slowed by half."""
    recs = []
    for name, factor, slow in (("a", 1.0, 0.0), ("a~twin1", 1.0, 0.0), ("a~slow50", 1.5, 0.5)):
        for r in _turn_records(name, factor, noise=0.01, seed=seed + len(recs)):
            r.update(run_id=run_id, base_adapter="a", slowdown=slow)
            recs.append(r)
    return recs


def test_a_calibration_judges_identical_code_across_two_runs_as_reports_judge_two_groups():
    """Cells of repeat 1 against cells of repeat 2 (3 against 4, ...): Welch's t on their process
    levels, as a report judges a strategy against its exact; a lone last repeat pairs with none."""
    repeats = [(i, _repeat(f"repeat-{i:02d}", 10 * i)) for i in (1, 2, 3)]
    pairs, groups = calibrate.between(repeats, 0.95)
    assert groups == [{"repeats": [1, 2], "judged": True, "any_pair_false": False}]
    # 2 identical cells x 2, and each slowed twin against the other run's 2 identical cells
    assert sorted(p["effect"] for p in pairs) == [0.0] * 4 + [0.5] * 4
    assert all(p["repeats"] == [1, 2] for p in pairs)
    assert all(p["right_way"] for p in pairs if p["effect"]) and not calibrate.any_false(pairs)
    a, b = calibrate.ok_cells(repeats[0][1])[0], calibrate.ok_cells(repeats[1][1])[0]
    assert not verdicts.same_group(a, b), "two runs: nothing pairs their generations"
    assert calibrate.known_pair(a, {**b, "slowdown": 0.5, "adapter": "x", "base_adapter": "x"}, 0.95) is None
    row = " ".join(calibrate.across_table(groups).splitlines()[2].split())
    assert row == "| any identical pair separated across the two runs | 1 | 0 | 0.0% [0.0, 79.3] |"


def test_a_calibration_judges_repeats_with_contended_cells_apart(tmp_path, monkeypatch):
    """A report does not rank a contended cell; the calibration's tables leave such repeats out and
    show them apart, with their turn counts."""
    for i, busy in ((1, False), (2, True)):
        recs = _turn_records("a", 1.0, noise=0.01, seed=i) + _turn_records("a~twin1", 1.0, noise=0.01, seed=10 + i)
        for r in recs[3:]:
            r["base_adapter"] = "a"
        recs[0].update(contended=busy, turns_dropped=5 if busy else 0, turns_contended=4 if busy else 0)
        folder = tmp_path / f"repeat-{i:02d}"
        folder.mkdir()
        (folder / records.RESULTS).write_text("".join(json.dumps(r) + "\n" for r in recs))
    setting = {"framework": "a", "workload": "mlp", "device": "cpu", "twins": "0"}
    (tmp_path / "calibration-run.json").write_text(
        json.dumps({"wall_min": 1.0, "rounds": 3, "command": "c", "setting": setting})
    )
    # judging again describes what ran (the setting recorded), not the command line's defaults
    assert calibrate.main(["--judge-only", "--out", str(tmp_path), "--level", "0.95"]) == 0
    data = json.loads((tmp_path / "calibration-3-generations.json").read_text())
    assert data["meta"]["adapter"] == "a" and data["meta"]["twins"] == "0%"
    assert data["meta"]["repeats"] == 1 and data["meta"]["contended_repeats"] == [2]
    assert {p["repeat"] for p in data["pairs"]} == {1}
    assert data["contended"][0]["turns"] == {"kept": 120, "retaken": 5, "contended": 4}
    text = (tmp_path / "calibration-3-generations.md").read_text()
    assert "## Across groups" not in text and "between" not in data, "one quiet repeat: no pair of runs"
    assert "## Repeats under contention (1, judged apart)" in text
    assert "repeat 2: 4 of 120 kept turns under contention, 5 retaken" in text


def _group(seed: int, close: bool) -> list[dict]:
    """A repeat of 4 generations: ``a`` and ``b``, twice as slow (settled after 3 generations), or
    3% slower and noisy (unsettled after 3 and after 4)."""
    factor, noise = (1.03, 0.05) if close else (2.0, 0.002)
    return _turn_records("a", 1.0, rounds=4, noise=noise, seed=seed) + _turn_records(
        "b", factor, rounds=4, noise=noise, seed=seed + 1
    )


def test_a_repeat_is_judged_where_a_budgeted_bench_stops_adding_generations(tmp_path):
    """--looks: after generation 3 where the group is settled there (the budget adds none), else
    after the last; the pairs and the page are those of the generations judged."""
    assert calibrate.stopping_look(_group(1, close=False), 3, 4, 0.9706) == 3
    assert calibrate.stopping_look(_group(1, close=True), 3, 4, 0.9706) == 4
    assert calibrate.stopping_look(_group(1, close=True), 4, 4, 0.9706) == 4, "one look: the last"
    for i, close in ((1, False), (2, True)):
        folder = tmp_path / f"repeat-{i:02d}"
        folder.mkdir()
        recs = [{**r, "base_adapter": "a"} if r["adapter"] == "b" else r for r in _group(10 * i, close)]
        (folder / records.RESULTS).write_text("".join(json.dumps(r) + "\n" for r in recs))
    setting = {"framework": "a", "workload": "mlp", "device": "cpu", "twins": "0"}
    (tmp_path / "calibration-run.json").write_text(
        json.dumps({"wall_min": 1.0, "rounds": 4, "command": "c", "setting": setting})
    )
    assert calibrate.main(["--judge-only", "--looks", "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "calibration-3-to-4-generations.json").read_text())
    assert [g["generations"] for g in data["groups"]] == [3, 4]
    assert data["meta"]["first_look"] == 3 and data["meta"]["rounds"] == 4
    three = [r for r in records.load(tmp_path / "repeat-01" / records.RESULTS) if r["round"] <= 3]
    first = next(p for p in data["pairs"] if p["repeat"] == 1)
    assert first["ratio"] == pytest.approx(calibrate.judge(three, data["meta"]["level"])[0][0]["ratio"])
    text = (tmp_path / "calibration-3-to-4-generations.md").read_text()
    assert "the quiet repeats stopped 1 after generation 3, 1 after generation 4" in text


def test_a_calibration_shows_the_pairs_with_a_slow_cell_apart(tmp_path):
    """Pairs where a cell sat turns out (its record's ``slow_rule``) get their own rows, with the
    rule; a page without such a cell stays as it was."""
    recs = _repeat("r", 0)
    rule = {"block_factor": 5.0, "blocks": 5, "turns": 20}
    for r in recs:
        if r["adapter"] == "a~slow50":
            keep = r["turn_ids"][::4]
            r.update(turn_ids=keep, turn_block_s=r["turn_block_s"][::4], sat_out_turns=15, slow_rule=rule)
    pairs, _ = calibrate.judge(recs, 0.95)
    slow = [p for p in pairs if p.get("slow")]
    assert sorted(p["effect"] for p in slow) == [0.5, 0.5] and all(p["slow"] == rule for p in slow)
    lines = calibrate._slow_lines(pairs)
    assert "took part in only 5 of every 20 kept turns" in lines[0] and "5 times its group's median" in lines[0]
    assert "2 detected" in lines[2] and "0 false differences" in lines[6]
    assert calibrate._slow_lines([p for p in pairs if not p.get("slow")]) == []
