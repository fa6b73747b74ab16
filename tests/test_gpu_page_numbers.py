"""docs/gpu-and-environments.md's numbers against the lock files: each lock's package count (its
pins), its download size (the registry's sizes in its ``.meta.json``), each variant's total, and
the versions the variants' table names. Offline: the locks and their metadata are in the repository."""

from __future__ import annotations

import re

import pytest

from harness.install.lock import download_size, pins_of
from harness.install.prerequisites import download_bytes
from harness.install.variant import ENVIRONMENTS, LOCK_NAMES
from tests.conftest import REPO

PAGE = REPO / "docs" / "gpu-and-environments.md"
#: A row of the page's table of locks: | `lock` | environment | packages | wheels to download |
LOCK_ROW = re.compile(r"^\| `([\w-]+)` \| [^|]+ \| (\d+) \| ([\d.]+) GiB \|$", re.MULTILINE)
#: A row of the page's table of variants: | `variant` | chosen when | environments (lock files) |
VARIANT_ROW = re.compile(r"^\| `(cpu|cuda12|cuda13)` \| [^|]+ \| (.+\.txt`\).+) \|$", re.MULTILINE)


def _gib(n_bytes: int) -> str:
    return f"{n_bytes / 2**30:.1f}"


def test_the_page_quotes_every_locks_pin_count_and_download_size():
    rows = {lock: (int(count), size) for lock, count, size in LOCK_ROW.findall(PAGE.read_text())}
    assert sorted(rows) == sorted(LOCK_NAMES), "one row per lock"
    for lock, (count, size) in rows.items():
        assert count == len(pins_of(lock)), (
            f"{lock}: the page says {count} packages, locks/{lock}.txt pins {len(pins_of(lock))}"
        )
        assert size == _gib(download_size(lock)), f"{lock}: the page says {size} GiB"


@pytest.mark.parametrize("variant", [v for v in ENVIRONMENTS if v != "cpu"])
def test_the_page_quotes_what_each_gpu_variant_downloads(variant):
    said = re.search(rf"VARIANT={variant}` (?:downloads )?about ([\d.]+) GiB", PAGE.read_text())
    assert said, f"no download total for {variant}"
    assert said.group(1) == _gib(download_bytes(variant))


def test_the_versions_the_variants_table_names_are_the_locks():
    rows = VARIANT_ROW.findall(PAGE.read_text())
    assert sorted(v for v, _ in rows) == sorted(ENVIRONMENTS)
    for variant, text in rows:
        pins: dict[str, str] = {}
        for lock in re.findall(r"\(`([\w-]+)\.txt`\)", text):
            pins |= {name: version.split("+")[0] for name, version in pins_of(lock).items()}
        named = re.findall(r"`?([a-z][\w-]*)(?:\[[\w-]+\])?`? (\d+\.\d+\.\d+)", text)
        checked = [(name, version) for name, version in named if name in pins]
        assert checked, f"{variant}: no pinned version named"
        for name, version in checked:
            assert pins[name] == version, f"{variant}: the page says {name} {version}, the lock pins {pins[name]}"
