"""Every number a report's tables print beside another can be recomputed from what is printed
(issue 44), checked on the committed all-workload default run regenerated from its records."""

from __future__ import annotations

import math
import re

import pytest

from harness.reporting import attention, model, report
from harness.reporting.formatting import DASH
from harness.reporting.workload_tables import DETAILS_LEAD, floor_text, table_title, workload_table
from harness.stats.cells import combine
from harness.stats.steps import summarize
from tests.conftest import FIXTURE_RUNS
from tests.fakes import record
from tests.test_workload_tables import STEADY, markdown_tables, workload_section

RUN = FIXTURE_RUNS / "2026-11-25-cpu-default"
WORKLOADS = ("cnn", "mlp", "mlp-wide", "rnn-caption", "rnn-decode", "transformer")
PIPELINED = "pipelined (ms/step)"


@pytest.fixture(scope="module")
def recs() -> list[dict]:
    return model.load_runs([RUN])[0]


@pytest.fixture(scope="module")
def md(recs) -> str:
    """The run's workload sections and attention section, as report.build draws them."""
    out = []
    for workload in WORKLOADS:
        group = [r for r in recs if r["workload"] == workload and r.get("data", "resident") == "resident"]
        out += [table_title(group[0]), "", workload_table(group), ""]
    return "\n" + "\n".join(out + attention.section(recs))


def _printed(text: str) -> tuple[float, float]:
    """The interval a number printed to 3 significant figures (formatting.sig) stands for."""
    value = float(text.replace(",", ""))
    half = 0.5 * 10 ** min(math.floor(math.log10(value)) - 2, 0)
    return value - half, value + half


def _ratio_bounds(top: str, bottom: str) -> tuple[float, float]:
    (a_low, a_high), (b_low, b_high) = _printed(top), _printed(bottom)
    return a_low / b_high - 0.005, a_high / b_low + 0.005  # and the ratio's own 2 decimals


def _steady(row: dict[str, str]) -> str:
    return row[STEADY].split(" ")[0]


def _rows(md: str, workload: str) -> list[dict[str, str]]:
    """The workload's main and details rows merged, cells that ran only."""
    main, details = workload_section(md, f"## {workload} (")
    return [m | d for m, d in zip(main, details, strict=True) if m[STEADY] != DASH]


def test_the_pipelined_ratio_is_the_printed_pipelined_time_over_the_printed_synced_time(md):
    checked = 0
    for workload in WORKLOADS:
        for row in _rows(md, workload):
            found = re.fullmatch(r"([\d.,]+) \(([\d.]+)x(?: of ([\d.,]+))?\)", row[PIPELINED])
            assert found, row[PIPELINED]
            pipelined, ratio, synced = found.groups()
            low, high = _ratio_bounds(pipelined, synced or _steady(row))  # no time named: the row's median
            assert low <= float(ratio) <= high, f"{workload} {row['adapter']}: {row[PIPELINED]} beside {row[STEADY]}"
            checked += 1
    assert checked == 60


def _tokens_per_step(rows: list[dict[str, str]], ms: str, tokens: str) -> list[tuple[float, float]]:
    """Per row, the interval of tokens per step that its printed ms/step and tokens/s allow."""
    out = []
    for row in rows:
        (t_low, t_high), (s_low, s_high) = _printed(row[tokens]), _printed(row[ms].split(" ")[0])
        out.append((t_low * s_low / 1e3, t_high * s_high / 1e3))
    return out


def _pass_tokens(rec: dict) -> float:
    """A raw record's tokens per step over a pass: decoding, what it emitted over the pass's batches;
    training (windows of whole passes), the window's tokens over its steps."""
    if rec.get("decode_captions"):
        return rec["decode_len_mean"] * rec["decode_captions"] / rec["spec"]["num_batches"]
    return rec["tokens_per_s"] * rec["mean_s"]


def test_tokens_per_s_is_from_the_printed_step_time(md):
    """Every adapter of a workload processes the same tokens per step over a pass (the same batches;
    decoding, the same captions to the same lengths), so tokens/s times the printed ms/step gives
    that count in every row: two rows with the same step time print the same tokens/s."""
    raw = [r for r in report.records.load(RUN / report.records.RESULTS) if r["status"] == "ok"]
    for workload in ("rnn-caption", "rnn-decode", "transformer"):
        per_step = [_pass_tokens(r) for r in raw if r["workload"] == workload]
        tokens = per_step[0]
        assert per_step == pytest.approx([tokens] * len(per_step), rel=1e-9), f"{workload}: the same tokens"
        for low, high in _tokens_per_step(_rows(md, workload), STEADY, "tokens/s"):
            assert low <= tokens <= high, f"{workload}: tokens/s beside the printed step"


