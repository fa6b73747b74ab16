"""Conformance checks: does an adapter compute the workloads' NumPy reference numbers?

Shared by the test suite (tests/test_conformance.py) and ``python -m harness check ADAPTER``,
which an adapter author runs until everything passes. One worker process runs every variant
of one adapter (one framework import, one warm compiler), writing what it computed; the
checks compare that with the float64 reference, in the parent. By concern:

- ``variants``: what to check (the workloads' variants, their shapes, steps and ids);
- ``tolerance``: the tolerance rule (float64 shadow steps from the adapter's own trajectory,
  allowances derived from float32 and bf16 runs of the reference), written out in its docstring;
- ``judging``: a variant's checks (``Check``) and their verdicts, in plain words;
- ``workers``: launching the one worker process that computes an adapter's variants;
- ``report``: the lines ``harness check`` prints.

Every name is re-exported here: ``from harness.checks import conformance`` then
``conformance.evaluate``, ``conformance.allowance`` and so on.
"""

from __future__ import annotations

from harness.checks.conformance.judging import (
    COMPILE_COUNTS,
    COMPILE_KEYS,
    RECOMPILE_CAUSES,
    Check,
    as_result,
    compile_check,
    evaluate,
    reported_counts,
    step_shapes,
    trajectory_of,
    worst,
)
from harness.checks.conformance.report import report_lines
from harness.checks.conformance.tolerance import (
    BF16_RUNS,
    FACTOR,
    FLOAT32_RUNS,
    FLOOR,
    RELU_TIE,
    Allowance,
    Shadow,
    allowance,
    bf16_train,
    float32_runs,
    relative_error,
    shadow,
    step_error,
)
from harness.checks.conformance.variants import (
    BF16_OVERRIDES,
    BF16_WORKLOADS,
    CHECK_EXTRA,
    CHECK_OVERRIDES,
    CHECK_SIZES,
    PRECISION,
    SNAPSHOT,
    Variant,
    all_variants,
    check_base,
    check_steps,
    falls_checked,
    is_training,
    precision_of,
    spec_of,
    variant_id,
)
from harness.checks.conformance.workers import check_cell, run_adapter

__all__ = [
    "BF16_OVERRIDES",
    "BF16_RUNS",
    "BF16_WORKLOADS",
    "CHECK_EXTRA",
    "CHECK_OVERRIDES",
    "CHECK_SIZES",
    "COMPILE_COUNTS",
    "COMPILE_KEYS",
    "FACTOR",
    "FLOAT32_RUNS",
    "FLOOR",
    "PRECISION",
    "RECOMPILE_CAUSES",
    "RELU_TIE",
    "SNAPSHOT",
    "Allowance",
    "Check",
    "Shadow",
    "Variant",
    "all_variants",
    "check_base",
    "allowance",
    "as_result",
    "bf16_train",
    "check_cell",
    "check_steps",
    "compile_check",
    "evaluate",
    "falls_checked",
    "float32_runs",
    "is_training",
    "precision_of",
    "relative_error",
    "report_lines",
    "reported_counts",
    "run_adapter",
    "shadow",
    "spec_of",
    "step_error",
    "step_shapes",
    "trajectory_of",
    "variant_id",
    "worst",
]
