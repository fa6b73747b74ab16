"""The derived tolerances of harness.checks.conformance pass float32 arithmetic and fail wrong models.

Each mutation is a model that is slightly not the one the spec describes, trained in float32
by the NumPy reference as an adapter would train it: the conformance checks must reject every
one of them, while the unmutated float32 runs (the same ones the allowances are derived from,
so this is a consistency check) pass. ``python -m tests.test_tolerance_mutations`` prints the
table of each mutation's error against its allowance.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator

import numpy as np
import pytest

from harness.checks import conformance
from workloads import Params, Workload, optim, transformer
from workloads.optim import ADAM_BETA1, ADAM_BETA2, ADAM_EPS

pytestmark = pytest.mark.slow  # seconds of NumPy reference training per test

#: One training variant per workload family and optimiser (strategies share the exact one).
WORKLOADS = ["mlp", "mlp-wide", "cnn", "rnn-caption", "transformer"]
PARITY = ("step-0 loss", "losses of the first", "parameter updates", "initial parameters")


class EpsilonBeforeBiasCorrection(optim.Adam):
    """Adam as Keras writes it: eps added to sqrt(v) before the bias correction is applied."""

    def apply(self, p: Params, g: Params) -> None:
        self.t += 1
        lr_t = self.lr * np.sqrt(1 - ADAM_BETA2**self.t) / (1 - ADAM_BETA1**self.t)
        for k in p:
            self.m[k] = ADAM_BETA1 * self.m[k] + (1 - ADAM_BETA1) * g[k]
            self.v[k] = ADAM_BETA2 * self.v[k] + (1 - ADAM_BETA2) * g[k] ** 2
            p[k] -= lr_t * self.m[k] / (np.sqrt(self.v[k]) + ADAM_EPS)


class Frozen:
    """The spec's optimiser, except that one tensor never receives its gradient."""

    def __init__(self, inner, key: str) -> None:
        self.inner, self.key = inner, key

    def apply(self, p: Params, g: Params) -> None:
        self.inner.apply(p, {**g, self.key: np.zeros_like(g[self.key])})


def _swap_gates(p: Params, h: int) -> Params:
    """Exchange the r and z column blocks of every GRU tensor (an involution)."""
    out = dict(p)
    for k in ("gru/kernel", "gru/recurrent_kernel", "gru/bias", "gru/recurrent_bias"):
        v = p[k].copy()
        v[..., : 2 * h] = np.concatenate([p[k][..., h : 2 * h], p[k][..., :h]], axis=-1)
        out[k] = v
    return out


def _flip_kernels(p: Params, h: int = 0) -> Params:
    return {k: v[::-1, ::-1].copy() if k.startswith("conv") and k.endswith("kernel") else v for k, v in p.items()}


class DecayEverything(optim.AdamW):
    """AdamW that also decays biases and LayerNorm parameters (one parameter group for all)."""

    def apply(self, p: Params, g: Params) -> None:
        for k in p:
            p[k] -= self.lr * self.weight_decay * p[k]
        optim.Adam.apply(self, p, g)


@contextlib.contextmanager
def _patched(name: str, value) -> Iterator[None]:
    """A constant or function of workloads.transformer replaced while a mutated model trains."""
    saved = getattr(transformer, name)
    setattr(transformer, name, value)
    try:
        yield
    finally:
        setattr(transformer, name, saved)


