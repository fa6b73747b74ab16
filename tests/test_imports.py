"""Importing the harness, the workloads and adapter discovery must import no framework (the
import graph between the harness's parts: tests/test_imports_graph.py)."""

from __future__ import annotations

import subprocess

from tests.conftest import REPO

FRAMEWORKS = ("torch", "tensorflow", "jax", "keras", "optax", "flax")


def test_harness_and_workloads_import_no_framework(python):
    code = (
        "import sys\n"
        "import harness, harness.cli, harness.session, harness.reporting.report, workloads\n"
        "import harness.running.runner, harness.running.worker\n"
        "from adapters import discover\n"
        "assert len(discover()) >= 4\n"
        f"print(sorted(m for m in {FRAMEWORKS!r} if m in sys.modules))\n"
    )
    out = subprocess.run([python, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
