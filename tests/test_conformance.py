"""Every discovered adapter x every workload variant must compute the workload's reference.

A new adapter module is picked up with no edit here. The checks live in harness.conformance
(shared with ``python -m harness check``); each test asserts one of them. For the caption
decoder every loop strategy is held to the reference of the ``exact`` strategy: padding and
masking may change the cost, never the result.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from harness import conformance
from tests.conftest import INFER_VARIANTS, TRAIN_VARIANTS

training_variants = pytest.mark.parametrize("variant", TRAIN_VARIANTS, ids=conformance.variant_id, indirect=True)


def check(spec, trained, name: str) -> None:
    (found,) = [c for c in conformance.evaluate(spec, trained) if c.name.startswith(name)]
    assert found.passed, f"{found.name}: {found.detail}"


@training_variants
def test_step0_loss_matches_numpy_reference(spec, trained):
    check(spec, trained, "step-0 loss")


@training_variants
def test_first_losses_follow_reference(spec, trained):
    check(spec, trained, "losses of the first")


@training_variants
def test_params_after_updates_match_reference(spec, trained):
    check(spec, trained, "parameters after")


@training_variants
def test_loss_falls_on_learnable_data(spec, trained):
    assert len(trained["losses"]) == conformance.check_steps(spec)
    check(spec, trained, "loss falls")


@pytest.mark.parametrize("variant", INFER_VARIANTS, ids=conformance.variant_id, indirect=True)
def test_greedy_decode_matches_reference(spec, trained):
    check(spec, trained, "greedy decode")


@training_variants
def test_update_tolerance_catches_drift(spec):
    """The parameter check must fail for a model that is slightly not the same (lr off by 1%)."""
    p0, _, ref_params = conformance.reference(spec)
    drifted = dataclasses.replace(spec, learning_rate=spec.learning_rate * 1.01)
    if hasattr(drifted, "strategy"):
        drifted = dataclasses.replace(drifted, strategy="exact")
    _, wrong = drifted.reference_train(p0, conformance.SNAPSHOT)
    assert max(conformance.update_errors(p0, wrong, ref_params).values()) > conformance.update_rtol(spec)


def test_evaluate_reports_a_wrong_adapter_in_plain_words():
    """A result that is off (here: the reference's own losses scaled by 1.01) fails by name."""
    spec = conformance.spec_of(("mlp", ()))
    p0, losses, params = conformance.reference(spec)
    bogus = {"losses": np.asarray(losses * 10) * 1.01, **{f"param:{k}": v for k, v in params.items()}}
    verdicts = {c.name: c for c in conformance.evaluate(spec, bogus)}
    assert not verdicts["step-0 loss"].passed and "relative error 1.0e-02" in verdicts["step-0 loss"].detail
    assert verdicts["parameters after 5 steps"].passed
