"""docs/adding-an-adapter.md stays true: every file, module and name it mentions exists.

The guide's example adapter is installed as a package and run through ``harness check`` by
tests/test_third_party.py, which takes it from the guide with ``example_adapter``.
"""

from __future__ import annotations

import importlib
import re

import pytest

import adapters
from adapters import kit
from adapters.base import Adapter
from tests.conftest import REPO
from tests.doc_names import unresolved

GUIDE = REPO / "docs" / "adding-an-adapter.md"
TEXT = GUIDE.read_text()
CODE_SPANS = re.findall(r"`([^`\n]+)`", TEXT)
PATHS = sorted(set(re.findall(r"\b((?:adapters|harness|workloads|fidelity|tests|docs)/[\w*/.-]*\.(?:py|md))", TEXT)))
FILE = re.compile(r"\.(py|md|json|toml)$")
DOTTED = sorted(
    m
    for span in CODE_SPANS
    for m in re.findall(r"\b((?:adapters|harness|workloads|fidelity)(?:\.\w+)+)", span)
    if not FILE.search(m)
)
KIT_NAMES = sorted({m for span in CODE_SPANS for m in re.findall(r"(?<![/\w])kit\.(\w+)", span) if m != "py"})


def example_adapter() -> str:
    """The source of the guide's minimal annotated example (section 3)."""
    section = TEXT.split("## 3. A minimal annotated example", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.mark.parametrize("path", PATHS)
def test_every_file_the_guide_names_exists(path):
    assert list(REPO.glob(path)), f"docs/adding-an-adapter.md names {path}, which does not exist"


@pytest.mark.parametrize("dotted", DOTTED)
def test_every_module_and_name_the_guide_mentions_imports(dotted):
    problem = unresolved(dotted)
    assert problem is None, problem


def test_every_kit_helper_the_guide_mentions_is_public():
    assert KIT_NAMES, "the guide names no adapters.kit helper"
    missing = [n for n in KIT_NAMES if n not in kit.__all__]
    assert not missing, f"docs/adding-an-adapter.md names kit.{missing}, not in adapters.kit.__all__"
    assert all(callable(getattr(kit, n)) for n in KIT_NAMES)


def test_every_method_and_attribute_the_guide_lists_is_the_contracts():
    methods = re.findall(r"^\| `(\w+)\(", TEXT, re.M)
    assert len(methods) >= 15
    for method in methods:
        assert callable(getattr(Adapter, method, None)), f"the guide lists Adapter.{method}, which does not exist"
    attributes = re.search(r"^Class attributes:(.*?)\n\n", TEXT, re.M | re.S).group(1)
    for attr in re.findall(r"`(\w+)` \(", attributes):
        assert attr in Adapter.__annotations__, f"the guide lists Adapter.{attr}, which the contract does not declare"
    assert "families` (which workload" in TEXT and f"`{Adapter.families!r}`".replace("'", '"') in TEXT


def test_names_the_guide_places_in_a_file_are_there():
    placed = re.findall(r"`(\w+)` in\s+`([\w/]+\.py)`", TEXT)
    assert ("algorithm1_adam", "adapters/_keras_common.py") in placed
    for name, path in placed:
        assert re.search(rf"\b{name}\b", (REPO / path).read_text()), f"{name} is not in {path}"


def test_the_entry_point_group_and_variable_are_the_ones_discovery_reads():
    assert f'[project.entry-points."{adapters.ENTRY_POINT_GROUP}"]' in TEXT
    assert (
        "DLCOMPARE_EXTRA_ADAPTERS" in TEXT and "DLCOMPARE_EXTRA_ADAPTERS" in (REPO / "adapters/__init__.py").read_text()
    )


def test_the_example_adapter_uses_the_public_api_only():
    source = example_adapter()
    imported = re.findall(r"^(?:from|import) ([\w.]+)", source, re.M)
    assert set(imported) <= {"numpy", "adapters", "workloads"}, imported
    assert "adapters._" not in source and "class NumpyReference(kit.Adapter)" in source
    compile(source, "example", "exec")


def test_the_hook_groups_the_guide_registers_are_the_ones_the_harness_reads():
    """Section 9's entry-point groups are adapters.HOOK_GROUPS, each read where the page says, and
    its Python examples compile (tests/test_plugin_hooks.py runs every hook on a plugin)."""
    section = TEXT.split("## 9. Hooks", 1)[1].split("\n## ", 1)[0]
    groups = re.findall(r'^\[project\.entry-points\."([\w.]+)"\]', section, re.M)
    assert sorted(groups) == sorted(adapters.HOOK_GROUPS)
    for block in re.findall(r"```python\n(.*?)```", section, re.S):
        compile(block, "section 9", "exec")
    readers = {
        "harness.measuring.profilers": "`harness.measuring.profilers.profiler_of`",
        "harness.checks.fidelity": "`harness.checks.fidelity.scripts`",
        "harness.measuring.floors": "`harness.measuring.floors`",
        "harness.running.devices": "`harness.running.devices`",
    }
    for module, named in readers.items():
        assert importlib.import_module(module).ENTRY_POINT_GROUP in groups and named in section, module
