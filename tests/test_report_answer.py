"""A report a reader finishes (harness.reporting.answer, report.pages): the answer on one screen,
one estimator behind every ratio, words that do not depend on the order of a pair, and no
"fastest" claimed inside the same-speed margin or over a failed physics check.

Checked on simulated verdicts with a known answer, and on every committed evidence run that
``report.pages`` draws (named explicitly: evidence/)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest

from harness import records
from harness.reporting import answer, attention, export, model, report
from harness.stats import verdicts
from harness.stats.verdicts import FASTER, SAME, SLOWER, UNRESOLVED, Family, PairVerdict, outcome_of

REPO = Path(__file__).resolve().parent.parent
EVIDENCE = REPO / "evidence"
RUNS = sorted(
    p.parent for p in EVIDENCE.glob("*/results.jsonl") if not all(export.is_export(r) for r in records.load(p))
)
DEFAULT_RUN = EVIDENCE / "2026-11-28-xeon-cpu-default-30m"
#: The one-hour run, whose peak (NumPy's and PyTorch's) was measured before the peak timed every library.
OLD_PEAK_RUN = EVIDENCE / "2026-11-28-cpu-all-1h"
MIRROR = {FASTER: SLOWER, SLOWER: FASTER, SAME: SAME, UNRESOLVED: UNRESOLVED}


def words(text: str) -> int:
    return len(text.split())


def test_the_same_speed_band_is_symmetric_in_the_ratio():
    rng = np.random.default_rng(7)
    for _ in range(2000):
        low = math.exp(rng.uniform(-0.12, 0.12))
        high = low * math.exp(rng.uniform(0, 0.12))
        word, _ = outcome_of(low, high)
        mirrored, _ = outcome_of(1 / high, 1 / low)
        assert mirrored == MIRROR[word], (low, high, word, mirrored)
    # the pair the one-hour run worded two ways (torch-compile against torch-eager on mlp-wide)
    assert outcome_of(0.951, 0.994)[0] == FASTER and outcome_of(1.006, 1.051)[0] == SLOWER
    assert outcome_of(0.953, 1.049)[0] == SAME and outcome_of(1 / 1.049, 1 / 0.953)[0] == SAME


def _family(points: list[float]) -> Family:
    lead = {"adapter": "lead", "median_s": 1.0}
    rivals = [
        ({"adapter": f"r{i}", "median_s": p}, PairVerdict(p, p * 0.99, p * 1.01, SLOWER, "", 10.0, 0.0))
        for i, p in enumerate(points)
    ]
    return Family(lead, rivals, len(points))


def test_no_fastest_is_claimed_for_a_lead_under_the_margin():
    assert _family([1.06, 1.3]).fastest
    close = _family([1.04, 1.3])
    assert not close.fastest, "separated, but a 4% lead is inside the difference a report does not claim"
    line = answer.workload_line(("w", "cpu", (), "fp32"), close, set())
    assert "no fastest is named" in line and "is the fastest" not in line


def test_a_failed_physics_check_takes_the_fastest_away():
    fam = _family([1.5, 2.0])
    line = answer.workload_line(("w", "cpu", (), "fp32"), fam, {id(fam.leader)})
    assert "physics check failed" in line and "is the fastest" not in line


@pytest.fixture(scope="module", params=RUNS, ids=lambda p: p.name)
def drawn(request):
    m = model.load([request.param])
    first, details = report.pages(m)
    return request.param, m, first, details


def test_the_evidence_set_has_runs_to_check():
    assert DEFAULT_RUN in RUNS and len(RUNS) >= 3, RUNS


def test_every_pair_and_its_mirror_get_mirrored_words(drawn):
    _, m, _, _ = drawn
    for fam in m.families.values():
        cells = fam.members
        for i, a in enumerate(cells):
            for b in cells[i + 1 :]:
                ab, ba = m.pair(a, b), m.pair(b, a)
                assert ba.outcome == MIRROR[ab.outcome], (a["adapter"], b["adapter"], ab, ba)
                if ab.judged:
                    assert ba.point == pytest.approx(1 / ab.point) and ba.low == pytest.approx(1 / ab.high)


def test_every_printed_ratio_is_its_verdicts_and_the_quotient_of_the_printed_steps(drawn):
    """The first page's workload tables: `time vs fastest` is the pair's point inside its
    interval, and the steady step column divided by the leader's gives the same ratio (one
    estimator), so the two columns order alike."""
    _, m, _, _ = drawn
    for fam in m.families.values():
        for rival, v in fam.rivals:
            if v.judged:
                assert v.low <= v.point <= v.high
            assert rival["median_s"] / fam.leader["median_s"] == pytest.approx(v.point, rel=1e-6), rival["adapter"]
        medians = [r["median_s"] for r in fam.members]
        assert medians == sorted(medians)


def test_every_fastest_on_the_first_page_holds(drawn):
    _, m, first, _ = drawn
    failed = answer.physics_failed(m)
    claimed = re.findall(r"^- \*\*(.+?)\*\*: (\S+) is the fastest", first, re.M)
    by_workload = {}
    for key, fam in m.families.items():
        by_workload[answer.what(key)] = fam
    for workload, adapter in claimed:
        fam = by_workload[workload]
        assert fam.fastest and id(fam.leader) not in failed
        assert min(v.point for _, v in fam.rivals) >= 1 + verdicts.SETTLE_MARGIN
        assert fam.leader["adapter"] in adapter


def test_the_first_page_answers_in_one_screen(drawn):
    """The answer within about 600 words besides its one table; the default run's report.md
    within about 2,500 (it was 9,439 before the details page)."""
    run, _, first, details = drawn
    section = first.split("## The answer", 1)[1].split("\n## ", 1)[0]
    prose = "\n".join(line for line in section.splitlines() if not line.startswith("|"))
    assert section.count("\n|") and words(prose) <= 650, words(prose)
    assert "[details.md](details.md)" in first and details.startswith("# dlcompare report")
    if run == DEFAULT_RUN:
        assert words(first) <= 2500, words(first)
        assert "CPU against GPU: not measured" in first
        for heading in ("## Where the run's time went", "## Environment", "## Memory"):
            assert heading in details and heading not in first


def test_the_first_page_names_the_machine_with_its_peak_and_floors(drawn):
    run, m, first, _ = drawn
    env = next(iter(m.envs.values()))
    if env.get("peaks"):
        assert "matmul peak" in first.split("## The answer")[0]
    if (env.get("kernel_floors") or {}).get("fastest_library"):
        assert "kernel floors on" in first.split("## The answer")[0]


def test_a_section_with_nothing_to_say_is_left_out(drawn):
    _, m, first, details = drawn
    text = first + details
    assert "## Attention implementations" not in text or any(attention.attention(r) == "fused" for r in m.recs)
    for block in re.findall(r"### Loop strategies: .*?(?=\n##|\Z)", text, re.S):
        rows = [line for line in block.splitlines() if line.startswith("| ") and "adapter" not in line]
        assert not rows or not all("baseline" in row for row in rows), "a strategies table of `exact` alone"


def test_a_static_adapter_that_decodes_op_by_op_says_so_rather_than_0_traces():
    """keras-tf on rnn-decode steps the GRU cell eagerly: its 0 traces are the truth, worded."""
    from harness.reporting.formatting import compiles_text

    decode = {"graph": "static", "traces": 0, "spec": {"task": "decode"}}
    assert compiles_text(decode) == "0 traces: decodes eagerly"
    assert compiles_text({**decode, "spec": {"task": "train"}}) == "0 traces, compiles not reported"
    assert compiles_text({**decode, "traces": 2, "compiles": 2}) == "2 traces, 2 compiles"


def test_a_users_own_calibration_reaches_the_method_only_when_given(tmp_path):
    """``--calibration`` (bench, report) reaches the details page's Method through the model;
    without it, a calibration lying in reports/ changes no report."""
    import shutil

    own = tmp_path / "my-calibration"
    shutil.copytree(EVIDENCE / "2026-11-28-calibration-rnn-caption-5-generations", own)
    _, without = report.pages(model.load([DEFAULT_RUN]))
    _, with_own = report.pages(model.load([DEFAULT_RUN], calibration=own))
    assert str(own) not in without and str(own) in with_own


def test_a_peak_that_timed_fewer_libraries_than_the_cells_ran_says_it_is_understated():
    """The one-hour run's peak (numpy and torch) was measured before the peak timed every
    installed library; its cells ran JAX and TensorFlow kernels, up to twice as fast on its CPU.
    The default run's peak timed all four, and says no such thing."""
    for run, understated in ((OLD_PEAK_RUN, True), (DEFAULT_RUN, False)):
        first, _ = report.pages(model.load([run]))
        machine = next(line for line in first.splitlines() if line.startswith("Machine: "))
        said = "understated: this run's cells ran jax and tensorflow kernels that the peak did not time" in machine
        assert said == understated, (run.name, machine)


def test_the_last_loss_says_how_many_steps_it_comes_after():
    """Two processes whose cold windows differ in length end at different losses without any
    numerical disagreement: the column says after how many steps each loss was read."""
    from harness.reporting import workload_tables
    from tests.fakes import record

    rec = record("torch-eager", loss_last_step=412)
    assert workload_tables._outcome(rec) == "2.300 → 1.100 after 412 steps"
    assert workload_tables._outcome(record("torch-eager")) == "2.300 → 1.100", "older records: as before"
