"""report.html: every ``##`` and ``###`` heading has an anchor, a table of contents links them
after the title, tables wrap their long cells, and ``<details>`` still collapses."""

from __future__ import annotations

import re

from harness.reporting import html
from tests.conftest import FIXTURE_RUNS
from tests.fakes import report_text

RUN = FIXTURE_RUNS / "2026-11-25-cpu-input-pipelines"


def _headings(page: str) -> list[tuple[str, str]]:
    """(tag, id) of every h2 and h3 of the page's body, in order; id empty where it has none."""
    return [(m[1], m[2] or "") for m in re.finditer(r'<(h[23])(?: id="([^"]*)")?>', page)]


def test_every_section_heading_has_a_unique_anchor_and_a_toc_link():
    md = report_text(RUN)
    page = html.render(md, RUN, "report")
    found = _headings(page)
    expected = len(re.findall(r"^#{2,3} ", md, flags=re.M))
    assert len(found) == expected >= 10
    ids = [anchor for _, anchor in found]
    assert all(ids) and len(set(ids)) == len(ids), "every heading anchored, no anchor twice"
    assert {"the-answer", "static-vs-dynamic", "cnn-on-cpu-workers"} <= set(ids), "GitHub's anchors"
    toc = page[page.index('<nav class="toc">') : page.index("</nav>")]
    assert page.index("</h1>") < page.index('<nav class="toc">') < page.index("<h2"), "after the title"
    assert re.findall(r'<a href="#([^"]+)">', toc) == ids, "one link per heading, in order"
    assert "<details><summary>More columns" in page and "&lt;details" not in page


def test_toc_nests_subsections_and_escapes_heading_text(tmp_path):
    md = "# T\n\nlead\n\n## A <b> & `c`\n\n### x\n\n### x\n\n## B\n"
    page = html.render(md, tmp_path, "T")
    assert _headings(page) == [("h2", "a-b--c"), ("h3", "x"), ("h3", "x-1"), ("h2", "b")]
    toc = page[page.index('<nav class="toc">') : page.index("</nav>")]
    assert "<b>" not in toc and "A &lt;b&gt; &amp; c" in toc
    assert toc.index('href="#a-b--c"') < toc.index("<ul>", toc.index('href="#a-b--c"')) < toc.index('href="#x"')
    assert '<nav class="toc">' not in html.render("# T\n\nno sections\n", tmp_path, "T"), "no TOC without sections"


def test_tables_wrap_long_cells_and_scroll_when_wider_than_the_page():
    rules = {sel.strip(): body for sel, body in re.findall(r"([^{}]+)\{([^}]*)\}", html.STYLE)}
    assert "overflow-x: auto" in rules["table"]
    cells = rules["th, td"]
    assert "nowrap" not in cells and "overflow-wrap: break-word" in cells
