"""Conformance checks: does an adapter compute the workloads' NumPy reference numbers?

Shared by the test suite (tests/test_conformance.py) and ``python -m harness check ADAPTER``,
which an adapter author runs until everything passes. One worker process runs every variant
of one adapter (one framework import, one warm compiler), writing what it computed; the
checks compare that with the float64 reference here, in the parent.

The tolerance rule: derived on the machine that runs the check, never tuned on one
---------------------------------------------------------------------------------------
Float32 training is not float64 training. Rounding differs between kernels (oneDNN, Eigen, XLA,
OpenBLAS) and between CPUs, and a ReLU whose input sits near zero, or Adam's per-element
normalisation, turns one rounding difference into a visibly different trajectory within a few
steps (on ``mlp-wide`` a plain float32 run of the NumPy reference itself ends 1.4% away from
the float64 one after 5 Adam steps, as far as a wrong beta2 does). So the checks never compare
trajectories. They follow the adapter's own trajectory and, at every step t of the first
SNAPSHOT, compare what the adapter did with what the float64 reference does *from the
adapter's own parameters* p_t, with the optimiser state accumulated along that same
trajectory (a "shadow" step):

* the loss at p_t, as a relative error;
* the update p_{t+1} - p_t of every parameter tensor, as a relative L2 error;
* the step size of the whole model's update: the component of the update's error along the
  reference update, relative to it (a learning rate 0.4% off reads 4e-3 here).

Errors then stay at rounding level instead of compounding. One discontinuity is followed
rather than allowed for: a ReLU input within float32 rounding of zero may fall on the other side
in a framework, flipping one unit's derivative for one sample (seen once in eight adapters on
``mlp-wide`` here: an input of 1.5e-7 in keras-torch's third step, where the next smallest was
2.5e-4). That moves the unit's bias by a third of the learning rate and, through Adam's
momentum, the first layer's later steps. So where a shadow step misses, it is retaken with the
inputs within RELU_TIE of zero counted on the other side (each way) and the nearer one is kept,
its gradient carried on in the optimiser state.

The allowance is the reference's own float32 sensitivity, measured on the machine running the
check by the same comparison applied to float32 runs of the NumPy reference (FLOAT32_RUNS) that
differ only in rounding: allowed error = FACTOR x the largest error of those runs, for the
losses, per tensor and for the whole model's step size, and never below FLOOR. Elements whose
gradient is below the float32 noise floor of its own sum (Adam turns any of them into a step of
about +-lr whatever its sign) carry no information about correctness: they stay in the norms,
and the float32 runs measure how much of a tensor they are, so such a tensor gets a larger
allowance, measured rather than guessed. The deliberately wrong models in
tests/test_tolerance_mutations.py (learning rate x1.004, Adam epsilon before the bias
correction, beta2 0.99, a bias never updated, conv kernels flipped, GRU gates swapped) must fail;
``python -m tests.test_tolerance_mutations`` prints each one's error against its allowance.

Mixed precision (``--precision bf16``) is checked the same way on BF16_WORKLOADS, in the same
worker process as the float32 variants: the adapter's bf16 trajectory against float64 shadow
steps from its own float32 master parameters, with an allowance derived as the float32 one is,
from runs of the reference that round where every bf16 mechanism rounds (BF16_RUNS, the
perturbations of FLOAT32_RUNS): each step's parameters and float inputs rounded to bfloat16
(``ml_dtypes``), the forward and backward then in float32 arithmetic, as the frameworks
accumulate their bfloat16 matmuls; float32 master parameters and optimiser state. The frameworks
also round activations and gradients between layers, which this leaves to FACTOR (on the AMD EPYC
VM the XLA-based adapters reach 0.41 of the bf16 allowance on mlp's output bias, the others stay
within 0.26). bf16 moves a
ReLU network's first layers by tens of percent, so those tensors' allowances are wide; the last
layer's and the whole model's step are a few percent: a run whose master weights are kept in
bfloat16 fails them (tests/test_precision.py).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from ml_dtypes import bfloat16
from threadpoolctl import threadpool_limits

from adapters import AdapterInfo
from harness.running import runner
from harness.running.plan import variants
from workloads import STRATEGIES, WORKLOADS, Batch, Params, Workload, get_workload, optim, override
from workloads.rnn import decoded_lengths

SNAPSHOT = 5
#: Allowed error = FACTOR x the largest error of the float32 runs of the reference. Framework
#: kernels round differently from NumPy's, not much worse: on the AMD EPYC VM this was written on
#: every adapter stays within a third of its allowance, every mutation above 100x it.
FACTOR = 10.0
#: No allowance below 256 float32 ulps (3.1e-5) of relative error. NumPy's exp/tanh are within an
#: ulp; the frameworks' vectorised ones are a few ulps off, and a GRU applies them at every step:
#: every framework here lands 1.0e-5 from float64 on rnn-caption's updates where NumPy's float32
#: runs land 1e-6 or less.
FLOOR = float(256 * np.finfo(np.float32).eps)
#: Half-width, relative to a layer's largest ReLU input, of the band in which float32 rounding
#: may put an input on the other side of zero: 16 ulps of the largest (a sum's rounding error is
#: a few ulps of its largest terms). Narrow on purpose: two ambiguous inputs in one step would
#: both be flipped, and an input outside rounding is not ambiguous.
RELU_TIE = 16 * float(np.finfo(np.float32).eps)
#: The float32 runs of the reference whose spread sets the allowances.
FLOAT32_RUNS = (
    "float32",
    "float32, the rows of every batch permuted (every sum over the batch in another order)",
    "float32, initial parameters moved by +-1 ulp at random",
    "float32, rows permuted, initial parameters and inputs moved by +-1 ulp",
)

#: Workloads whose training is also checked under ``--precision bf16`` (every adapter, small
#: shapes, about 6 steps each). rnn-caption stays out: rounding only parameters and inputs gives
#: its output bias an allowance (1.5e-4) below what rounding its hidden states to bfloat16 in
#: every step does, so its check would measure the emulation, not the adapter.
BF16_WORKLOADS = ("mlp", "cnn")
#: The bf16 variants' smaller shapes (on top of CHECK_OVERRIDES): half the default batch halves
#: the shadow steps and the bf16 compiles that the bf16 checks add to the suite.
BF16_OVERRIDES = ("batch_size=16",)
#: How a conformance variant asks for a precision (kept with its overrides; never a spec field).
PRECISION = "precision="
#: The bf16 runs of the reference whose spread sets the bf16 allowances: FLOAT32_RUNS, each with
#: the parameters and float inputs rounded to bfloat16 at every step (``bf16_train``).
BF16_RUNS = tuple(run.replace("float32", "bfloat16-rounded parameters and inputs", 1) for run in FLOAT32_RUNS)

#: Checks train on a 4-batch dataset: numerics are the same, four caption lengths (not 16)
#: keep static-graph compiles few, and the loss falls fast.
CHECK_OVERRIDES = ["num_batches=4"]
#: Workloads checked on smaller shapes than their defaults (the numerics are the same), so each
#: adapter's extra check time stays a few seconds: the transformer at width 16, sequences of 4..12.
CHECK_SIZES = {
    "transformer": [
        "vocab=32", "width=16", "heads=2", "layers=2", "topics=4", "batch_size=4",
        "min_len=4", "max_len=12", "buckets=8,12", "attention=naive",
    ],
}  # fmt: skip
#: Further variants checked beside each loop strategy's: the fused attention kernel once, padded
#: (one compile: its maths is the naive one's, which every strategy checks; static graphs
#: compile each variant's shapes anew, and torch.compile takes seconds per shape).
CHECK_EXTRA = {"transformer": [("attention=fused", "strategy=padded")]}

Variant = tuple[str, tuple[str, ...]]


def all_variants(workloads: list[str] | None = None) -> list[Variant]:
    """Every workload, each loop strategy where the workload has them, and its CHECK_EXTRA; then
    the bf16 variants of the chosen BF16_WORKLOADS."""
    chosen = workloads or list(WORKLOADS)
    out = []
    for w in chosen:
        base = [*CHECK_OVERRIDES, *CHECK_SIZES.get(w, [])]
        out += [(w, tuple(o)) for o in variants(w, base, list(STRATEGIES))]
        for extra in CHECK_EXTRA.get(w, []):
            fields = {e.split("=")[0] for e in extra}
            out.append((w, (*(o for o in base if o.split("=")[0] not in fields), *extra)))
    for w in BF16_WORKLOADS:
        if w in chosen:
            out.append((w, (*CHECK_OVERRIDES, *CHECK_SIZES.get(w, []), *BF16_OVERRIDES, f"{PRECISION}bf16")))
    return out


def precision_of(variant: Variant) -> str:
    """The precision a variant checks: ``fp32`` unless its overrides name another."""
    return next((o.removeprefix(PRECISION) for o in variant[1] if o.startswith(PRECISION)), "fp32")


def spec_of(variant: Variant) -> Workload:
    return override(get_workload(variant[0]), [o for o in variant[1] if not o.startswith(PRECISION)])


def variant_id(variant: Variant) -> str:
    workload, overrides = variant
    fixed = [*CHECK_OVERRIDES, *CHECK_SIZES.get(workload, []), *BF16_OVERRIDES]
    return "-".join([workload, *(o.split("=")[1] for o in overrides if o not in fixed)])


def check_steps(spec: Workload, precision: str = "fp32") -> int:
    """Training steps a check runs: enough for the loss to fall clearly on the learnable data
    (on 4 batches the caption decoder drops from 6.8 to 4.4 in 20 steps, the convnet from 2.32
    to 2.13 in 30). A padding strategy only runs the compared steps: held to the exact
    strategy's reference on every batch, it trains as the exact strategy does, whose check
    covers the falling loss (and eager adapters step these decoders slowly). A bf16 variant
    likewise runs only the compared steps: its float32 twin covers the falling loss."""
    if not falls_checked(spec, precision):
        return SNAPSHOT + 1
    if spec.family in ("rnn-caption", "transformer"):
        return 20
    return 30


def falls_checked(spec: Workload, precision: str = "fp32") -> bool:
    """Whether the "loss falls" check applies: not to padding strategies nor bf16 variants (see
    check_steps)."""
    return getattr(spec, "strategy", "exact") == "exact" and precision != "bf16"


def is_training(spec: Workload) -> bool:
    return getattr(spec, "task", "train") == "train"


def _exact(spec: Workload) -> Workload:
    """Every loop strategy is held to the exact strategy's reference: padding may change
    cost, never results. The attention kernel changes neither: one reference for both."""
    if getattr(spec, "strategy", "exact") != "exact":
        spec = dataclasses.replace(spec, strategy="exact")
    if getattr(spec, "attention", "naive") != "naive":
        spec = dataclasses.replace(spec, attention="naive")
    return spec


def step_error(got: np.ndarray, want: np.ndarray) -> float:
    """How much more (or less) than the reference step a tensor moved: the component of
    ``got - want`` along ``want``, relative to ``want`` (<(got - want), want> / ||want||^2).
    A learning rate off by 0.4% reads 0.004; rounding noise and a kink, uncorrelated with the
    step, average out."""
    den = float(np.dot(want.ravel(), want.ravel()))
    num = float(np.dot((got - want).ravel(), want.ravel()))
    if den == 0.0:
        return 0.0 if num == 0.0 else float("inf")
    return abs(num) / den


def relative_error(got: np.ndarray, want: np.ndarray) -> float:
    """||got - want|| / ||want||; inf where want is zero and got is not; NaN if got has a NaN."""
    num = float(np.linalg.norm(got - want))
    den = float(np.linalg.norm(want))
    if den == 0.0:
        return 0.0 if num == 0.0 else float("inf")
    return num / den


@dataclass(frozen=True)
class Shadow:
    """Per-step errors of a trajectory against float64 shadow steps from its own parameters."""

    loss_errors: np.ndarray
    """Relative error of the loss at each step."""
    update_errors: dict[str, float]
    """Per tensor, the largest relative L2 error of an update over the steps (NaN-propagating)."""
    step_error: float
    """The largest step-size error (step_error) of the whole model's update over the steps."""


