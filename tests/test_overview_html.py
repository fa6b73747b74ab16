"""The report's opening (overview grid and table), its plots' shared colours, and report.html."""

from __future__ import annotations

import base64
import re

import pytest

from harness.reporting import html, overview, plots, report
from tests.conftest import FIXTURE_RUNS
from tests.fakes import record, report_text
from tests.test_summary_compare_sweep import timed

FULL_RUN = FIXTURE_RUNS / "2026-11-25-cpu-default"


def test_overview_grid_ranks_ties_and_shows_cells_that_did_not_run():
    recs = [
        timed("jax-jit", 1.0, graph="static", framework="jax"),
        timed("jax-eager", 3.0, seed=1, framework="jax"),
        timed("torch-eager", 1.01, 0.3, n=21, seed=2, framework="torch"),
        timed("tf-eager", 0.5, seed=3, framework="tf", contended=True),
        record("keras-jax", status="failed", reason="boom"),
        record("torch-compile", status="skipped", reason="not installed", framework="torch"),
    ]
    g = overview.grid(recs)
    assert g.columns == ["mlp"] and g.fastest_s == [recs[0]["median_s"]], "contended cells never win a column"
    cell = {a: g.cells[("mlp", a)] for a in g.rows}
    # torch-eager cannot be told from jax-jit, so jax-jit leads the column but is not the fastest
    assert not cell["jax-jit"].fastest and cell["jax-jit"].ratio == 1.0
    assert cell["torch-eager"].unresolved and not cell["jax-eager"].unresolved and not cell["jax-eager"].same
    assert cell["jax-eager"].ratio == pytest.approx(3.0)  # the verdict's point, as the table prints
    assert (cell["keras-jax"].status, cell["torch-compile"].status) == ("failed", "skipped")
    assert cell["tf-eager"].status == "contended" and not cell["tf-eager"].fastest
    # each framework's dynamic mode above its static one
    assert g.rows.index("jax-eager") < g.rows.index("jax-jit")
    text = overview.table(g)
    rows = {line.split("|")[1].strip(): line.split("|")[2].strip() for line in text.splitlines()[2:]}
    assert rows == {
        "fastest (ms/step)": "1",
        "jax-eager": "3.00",
        "jax-jit": "1.00",
        "keras-jax": "failed",
        "tf-eager": "0.50 contended",
        "torch-eager": "1.01 unresolved",
        "torch-compile": "skipped",
    }


def test_overview_columns_split_by_device_and_setting():
    recs = [
        timed("jax-jit", 1.0, overrides=["batch_size=1024"]),
        timed("jax-jit", 2.0, seed=1, overrides=["batch_size=16"]),
        timed("jax-jit", 3.0, seed=2, device="cuda", overrides=["batch_size=16"]),
    ]
    recs[2]["device_requested"] = "cuda"
    g = overview.grid(recs)
    assert g.columns == ["mlp (batch_size=16) / cpu", "mlp (batch_size=16) / cuda", "mlp (batch_size=1024) / cpu"]


def test_one_colour_per_adapter_in_every_plot_of_a_report():
    recs = [record(a, framework=f, graph=g) for a, f, g in [
        ("torch-eager", "torch", "dynamic"), ("torch-compile", "torch", "static"),
        ("jax-eager", "jax", "dynamic"), ("jax-jit", "jax", "static"), ("jax-other", "jax", "static"),
    ]]  # fmt: skip
    colors = plots.palette(recs)
    assert len(set(colors.values())) == len(recs), "distinct adapters, distinct colours"
    assert plots.palette(list(reversed(recs))) == colors, "independent of record order"
    assert plots._wide([1.0, 10.5]) and not plots._wide([1.0, 9.5]), "log axis past a 10x span"


@pytest.mark.slow
def test_committed_report_opens_with_the_overview_and_a_short_summary(tmp_path):
    md = report_text(FULL_RUN)
    assert report.build(FULL_RUN, plot_dir=tmp_path) == md, "regenerated from its records, nothing by hand"
    assert (tmp_path / "overview.png").is_file()
    headings = [line for line in md.splitlines() if line.startswith("## ")]
    assert headings[0] == "## The answer"
    answer = md.split("## The answer")[1].split("\n## ")[0]
    assert "](overview.png)" in answer and 1 <= sum(line.startswith("- ") for line in answer.splitlines()) <= 12
    assert "### What compiling costs" in md.split("## Static vs dynamic")[1]
    assert "spends" not in answer, "per-adapter compile sentences live in the Static vs dynamic table"


def test_report_html_has_every_table_and_image_of_the_committed_report(tmp_path):
    found = {"tables": 0, "images": []}
    for name in ("report", "details"):
        md = (FULL_RUN / f"{name}.md").read_text()
        page = html.render(md, FULL_RUN, name)
        tables = len(re.findall(r"^\|(?: *:?-+:? *\|)+$", md, flags=re.M))  # one separator row per table
        assert page.count("<table>") == tables
        images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md)
        found["tables"] += tables
        found["images"] += images
        for image in images:
            data = base64.b64encode((FULL_RUN / image).read_bytes()).decode("ascii")
            assert f'src="data:image/png;base64,{data}"' in page, f"{image} embedded"
        assert 'src="overview.png"' not in page and "<p>|" not in page, "no raw links or unrendered tables"
        # the committed page is this rendering of the committed markdown
        assert (FULL_RUN / f"{name}.html").read_text() == html.render(md, FULL_RUN, md.splitlines()[0][2:])
    assert found["tables"] >= 8 and "overview.png" in found["images"] and len(found["images"]) >= 10


def test_report_write_puts_html_beside_markdown(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    from harness import records

    for r in [timed("torch-eager", 1.0), timed("jax-jit", 2.0, seed=1)]:
        records.append(run / records.RESULTS, r)
    path = report.write(run)
    page, details = (run / "report.html").read_text(), (run / "details.html").read_text()
    assert path.name == "report.md" and page.startswith("<!DOCTYPE html>") and details.startswith("<!DOCTYPE html>")
    assert (run / "overview.png").stat().st_size > 5000 and page.count("data:image/png;base64,") >= 2
    assert details.count("data:image/png;base64,") >= 1, "the details page embeds the other plots"


def test_plots_draw_an_interval_that_does_not_hold_its_estimate(tmp_path):
    # A percentile bootstrap of a few skewed steps (a pass mean of rnn-caption under load) may lie
    # wholly above its estimate: the plot is drawn (error bar clipped at the bar), never a crash
    # that costs the run its report.
    recs = [record("torch-eager", median_ms=28.9, ci_low_s=0.034, ci_high_s=0.205), record("jax-jit")]
    assert plots.step_times(recs, "mlp", tmp_path / "steps.png", plots.palette(recs)).is_file()
    series = {"torch-eager cpu": [(32, 0.0289, 0.034, 0.205, 1100.0), (64, 0.05, 0.04, 0.06, 1280.0)]}
    styles = {"torch-eager cpu": {"color": "C0", "linestyle": "-"}}
    assert plots.sweep(series, "batch_size", "mlp", tmp_path / "sweep.png", styles).is_file()


def test_overview_column_titles_stack_one_setting_per_line():
    """A wide grid's titles ran into each other (the transformer sequence-length sweep)."""
    assert plots._stacked("transformer (attention=fused, lengths=fixed, max_len=32)") == (
        "transformer\nattention=fused\nlengths=fixed\nmax_len=32"
    )
    assert plots._stacked("mlp (batch_size=16) / cpu") == "mlp\nbatch_size=16 / cpu"
    assert plots._stacked("cnn") == "cnn"
