"""The framework-free workload specs: sizes from the seed articles, determinism, reference maths."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from workloads import CNN, MLP, STRATEGIES, WORKLOADS, RNNCaption, SpecError, Transformer, get_workload, optim, override
from workloads.mlp import mlp_loss_and_grads
from workloads.rnn import EOS, PAD, decoded_lengths
from workloads.transformer import STRATEGIES as TRANSFORMER_STRATEGIES


def test_parameter_counts_match_the_seed_articles():
    assert get_workload("mlp").param_count() == 266_610
    assert get_workload("mlp-wide").param_count() == 3_623_600


def test_init_and_data_are_deterministic_and_seeded():
    spec = MLP(name="t", input_shape=(4, 3), hidden=(5,), num_classes=3, num_batches=2, batch_size=8)
    a, b = spec.init_params(), spec.init_params()
    assert all(np.array_equal(a[k], b[k]) and a[k].dtype == np.float32 for k in a)
    x1, x2 = spec.batches(), spec.batches()
    assert all(np.array_equal(p["x"], q["x"]) and np.array_equal(p["y"], q["y"]) for p, q in zip(x1, x2, strict=True))
    other = dataclasses.replace(spec, seed=1)
    assert not np.array_equal(other.init_params()["dense0/kernel"], a["dense0/kernel"])
    assert not np.array_equal(other.batches()[0]["x"], x1[0]["x"])


def test_labels_use_every_class():
    spec = get_workload("mlp")
    labels = np.concatenate([b["y"] for b in spec.batches()])
    assert set(np.unique(labels)) == set(range(spec.num_classes))


def test_reference_gradients_match_finite_differences():
    spec = MLP(name="t", input_shape=(6,), hidden=(5, 4), num_classes=3, batch_size=7, num_batches=1)
    params = {k: v.astype(np.float64) for k, v in spec.init_params().items()}
    batch = spec.batches()[0]
    n_layers = len(spec.layer_sizes) - 1
    _, grads = mlp_loss_and_grads(params, batch, n_layers)
    eps = 1e-6
    for name, value in params.items():
        for idx in [(0,) * value.ndim, tuple(s - 1 for s in value.shape)]:
            plus = {k: v.copy() for k, v in params.items()}
            minus = {k: v.copy() for k, v in params.items()}
            plus[name][idx] += eps
            minus[name][idx] -= eps
            numeric = (mlp_loss_and_grads(plus, batch, n_layers)[0] - mlp_loss_and_grads(minus, batch, n_layers)[0]) / (
                2 * eps
            )
            assert grads[name][idx] == pytest.approx(numeric, rel=1e-5, abs=1e-8), (name, idx)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
@pytest.mark.slow
def test_reference_training_reduces_loss(optimizer):
    spec = dataclasses.replace(
        WORKLOADS["mlp"], optimizer=optimizer, learning_rate=0.01 if optimizer == "sgd" else 1e-3
    )
    losses, _ = spec.reference_train(spec.init_params(), 40)
    assert np.mean(losses[-5:]) < 0.8 * np.mean(losses[:5])


def test_override_parses_types():
    spec = override(get_workload("mlp"), ["batch_size=256", "hidden=64,32", "learning_rate=0.1", "optimizer=adam"])
    assert (spec.batch_size, spec.hidden, spec.learning_rate, spec.optimizer) == (256, (64, 32), 0.1, "adam")
    assert get_workload("mlp").batch_size == 32, "overrides never mutate the registered spec"


@pytest.mark.parametrize(
    "assignment, message",
    [
        ("batch_sise=3", "unknown field 'batch_sise' for workload mlp; valid fields: batch_size"),
        ("name=x", "unknown field 'name'"),
        ("batch_size=abc", "--set batch_size='abc': expected an integer"),
        ("batch_size=0", "batch_size must be > 0, got 0"),
        ("hidden=64,-1", "hidden widths must be > 0"),
        ("learning_rate=-1", "learning_rate must be a finite number > 0"),
        ("optimizer=rmsprop", "optimizer 'rmsprop' is not one of: sgd, adam"),
        ("batch_size", "expected field=value"),
    ],
)
def test_override_rejects_bad_input(assignment, message):
    with pytest.raises(SpecError, match=None) as info:
        override(get_workload("mlp"), [assignment])
    assert message in str(info.value)


def test_unknown_workload_names_the_valid_ones():
    with pytest.raises(SpecError, match="unknown workload 'mpl'; valid: mlp, mlp-wide"):
        get_workload("mpl")


def _finite_difference_check(spec, rel=1e-5):
    params = {k: v.astype(np.float64) for k, v in spec.init_params().items()}
    batch = spec.batches()[0]
    _, grads = spec.reference_loss_and_grads(params, batch)
    eps = 1e-6
    for name, value in params.items():
        for idx in [(0,) * value.ndim, tuple(s - 1 for s in value.shape), tuple(s // 2 for s in value.shape)]:
            plus = {k: v.copy() for k, v in params.items()}
            minus = {k: v.copy() for k, v in params.items()}
            plus[name][idx] += eps
            minus[name][idx] -= eps
            numeric = (
                spec.reference_loss_and_grads(plus, batch)[0] - spec.reference_loss_and_grads(minus, batch)[0]
            ) / (2 * eps)
            assert grads[name][idx] == pytest.approx(numeric, rel=rel, abs=1e-8), (name, idx)


def test_cnn_reference_gradients_match_finite_differences():
    _finite_difference_check(
        CNN(name="t", input_shape=(4, 4, 2), channels=(3, 2), hidden=(5,), num_classes=3, batch_size=3, num_batches=1)
    )


def test_rnn_reference_gradients_match_finite_differences():
    small = RNNCaption(
        name="t", feature_dim=5, vocab=7, embed_dim=3, hidden=4, topics=2, min_len=2, max_len=4, buckets=(4,),
        batch_size=3, num_batches=1,
    )  # fmt: skip
    _finite_difference_check(small)


def test_sizes_of_the_new_workloads():
    assert get_workload("cnn").param_count() == 545_098
    assert get_workload("rnn-caption").param_count() == 812_776


def test_cnn_labels_cover_every_class():
    labels = np.concatenate([b["y"] for b in get_workload("cnn").batches()])
    assert set(np.unique(labels)) == set(range(10))


def test_caption_lengths_vary_and_strategies_shape_the_time_axis():
    spec = get_workload("rnn-caption")
    lengths = [int(b["mask"].sum(axis=1).max()) for b in spec.batches()]
    assert len(set(lengths)) > 8 and min(lengths) >= spec.min_len and max(lengths) <= spec.max_len
    for strategy, expect in [("exact", lengths), ("padded", [40] * 16)]:
        batches = override(spec, [f"strategy={strategy}"]).batches()
        assert [b["tokens"].shape[1] for b in batches] == expect
    bucketed = override(spec, ["strategy=bucketed"]).batches()
    assert {b["tokens"].shape[1] for b in bucketed} <= set(spec.buckets)
    graph = override(spec, ["strategy=graph-loop"]).batches()
    assert [int(b["length"]) for b in graph] == lengths
    # every caption ends with EOS and nothing follows it
    b = spec.batches()[0]
    ends = b["mask"].sum(axis=1).astype(int) - 1
    assert np.all(b["targets"][np.arange(len(ends)), ends] == 2)


@pytest.mark.slow
def test_strategies_change_cost_never_the_reference_loss():
    # the default decoder at batch 8: its first two batches (8 and 14 long) are still padded by every
    # padding strategy (bucketed to 10 and 20, padded and graph-loop to 40), for about 1 CPU-s of
    # reference work instead of 28 at batch 32
    spec = override(get_workload("rnn-caption"), ["batch_size=8"])
    p = spec.init_params()
    losses = {s: override(spec, [f"strategy={s}"]).reference_train(p, 2)[0] for s in STRATEGIES}
    for s, value in losses.items():
        np.testing.assert_allclose(value, losses["exact"], rtol=1e-12, err_msg=s)


def test_reference_decode_stops_after_eos():
    spec = get_workload("rnn-decode")
    p = spec.init_params()
    # make EOS the most likely token from the second step on: every caption ends at step 1 or 2
    p["out/kernel"][:, 2] = 0.0  # drop the spec's own stopping rule
    p["out/bias"][2] = 50.0
    out = spec.reference_decode(p, spec.batches()[0]["features"])
    assert np.all(out[:, 0] == 2) and np.all(out[:, 1:] == 0)


@pytest.mark.parametrize(
    "name, assignment, message",
    [
        ("rnn-caption", "strategy=fast", "strategy 'fast' is not one of: exact, bucketed, padded, graph-loop"),
        ("rnn-caption", "max_len=50", "buckets must be increasing and end at >= max_len (50)"),
        ("rnn-caption", "min_len=1", "need 2 <= min_len <= max_len"),
        ("cnn", "input_shape=30,30,3", "height and width must divide by 4"),
        ("cnn", "channels=0", "channels must be one or more positive widths"),
    ],
)
def test_new_workloads_reject_bad_values(name, assignment, message):
    with pytest.raises(SpecError) as info:
        override(get_workload(name), [assignment])
    assert message in str(info.value)


def test_flops_are_counted_from_the_spec():
    mlp = get_workload("mlp")
    # 784x300 (no input gradient: 4 B in out), 300x100 and 100x10 (6 B in out each)
    assert mlp.flops(mlp.batches()[0]) == 32 * (4 * 784 * 300 + 6 * 300 * 100 + 6 * 100 * 10)
    rnn = get_workload("rnn-caption")
    b = rnn.batches()[0]
    steps = int(b["mask"].sum(axis=1).max())
    per_step = 2 * 32 * (128 * 768 + 256 * 768 + 256 * 1000)
    assert rnn.flops(b) == 3 * per_step * steps + 4 * 32 * 512 * 256
    padded = override(rnn, ["strategy=padded"])
    assert padded.flops(padded.batches()[0]) == rnn.flops(b), "padding is waste, not useful work"
    assert get_workload("rnn-decode").flops(b) is None


@pytest.mark.slow
def test_decode_spec_stops_at_the_designed_varied_lengths():
    """rnn-decode's captions end where its batches' masks say, at lengths spread like the
    training captions', with early exits and PAD after EOS in every batch."""
    spec = get_workload("rnn-decode")
    params = spec.init_params()
    lengths = []
    for batch in spec.batches():
        out = spec.reference_decode(params, batch["features"])
        got = decoded_lengths(out)
        np.testing.assert_array_equal(got, batch["mask"].sum(axis=1))
        for row, n in zip(out, got, strict=True):
            assert row[n - 1] == EOS and np.all(row[n:] == PAD) and np.all(row[: n - 1] > EOS)
        lengths.append(got)
    every = np.concatenate(lengths)
    assert every.min() == spec.min_len and every.max() == spec.max_len
    assert len(np.unique(every)) >= 20 and (every < spec.max_len).mean() > 0.9
    train = get_workload("rnn-caption")
    np.testing.assert_array_equal(train.init_params()["out/bias"], RNNCaption(name="t").init_params()["out/bias"])
    assert not np.array_equal(train.init_params()["out/bias"], params["out/bias"]), "only decoding is rebuilt"


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_kernel_lists_add_up_to_the_stated_flops(name):
    """The kernel floor (harness.measuring.floors) times exactly the work ``flops`` counts, batch by batch,
    under every loop strategy (padding is waste, in neither)."""
    from workloads.spec import kernel_flops

    variants = [["strategy=" + s] for s in STRATEGIES] if WORKLOADS[name].family == "rnn" else [[]]
    for overrides in variants:
        spec = override(WORKLOADS[name], overrides)
        for batch in spec.batches():
            kernels = spec.kernels(batch)
            if spec.flops(batch) is None:
                assert kernels is None
                continue
            assert sum(kernel_flops(k) * n for k, n in kernels) == spec.flops(batch)
            assert all(n >= 1 and all(d >= 1 for d in k[1:] if isinstance(d, int)) for k, n in kernels)


