"""How far an adapter may be from the float64 reference: shadow steps and derived allowances.

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
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
from ml_dtypes import bfloat16
from threadpoolctl import threadpool_limits

from harness.checks.conformance.variants import SNAPSHOT
from workloads import Batch, Params, Workload, optim
from workloads.arrays import ulp_moved

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

#: The bf16 runs of the reference whose spread sets the bf16 allowances: FLOAT32_RUNS, each with
#: the parameters and float inputs rounded to bfloat16 at every step (``bf16_train``).
BF16_RUNS = tuple(run.replace("float32", "bfloat16-rounded parameters and inputs", 1) for run in FLOAT32_RUNS)


def _exact(spec: Workload) -> Workload:
    """Every loop strategy is held to the exact strategy's reference: padding may change
    cost, never results. The attention kernel changes neither: one reference for both."""
    if spec.strategy != "exact":
        spec = dataclasses.replace(cast(Any, spec), strategy="exact")  # a workload with a strategy field
    if spec.attention != "naive":
        spec = dataclasses.replace(cast(Any, spec), attention="naive")  # the transformer's field
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
        update_errors: dict[str, list[float]] = {k: [] for k in p}
        loss_errors, step_errors = [], []
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
    tried: list[tuple[float, int, Params, Any]] = []  # (error, order, update, optimiser state)
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
    moved = ulp_moved(p0, rng)  # drawn in this order: the allowances' float32 runs stay as they were
    setups = [(p0, data), (p0, permuted), (moved, data), (ulp_moved(p0, rng), [ulp_moved(b, rng) for b in permuted])]
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
