"""Where a run's time went (harness.reporting.run_time), on records with known answers."""

from __future__ import annotations

from harness.reporting import model, run_time
from tests.conftest import EVIDENCE, FIXTURE_RUNS


def _proc(adapter: str, workload: str, k: int, ready: float | None, wall: float, **extra) -> dict:
    return {
        "adapter": adapter,
        "workload": workload,
        "round": k,
        "status": "ok",
        "overrides": [],
        "ready_s": ready,
        "wall_s": wall,
        **extra,
    }


def _row(lines: list[str], first: str) -> list[str]:
    line = next(line for line in "\n".join(lines).splitlines() if line.startswith(f"| {first} "))
    return [c.strip() for c in line.strip("|").split("|")]


def _starts_table(lines: list[str]) -> list[str]:
    """The lines of the section from its table of each generation's start on, to the next caption."""
    at = next(i for i, line in enumerate(lines) if line.startswith("Each generation's start"))
    end = next(i for i in range(at + 3, len(lines)) if not lines[i].startswith("|"))
    return lines[at:end]


def test_a_generation_is_its_workers_start_ups_then_turns_and_cells_alone_count_whole():
    procs = [
        # mlp generation 1: workers start for 30 s and 60 s one after another; the first lives 150 s
        _proc("a", "mlp", 1, 30.0, 150.0, turn_block_steps=10, turn_block_s=[0.1, 0.2], pipelined_blocks_s=[0.5]),
        _proc("b", "mlp", 1, 60.0, 115.0),
        # generation 2: 12 + 18 s of start-ups in 90 s
        _proc("a", "mlp", 2, 12.0, 90.0, turn_block_steps=10, turn_block_s=[0.1]),
        _proc("b", "mlp", 2, 18.0, 75.0),
        # a loader cell runs alone: its wall counts whole, one after another
        _proc("a", "cnn", 1, None, 40.0, data="loader"),
        _proc("b", "cnn", 1, None, 20.0, data="loader"),
        {**_proc("c", "mlp", 1, None, None), "status": "skipped"},  # never started: no time
    ]
    gens = run_time.generations(procs)
    assert gens["mlp"] == {
        1: {"wall": 150.0, "startup": 90.0, "workers": 2, "floors_in_start": 0.0, "beside": 0},
        2: {"wall": 90.0, "startup": 30.0, "workers": 2, "floors_in_start": 0.0, "beside": 0},
    }
    assert gens["cnn, loader data"] == {
        1: {"wall": 60.0, "startup": 0.0, "workers": 2, "floors_in_start": 0.0, "beside": 0}
    }
    lines = run_time.section(procs)
    assert lines[0] == "## Where the run's time went"
    # mlp: 240 s = 4 min, 120 s starting, 120 s of turns; generation 1 2.5 min, the later one 1.5
    assert _row(lines, "mlp") == ["mlp", "2", "4", "2", "2", "2.5", "1.5"]
    assert _row(lines, "cnn, loader data") == ["cnn, loader data", "1", "1", "0", "1", "1", "—"]
    assert _row(lines, "all") == ["all", "", "5", "2", "3", "", ""]
    # per adapter: a's start-ups 30 s then 12 s; its blocks 10 x (0.1 + 0.2) + 0.5 + 10 x 0.1 = 4.5 s
    assert _row(lines, "a") == ["a", "2", "30", "12", "4.5"]
    assert _row(lines, "b") == ["b", "2", "60", "18", "0"]


def test_a_run_without_wall_times_has_no_such_section():
    assert run_time.section([{**_proc("a", "mlp", 1, None, None), "wall_s": None}]) == []


def test_the_model_keeps_every_process_and_the_report_says_where_the_default_runs_time_went():
    run = FIXTURE_RUNS / "2026-11-26-cpu-default-30m"
    m = model.load([run])
    assert len(m.processes) == 80 and len(m.recs) == 30  # 30 cells in 80 processes
    lines = run_time.section(m.processes)
    # rnn-caption ran one generation of 13.1 minutes, 5.08 of them starting its 10 workers
    assert _row(lines, "rnn-caption, exact")[:5] == ["rnn-caption, exact", "1", "13.1", "5.08", "8.01"]
    assert _row(lines, "mlp")[1] == "4" and _row(lines, "cnn")[1] == "3"


