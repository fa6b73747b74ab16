"""The report model (harness.reporting.model): a report's verdicts are computed once, whoever
asks, and every section reads those; the overview's marks are the families the tables read."""

from __future__ import annotations

import collections
from pathlib import Path

import pytest

from harness import records
from harness.reporting import cells, export, model, overview, report
from harness.stats import verdicts
from tests.conftest import EVIDENCE, FIXTURE_RUNS

#: Every committed run whose report.md report.build draws (a folder with its records; an export
#: run's page is harness.reporting.export's and judges no pairs).
RUNS = sorted(
    p.parent
    for p in EVIDENCE.glob("**/report.md")
    if (p.parent / records.RESULTS).is_file()
    and not all(export.is_export(r) for r in records.load(p.parent / records.RESULTS))
)


def _cell(adapter: str, levels: dict[int, float]) -> dict:
    gens = sorted(levels)
    return {
        "adapter": adapter,
        "status": "ok",
        "median_s": 0.01,
        "process_levels": levels,
        "group": "g",
        "group_generations": gens,
        "verdict_level": 0.95,
    }


def test_the_model_judges_a_pair_once_and_verdicts_are_pure(monkeypatch):
    computed = collections.Counter()
    real = verdicts.pair_verdict

    def counting(a, b, level=None):
        computed[(a["adapter"], b["adapter"], level)] += 1
        return real(a, b, level)

    monkeypatch.setattr(model, "pair_verdict", counting)
    a = _cell("a", {1: -4.60, 2: -4.61, 3: -4.59})
    b = _cell("b", {1: -4.40, 2: -4.42, 3: -4.39})
    m = model.Model([], [a, b], {}, {}, {}, None, {})
    first = m.pair(a, b)
    assert m.pair(a, b) is first, "asked again: the same verdict, not a second computation"
    m.pair(b, a)  # the other direction is another question
    m.pair(a, b, 0.99)  # and so is another level
    assert computed == {("a", "b", None): 1, ("b", "a", None): 1, ("a", "b", 0.99): 1}
    assert m.verdicts[(id(a), id(b), None)] == (a, b, first), "the store holds the records its keys name"
    assert first == real(a, b), "a verdict is a function of its records alone"
    assert not hasattr(verdicts, "judged_once") and "ContextVar" not in Path(verdicts.__file__).read_text()


@pytest.mark.parametrize("run", RUNS, ids=lambda p: str(p.relative_to(EVIDENCE)))
def test_every_committed_report_computes_each_family_once_and_reads_the_models_verdicts(run, monkeypatch):
    """The overview, the tables, the answer and the findings read the model's families: each
    group is judged together once; a pair asked of the model twice is computed once."""
    groups = collections.Counter()
    real_family = cells.family

    def family(members, *args, **kwargs):
        groups[frozenset(id(c) for c in members)] += 1
        return real_family(members, *args, **kwargs)

    monkeypatch.setattr(cells, "family", family)
    m = model.load([run])
    report.pages(m)
    assert not [k for k, n in groups.items() if n > 1], "a group's family judged again"
    pairs = [(fam.leader, rival) for fam in m.families.values() for rival, _ in fam.rivals]
    first = [m.pair(a, b) for a, b in pairs]
    asked = len(m.verdicts)
    assert [m.pair(a, b) for a, b in pairs] == first and len(m.verdicts) == asked, "asked again: kept, not recomputed"


def test_the_model_holds_the_families_the_overview_marks():
    m = model.load([FIXTURE_RUNS / "2026-11-26-cpu-default-30m"])
    assert m.families and m.grid is not None
    assert m.sections and all(r.get("data", "resident") == "resident" for g in m.sections.values() for r in g)
    # the overview drawn alone (its own families) marks the same cells as the model's
    alone = overview.grid(m.recs)
    assert alone.cells == m.grid.cells and alone.fastest_s == m.grid.fastest_s
    for fam in m.families.values():
        best = [r for r in m.recs if r is fam.leader]
        assert best, "a family's leader is one of the model's own records, not a copy"
