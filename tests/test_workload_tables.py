"""The per-workload tables: a main table of at most MAIN_MAX columns, a details table with the
rest, rows fastest first in both, and both rendered in report.html."""

from __future__ import annotations

from harness.reporting import html
from harness.reporting.workload_tables import DETAILS_LEAD, MAIN_MAX, workload_table
from tests.conftest import EVIDENCE
from tests.fakes import record

STEADY = "steady [CI] (ms/step)"

#: Every column the single table had before it was split: none may be lost.
EVERY_COLUMN = {
    "adapter",
    "graph",
    "strategy",
    "device",
    "first step (ms)",
    STEADY,
    "pipelined (ms/step)",
    "IQR (ms)",
    "samples/s",
    "tokens/s",
    "time vs fastest",
    "vs its floor",
    "traces / compiles",
    "loss first → last / decoded tokens",
    "timed steps (rounds)",
    "status",
}


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip("|").split("|")]


def markdown_tables(text: str) -> list[list[dict[str, str]]]:
    """Every markdown table in ``text``, each as its rows keyed by header (a table without rows
    is one empty list)."""
    tables, lines = [], text.splitlines()
    for i, line in enumerate(lines[:-1]):
        if line.startswith("| ") and lines[i + 1].startswith("|-"):
            headers, rows = _cells(line), []
            for row in lines[i + 2 :]:
                if not row.startswith("| "):
                    break
                rows.append(dict(zip(headers, _cells(row), strict=True)))
            tables.append(rows)
    return tables


def workload_section(md: str, heading: str) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """The main and the details table of the workload section whose heading starts ``heading``, on
    the details page (the last such heading: the first page has the compact table alone)."""
    find = md.rindex if heading.startswith("#") else md.index
    section = md[find(f"\n{heading}") + 1 :].split("\n## ")[0]
    main, details = markdown_tables(section)[:2]
    return main, details


def _cell(adapter: str, strat: str, device: str, median_ms: float, **extra) -> dict:
    spec = {"batch_size": 8, "optimizer": "adamw", "learning_rate": 1e-3, "task": "train", "strategy": strat}
    return record(
        adapter,
        workload="transformer",
        median_ms=median_ms,
        device=device,
        spec=spec,
        **({"tokens_per_s": 1000 / median_ms, "kernel_floor_s": median_ms * 2e-4, "dispatch_floor_s": 1e-4} | extra),
    )


def _widest() -> list[dict]:
    """Cells that give every optional column: loop strategies, tokens, floors, two devices."""
    return [
        _cell("torch-eager", "exact", "cpu", 3.0, pipelined_s=2.7e-3),
        _cell("jax-jit", "padded", "cuda", 1.0, traces=2, compiles=2, compile_s=0.5),
        record("tf-function", workload="transformer", status="skipped", reason="no fused attention"),
        _cell("jax-jit", "exact", "cpu", 2.0, noisy=True),
        record("keras-jax", workload="transformer", status="failed", reason="boom"),
    ]


def test_main_table_has_at_most_ten_columns_and_the_details_hold_every_other():
    main, details = workload_section("\n" + workload_table(_widest()) + "\n## end", "| adapter")
    assert 1 < len(main[0]) <= MAIN_MAX == 10
    assert len(main[0]) == MAIN_MAX, "the widest case fills the main table exactly"
    key = ["adapter", "strategy", "device"]  # the device tells rows apart here: two of them
    assert list(main[0])[:3] == list(details[0])[:3] == key, "both tables open with what tells rows apart"
    assert set(main[0]) | set(details[0]) == EVERY_COLUMN, "no column lost"
    assert set(main[0]) & set(details[0]) == set(key), "only the key columns are repeated"
    assert {STEADY, "time vs fastest", "tokens/s", "first step (ms)", "vs its floor", "status"} <= set(main[0])
    assert "samples/s" in details[0], "tokens/s stands for throughput in the main table"


