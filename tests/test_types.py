"""The type checker over harness/, adapters/ and workloads/ (pyproject.toml's [tool.mypy]; `make
lint` runs the same): clean, and live on records: reading a key ``Record`` does not declare is an
error it reports, so a record's fields stay the ones harness/records.py lists."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO

PROBE = """
from harness import records

rec = records.new_record({"adapter": "a", "threads": 1, "device_requested": "cpu"}, "ok")
print(rec["median_s"], rec["no_such_field"])
"""


@pytest.mark.workers
def test_mypy_is_clean_and_checks_record_keys(tmp_path):
    probe = tmp_path / "record_probe.py"
    probe.write_text(PROBE)
    cmd = [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache"), "harness", "adapters", "workloads"]
    proc = subprocess.run([*cmd, str(probe)], cwd=REPO, capture_output=True, text=True, timeout=900)
    errors = [ln for ln in proc.stdout.splitlines() if ": error:" in ln]
    assert [e for e in errors if not e.startswith(str(probe))] == [], proc.stdout[-6000:]
    assert len(errors) == 1 and 'TypedDict "Record" has no key "no_such_field"' in errors[0], proc.stdout[-3000:]
