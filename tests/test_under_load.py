"""An answer on a busy machine (issue 71, item 5): a run whose machine never quiets can ask for a
ranking of its contended cells (``--rank-under-load``, ``LOAD=rank``), which states the load beside
every verdict and quotes what such a ranking's error rate is; without it those cells stay unranked.
Words and records only: nothing here reads a clock."""

from __future__ import annotations

import json
import os
import subprocess

import psutil

from harness import calibrate, cli, records, session
from harness.measuring import contention
from harness.reporting import calibration_note, cells, report
from tests.conftest import REPO
from tests.fakes import as_rounds, record
from tests.test_turns import _turn_records


def _busy_run(tmp_path, rank: bool, cores: float = 1.1, steal: float = 0.0):
    """Two adapters, 5 processes each, every one contended (``cores`` other cores busy, ``steal``
    of the CPU taken by the hypervisor): env.json says whether the bench asked for a ranking under load."""
    recs = [
        r
        for adapter, ms in (("torch-eager", 1.0), ("jax-jit", 2.0))
        for r in as_rounds(record(adapter, median_ms=ms, contended=True, other_cpu_cores=cores, steal_share=steal))
    ]
    for r in recs:
        records.append(tmp_path / records.RESULTS, r)
    env = {"cpu": "Test CPU", "threads": 2, "load_at_start": {"other_cores": cores, "steal": 0.0}}
    (tmp_path / records.ENV).write_text(json.dumps(env | ({"rank_under_load": True} if rank else {})))
    return tmp_path


def _answer(run) -> list[str]:
    """The answer section of report.md: up to the next section (the workload tables)."""
    page = (run / "report.md").read_text().splitlines()
    start = page.index("## The answer")
    end = next((i for i in range(start + 1, len(page)) if page[i].startswith("## ")), len(page))
    return page[start:end]


def test_contended_cells_stay_unranked_unless_the_run_asked(tmp_path):
    run = _busy_run(tmp_path, rank=False)
    report.write(run)
    answer = "\n".join(_answer(run))
    assert "| torch-eager       | — contended |" in answer or "— contended" in answer, "shown, never ranked"
    assert "under load" not in answer
    assert "**mlp**" not in answer, "no verdict line without a ranked cell"
    assert "are left out of every verdict here" in answer
    assert "python -m harness report RUN --rank-under-load" in answer, "the way to an answer is said"


def test_a_cell_the_hypervisor_slowed_names_the_steal_not_the_idle_processes(tmp_path):
    """A VM whose host is busy: its own processes idle (0.01 other cores), 5.9% of its CPU stolen.
    The status and the answer say what made the cells contended."""
    recs = [
        r
        for adapter, ms in (("torch-eager", 1.0), ("jax-jit", 2.0))
        for r in as_rounds(record(adapter, median_ms=ms, contended=True, other_cpu_cores=0.008, steal_share=0.059))
    ]
    for r in recs:
        records.append(tmp_path / records.RESULTS, r)
    env = {"cpu": "Test CPU", "threads": 2, "load_at_start": {"other_cores": 0.0, "steal": 0.0}}
    (tmp_path / records.ENV).write_text(json.dumps(env))
    report.write(tmp_path)
    answer = "\n".join(_answer(tmp_path))
    assert "cells ran while the VM's host took the CPU (hypervisor steal) and are left out of every verdict" in answer
    details = (tmp_path / "details.md").read_text()
    assert "contended (the hypervisor took 5.9% of the CPU, 0.01 other cores busy): not ranked" in details
    assert "or the hypervisor took more than 5% of the CPU" in details, "the Method states the rule"


def test_a_run_that_asked_ranks_them_and_states_the_load_beside_every_verdict(tmp_path):
    run = _busy_run(tmp_path, rank=True)
    report.write(run)
    answer = _answer(run)
    table = [ln for ln in answer if ln.startswith("| jax-jit") or ln.startswith("| torch-eager")]
    assert all("under load" in ln for ln in table), table
    assert "contended" not in " ".join(table)
    line = next(ln for ln in answer if ln.startswith("- **mlp**"))
    assert "torch-eager is the fastest" in line
    assert line.endswith("Ranked under load: 2 of its 2 cells ran beside 1.10 other busy cores (`under load`).")
    said = next(ln for ln in answer if "ranked all the same, as the run asked" in ln)
    assert "2 cells ran while other processes kept 1.10 cores busy" in said
    # no committed calibration under load matches the fake CPU: the rate is said to be unknown, with the command
    assert "the error rate of these verdicts is not known" in said and "--beside-load 1 --rank-under-load" in said
    details = (run / "details.md").read_text()
    assert "(under load)" in details, "the workload table's verdict column says it too"
    assert "ranked under load, as the run asked" in details, "and the status column"


