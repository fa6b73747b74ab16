"""README.md, every docs/*.md page and evidence/README.md stay true, as tests/test_guide.py keeps the adapter guide:
every file and module path they mention exists, every dotted module and name imports, every
``make`` target and variable is the Makefile's, and every link between the pages resolves.
"""

from __future__ import annotations

import re

import pytest

from adapters import kit
from tests.conftest import ADAPTERS, REPO
from tests.doc_names import unresolved

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "evidence" / "README.md"]
TEXTS = {p.relative_to(REPO).as_posix(): p.read_text() for p in PAGES}
MAKEFILE = (REPO / "Makefile").read_text()
TARGETS = set(re.findall(r"^([\w-]+):", MAKEFILE, re.M))
VARIABLES = set(re.findall(r"^(\w+) *[?:]?=", MAKEFILE, re.M)) | set(re.findall(r"\$\((\w+)\)", MAKEFILE))


def code(text: str) -> list[str]:
    """The page's code: fenced blocks, then inline code spans outside them."""
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", text, re.M | re.S)
    rest = re.sub(r"^```[^\n]*\n.*?^```", "", text, flags=re.M | re.S)
    return blocks + re.findall(r"`([^`\n]+)`", rest)


def mentions(pattern: str, *, in_code: bool) -> list[tuple[str, str]]:
    return sorted(
        {
            (page, m)
            for page, text in TEXTS.items()
            for chunk in (code(text) if in_code else [text])
            for m in re.findall(pattern, chunk)
        }
    )


#: A repository path: adapters/..., harness/....py, workloads/..., docs/..., a committed run under
#: evidence/, a lock file; paths with a placeholder (``reports/<run-id>/``) or a glob are left out, and
#: so is ``reports/`` itself: the user's own runs, ignored by git, absent until the first run.
PATHS = [
    (page, path.rstrip(".,:;)"))
    for page, path in mentions(
        r"(?<![\w/.-])((?:adapters|harness|workloads|fidelity|tests|docs|locks|reports|evidence)/[\w/.<>*-]*)",
        in_code=False,
    )
    if "<" not in path and "*" not in path and "..." not in path and path.rstrip(".,:;)") != "reports/"
]
DOTTED = [
    (page, m)
    for page, m in mentions(r"(?<![\w/.-])((?:adapters|harness|workloads|fidelity)(?:\.\w+)+)", in_code=True)
    if not re.search(r"\.(py|md|json|toml|txt)$", m)
]
KIT_NAMES = [(page, m) for page, m in mentions(r"(?<![/\w])kit\.(\w+)", in_code=True) if m != "py"]
MAKE_COMMANDS = mentions(r"(?<![\w-])(make [a-z][\w-]*(?: [A-Z]\w*=\S*)*)", in_code=True)
LINKS = [
    (page, target)
    for page, text in TEXTS.items()
    for target in re.findall(r"\]\(([^)\s]+)\)", text)
    if not re.match(r"\w+:", target)
]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path) -> set[str]:
    return {slug(h) for h in re.findall(r"^#+ (.*)$", path.read_text(), re.M)}


def test_the_pages_are_found_and_mention_paths_modules_and_targets():
    assert len(PAGES) >= 12, [p.name for p in PAGES]
    assert len(PATHS) > 40 and len(DOTTED) > 5 and len(MAKE_COMMANDS) > 20 and len(LINKS) > 30


@pytest.mark.parametrize(("page", "path"), PATHS)
def test_every_path_a_page_names_exists(page, path):
    assert (REPO / path).exists(), f"{page} names {path}, which does not exist"


@pytest.mark.parametrize(("page", "dotted"), DOTTED)
def test_every_module_and_name_a_page_mentions_imports(page, dotted):
    problem = unresolved(dotted)
    assert problem is None, f"{page}: {problem}"


@pytest.mark.parametrize(("page", "name"), KIT_NAMES)
def test_every_kit_helper_a_page_mentions_is_public(page, name):
    assert name in kit.__all__, f"{page} names kit.{name}, not in adapters.kit.__all__"