def shadow(spec: Workload, losses: np.ndarray, trajectory: list[Params]) -> Shadow:
    """Compare ``trajectory`` (parameters before the first and after each update) and the
    ``losses`` taken at its points with float64 shadow steps; see the module docstring."""
    spec = _exact(spec)
    data = spec.batches()
    steps = len(trajectory) - 1
    with threadpool_limits(1, "blas"):  # deterministic sums, and no spinning BLAS threads
        p = {k: v.astype(np.float64) for k, v in trajectory[0].items()}
        opt = optim.make(spec.optimizer, spec.learning_rate, p)
        loss_errors, update_errors, step_errors = [], {k: [] for k in p}, []
        for t in range(steps):
            p = {k: v.astype(np.float64) for k, v in trajectory[t].items()}
            did = {k: trajectory[t + 1][k].astype(np.float64) - p[k] for k in p}
            loss, want, opt = _shadow_step(spec, p, data[t % len(data)], opt, did)
            loss_errors.append(abs(float(losses[t]) - loss) / abs(loss))
            for k in p:
                update_errors[k].append(relative_error(did[k], want[k]))
            step_errors.append(step_error(_flat(did), _flat(want)))
    return Shadow(
        np.asarray(loss_errors),
        {k: float(np.max(v)) for k, v in update_errors.items()},
        float(np.max(step_errors)),
    )