def test_a_ranking_under_load_states_the_hypervisors_steal_beside_the_idle_processes(tmp_path):
    """A VM slowed by its host (0.01 other cores busy, 5.9% of the CPU stolen) ranked under load:
    the load stated beside the verdict names the steal, not the idle processes alone."""
    run = _busy_run(tmp_path, rank=True, cores=0.01, steal=0.059)
    report.write(run)
    answer = _answer(run)
    line = next(ln for ln in answer if ln.startswith("- **mlp**"))
    assert line.endswith("ran beside 0.01 other busy cores, the hypervisor taking 5.9% of the CPU (`under load`)."), (
        line
    )
    said = next(ln for ln in answer if "ranked all the same, as the run asked" in ln)
    assert "kept 0.01 cores busy, the hypervisor taking 5.9% of the CPU, and are ranked" in said, said
    (tmp_path / "quiet").mkdir()
    quiet_host = _busy_run(tmp_path / "quiet", rank=True, cores=1.1, steal=0.01)
    report.write(quiet_host)
    assert "hypervisor taking" not in "\n".join(_answer(quiet_host)), "steal under STEAL_SHARE is not named"


def test_the_report_command_ranks_a_finished_run_under_load(tmp_path, capsys):
    run = _busy_run(tmp_path, rank=False)
    assert cli.main(["report", str(run), "--rank-under-load"]) == 0
    assert any(ln.startswith("- **mlp**: torch-eager is the fastest") for ln in _answer(run))
    capsys.readouterr()


def test_the_load_span_reads_lowest_to_highest():
    loaded = [{"contended": True, "ranked_under_load": True, "other_cpu_cores": c} for c in (1.35, 1.02)]
    assert cells.load_span(loaded) == "1.02-1.35"
    assert cells.load_span(loaded[:1]) == "1.35"
    assert cells.unranked({"contended": True}) and not cells.unranked(loaded[0])
    assert not cells.under_load({"contended": False, "ranked_under_load": True})


def test_the_start_says_what_a_busy_machine_costs_with_and_without_the_ranking():
    busy = {"other_cores": 1.4, "steal": 0.0}
    unranked = session.load_note(busy)
    assert "leaves its cells unranked (--rank-under-load, LOAD=rank: ranked all the same" in unranked
    ranked = session.load_note(busy, rank_under_load=True)
    assert "has its cells ranked all the same (--rank-under-load), the load stated beside every verdict" in ranked
    crowded = session.load_note({"other_cores": 0.98, "steal": 0.0}, True, threads=2, cores=2)
    assert crowded.endswith("each cell's 2 threads share the busy cores, which makes its steps erratic (the "
                            "calibration under load: docs/troubleshooting.md#a-busy-machine): --threads 1 keeps "
                            "them on the free core")  # fmt: skip
    assert "--threads" not in session.load_note({"other_cores": 0.98, "steal": 0.0}, True, threads=1, cores=2)
    assert (
        session.load_note({"other_cores": 0.05, "steal": 0.0}, True)
        == "machine load at the start: 0.05 other cores busy"
    )


def _page(loaded: bool, identical: tuple[int, int], slowed: tuple[int, int]) -> dict:
    page = {
        "file": "calibration-3-generations.json",
        "adapter": "torch-eager",
        "workload": "mlp",
        "device": "cpu",
        "machine": "Test CPU",
        "twins": "0%, 0%, 10%",
        "level": 0.95,
        "generations": 3,
        "first_look": 3,
        "repeats": 8,
        "identical": {"pairs": identical[0], "different": identical[1]},
        "family": {"groups": 8, "false": 0},
        "slowdowns": [{"effect": 0.1, "pairs": slowed[0], "detected": slowed[1], "measured": 1.12}],
    }
    loaded_keys = {"beside_load": 1, "rank_under_load": True, "other_cores": [0.98, 1.04], "cell_threads": 1}
    return page | (loaded_keys if loaded else {})


