"""Parity of a forward pass (the export task's served and in-process forwards) with the float64
reference, under an allowance derived the way ``tolerance`` derives the training one.

What is compared: the logits a forward returns for the parity inputs, against the workload's
float64 ``reference_logits`` from the same canonical parameters, as one relative L2 error
(``tolerance.relative_error``) over the whole batch, plus the error of the worst sample (a
program that is right on average and wrong on one row, say a batch-dependent bug, fails there).

The allowance: FACTOR x the largest of those errors over float32 forwards of the reference whose
parameters and inputs were each moved by one ulp at random (FLOAT32_RUNS: runs that differ only in
rounding), never below FLOOR. So it is measured on the machine running the check, for the exact
model and inputs, as the training checks' allowances are; nothing is tuned on one machine.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from threadpoolctl import threadpool_limits

from harness.checks.conformance.tolerance import FACTOR, FLOOR, relative_error
from workloads import Params, Workload
from workloads.arrays import ulp_moved
from workloads.spec import FixedForward

#: Float32 runs of the reference forward the allowance is measured on.
FLOAT32_RUNS = 4


@dataclass(frozen=True)
class ForwardParity:
    """A forward's distance from the float64 reference and what is allowed."""

    error: float
    """Relative L2 error of all logits."""
    worst_row: float
    """The largest relative L2 error of one sample's logits."""
    allowed: float
    """The allowance both are held to."""

    @property
    def ok(self) -> bool:
        return bool(self.error <= self.allowed and self.worst_row <= self.allowed)  # NaN fails

    def reason(self) -> str:
        """Why the forward failed parity, in plain words ("" when it passed)."""
        if self.ok:
            return ""
        return (
            f"outputs differ from the float64 reference: relative error {self.error:.3g} "
            f"(worst sample {self.worst_row:.3g}), allowed {self.allowed:.3g}"
        )


def errors(got: np.ndarray, want: np.ndarray) -> tuple[float, float]:
    """(relative L2 error of all of ``got``, the largest of one row's); inf for a shape mismatch."""
    got = np.asarray(got, np.float64)
    if got.shape != want.shape:
        return float("inf"), float("inf")
    return relative_error(got, want), max(relative_error(g, w) for g, w in zip(got, want, strict=True))


def reference(spec: FixedForward, params: Params, x: np.ndarray) -> np.ndarray:
    """The float64 reference logits of ``x``."""
    p64 = {k: v.astype(np.float64) for k, v in params.items()}
    return spec.reference_logits(p64, x.astype(np.float64))


def allowance(spec: Workload, params: Params, x: np.ndarray, seed: int = 0) -> float:
    """FACTOR x the largest error of FLOAT32_RUNS ulp-perturbed float32 reference forwards,
    at least FLOOR (module docstring)."""
    assert isinstance(spec, FixedForward)  # the export task's workloads (mlp, cnn)
    want = reference(spec, params, x)
    rng = np.random.default_rng(seed)
    worst = 0.0
    with threadpool_limits(1):  # one thread: the float32 runs do not depend on the BLAS pool
        for _ in range(FLOAT32_RUNS):
            moved = ulp_moved({**params, "__x": x.astype(np.float32)}, rng)
            x32 = moved.pop("__x")
            worst = max(worst, *errors(spec.reference_logits(moved, x32), want))
    return max(FLOOR, FACTOR * worst)


def check(spec: Workload, params: Params, x: np.ndarray, got: np.ndarray, allowed: float) -> ForwardParity:
    """How far ``got`` (a forward's logits of ``x``) is from the float64 reference."""
    assert isinstance(spec, FixedForward)  # the export task's workloads (mlp, cnn)
    error, worst_row = errors(got, reference(spec, params, x))
    return ForwardParity(error, worst_row, allowed)