@pytest.mark.parametrize(("page", "command"), MAKE_COMMANDS)
def test_every_make_target_and_variable_a_page_uses_is_the_makefiles(page, command):
    target, *assignments = command.split()[1:]
    assert target in TARGETS, f"{page}: `{command}`: the Makefile has no target {target!r}"
    for assignment in assignments:
        name = assignment.split("=", 1)[0]
        assert name in VARIABLES, f"{page}: `{command}`: the Makefile reads no variable {name}"


@pytest.mark.parametrize(("page", "target"), LINKS)
def test_every_link_between_pages_resolves(page, target):
    path, _, anchor = target.partition("#")
    dest = (REPO / page).parent / path if path else REPO / page
    assert dest.exists(), f"{page} links to {target}: {dest.relative_to(REPO)} does not exist"
    if anchor:
        assert dest.suffix == ".md", f"{page} links to an anchor in {path}, not a page"
        assert anchor in anchors(dest), f"{page} links to {target}: no such heading in {path or page}"


def test_the_readme_opens_with_the_two_commands_and_links_every_page():
    readme = TEXTS["README.md"]
    first_block = re.search(r"^```[^\n]*\n(.*?)^```", readme, re.M | re.S).group(1)
    assert [line.split()[:2] for line in first_block.splitlines()] == [["make", "bench"], ["make", "test"]]
    assert re.search(r"^## (.*)$", readme, re.M).group(1) == "Two commands"
    assert {"bench", "test"} <= TARGETS
    linked = {t.partition("#")[0] for p, t in LINKS if p == "README.md"}
    missing = [p for p in TEXTS if p.startswith("docs/") and p not in linked]
    assert not missing, f"README.md links no {missing}"
    assert "## Calibration" in readme and "docs/measurement.md#calibration" in readme


def test_the_readmes_example_report_is_a_committed_reports_own_lines():
    """README's "What a report looks like" is copied from a committed example, not retyped: every
    line of it stands, as it is, in one report.md under evidence/ (regenerated, the example goes
    stale here first)."""
    section = TEXTS["README.md"].partition("## What a report looks like")[2]
    block = re.search(r"^```text\n(.*?)^```", section, re.M | re.S).group(1)
    lines = [line for line in block.splitlines() if line.strip()]
    assert len(lines) > 10, "the README shows a report's first lines"
    missing = {
        p.parent.name: [line for line in lines if line not in set(p.read_text().splitlines())]
        for p in (REPO / "evidence").glob("*/report.md")
    }
    nearest = min(missing, key=lambda name: len(missing[name]))
    assert not missing[nearest], (
        f"no committed report holds the README's example; {nearest} lacks {missing[nearest][:2]}"
    )


def test_every_page_links_back_to_the_readme_or_is_the_guide():
    for page, text in TEXTS.items():
        if page.startswith("docs/") and page not in ("docs/adding-an-adapter.md", "docs/faults.md"):
            assert "](../README.md)" in text, f"{page} does not link back to the README"


def test_the_adapters_table_names_the_discovered_adapters():
    text = TEXTS["docs/adapters-and-frameworks.md"]
    table = re.search(r"^\| framework \| dynamic graph \| static graph \|\n(.*?)\n\n", text, re.M | re.S).group(1)
    cells = [cell for row in table.splitlines()[1:] for cell in row.split("|")[2:4]]  # dynamic, static
    named = {n for cell in cells for n in re.findall(r"`([\w-]+)`", re.sub(r"\([^()]*\)", "", cell))}
    built_in = {name for name, info in ADAPTERS.items() if info.source == "built-in"}
    assert named <= built_in, f"the adapters table names {sorted(named - built_in)}, not adapters"
    assert built_in <= named, f"the adapters table leaves out {sorted(built_in - named)}"


def test_workload_and_conformance_names_the_pages_use_exist():
    from harness.checks import conformance
    from workloads.spec import Workload

    text = "\n".join(TEXTS.values())
    for attr in set(re.findall(r"`Workload\.(\w+)`", text)):
        assert hasattr(Workload, attr), f"the docs name Workload.{attr}"
    for attr in set(re.findall(r"`conformance\.(\w+)`", text)):
        assert hasattr(conformance, attr), f"the docs name conformance.{attr}"