def test_a_committed_calibration_under_load_is_quoted_beside_the_ranking(tmp_path):
    path = tmp_path / "calibrations.json"
    data = {
        "schema_version": calibration_note.SCHEMA_VERSION,
        "calibrations": [
            {"folder": "evidence/quiet", "judgings": [_page(False, (48, 0), (32, 32))]},
            {"folder": "evidence/loaded", "judgings": [_page(True, (48, 3), (32, 20))]},
        ],
    }
    path.write_text(json.dumps(data))
    ranked = [{"status": "ok", "device": "cpu", "fingerprint": {"cpu": "Test CPU"}}]
    said = calibration_note.under_load_sentence(ranked, evidence=path)
    assert said.startswith("Calibrated so, beside 1 busy core, 1 thread a cell (`evidence/loaded`): ")
    assert "identical cells called different in 3 of 48 pairs (6.2% [" in said
    assert "a 10% slow-down detected in 20 of 32 pairs" in said and "evidence/quiet" not in said
    assert not any("steady load" in m for m in calibration_note.lines(ranked, evidence=path)), "a quiet run's Method"
    ranked[0]["ranked_under_load"] = True
    method = calibration_note.lines(ranked, evidence=path)
    loaded = "beside a steady load of 1 busy core (the cells measured 0.98-1.04 other cores), 1 thread a cell"
    assert any(loaded in m for m in method)
    other = [{"status": "ok", "device": "cpu", "fingerprint": {"cpu": "Another CPU"}}]
    assert "is not known" in calibration_note.under_load_sentence(other, evidence=path)


def test_a_calibration_ranking_under_load_judges_contended_repeats_with_the_others(tmp_path):
    for i in (1, 2):
        recs = _turn_records("a", 1.0, noise=0.01, seed=i) + _turn_records("a~twin1", 1.0, noise=0.01, seed=10 + i)
        for r in recs[3:]:
            r["base_adapter"] = "a"
        for r in recs:
            r["other_cpu_cores"] = 1.0 + 0.01 * i
        recs[0].update(contended=i == 2, turns_contended=4 if i == 2 else 0)
        folder = tmp_path / f"repeat-{i:02d}"
        folder.mkdir()
        (folder / records.RESULTS).write_text("".join(json.dumps(r) + "\n" for r in recs))
    setting = {"framework": "a", "workload": "mlp", "device": "cpu", "twins": "0", "beside_load": 1}
    (tmp_path / "calibration-run.json").write_text(
        json.dumps({"wall_min": 1.0, "rounds": 3, "command": "c", "setting": setting})
    )
    assert calibrate.main(["--judge-only", "--rank-under-load", "--out", str(tmp_path), "--level", "0.95"]) == 0
    data = json.loads((tmp_path / "calibration-3-generations.json").read_text())
    meta = data["meta"]
    assert meta["repeats"] == 2 and meta["contended_repeats"] == [] and data["contended"] == []
    assert meta["beside_load"] == 1 and meta["rank_under_load"] and meta["loaded_repeats"] == 1
    assert meta["other_cores"] == [1.01, 1.02]
    assert {p["repeat"] for p in data["pairs"]} == {1, 2}
    text = (tmp_path / "calibration-3-generations.md").read_text()
    assert "Beside a steady load: 1 spinning process kept as many cores busy through every repeat." in text
    assert "1 of the 2 repeats had such cells" in text
    summary = calibration_note.summarize(data)
    assert summary["beside_load"] == 1 and summary["rank_under_load"] and summary["other_cores"] == [1.01, 1.02]


def test_a_calibration_refuses_a_load_that_leaves_the_twins_no_core(tmp_path, capsys):
    cores = os.cpu_count() or 1
    assert calibrate.main(["--beside-load", str(cores), "--out", str(tmp_path)]) == 2
    assert f"--beside-load {cores}: 0 up to {cores - 1} busy cores on this machine" in capsys.readouterr().out


def test_busy_cores_start_spinning_processes_and_end_them():
    with contention.busy_cores(1) as pids:
        (pid,) = pids
        assert psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    with contention.busy_cores(0) as none:
        assert none == []


def test_make_bench_load_rank_asks_for_the_ranking_and_names_a_bad_value():
    def dry(*args: str) -> subprocess.CompletedProcess:
        cmd = ["make", "-n", "--no-print-directory", "VARIANT=cpu", "bench", *args]
        return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=60)

    assert "--rank-under-load" in dry("LOAD=rank").stdout
    assert "--rank-under-load" not in dry().stdout
    bad = dry("LOAD=always")
    assert bad.returncode != 0 and "LOAD=always is not a load policy; valid: rank" in bad.stderr
