"""``harness check``'s plain-word lines: one per check of every variant, PASS, FAIL or SKIP."""

from __future__ import annotations

from adapters import AdapterInfo
from harness.checks.conformance.judging import evaluate
from harness.checks.conformance.variants import Variant, spec_of, variant_id


def report_lines(info: AdapterInfo, results: dict[Variant, dict]) -> tuple[list[str], int]:
    """Plain-word lines for ``harness check`` and the number of failed checks; a check skipped for
    want of evidence (``Check.skipped``, e.g. compile counts not reported) prints SKIP with its reason."""
    lines, failed = [], 0
    for variant, result in results.items():
        label = f"{info.name} / {variant_id(variant)}"
        if "skipped" in result:
            lines.append(f"SKIP  {label}: {result['skipped']}")
            continue
        for check in evaluate(spec_of(variant), result):
            failed += check.verdict == "FAIL"
            lines.append(f"{check.verdict}  {label}: {check.name}: {check.detail}")
    return lines, failed