def test_a_generation_started_side_by_side_counts_its_start_from_first_start_to_last_ready():
    """Workers started two at a time (harness.running.turns.starts_at_once): their ``ready_s``
    overlap, so the generation's start is its own ``starting_s``, and the captions say so."""
    side = {"starts_at_once": 2, "starting_s": 20.0}
    procs = [
        _proc("a", "mlp", 1, 30.0, 150.0),
        _proc("b", "mlp", 1, 60.0, 115.0),
        _proc("a", "mlp", 2, 12.0, 90.0, **side),
        _proc("b", "mlp", 2, 18.0, 80.0, **side),
    ]
    gens = run_time.generations(procs)
    assert gens["mlp"][1]["startup"] == 90.0, "one at a time: the sum of its start-ups"
    assert gens["mlp"][2] == {"wall": 90.0, "startup": 20.0, "workers": 2, "floors_in_start": 0.0, "beside": 0}, (
        "not 12 + 18"
    )
    text = "\n".join(run_time.section(procs))
    assert "Later generations that timed no floor started them two at a time" in text
    assert "one started beside another shared the CPU with it" in text
    assert "two at a time" not in "\n".join(run_time.section(procs[:2]))
    floored = [*procs[:3], {**procs[3], "dispatch_floor_wall_s": 3.0, "dispatch_floor_timed_s": 1.0}]
    text = "\n".join(run_time.section(floored))
    assert "Later generations started them two at a time" in text, "since 2026-11-27 floors start side by side too"
    assert "then each floor is timed, one worker at a time (counted with the turns)" in text
    assert "each next one as soon as one was ready" in text
    gated = [*procs[:2], *({**r, "gated": True} for r in floored[2:])]  # warm-ups one at a time
    text = "\n".join(run_time.section(gated))
    assert "then warming up one after the other, and the next two once both were ready" in text
    assert "as soon as one was ready" not in text


def test_each_later_generations_start_is_set_against_the_first_and_floors_are_told_apart():
    """The table of starts: generation 1's seconds, then each later generation's with its share of
    them; a generation that prepared dispatch floors says how long that took, and its share leaves
    it out; workers that warmed up side by side are counted in the caption."""
    side = {"starts_at_once": 2, "gated": True}
    procs = [
        _proc("a", "mlp", 1, 30.0, 150.0),
        _proc("b", "mlp", 1, 70.0, 115.0),
        _proc("a", "mlp", 2, 30.0, 90.0, starting_s=40.0, **side),
        _proc("b", "mlp", 2, 35.0, 80.0, starting_s=40.0, **side),
        # each warmed up and prepared its floor while the other waited: 20 and 5 s of it the floors'
        _proc(
            "a", "mlp", 3, 50.0, 90.0, starting_s=70.0, dispatch_floor_wall_s=21.0, dispatch_floor_timed_s=1.0, **side
        ),
        _proc(
            "b", "mlp", 3, 60.0, 80.0, starting_s=70.0, dispatch_floor_wall_s=6.0, dispatch_floor_timed_s=1.0, **side
        ),
        _proc("a", "mlp", 4, 30.0, 90.0, starting_s=30.0, warmed_beside=True, **side),
        _proc("b", "mlp", 4, 30.0, 80.0, starting_s=30.0, warmed_beside=True, **side),
        _proc("a", "cnn", 1, 10.0, 50.0),  # one generation: no row
    ]
    lines = _starts_table(run_time.section(procs))
    # generation 1: 100 s; 2: 40 s (40%); 3: 70 s, 25 of them floors: 45 s (45%); 4: 30 s (30%)
    assert _row(lines, "mlp") == [
        "mlp", "100", "40, 40%", "70, 25 of it preparing floors: 45% without", "30, 30%"
    ]  # fmt: skip
    assert not any(line.startswith("| cnn ") for line in lines)
    text = "\n".join(run_time.section(procs))
    assert "two workers at a time; 2 of their workers warmed up side by side with another" in text
    assert "its share leaves it out" in text
    assert "(or side by side, where both warm-ups use about one core)" in text
    plain = [r for r in procs if r["round"] < 3]  # no floors, no pair: neither is said
    text = "\n".join(run_time.section(plain))
    assert "its share leaves it out" not in text and "side by side" not in text
    assert _row(_starts_table(run_time.section(plain)), "mlp")[2] == "40, 40%"
    # prepared and timed after the turns: no part of the start
    after = [{**r, "floor_after_turns": True, "floor_prepare_s": 20.0} if r["round"] == 3 else r for r in procs]
    assert _row(_starts_table(run_time.section(after)), "mlp")[3] == "70, 70%"
    assert "Each generation's start" not in "\n".join(run_time.section(procs[:2]))