@pytest.mark.parametrize("name", list(WORKLOADS))
@pytest.mark.slow
def test_tiny_spec_keeps_the_step_structure_on_tiny_tensors(name):
    """The dispatch floor's spec: valid, a few parameters, the same number of batches and, for
    the caption decoder, the same caption lengths batch by batch (the same loop trip counts)."""
    spec = WORKLOADS[name]
    tiny = spec.tiny()
    tiny.validate()
    assert type(tiny) is type(spec) and tiny.param_count() < 2000 < spec.param_count()
    assert len(tiny.batches()) == len(spec.batches())
    if spec.family == "rnn":
        for big, small in zip(spec.batches(), tiny.batches(), strict=True):
            np.testing.assert_array_equal(big["mask"], small["mask"])


def _small_transformer(**changes):
    small = dict(vocab=11, width=6, heads=2, layers=2, topics=3, min_len=3, max_len=6, buckets=(4, 6), num_batches=2)
    return Transformer(name="t", batch_size=3, **{**small, **changes})


def test_transformer_reference_gradients_match_finite_differences():
    _finite_difference_check(_small_transformer())


def test_transformer_strategies_shape_the_time_axis_never_the_loss():
    spec = _small_transformer(num_batches=6, max_len=12, buckets=(4, 8, 16))
    p = spec.init_params()
    lengths = [int(b["mask"].sum(axis=1).max()) for b in spec.batches()]
    shapes = {
        s: [b["tokens"].shape[1] for b in override(spec, [f"strategy={s}"]).batches()] for s in ("bucketed", "padded")
    }
    assert [b["tokens"].shape[1] for b in spec.batches()] == lengths and len(set(lengths)) > 2
    assert shapes["padded"] == [12] * 6
    assert shapes["bucketed"] == [min(next(k for k in (4, 8, 16) if k >= n), 12) for n in lengths]
    losses = {s: override(spec, [f"strategy={s}"]).reference_train(p, 3)[0] for s in TRANSFORMER_STRATEGIES}
    for s, value in losses.items():
        np.testing.assert_allclose(value, losses["exact"], rtol=1e-12, err_msg=s)
    fixed = override(spec, ["lengths=fixed"]).batches()
    assert all(b["mask"].all() and b["tokens"].shape == (3, 12) for b in fixed)
    b = spec.batches()[0]
    ends = b["mask"].sum(axis=1).astype(int) - 1
    assert np.all(b["targets"][np.arange(3), ends] == EOS) and np.all(b["tokens"][:, 0] == 1)