def test_a_floor_multiple_names_a_bound_only_where_both_floors_were_measured(md, recs):
    for workload in WORKLOADS:
        main, _ = workload_section(md, f"## {workload} (")
        cells = {r["adapter"]: r for r in recs if r["workload"] == workload}
        for row in main:
            rec = cells[row["adapter"]]
            both = bool(rec.get("kernel_floor_s") and rec.get("dispatch_floor_s"))
            assert (row.get("vs its floor", DASH) != DASH) == both, f"{workload} {row['adapter']}"
    assert floor_text(record("a", median_ms=4.0, dispatch_floor_s=1e-3)) == DASH, "dispatch alone names no bound"


def test_steps_of_different_sizes_are_never_flagged_noisy(md, recs):
    varied = [r for r in recs if (r.get("pass_steps") or 1) > 1]
    assert {r["workload"] for r in varied} == {"rnn-caption", "transformer"}
    assert not any(r["noisy"] for r in varied), "their IQR spans sizes, not noise"
    for workload in ("rnn-caption", "transformer"):
        assert not any("noisy" in row["IQR (ms)"] for row in _rows(md, workload)), workload
    # what combining rounds keeps: a pass of two sizes, 10 ms and 30 ms, steady within each
    times, batches = [0.01, 0.03] * 8, [0, 1] * 8
    one = record("a", pass_steps=2, step_batches=batches, step_times_s=times, batch_size=32, cold_s=0.1)
    one.update(summarize(times, 32, batches=batches))
    assert one["noisy"] is False
    assert combine([one, {**one, "round": 2}])["noisy"] is False


def test_tokens_per_s_of_combined_rounds_is_tokens_per_step_over_the_printed_step():
    from harness.reporting.cells import tokens_per_s

    times = [[0.010, 0.010, 0.040], [0.020, 0.020, 0.020]]  # mean 20 ms in both, medians 10 and 20 ms
    runs = []
    for k, t in enumerate(times, start=1):
        rec = record("a", step_times_s=t, batch_size=32, cold_s=0.1, round=k, tokens_per_s=300 / sum(t))  # 100 a step
        runs.append({**rec, **summarize(t, 32)})
    both = combine(runs)
    assert both["median_s"] == pytest.approx((0.010 * 0.020) ** 0.5)  # geometric mean of the processes' medians
    assert tokens_per_s(both) == pytest.approx(100 / both["median_s"])
    assert tokens_per_s(runs[0]) == pytest.approx(100 / 0.010)
    assert tokens_per_s(record("a")) is None


def _columns(md: str) -> list[tuple[str, list[dict[str, str]]]]:
    """Every table of the workload sections on the details page (their last heading: the first page
    has the compact table alone), with its section's heading."""
    out = []
    for heading in [f"## {w} (" for w in WORKLOADS]:
        text = md[md.rindex(f"\n{heading}") + 1 :].split("\n## ")[0]
        out += [(heading, rows) for rows in markdown_tables(text) if rows]
    return out


def test_no_table_prints_a_column_of_dashes_alone(md):
    tables = _columns(md)
    assert len(tables) == 2 * len(WORKLOADS)
    for heading, rows in tables:
        dead = [h for h in rows[0] if all(r[h] == DASH for r in rows)]
        assert not dead, f"{heading}: {dead}"
    assert "\n## Attention implementations" not in md, "no fused cell: nothing to set beside naive attention"


def test_a_dead_column_leaves_the_details_summary_too():
    recs = [record("torch-eager", median_ms=2.0), record("jax-jit", median_ms=1.0, pipelined_s=0.9e-3)]
    text = workload_table(recs)
    main, details = workload_section("\n" + text + "\n## end", "| adapter")
    assert PIPELINED in main[0] and "traces / compiles" not in details[0], "no cell counted compiles"
    assert f"{DETAILS_LEAD} graph, device, IQR (ms), loss first" in text
    assert main[0][PIPELINED] == "0.9 (0.90x of 1)", "without synced windows: against the steady median"
