"""Issue 44, every sentence true: the numbers of the summary's and the sweep section's sentences are
the values a table of the same report prints, never a second computation."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.reporting import model, static_dynamic, summary, sweeps
from harness.reporting.cells import families, name, top, what
from harness.reporting.workload_tables import workload_table
from tests.conftest import FIXTURE_RUNS

DEFAULT = FIXTURE_RUNS / "2026-11-25-cpu-default"
SWEEP = FIXTURE_RUNS / "2026-11-25-cpu-sweep-batch"


def _groups(recs: list[dict]) -> dict[tuple, list[dict]]:
    """Resident cells by workload and setting, as report.build hands them to the sections."""
    groups: dict[tuple, list[dict]] = {}
    for r in recs:
        if r.get("data", "resident") == "resident":
            setting = tuple(o for o in r.get("overrides", []) if not o.startswith("strategy="))
            groups.setdefault((r["workload"], setting), []).append(r)
    return groups


def _rows(table: str) -> list[dict[str, str]]:
    """The rows of the first markdown table in ``table``, by header."""
    lines = table[table.index("|") :].split("\n\n")[0].splitlines()
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines]
    return [dict(zip(cells[0], row, strict=True)) for row in cells[2:]]


@pytest.fixture(scope="module")
def default_run() -> list[dict]:
    return model.load_runs([DEFAULT])[0]


@pytest.fixture(scope="module")
def sweep_run() -> list[dict]:
    return model.load_runs([SWEEP])[0]


def test_framework_sentences_quote_the_within_frameworks_table(default_run):
    """Speed-ups and break-even steps: the lowest and highest the table prints for the framework's
    rows with a static mode faster once compiled (were interval ends, 49 to 13,892 for keras)."""
    table = "\n".join(static_dynamic.within_frameworks(_groups(default_run)))
    rows = _rows(table[table.index("| framework") :])
    lines = summary.framework_sentences(default_run)
    assert len(lines) == 3, "Keras's dynamic and static cells differ in backend too: no row, no sentence"
    for line in lines:
        framework = line.split(":")[0]
        mine = [r for r in rows if r["framework"] == framework]
        printed = {r["static speed-up"] for r in mine}
        assert set(re.findall(r"\d+\.\d+x", line)) <= printed, line
        steps = [int(r["break-even (steps)"].replace(",", "")) for r in mine if r["break-even (steps)"][0].isdigit()]
        paid = re.search(r"paid off after ([\d,]+)(?: to ([\d,]+))? steps?", line)
        assert bool(paid) == bool(steps), line
        if paid:
            assert f"{min(steps):,}" == paid[1] and f"{max(steps):,}" == (paid[2] or paid[1]), line
    by_framework = {line.split(":")[0]: line for line in lines}
    assert "(cnn, mlp, mlp-wide, transformer: 1.20x to 23.0x)" in by_framework["jax"]
    assert "keras" not in by_framework
    assert "paid off after 21 to 157 steps" in by_framework["tensorflow"]


def test_the_named_fastest_leads_by_the_ratio_its_workload_table_prints(sweep_run):
    """`1.48x ahead of torch-eager` where the table prints `1.48 [1.38, 1.59]` (was the ratio of the
    medians, 1.43x, printed nowhere)."""
    (line,) = summary.winner_sentences(sweep_run)
    checked = 0
    for group in _groups(sweep_run).values():
        rows = _rows(workload_table(group))
        leader, second = rows[0], rows[1]
        if leader["time vs fastest"] != "1.00 fastest":
            continue
        ratio = second["time vs fastest"].split()[0]
        assert f"{leader['adapter']} on " in line and f", {ratio}x ahead of {second['adapter']})" in line
        checked += 1
    assert checked == 3


def test_the_top_lists_every_adapter_not_told_from_the_leader(sweep_run):
    """At batch 256 and 512 three adapters could not be told apart: all three are named."""
    (line,) = summary.winner_sentences(sweep_run)
    for key, fam in families(sweep_run).items():
        if not fam.fastest:
            _, cells = top(fam)
            names = [name(r) for r in cells]
            assert f"{', '.join(names[:-1])} and {names[-1]} on {what(key)}" in line
    assert "jax-jit, torch-eager and tf-function on mlp (batch_size=256)" in line
    assert "torch-eager, tf-function and jax-jit on mlp (batch_size=512)" in line


def test_a_crossover_prints_the_paired_ratio_its_verdict_used(sweep_run):
    text = "\n".join(sweeps.sweep_section(sweep_run, None))
    crossover = "| tf-function / cpu | jax-jit / cpu       | 1.31 [1.06, 1.61] at 128 | 1.25 [1.23, 1.28] at 1024 |"
    assert "| batch_size=128 to 1024 " + crossover in text
    assert "ratio of the two series' cells" in text and "paired generation by generation;" in text
    assert "its interval at 95%" in text
    assert "`same speed` or `unresolved` are skipped" in text
    assert not re.search(r"\bties?\b", text), "the three words of harness.stats.verdicts, never `tie`"
    # the ratio is the one the workload's table prints for the pair (tf-function against the fastest, jax-jit)
    (group,) = [g for (_, setting), g in _groups(sweep_run).items() if setting == ("batch_size=128",)]
    assert {r["adapter"]: r["time vs fastest"] for r in _rows(workload_table(group))}["tf-function"].startswith(
        "1.31 [1.06, 1.61]"
    )


def test_a_crossover_is_judged_and_printed_at_the_level_the_records_carry(sweep_run):
    strict = [dict(r, verdict_level=0.9706) for r in sweep_run]
    text = "\n".join(sweeps.sweep_section(strict, None))
    assert "its interval at 97.06%" in text and "95%" not in text


def test_a_cell_of_fewer_than_three_rounds_gets_no_error_bar(sweep_run, tmp_path, monkeypatch):
    """Two processes give a t interval on one degree of freedom ([18.7, 64.6] around 34.31 and
    35.27 ms): the sweep draws none and says so."""
    drawn = {}

    def sweep(points, field, workload, path, styles):
        drawn.update(points)
        return Path(path)

    monkeypatch.setattr(sweeps.plots, "sweep", sweep)
    short = dict(sweep_run[0], process_levels=dict(list(sweep_run[0]["process_levels"].items())[:2]))
    assert short["ci_low_s"] < short["median_s"] < short["ci_high_s"]
    text = "\n".join(sweeps.sweep_section([short, *sweep_run[1:]], tmp_path))
    value = short["sweep"]["value"]
    (point,) = [p for label, ps in drawn.items() if label.startswith(short["adapter"]) for p in ps if p[0] == value]
    assert point[1] == point[2] == point[3] == short["median_s"], "no error bar"
    assert f"1 of {len(sweep_run)} cells ran fewer than 3 rounds: no interval" in text
    assert sweeps.shown_interval(short) is None and sweeps.shown_interval(sweep_run[1]) is not None