def _shadow_step(spec: Workload, p: Params, batch: Batch, opt: Any, did: Params) -> tuple[float, Params, Any]:
    """The float64 reference's step from ``p``: (loss, update, optimiser state after it).

    Where that step misses the adapter's (``did``) by more than FLOOR in some tensor, the step
    is also taken with the ReLU inputs within RELU_TIE of zero counted on the other side, each
    way; the one nearest the adapter's wins, and its gradient is what the optimiser state
    carries on."""
    loss, grads = spec.reference_loss_and_grads(p, batch)
    tried = []
    for tie in (0.0, RELU_TIE, -RELU_TIE) if spec.relu else (0.0,):
        if tie:
            if min(error for error, *_ in tried) <= FLOOR:
                break
            grads = spec.reference_loss_and_grads(p, batch, relu_tie=tie)[1]
        after = copy.deepcopy(opt)
        stepped = {k: v.copy() for k, v in p.items()}
        after.apply(stepped, grads)
        want = {k: stepped[k] - p[k] for k in p}
        error = max(relative_error(did[k], want[k]) for k in p)
        tried.append((np.inf if np.isnan(error) else error, len(tried), want, after))
    _, _, want, after = min(tried, key=lambda one: one[:2])
    return loss, want, after


def _flat(params: Params) -> np.ndarray:
    return np.concatenate([v.ravel() for v in params.values()])