def test_the_runs_own_start_and_close_and_its_whole_length_come_from_its_phases():
    """env.json's ``phases_s`` (harness.session.timed) and ``report_at_s``: a table of the start's
    phases (those under 0.05 s left out), the close, and what the run spent around its generations."""
    procs = [_proc("a", "mlp", 1, 30.0, 150.0), _proc("b", "mlp", 1, 60.0, 115.0)]  # 150 s of generations
    phases = {"start-up and plan": 3.0, "doctor": 15.0, "kernel JIT warm-up": 0.001, "device peaks": 8.0}
    env = {"phases_s": {**phases, "kernel floors": 34.0, "device peaks again": 9.0}, "report_at_s": 240.0}
    lines = run_time.section(procs, {"vm": env})
    assert "are not counted here, but in the table below it." in "\n".join(lines)
    assert _row(lines, "doctor") == ["doctor", "15", "—"] and _row(lines, "kernel floors")[1] == "34"
    assert not [line for line in lines if line.startswith("| kernel JIT warm-up ")]
    assert _row(lines, "the run's own start, before its first generation")[1:] == ["60", "1"]
    assert _row(lines, "device peaks again: its close, before the report")[1] == "9"
    # 240 s = 4 min: 150 s of generations (2.5), 60 + 9 s of its own, 21 s around them (0.35)
    assert _row(lines, "the generations above")[2] == "2.5"
    assert _row(lines, "around the generations (workers ending, each next generation planned)")[2] == "0.35"
    assert _row(lines, "the command's start to its report")[2] == "4"
    resumed = {"phases_s": env["phases_s"]}  # no report_at_s: a resumed run's process started part-way
    assert "the command's start to its report" not in "\n".join(run_time.section(procs, {"vm": resumed}))
    two = "\n".join(run_time.section(procs, {"vm": env, "other": env}))
    assert "| doctor " not in two and "not counted here." in two, "a merged report's runs each had their own"
    assert "| doctor " not in "\n".join(run_time.section(procs, {"vm": {}}))


def test_the_committed_default_run_accounts_for_its_whole_length():
    """reports/2026-11-27-cpu-default-30m-c (the README quotes it): its generations, its own start
    and close, and what went around them add up to its 29.5 minutes from command to report."""
    run = FIXTURE_RUNS / "2026-11-27-cpu-default-30m-c"
    m = model.load([run])
    lines = run_time.section(m.processes, m.envs)
    assert _row(lines, "rnn-caption, exact")[:2] == ["rnn-caption, exact", "3"]
    assert _row(lines, "kernel floors")[1] == "51.1"
    assert _row(lines, "device peaks again: its close, before the report")[1] == "8.07"
    assert _row(lines, "the generations above")[2] == "27.9"
    assert _row(lines, "the command's start to its report")[2] == "29.5"


def test_the_committed_evening_default_run_started_every_later_generation_in_under_half_the_first():
    """evidence/2026-11-28-xeon-cpu-default-30m-c (light warm-ups side by side, floors after the
    turns, issue 71): every later generation's start, as the section prints it, is under half of
    its workload's first, and no floor counts in a start (recorded times; no clock read here)."""
    m = model.load([EVIDENCE / "2026-11-28-xeon-cpu-default-30m-c"])
    found = run_time.generations(m.processes)
    assert set(found) == {"mlp", "cnn", "rnn-caption, exact"}
    for label, gens in found.items():
        first = gens[1]["startup"]
        later = {k: g["startup"] for k, g in gens.items() if k > 1}
        assert len(later) >= 3 and all(g["floors_in_start"] == 0 for g in gens.values()), label
        assert max(later.values()) < 0.5 * first, (label, first, later)
    assert any(r.get("warmed_beside") for r in m.processes)
    assert all(r.get("floor_after_turns") for r in m.processes if r.get("dispatch_floor_s") is not None)
