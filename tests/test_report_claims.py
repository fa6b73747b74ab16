"""Every committed report's sentences against its own tables (issue 44: every sentence true).

A reader believes each sentence of a report until one is wrong. These tests walk every committed
``report.md`` and check what its prose claims against what its tables print:

- every measured number in the Summary, and in every other section's sentences, is one a table of
  the same report prints (the sentences show the tables' values, not a second computation); the
  sections that state the protocol and the machine (``PROTOCOL_SECTIONS``) are not measurements;
- no sentence says "tie"/"tied" (a report has three outcomes: separated, same speed, unresolved);
- every list of adapters "at the top" of a workload is the overview's whole top (none left out),
  and every "fastest" is the overview's framed cell.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.reporting.plots import HORIZON
from harness.stats.verdicts import SAME_BAND
from tests.conftest import EVIDENCE, FIXTURE_RUNS
from tests.fakes import report_text

REPORTS = sorted(EVIDENCE.glob("**/report.md"))

#: A measured number as sentences print it: 8.77, 1.55x, 13,892 (thousands), 23x. Counts ("4 of 6
#: workloads", "60 cells"), levels and shares ("95%", "23%") and settings ("batch_size=16") are not.
NUMBER = re.compile(
    r"(?<![\w.=\-/])(\d{1,3}(?:,\d{3})+|\d+\.\d+|\d+(?=x\b)|\d+(?= steps?\b))(?![\d%]|\.\d)"  # 0.10.2: a version
)
TIE = re.compile(r"\btie[sd]?\b", re.IGNORECASE)


def sections(text: str) -> dict[str, list[str]]:
    """``## heading`` -> its lines (the title's lines under "")."""
    out: dict[str, list[str]] = {"": []}
    current = ""
    for line in text.splitlines():
        if line.startswith("## "):
            current = line[3:].strip()
            out[current] = []
        else:
            out[current].append(line)
    return out


def table_text(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if line.lstrip().startswith("|"))


def prose(lines: list[str]) -> list[str]:
    """Sentence lines: not tables, headings, pictures or HTML."""
    return [line for line in lines if line.strip() and not line.lstrip().startswith(("|", "#", "![", "<", "```"))]


#: Sections whose sentences state the protocol, its calibration and the machine, not this run's
#: measurements: their numbers are settings and constants (block seconds, levels, versions).
PROTOCOL_SECTIONS = ("Method", "Method in full", "Environment", "Machines", "Framework settings")


def numbers(sentence: str) -> list[str]:
    # Names carry digits that are no measurement ("mlp (batch_size=16)", "repeat-01", "fp32"), and
    # the cumulative plot's horizon is a setting of the report.
    sentence = sentence.replace(f"{HORIZON:,} steps", "").replace(SAME_BAND, "")
    if sentence.startswith("Machine: "):  # the machine's measured peaks and floor counts: a protocol line
        return []
    sentence = re.sub(r"\([^()]*=[^()]*\)", "", sentence)
    sentence = re.sub(r"`[^`]*`", "", sentence)
    return NUMBER.findall(sentence)


def in_tables(number: str, tables: str) -> bool:
    return re.search(rf"(?<![\d.,]){re.escape(number)}(?![\d]|,\d)", tables) is not None


def summary(text: str) -> list[str]:
    """The answer's lines (the first page's ``## The answer``)."""
    return [line for line in sections(text).get("The answer", []) if line.startswith("- ")]


@pytest.mark.parametrize("path", REPORTS, ids=lambda p: str(p.parent.relative_to(EVIDENCE)))
def test_summary_numbers_are_printed_in_a_table(path: Path) -> None:
    text = report_text(path.parent)
    tables = table_text(text)
    missing = [(n, line[:120]) for line in summary(text) for n in numbers(line) if not in_tables(n, tables)]
    assert not missing, f"{path}: Summary numbers no table prints: {missing}"


@pytest.mark.parametrize("path", REPORTS, ids=lambda p: str(p.parent.relative_to(EVIDENCE)))
def test_every_sections_numbers_are_printed_in_a_table(path: Path) -> None:
    """Every section's sentences (list items, notes, captions) quote only numbers a table of the
    report prints: fails on the reports of 7e87494 for the measured peaks (a list), the sweeps'
    crossover intervals, the ops profile's milliseconds and differences, and the parity line."""
    text = report_text(path.parent)
    tables = table_text(text)
    missing = [
        (head, n, line[:100])
        for head, lines in sections(text).items()
        if head not in PROTOCOL_SECTIONS
        for line in prose(lines)
        for n in numbers(line)
        if not in_tables(n, tables)
    ]
    assert not missing, f"{path}: numbers no table prints: {missing}"