def test_transformer_reference_training_reduces_loss():
    spec = _small_transformer(num_batches=4, learning_rate=1e-2)
    losses, _ = spec.reference_train(spec.init_params(), 30)
    assert np.mean(losses[-4:]) < 0.8 * np.mean(losses[:4])


def test_transformer_flops_formula():
    spec = get_workload("transformer")
    b = spec.batches()[0]
    t = int(b["mask"].sum(axis=1).max())
    n = 8 * t  # batch_size 8
    assert spec.flops(b) == 3 * (2 * (24 * n * 256**2 + 4 * 8 * t * t * 256) + 2 * n * 256 * 1000)
    padded = override(spec, ["strategy=padded"])
    assert padded.flops(padded.batches()[0]) == spec.flops(b), "padding is waste, not useful work"


def test_adamw_decays_kernels_and_tables_only():
    p = {"a/kernel": np.full(3, 2.0), "e/table": np.full(2, -1.0), "a/bias": np.full(3, 2.0), "n/scale": np.ones(2)}
    opt = optim.make("adamw", 0.1, p)
    opt.apply(p, {k: np.zeros_like(v) for k, v in p.items()})  # zero gradient: the decay alone
    factor = 1 - 0.1 * optim.ADAMW_WEIGHT_DECAY
    np.testing.assert_array_equal(p["a/kernel"], 2.0 * factor)
    np.testing.assert_array_equal(p["e/table"], -1.0 * factor)
    np.testing.assert_array_equal(p["a/bias"], 2.0)
    np.testing.assert_array_equal(p["n/scale"], 1.0)


@pytest.mark.parametrize(
    "assignment, message",
    [
        ("strategy=graph-loop", "strategy 'graph-loop' is not one of: exact, bucketed, padded"),
        ("attention=flash", "attention 'flash' is not one of: naive, fused"),
        ("heads=3", "width (256) must be a multiple of heads (3)"),
        ("lengths=random", "lengths 'random' is not one of: vary, fixed"),
    ],
)
def test_transformer_rejects_bad_values(assignment, message):
    with pytest.raises(SpecError) as info:
        override(get_workload("transformer"), [assignment])
    assert message in str(info.value)