def test_rows_fastest_first_cells_that_did_not_run_last_in_both_tables():
    main, details = workload_section("\n" + workload_table(_widest()) + "\n## end", "| adapter")
    order = [(r["adapter"], r["strategy"], r["device"]) for r in main]
    assert order == [
        ("jax-jit", "padded", "cuda"),
        ("jax-jit", "exact", "cpu"),
        ("torch-eager", "exact", "cpu"),
        ("keras-jax", "—", "cpu"),
        ("tf-function", "—", "cpu"),
    ]
    assert [(r["adapter"], r["strategy"], r["device"]) for r in details] == order, "the same rows, same order"
    # each row against the fastest of its own device (its comparable group), never across devices
    assert [r["time vs fastest"] for r in main[:3]] == ["1.00", "1.00", "1.50"]
    assert details[1]["IQR (ms)"] == "0.2 noisy" and details[0]["traces / compiles"] == "2 traces, 2 compiles, 0.5 s"
    assert main[3]["status"] == "failed: boom" and main[3][STEADY] == details[3]["IQR (ms)"] == "—"


def test_narrow_workload_keeps_samples_in_main_and_a_single_device_in_the_details():
    recs = [record("torch-eager", median_ms=2.0), record("jax-jit", median_ms=1.0)]
    for r in recs:  # columns no row has a value in are left out: these rows have every one
        r.update(pipelined_s=r["median_s"] * 0.9, compiles=2, traces=2, compile_s=0.5)
    text = workload_table(recs)
    main, details = workload_section("\n" + text + "\n## end", "| adapter")
    main_columns = [STEADY, "time vs fastest", "pipelined (ms/step)", "samples/s", "first step (ms)", "status"]
    assert list(main[0]) == ["adapter", *main_columns]
    other = ["graph", "device", "IQR (ms)", "traces / compiles", "loss first → last / decoded tokens"]
    assert list(details[0]) == ["adapter", *other, "timed steps (rounds)"]
    summary = f"<details><summary>{DETAILS_LEAD} graph, device, IQR (ms), traces / compiles, "
    assert summary in text and text.endswith("\n\n</details>"), "collapsed, its summary naming its columns"


def test_html_renders_the_collapsed_details_and_escapes_any_other_html(tmp_path):
    md = workload_table([record("torch-eager", median_ms=2.0)]) + "\n\n<b>raw</b>\n"
    page = html.render(md, tmp_path, "t")
    assert page.count("<table>") == 2 and page.count("<details><summary>More columns: graph, ") == 1
    assert page.index("<details>") < page.rindex("<table>") < page.index("</details>")
    assert "&lt;details" not in page and "&lt;b&gt;raw&lt;/b&gt;" in page, "only the details block is HTML"


def test_every_committed_report_keeps_its_main_tables_within_ten_columns():
    checked = 0
    for path in sorted(EVIDENCE.glob("**/details.md")):  # the full tables are on the details page
        tables = markdown_tables(path.read_text())
        for i, table in enumerate(tables):
            if table and STEADY in table[0]:
                assert len(table[0]) <= MAIN_MAX, f"{path}: table {i + 1} has {len(table[0])} columns"
                details = tables[i + 1]
                assert "IQR (ms)" in details[0] and len(details) == len(table), f"{path}: table {i + 1}'s details"
                checked += 1
    assert checked >= 15, "the committed reports' workload tables were found"


def test_every_table_listing_cells_follows_the_workload_tables_order(tmp_path):
    from harness import records
    from harness.reporting import report

    rss = {"host_peak_rss_bytes": 2**30}
    cells = [
        record("torch-eager", median_ms=3.0, **rss),
        record("jax-jit", median_ms=1.0, **rss),
        record("tf-function", median_ms=2.0, **rss),
        record("keras-jax", status="failed", reason="boom"),
    ]
    cells += [record(r["adapter"], median_ms=4.0, data="host", to_device_s=1e-4) for r in cells[:3]]
    for r in cells:
        records.append(tmp_path / records.RESULTS, r)
    md = report.build(tmp_path)
    fastest_first = ["jax-jit", "tf-function", "torch-eager"]
    main, details = workload_section(md, "## mlp (")
    assert [r["adapter"] for r in main] == [r["adapter"] for r in details] == [*fastest_first, "keras-jax"]
    for heading in ("## Memory", "## Input pipeline"):
        section = md[md.index(heading) :].split("\n## ")[0]
        rows = markdown_tables(section)[0]
        resident = [r["adapter"] for r in rows if r.get("data", "resident") == "resident"]
        assert resident == fastest_first, heading
