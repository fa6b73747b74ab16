"""The verdicts of one variant: what a worker computed, judged against the reference in plain words.

``evaluate`` turns a check result (what a worker writes: losses and parameter snapshots, or
decoded outputs) into named ``Check``s that pass or fail, with the allowances of
``tolerance``; ``compile_check`` judges a static graph's compiles per input shape (or, where its
adapter reports no counts, says so and skips: no pass on no evidence).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.checks.conformance.tolerance import allowance, shadow
from harness.checks.conformance.variants import SNAPSHOT, falls_checked, is_training
from workloads import Params, Workload
from workloads.rnn import RNNCaption, decoded_lengths


def worst(errors: dict[str, float]) -> str:
    """The key of the largest error; a NaN counts as the largest (NaN-safe max)."""
    return max(errors, key=lambda k: np.inf if np.isnan(errors[k]) else errors[k])


def trajectory_of(result: dict[str, np.ndarray]) -> list[Params]:
    """The parameter snapshots ``param{t}:{name}`` of a check result, in step order."""
    snaps: dict[int, Params] = {}
    for key, value in result.items():
        if key.startswith("param") and ":" in key:
            step, name = key.removeprefix("param").split(":", 1)
            snaps.setdefault(int(step), {})[name] = value
    return [snaps[t] for t in sorted(snaps)]


def as_result(losses: Any, trajectory: list[Params]) -> dict[str, np.ndarray]:
    """A check result (what a worker writes) from losses and a trajectory; see trajectory_of."""
    snaps = {f"param{t}:{k}": v for t, snap in enumerate(trajectory) for k, v in snap.items()}
    return {"losses": np.asarray(losses, dtype=np.float64), **snaps}


@dataclass
class Check:
    name: str
    passed: bool
    detail: str
    skipped: bool = False
    """Not judged for want of evidence (``detail`` says what is missing): never a pass (``passed``
    is False), and not counted as a failure either."""

    @property
    def verdict(self) -> str:
        """``PASS``, ``FAIL`` or ``SKIP``, as ``harness check`` prints it."""
        return "SKIP" if self.skipped else "PASS" if self.passed else "FAIL"


def _decode_checks(spec: Workload, result: dict[str, np.ndarray]) -> list[Check]:
    assert isinstance(spec, RNNCaption)  # the one workload whose step decodes (not is_training)
    want = reference_decodes(spec)
    got = result["outputs"]
    same = got.shape == want.shape and bool(np.array_equal(got, want))
    lengths = decoded_lengths(want)
    early = int((lengths < spec.max_len).sum())
    shape = f"{lengths.size} captions of {lengths.min()}..{lengths.max()} tokens, {early} ending before max_len"
    if same:
        detail = f"token-identical to the reference ({shape})"
    else:
        differ = int((got != want).sum()) if got.shape == want.shape else f"shape {got.shape} vs {want.shape}:"
        detail = f"{differ} tokens differ from the reference ({shape})"
    return [Check("greedy decode", same, detail)]


@functools.cache
def reference_decodes(spec: RNNCaption) -> np.ndarray:
    """The float64 greedy decode of every batch of ``spec`` from its initial parameters, computed
    once per spec (seconds of NumPy; every adapter's decode is held to the same one)."""
    params = spec.init_params()
    want = np.stack([spec.reference_decode(params, b["features"]) for b in spec.batches()])
    want.setflags(write=False)  # shared by every caller
    return want


def evaluate(spec: Workload, result: dict[str, np.ndarray]) -> list[Check]:
    """Every check of one variant, in plain words. A NaN anywhere fails the check it is in."""
    if "skipped" in result:
        return []
    if "device_failed" in result:
        return [Check("device", False, str(result["device_failed"]))]
    if not is_training(spec):
        return _decode_checks(spec, result)
    p0 = spec.init_params()
    losses = np.asarray(result["losses"], dtype=np.float64)
    trajectory = trajectory_of(result)
    missing = sorted(set(p0) - set(trajectory[0])) if trajectory else sorted(p0)
    wrong = sorted({k for snap in trajectory for k in snap if k in p0 and snap[k].shape != p0[k].shape})
    if missing or wrong:
        detail = f"missing {missing}" if missing else f"non-canonical layout for {wrong}"
        return [Check(f"parameters of the first {SNAPSHOT} steps", False, detail)]
    if len(trajectory) != SNAPSHOT + 1 or len(losses) < SNAPSHOT:
        detail = f"{len(trajectory)} parameter snapshots, {len(losses)} losses; need {SNAPSHOT + 1}, {SNAPSHOT}"
        return [Check(f"parameters of the first {SNAPSHOT} steps", False, detail)]
    moved = {k: float(np.max(np.abs(trajectory[0][k].astype(np.float64) - p0[k]))) for k in p0}
    bad = worst(moved)
    same = moved[bad] == 0.0  # False for NaN too
    checks = [
        Check("initial parameters", same, "the spec's, bit for bit" if same else f"{bad} differs by {moved[bad]:.1e}")
    ]
    precision = str(result.get("precision", "fp32"))
    allowed = allowance(spec, precision)
    found = shadow(spec, losses, trajectory)
    err0 = float(found.loss_errors[0])
    checks.append(
        Check(
            "step-0 loss",
            err0 <= allowed.loss,
            f"{losses[0]:.6f} (relative error {err0:.1e}, allowed {allowed.loss:.1e})",
        )
    )
    errs = found.loss_errors
    checks.append(
        Check(
            f"losses of the first {SNAPSHOT} steps",
            bool(np.all(errs <= allowed.loss)),
            f"largest relative error {np.max(errs):.1e} (allowed {allowed.loss:.1e})",
        )
    )
    inert = spec.inert_params()
    ratios = {k: found.update_errors[k] / allowed.updates[k] for k in allowed.updates if k not in inert}
    key = worst(ratios)
    tensors_ok = all(r <= 1.0 for r in ratios.values())  # False for NaN too
    detail = (
        f"step size of the whole model off by {found.step_error:.1e} (allowed {allowed.step:.1e}); "
        f"largest tensor error relative to its allowance in {key}: "
        f"{found.update_errors[key]:.1e} (allowed {allowed.updates[key]:.1e})"
    )
    if inert:
        detail += f"; not held per tensor, as no output depends on them: {', '.join(inert)}"
    passed = found.step_error <= allowed.step and tensors_ok
    checks.append(Check(f"parameter updates of the first {SNAPSHOT} steps", passed, detail))
    if "step_compiles" in result or COMPILE_KEYS in result:  # a static graph: the worker names its counts
        counts = result.get("step_compiles")
        checks.append(compile_check(spec, None if counts is None else np.asarray(counts), reported_counts(result)))
    if not falls_checked(spec, precision):
        return checks
    first, last = float(losses[:5].mean()), float(losses[-5:].mean())
    checks.append(
        Check(
            f"loss falls over {len(losses)} steps",
            bool(np.all(np.isfinite(losses))) and last < first - 0.05,
            f"mean of the first 5 losses {first:.4f}, of the last 5 {last:.4f}",
        )
    )
    return checks


#: Why a static graph compiles again for inputs of a shape it has already compiled for.
RECOMPILE_CAUSES = (
    "the step's inputs differ between calls in something other than shape: in JAX, initial arrays "
    "left uncommitted (jnp.asarray, a model's own initialisers) while the jitted step returns arrays "
    "committed to a device, so step 2 sees new input types (place the initial state with "
    "adapters.kit.jax_place), or a dtype, weak type or sharding the step's outputs do not keep; in "
    "tf.function, a Python value passed as an argument or no input_signature"
)


#: The counters of ``Adapter.compile_stats`` the compile check reads, in the order of ``step_compiles``.
COMPILE_COUNTS = ("traces", "compiles")
#: The key of a check result naming which of COMPILE_COUNTS a static-graph adapter reported (possibly none).
COMPILE_KEYS = "compile_keys"


def reported_counts(result: dict[str, np.ndarray]) -> tuple[str, ...]:
    """Which of COMPILE_COUNTS the adapter behind ``result`` reported; both where the result does not say
    (a result written with ``step_compiles`` alone)."""
    if COMPILE_KEYS not in result:
        return COMPILE_COUNTS
    named = {str(k) for k in np.atleast_1d(result[COMPILE_KEYS])}
    return tuple(k for k in COMPILE_COUNTS if k in named)


def step_shapes(spec: Workload, steps: int) -> list[tuple]:
    """The input shapes (and dtypes) of each training step a check runs, in order."""
    data = spec.batches()
    keys = [tuple(sorted((k, v.shape, v.dtype.str) for k, v in b.items())) for b in data]
    return [keys[t % len(keys)] for t in range(steps)]


def compile_check(
    spec: Workload, step_compiles: np.ndarray | None, reported: tuple[str, ...] = COMPILE_COUNTS
) -> Check:
    """A static graph compiles only in the first step of each distinct input shape, never
    later: in step 1 alone for mlp, cnn and the padded and graph-loop caption strategies, at each
    new caption length under exact (3 on the check's batches), at each new bucket under bucketed
    (2). ``step_compiles`` holds the (traces, compiles) accrued in each step; a first step may
    hold several (eager ops compiled once, a forward and a backward graph). ``reported``: which
    of the two the adapter's ``compile_stats`` reports; a count it leaves out reads "not
    reported", never 0, and with neither (or no ``step_compiles``) the check is skipped, not
    passed: nothing shows whether the graph compiled again."""
    name = "compiles once per input shape"
    if step_compiles is None or not reported:
        detail = (
            "traces and compiles not reported: compile_stats() returns neither 'traces' nor 'compiles', so "
            "nothing shows whether this static graph compiles again for a shape it has compiled "
            "(docs/adding-an-adapter.md, section 5)"
        )
        return Check(name, False, detail, skipped=True)
    shapes = step_shapes(spec, len(step_compiles))
    seen: set[tuple] = set()
    again: list[int] = []  # steps that compiled for a shape compiled before
    for t, (key, counts) in enumerate(zip(shapes, step_compiles, strict=True)):
        if key in seen and counts.sum() > 0:
            again.append(t + 1)
        seen.add(key)
    totals = dict(zip(COMPILE_COUNTS, (int(n) for n in step_compiles.sum(axis=0)), strict=True))
    missing = [k for k in COMPILE_COUNTS if k not in reported]
    counted = ", ".join(f"{totals[k]} {k}" for k in reported) + f" over {len(step_compiles)} steps"
    if missing:
        counted += f" ({' and '.join(missing)} not reported)"
    first = sorted({t + 1 for t, key in enumerate(shapes) if shapes.index(key) == t})
    plural = "s" if len(seen) > 1 else ""
    distinct = f"{len(seen)} distinct input shape{plural} (first at step{plural} {', '.join(map(str, first))})"
    if not again:
        detail = f"{counted}, none after the first step of each of {distinct}"
        return Check(name, True, detail)
    where = ", ".join(map(str, again[:5])) + (" ..." if len(again) > 5 else "")
    detail = (
        f"{counted} with {distinct}: step{'s' if len(again) > 1 else ''} {where} compiled again for a shape "
        f"already compiled. Likely cause: {RECOMPILE_CAUSES}"
    )
    return Check(name, False, detail)
