"""Every discovered adapter x every workload variant must compute the workload's reference.

A new adapter module is picked up with no edit here. The checks live in harness.checks.conformance
(shared with ``python -m harness check``); each test asserts one of them. For the caption
decoder every loop strategy is held to the reference of the ``exact`` strategy: padding and
masking may change the cost, never the result.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from harness.checks import conformance
from tests.conftest import INFER_VARIANTS, TRAIN_VARIANTS

training_variants = pytest.mark.parametrize("variant", TRAIN_VARIANTS, ids=conformance.variant_id, indirect=True)


_verdicts: dict[int, list[conformance.Check]] = {}


def check(spec, trained, name: str) -> None:
    """Assert one check; every check of a result is evaluated once (the shadow steps cost)."""
    if id(trained) not in _verdicts:
        _verdicts[id(trained)] = conformance.evaluate(spec, trained)
    (found,) = [c for c in _verdicts[id(trained)] if c.name.startswith(name)]
    assert found.passed, f"{found.name}: {found.detail}"


@training_variants
def test_step0_loss_matches_numpy_reference(spec, trained):
    check(spec, trained, "step-0 loss")


@training_variants
def test_first_losses_follow_reference(spec, trained):
    check(spec, trained, "losses of the first")


@training_variants
def test_params_after_updates_match_reference(spec, trained):
    check(spec, trained, "parameter updates")


@training_variants
def test_initial_parameters_are_the_specs(spec, trained):
    check(spec, trained, "initial parameters")


@training_variants
def test_loss_falls_on_learnable_data(spec, trained):
    precision = str(trained["precision"])
    assert len(trained["losses"]) == conformance.check_steps(spec, precision)
    if not conformance.falls_checked(spec, precision):
        pytest.skip("a padding strategy or a bf16 variant: held to the reference step by step; its twin covers it")
    check(spec, trained, "loss falls")


@training_variants
def test_static_graph_compiles_once_per_input_shape(spec, trained, adapter_name):
    """A static-graph adapter compiles in the first step of each distinct input shape only:
    step 1 alone for a fixed-shape workload, never again for a shape it has compiled."""
    if "step_compiles" not in trained:
        pytest.skip(f"{adapter_name}: a dynamic graph, or an adapter that counts no compiles")
    check(spec, trained, "compiles once per input shape")


#: The framework's own optimiser kernel each built-in adapter runs (docs/adapters-and-frameworks.md).
OWN_KERNELS = {
    "adam": {
        "torch-eager": "torch.optim.Adam (fused)",
        "torch-compile": "torch.optim.Adam (fused)",
        "tf-function": "ResourceApplyAdam (fused)",
        "tf-eager": "ResourceApplyAdam (fused)",
        "jax-jit": "optax.adam (inside the jitted step",
        "jax-eager": "optax.adam (op by op)",
        "keras-jax": "keras.optimizers.Adam, Keras's own update",
        "keras-torch": "keras.optimizers.Adam, Keras's own update",
        "keras-tf": "keras.optimizers.Adam, Keras's own update",
        "flax-nnx": "optax.adam via nnx.Optimizer",
        "flax-nnx-cached": "optax.adam via nnx.Optimizer",
    },
    "adamw": {
        "torch-eager": "torch.optim.AdamW (fused)",
        "torch-compile": "torch.optim.AdamW (fused)",
        "jax-jit": "optax.adamw (inside the jitted step",
        "jax-eager": "optax.adamw (op by op)",
        "flax-nnx": "optax.adamw via nnx.Optimizer",
        "flax-nnx-cached": "optax.adamw via nnx.Optimizer",
        "tf-function": "ResourceApplyAdam (fused)",
        "tf-eager": "ResourceApplyAdam (fused)",
        "keras-jax": "keras.optimizers.AdamW, Keras's own update",
        "keras-torch": "keras.optimizers.AdamW, Keras's own update",
        "keras-tf": "keras.optimizers.AdamW, Keras's own update",
    },
    "sgd": {
        "torch-eager": "torch.optim.SGD (foreach)",
        "tf-function": "ResourceApplyGradientDescent (fused)",
        "jax-jit": "optax.sgd",
        "keras-jax": "keras.optimizers.SGD",
        "keras-tf": "keras.optimizers.SGD",
        "flax-nnx": "optax.sgd via nnx.Optimizer",
    },
}


@training_variants
def test_the_record_names_the_optimiser_kernel_that_ran(spec, trained, adapter_name):
    """Every adapter names its optimiser kernel; the built-in ones run their framework's own,
    which still passes the parity checks above (epsilon placement corrected by its equivalent)."""
    settings = json.loads(str(trained["settings"]))
    assert settings.get("optimizer_kernel"), f"{adapter_name}.settings() names no optimizer_kernel"
    expected = OWN_KERNELS[spec.optimizer].get(adapter_name)
    if expected is not None:
        assert settings["optimizer_kernel"].startswith(expected), settings["optimizer_kernel"]


BF16_VARIANTS = [v for v in TRAIN_VARIANTS if conformance.precision_of(v) == "bf16"]


@pytest.mark.parametrize("variant", BF16_VARIANTS, ids=conformance.variant_id, indirect=True)
def test_the_record_names_the_mixed_precision_mechanism_that_ran(spec, trained, adapter_name):
    """A bf16 variant (harness.checks.conformance.BF16_WORKLOADS) ran bf16 compute through a mechanism
    the adapter names; the checks above hold it to the bf16 allowance."""
    settings = json.loads(str(trained["settings"]))
    assert str(trained["precision"]) == "bf16"
    assert settings.get("mixed_precision") not in (None, "off"), f"{adapter_name} names no bf16 mechanism"


@pytest.mark.parametrize("variant", INFER_VARIANTS, ids=conformance.variant_id, indirect=True)
def test_greedy_decode_matches_reference(spec, trained):
    check(spec, trained, "greedy decode")


@pytest.mark.slow
def test_evaluate_reports_a_wrong_adapter_in_plain_words():
    """A result that is off (float32 reference losses scaled by 1.01) fails by name."""
    spec = conformance.spec_of(("mlp", tuple(conformance.CHECK_OVERRIDES)))
    (losses, trajectory), *_ = conformance.float32_runs(spec)
    verdicts = {c.name: c for c in conformance.evaluate(spec, conformance.as_result(losses * 1.01, trajectory))}
    assert not verdicts["step-0 loss"].passed and "relative error 1.0e-02" in verdicts["step-0 loss"].detail
    assert verdicts["parameter updates of the first 5 steps"].passed
    assert verdicts["initial parameters"].passed


def test_compile_check_fails_a_recompile_with_the_counts_and_the_cause():
    """The newcomer's Flax adapter: "1 traces, 2 compiles" on a fixed-shape workload (step 2
    compiled again for its own committed outputs) fails; compiles at new caption lengths pass."""
    mlp = conformance.spec_of(("mlp", tuple(conformance.CHECK_OVERRIDES)))
    recompiled = np.zeros((30, 2), dtype=np.int64)
    recompiled[0], recompiled[1] = (1, 1), (0, 1)
    found = conformance.compile_check(mlp, recompiled)
    assert not found.passed
    assert "1 traces, 2 compiles over 30 steps" in found.detail and "step 2 compiled again" in found.detail
    assert "uncommitted" in found.detail and "kit.jax_place" in found.detail
    exact = conformance.spec_of(("rnn-caption", (*conformance.check_base("rnn-caption"), "strategy=exact")))
    firsts = np.zeros((20, 2), dtype=np.int64)
    firsts[:3] = 1  # three batches of three lengths: one compile each, at its first step
    assert conformance.compile_check(exact, firsts).passed
    firsts[3] = (0, 1)  # step 4 reruns step 1's length
    assert not conformance.compile_check(exact, firsts).passed


@pytest.mark.parametrize("workload", ["rnn-caption", "transformer"])
def test_bucketed_checks_pad_into_two_buckets_of_lengths_the_exact_checks_ran(workload):
    """conformance.CHECK_SIZES: a bucketed check spreads its batches over two buckets and pads
    some (bucketing is what it checks), to lengths its exact twin ran, so a static graph's
    compiler cache serves every bucketed step instead of a compile per new length. Fails if the
    workload's data changes: pick the buckets again from the lengths printed."""
    by_id = {conformance.variant_id(v): v for v in conformance.all_variants([workload])}

    def lengths(strategy: str) -> list[int]:
        return [batch["tokens"].shape[1] for batch in conformance.spec_of(by_id[f"{workload}-{strategy}"]).batches()]

    exact, bucketed = lengths("exact"), lengths("bucketed")
    assert set(bucketed) <= set(exact), f"exact lengths {exact}, bucketed {bucketed}"
    assert len(set(bucketed)) == 2 and any(b > e for b, e in zip(bucketed, exact, strict=True)), bucketed