def test_the_claims_walk_reads_every_sections_sentences() -> None:
    """Guards the walk above against matching nothing: the default run's sentences hold numbers."""
    text = report_text(FIXTURE_RUNS / "2026-11-26-cpu-default-30m")
    checked = [
        n
        for head, lines in sections(text).items()
        if head not in PROTOCOL_SECTIONS
        for line in prose(lines)
        for n in numbers(line)
    ]
    assert len(checked) > 40 and numbers("copy 0.10.2 and 1.17 [0.98, 1.41], 3x") == ["1.17", "0.98", "1.41", "3"]


@pytest.mark.parametrize("path", REPORTS, ids=lambda p: str(p.parent.relative_to(EVIDENCE)))
def test_no_sentence_says_tie(path: Path) -> None:
    text = report_text(path.parent)
    said = [line[:120] for line in text.splitlines() if TIE.search(line)]
    assert not said, f"{path}: 'tie' is no outcome of this project's verdicts: {said}"


def overview_marks(text: str) -> dict[str, dict[str, str]]:
    """The overview table: workload column -> adapter -> its cell text."""
    lines = [line for line in sections(text).get("The answer", []) if line.startswith("|")]
    if len(lines) < 3:
        return {}
    cols = [c.strip() for c in lines[0].strip("|").split("|")]
    out: dict[str, dict[str, str]] = {c: {} for c in cols[1:]}
    for line in lines[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        for col, cell in zip(cols[1:], cells[1:], strict=True):
            out[col][cells[0]] = cell
    return out


def split_top_level(text: str, seps: tuple[str, ...]) -> list[str]:
    """``text`` split at any of ``seps`` outside parentheses."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(text):
        ch = text[i]
        depth += (ch == "(") - (ch == ")")
        sep = next((s for s in seps if depth == 0 and text.startswith(s, i)), None)
        if sep:
            parts.append(text[start:i])
            i += len(sep)
            start = i
        else:
            i += 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def claimed_tops(text: str) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """From the answer's workload lines: workload -> adapters called fastest, and workload ->
    adapters listed at the top (the leader and those the same speed as it or unresolved against it)."""
    fastest: dict[str, set[str]] = {}
    tops: dict[str, set[str]] = {}
    for line in summary(text):
        found = re.match(r"- \*\*(.+?)\*\*: (\S+)(?: \([a-z-]+\))? (is the fastest|leads) at ", line)
        if not found:
            continue
        workload, leader, word = found.groups()
        if word == "is the fastest":
            fastest.setdefault(workload, set()).add(leader)
            continue
        rest = re.search(r"(?:the same speed as|unresolved against) (.+?) \((?:the table|every ratio)", line)
        if rest:
            names = {re.sub(r" \([a-z-]+\)$", "", n) for n in split_top_level(rest.group(1), (", ", " and "))}
            tops.setdefault(workload, set()).update({leader, *names})
    return fastest, tops


def test_top_lists_are_checked_on_the_default_run() -> None:
    """The completeness test below reads the default run (guards the parser against silently
    matching nothing)."""
    text = report_text(FIXTURE_RUNS / "2026-11-25-cpu-default")
    fastest, tops = claimed_tops(text)
    assert fastest == {"cnn": {"tf-function"}}
    assert {"mlp", "rnn-caption", "mlp-wide", "rnn-decode", "transformer"} <= set(tops)
    assert overview_marks(text)["mlp"]["jax-jit"].startswith("1.00")


@pytest.mark.parametrize("path", REPORTS, ids=lambda p: str(p.parent.relative_to(EVIDENCE)))
def test_top_lists_match_the_overview(path: Path) -> None:
    text = report_text(path.parent)
    marks = overview_marks(text)
    fastest, tops = claimed_tops(text)
    for workload, cells in marks.items():
        if workload not in fastest and workload not in tops:
            continue
        framed = {a for a, c in cells.items() if c.startswith("**")}
        close = {a for a, c in cells.items() if "unresolved" in c or "same" in c or re.match(r"1\.00\b", c)}
        assert fastest.get(workload, set()) == framed, f"{path}: {workload}: fastest {fastest.get(workload)}"
        if workload in tops:
            assert tops[workload] == close, f"{path}: {workload}: listed {tops[workload]}, overview {close}"