def _ulp(arrays: dict[str, np.ndarray], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Every non-integral float32 array moved by one ulp up or down at random, element-wise
    (masks and other 0/1 arrays stay as they are)."""
    out = {}
    for k, v in arrays.items():
        if v.dtype == np.float32 and not np.array_equal(v, np.round(v)):
            up = rng.random(v.shape) < 0.5
            v = np.where(up, np.nextafter(v, np.float32(np.inf)), np.nextafter(v, np.float32(-np.inf)))
        out[k] = v
    return out


def _permuted(batch: Batch, rng: np.random.Generator) -> Batch:
    rows = len(next(iter(batch.values())))
    order = rng.permutation(rows)
    return {k: v[order] if v.ndim and len(v) == rows else v for k, v in batch.items()}


def float32_runs(spec: Workload, precision: str = "fp32") -> list[tuple[np.ndarray, list[Params]]]:
    """The reference trained in float32 under each of FLOAT32_RUNS: (losses, trajectory); with
    ``precision="bf16"``, in bfloat16 compute under each of BF16_RUNS (``bf16_train``)."""
    spec = _exact(spec)
    rng = np.random.default_rng([spec.seed, 4])
    p0, data = spec.init_params(), spec.batches()
    permuted = [_permuted(b, rng) for b in data]
    setups = [(p0, data), (p0, permuted), (_ulp(p0, rng), data), (_ulp(p0, rng), [_ulp(b, rng) for b in permuted])]
    runs = []
    with threadpool_limits(1, "blas"):
        for params, batches in setups:
            if precision == "bf16":
                losses, trajectory = bf16_train(spec, params, SNAPSHOT, batches)
            else:
                losses, trajectory = spec.reference_train(params, SNAPSHOT, np.float32, data=batches)
            runs.append((np.asarray(losses), trajectory))
    return runs


def bf16_train(spec: Workload, params: Params, steps: int, data: list[Batch]) -> tuple[list[float], list[Params]]:
    """The reference trained as ``--precision bf16`` trains: float32 master parameters and
    optimiser state; each step's forward and backward from the parameters and float inputs
    rounded to bfloat16 (where torch.autocast and the explicit casts round them), in float32
    arithmetic. Losses and snapshots as ``Workload.reference_train``."""
    p = {k: v.astype(np.float32) for k, v in params.items()}
    opt = optim.make(spec.optimizer, spec.learning_rate, p)
    losses, snapshots = [], [{k: v.copy() for k, v in p.items()}]
    for step in range(steps):
        batch = {k: _bf16_rounded(v) for k, v in data[step % len(data)].items()}
        loss, grads = spec.reference_loss_and_grads({k: _bf16_rounded(v) for k, v in p.items()}, batch)
        losses.append(float(loss))
        opt.apply(p, grads)
        snapshots.append({k: v.copy() for k, v in p.items()})
    return losses, snapshots


def _bf16_rounded(a: np.ndarray) -> np.ndarray:
    """A float32 array rounded to the nearest bfloat16 (ties to even), kept as float32."""
    return a.astype(bfloat16).astype(np.float32) if a.dtype == np.float32 else a


@dataclass(frozen=True)
class Allowance:
    loss: float
    """Largest relative loss error allowed at any of the first SNAPSHOT steps."""
    updates: dict[str, float]
    """Per tensor, the largest relative L2 update error allowed."""
    step: float
    """The largest step-size error of the whole model's update allowed."""


def allowance(spec: Workload, precision: str = "fp32") -> Allowance:
    """FACTOR x the float32 sensitivity of the reference (module docstring), at least FLOOR;
    every loop strategy shares the exact one's. ``precision="bf16"``: the bfloat16 sensitivity
    (BF16_RUNS) instead; fp32 and tf32 share the float32 one."""
    return _allowance(_exact(spec), "bf16" if precision == "bf16" else "fp32")


@functools.cache
def _allowance(spec: Workload, precision: str = "fp32") -> Allowance:
    measured = [shadow(spec, losses, trajectory) for losses, trajectory in float32_runs(spec, precision)]
    loss = max(float(np.max(m.loss_errors)) for m in measured)
    updates = {k: max(m.update_errors[k] for m in measured) for k in measured[0].update_errors}
    step = max(m.step_error for m in measured)
    return Allowance(
        max(FLOOR, FACTOR * loss),
        {k: max(FLOOR, FACTOR * v) for k, v in updates.items()},
        max(FLOOR, FACTOR * step),
    )


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


def _decode_checks(spec: Workload, result: dict[str, np.ndarray]) -> list[Check]:
    params = spec.init_params()
    want = np.stack([spec.reference_decode(params, b["features"]) for b in spec.batches()])
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
    if "step_compiles" in result:
        checks.append(compile_check(spec, np.asarray(result["step_compiles"])))
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


def step_shapes(spec: Workload, steps: int) -> list[tuple]:
    """The input shapes (and dtypes) of each training step a check runs, in order."""
    data = spec.batches()
    keys = [tuple(sorted((k, v.shape, v.dtype.str) for k, v in b.items())) for b in data]
    return [keys[t % len(keys)] for t in range(steps)]


def compile_check(spec: Workload, step_compiles: np.ndarray) -> Check:
    """A static graph compiles only in the first step of each distinct input shape, never
    later: in step 1 alone for mlp, cnn and the padded and graph-loop caption strategies, at each
    new caption length under exact (4 on the check's batches), at each new bucket under bucketed
    (3). ``step_compiles`` holds the (traces, compiles) accrued in each step; a first step may
    hold several (eager ops compiled once, a forward and a backward graph)."""
    shapes = step_shapes(spec, len(step_compiles))
    seen: set[tuple] = set()
    again: list[int] = []  # steps that compiled for a shape compiled before
    for t, (key, counts) in enumerate(zip(shapes, step_compiles, strict=True)):
        if key in seen and counts.sum() > 0:
            again.append(t + 1)
        seen.add(key)
    traces, compiles = (int(n) for n in step_compiles.sum(axis=0))
    first = sorted({t + 1 for t, key in enumerate(shapes) if shapes.index(key) == t})
    counted = f"{traces} traces, {compiles} compiles over {len(step_compiles)} steps"
    plural = "s" if len(seen) > 1 else ""
    distinct = f"{len(seen)} distinct input shape{plural} (first at step{plural} {', '.join(map(str, first))})"
    if not again:
        detail = f"{counted}, none after the first step of each of {distinct}"
        return Check("compiles once per input shape", True, detail)
    where = ", ".join(map(str, again[:5])) + (" ..." if len(again) > 5 else "")
    detail = (
        f"{counted} with {distinct}: step{'s' if len(again) > 1 else ''} {where} compiled again for a shape "
        f"already compiled. Likely cause: {RECOMPILE_CAUSES}"
    )
    return Check("compiles once per input shape", False, detail)


def run_adapter(
    info: AdapterInfo, chosen: list[Variant], timeout_s: float = 1800, device: str = "cpu"
) -> dict[Variant, dict]:
    """What the adapter computes for each variant on ``device``, all in one worker process.
    Variants the adapter declines come back as {"skipped": reason}, a GPU it cannot use as
    {"device_failed": reason}; a crash raises RuntimeError."""
    results: dict[Variant, dict] = {}
    cells = []
    for variant in chosen:
        adapter = info.cls()
        reason = adapter.supports(spec_of(variant)) or adapter.precision_reason(precision_of(variant))
        if reason:
            results[variant] = {"skipped": reason}
        else:
            steps = check_steps(spec_of(variant), precision_of(variant))
            cell = check_cell(info, variant, device) | {"check_steps": steps}
            cells.append((variant, cell))
    if not cells:
        return results
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        extra = ["--snapshot", str(SNAPSHOT)]
        batch = {"cells": [cell for _, cell in cells]}
        proc = runner.run_worker(info, batch, "check", out, timeout_s, extra)
        if proc.returncode != 0:
            raise RuntimeError(f"{info.name} worker failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
        for i, (variant, _) in enumerate(cells):
            with np.load(out / f"{i}.npz") as data:
                results[variant] = {k: data[k] for k in data.files}
                for key in ("skipped", "device_failed"):
                    if key in results[variant]:
                        results[variant] = {key: str(results[variant][key])}
    return results


def check_cell(info: AdapterInfo, variant: Variant, device: str = "cpu") -> dict[str, Any]:
    return {
        "run_id": "check",
        "adapter": info.name,
        "framework": info.framework,
        "graph": info.graph,
        "workload": variant[0],
        "overrides": [o for o in variant[1] if not o.startswith(PRECISION)],
        "precision": precision_of(variant),
        "device_requested": device,
        "profile": "quick",
        "threads": 2,
    }


def report_lines(info: AdapterInfo, results: dict[Variant, dict]) -> tuple[list[str], int]:
    """Plain-word lines for ``harness check`` and the number of failed checks."""
    lines, failed = [], 0
    for variant, result in results.items():
        label = f"{info.name} / {variant_id(variant)}"
        if "skipped" in result:
            lines.append(f"SKIP  {label}: {result['skipped']}")
            continue
        for check in evaluate(spec_of(variant), result):
            failed += not check.passed
            lines.append(f"{'PASS' if check.passed else 'FAIL'}  {label}: {check.name}: {check.detail}")
    return lines, failed