def _sigmoid_gelu(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """GELU's other common approximation, x sigmoid(1.702 x), and its derivative."""
    s = 1 / (1 + np.exp(-1.702 * x))
    return x * s, s + 1.702 * x * s * (1 - s)


def _swap_query_key(p: Params) -> Params:
    out = dict(p)
    for k in p:
        if "/attn/query/" in k:
            other = k.replace("/query/", "/key/")
            out[k], out[other] = p[other], p[k]
    return out


def _float32_run(spec: Workload, optimizer=None, transform: Callable[[Params], Params] | None = None) -> dict:
    """A check result as a float32 adapter with the given fault would report it. ``transform``
    models a layout bug: the adapter loads transform(canonical) and reports transform(its own)."""
    p0 = spec.init_params()
    start = transform(p0) if transform else p0
    opt = optimizer(start) if optimizer else None
    losses, trajectory = spec.reference_train(start, conformance.SNAPSHOT, np.float32, opt)
    if transform:
        trajectory = [transform(p) for p in trajectory]
    return conformance.as_result(losses, trajectory)


def mutations(spec: Workload) -> dict[str, dict]:
    """Each mutation that applies to ``spec``, as a check result."""
    adam = spec.optimizer == "adam"
    first_bias = next(k for k in spec.init_params() if k.endswith("bias"))
    out = {
        "learning rate x1.004": _float32_run(dataclasses.replace(spec, learning_rate=spec.learning_rate * 1.004)),
        f"{first_bias} never updated": _float32_run(
            spec, lambda p: Frozen(optim.make(spec.optimizer, spec.learning_rate, p), first_bias)
        ),
    }
    if adam:
        out["Adam eps before bias correction"] = _float32_run(
            spec, lambda p: EpsilonBeforeBiasCorrection(spec.learning_rate, p)
        )
        out["Adam beta2 0.99"] = _float32_run(spec, lambda p: optim.Adam(spec.learning_rate, p, beta2=0.99))
    if spec.family == "cnn":
        out["conv kernels flipped in H and W"] = _float32_run(spec, transform=_flip_kernels)
    if spec.family == "rnn-caption":
        out["GRU gates r and z swapped"] = _float32_run(spec, transform=lambda p: _swap_gates(p, spec.hidden))
    if spec.optimizer == "adamw":
        out["AdamW decaying biases and norms too"] = _float32_run(
            spec, lambda p: DecayEverything(spec.learning_rate, p)
        )
        out["Adam, no weight decay"] = _float32_run(spec, lambda p: optim.Adam(spec.learning_rate, p))
    if spec.family == "transformer":
        with _patched("LN_EPS", 1e-3):
            out["LayerNorm epsilon 1e-3 (Keras's default)"] = _float32_run(spec)
        with _patched("gelu", _sigmoid_gelu):
            out["GELU as x sigmoid(1.702 x)"] = _float32_run(spec)
        out["query and key projections swapped"] = _float32_run(spec, transform=_swap_query_key)
    return out


def parity(spec: Workload, result: dict) -> list[conformance.Check]:
    return [c for c in conformance.evaluate(spec, result) if c.name.startswith(PARITY)]


def _spec(workload: str) -> Workload:
    return conformance.spec_of((workload, tuple(conformance.check_base(workload))))


@pytest.mark.parametrize("workload", WORKLOADS)
def test_a_plain_float32_run_of_the_reference_passes(workload):
    """The unmutated model in float32 (one of the runs the allowances come from) passes every
    parity check, the initial parameters' included."""
    spec = _spec(workload)
    (losses, trajectory), *_ = conformance.float32_runs(spec)
    failed = [f"{c.name}: {c.detail}" for c in parity(spec, conformance.as_result(losses, trajectory)) if not c.passed]
    assert not failed, failed


@pytest.mark.parametrize("workload", WORKLOADS)
def test_every_mutation_fails_a_parity_check(workload):
    spec = _spec(workload)
    for name, result in mutations(spec).items():
        verdicts = parity(spec, result)
        assert not all(c.passed for c in verdicts), f"{workload}: mutation '{name}' passed every check"


def test_a_nan_in_any_tensor_fails_the_update_check():
    spec = _spec("mlp")
    (losses, trajectory), *_ = conformance.float32_runs(spec)
    last = trajectory[-1]
    key = list(last)[-1]  # not the first tensor: a max() keyed on the errors would never see it
    last[key] = last[key].copy()
    last[key][0] = np.nan
    result = conformance.as_result(losses, trajectory)
    (update,) = [c for c in parity(spec, result) if c.name.startswith("parameter updates")]
    assert not update.passed and key in update.detail


def test_a_nan_loss_fails_the_loss_checks():
    spec = _spec("mlp")
    (losses, trajectory), *_ = conformance.float32_runs(spec)
    losses = losses.copy()
    losses[3] = np.nan
    result = conformance.as_result(losses, trajectory)
    verdicts = {c.name: c.passed for c in conformance.evaluate(spec, result)}
    assert verdicts["step-0 loss"] and not verdicts[f"losses of the first {conformance.SNAPSHOT} steps"]


def table() -> str:
    """Markdown: every mutation's worst error against its allowance, per workload."""
    rows = [
        "| workload | mutation | worst check | error | allowed | error / allowed | whole-model step error / allowed |",
        "|---|---|---|---|---|---|---|",
    ]
    for workload in WORKLOADS:
        spec = _spec(workload)
        allowed = conformance.allowance(spec)
        for name, result in mutations(spec).items():
            found = conformance.shadow(spec, result["losses"], conformance.trajectory_of(result))
            loss = float(np.max(found.loss_errors))
            ratios = {k: found.update_errors[k] / allowed.updates[k] for k in allowed.updates}
            key = conformance.worst(ratios)
            what, err, tol = f"update of {key}", found.update_errors[key], allowed.updates[key]
            if loss / allowed.loss > ratios[key]:
                what, err, tol = "loss", loss, allowed.loss
            step = f"{found.step_error:.1e} / {allowed.step:.1e}"
            rows.append(f"| {workload} | {name} | {what} | {err:.1e} | {tol:.1e} | {err / tol:.0f} | {step} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(table())
