"""The type checker over harness/, adapters/ and workloads/ (pyproject.toml's [tool.mypy]; `make
lint` runs the same): clean, and live on records: reading a key ``Record`` does not declare is an
error it reports, so a record's fields stay the ones harness/record_types.py lists; and the reads
of record keys it cannot check (from a ``Mapping[str, Any]``, a ``dict[str, Any]``, ``Any``:
tests/record_reads.py) stay under UNCHECKED_CEILING."""

from __future__ import annotations

import collections
import json
import subprocess
import sys

import pytest

from tests.conftest import REPO

PROBE = """
from collections.abc import Mapping
from typing import Any

from harness import records

rec = records.new_record({"adapter": "a", "threads": 1, "device_requested": "cpu"}, "ok")
print(rec["median_s"], rec["no_such_field"])


def untyped(r: Mapping[str, Any]) -> float:
    return r["median_s"] + r.get("mean_s", 0.0)
"""


#: Issue 46's bound on harness/'s reads of record keys that no type checks (485 before records
#: were typed through the stages, 139 after).
UNCHECKED_CEILING = 150


@pytest.mark.workers
def test_mypy_is_clean_checks_record_keys_and_few_reads_escape_it(tmp_path):
    probe = tmp_path / "record_probe.py"
    probe.write_text(PROBE)
    cmd = [sys.executable, "-m", "tests.record_reads", str(probe)]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(proc.stdout)
    errors = found["errors"]
    assert [e for e in errors if not e.startswith(str(probe))] == [], "\n".join(errors)[-6000:]
    assert len(errors) == 1 and 'TypedDict "Record" has no key "no_such_field"' in errors[0], errors
    # the count is live: the probe's two reads from a Mapping are found, its typed reads are not
    line = PROBE.splitlines().index('    return r["median_s"] + r.get("mean_s", 0.0)') + 1
    probed = sorted((n, key) for path, n, key in found["unchecked"] if path == str(probe))
    assert probed == [(line, "mean_s"), (line, "median_s")], found["unchecked"]
    harness = [path for path, _, _ in found["unchecked"] if path.startswith("harness/")]
    assert len(harness) < UNCHECKED_CEILING, collections.Counter(harness).most_common()
