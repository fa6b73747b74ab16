"""fidelity.md's "within 1.10x" is two-sided and rests on the whole interval of adapter / script,
and an adapter faster than its idiomatic script beyond the allowance is flagged."""

from __future__ import annotations

import math

import pytest

from harness import records
from harness.reporting import fidelity
from tests.conftest import FIXTURE_RUNS

RUN = FIXTURE_RUNS / "2026-11-25-cpu-fidelity"


@pytest.fixture(scope="module")
def found() -> list[dict]:
    return fidelity.rows(records.load(RUN / records.RESULTS))


def _row(found: list[dict], adapter: str, batch: int) -> dict:
    return next(r for r in found if r["adapter"] == adapter and r["batch"] == batch)


@pytest.mark.parametrize(
    ("ratio", "word"),
    [
        ((1.0, 0.95, 1.05), "within 1.10x"),
        ((1.0, 1 / 1.10, 1.10), "within 1.10x"),
        ((0.78, 0.33, 1.81), "unresolved"),
        ((0.69, 0.66, 0.72), "faster beyond 1.10x"),
        ((1.3, 1.2, 1.4), "slower beyond 1.10x"),
        ((1.21, 1.02, 1.43), "slower, unresolved against 1.10x"),
        ((0.90, 0.84, 0.97), "faster, unresolved against 1.10x"),
        ((1.2, 0.0, math.inf), "unresolved"),
        (None, "unresolved"),
    ],
)
def test_within_needs_the_whole_interval_inside_the_allowance_both_ways(ratio, word):
    assert fidelity.against_target(ratio) == word


def test_a_wide_interval_is_not_within(found):
    wide = _row(found, "keras-jax", 32)
    assert wide["latency"][1] < 0.5 and wide["latency"][2] > 1.5
    assert "within" not in fidelity._verdict(wide) and "unresolved: latency" in fidelity._verdict(wide)
    assert "| keras-jax       | 32 " in fidelity.table(found)


def test_an_adapter_faster_than_idiomatic_code_is_flagged(found):
    fit = _row(found, "keras-jax", 1024)
    assert fit["throughput"][0] == pytest.approx(0.69, abs=0.01) and fit["throughput"][2] < 1 / 1.10
    assert "faster beyond 1.10x: throughput" in fidelity._verdict(fit)
    text = "\n".join(fidelity.summary(found))
    assert "18 of 20" not in text
    flagged = next(line for line in text.splitlines() if line.startswith("**Faster than"))
    assert "keras-jax at batch 1024 (throughput 0.69 [" in flagged and "misrepresents the framework" in flagged
    within = sum(fidelity.against_target(r["latency"]) == "within 1.10x" for r in found if "problem" not in r)
    assert text.startswith(f"{within} of 20 adapter cells are within 1.10x of their idiomatic script both ways")
