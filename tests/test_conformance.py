"""Every discovered adapter x every workload must compute the workload's reference numbers.

A new adapter module is picked up with no edit here. The reference is the workload's NumPy
float64 implementation; adapters run in float32, hence the stated tolerances.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from tests.conftest import CHECK_STEPS, SNAPSHOT
from workloads import get_workload

#: Relative tolerance on the step-0 loss (float32 forward pass vs float64 reference).
LOSS_RTOL = 1e-5
#: Relative L2 error allowed on each parameter tensor's total update after SNAPSHOT steps.
#: Adam normalises every element's step, so float32 noise in near-zero gradients moves
#: single elements by a visible fraction of the learning rate; SGD is far tighter.
UPDATE_RTOL = {"sgd": 1e-4, "adam": 5e-3}


@functools.cache
def reference(workload: str):
    spec = get_workload(workload)
    p0 = spec.init_params()
    losses, params = spec.reference_train(p0, SNAPSHOT)
    return spec, p0, losses, params


def update_errors(p0, got, want) -> dict[str, float]:
    """Per tensor: ||(got - p0) - (want - p0)|| / ||want - p0||."""
    return {
        k: float(np.linalg.norm(got[k].astype(np.float64) - want[k]) / np.linalg.norm(want[k] - p0[k])) for k in want
    }


def test_step0_loss_matches_numpy_reference(trained, workload_name):
    _, _, ref_losses, _ = reference(workload_name)
    np.testing.assert_allclose(trained["losses"][0], ref_losses[0], rtol=LOSS_RTOL)


def test_first_losses_follow_reference(trained, workload_name):
    _, _, ref_losses, _ = reference(workload_name)
    np.testing.assert_allclose(trained["losses"][:SNAPSHOT], ref_losses, rtol=1e-4)


def test_params_after_updates_match_reference(trained, workload_name):
    spec, p0, _, ref_params = reference(workload_name)
    got = {k.removeprefix("param:"): v for k, v in trained.items() if k.startswith("param:")}
    assert set(got) == set(ref_params), "adapter must export every canonical parameter"
    for k, v in got.items():
        assert v.shape == ref_params[k].shape, f"{k}: layout {v.shape}, canonical {ref_params[k].shape}"
    errors = update_errors(p0, got, ref_params)
    tol = UPDATE_RTOL[spec.optimizer]
    assert max(errors.values()) < tol, f"update drift beyond {tol}: {errors}"


def test_loss_falls_on_learnable_data(trained):
    losses = trained["losses"]
    assert len(losses) == CHECK_STEPS and np.all(np.isfinite(losses))
    assert losses[-5:].mean() < 0.7 * losses[:5].mean()


def test_update_tolerance_catches_drift(workload_name):
    """The parameter check must fail for a model that is slightly not the same (lr off by 1%)."""
    spec, p0, _, ref_params = reference(workload_name)
    drifted = dataclasses.replace(spec, learning_rate=spec.learning_rate * 1.01)
    _, wrong = drifted.reference_train(p0, SNAPSHOT)
    assert max(update_errors(p0, wrong, ref_params).values()) > UPDATE_RTOL[spec.optimizer]
