"""Keras model building and canonical weight mapping shared by the Keras adapters."""

from __future__ import annotations

import json
from typing import Any, cast

import numpy as np

from adapters import _keras_transformer
from adapters.kit import swap_rz_gates
from workloads import Params, Workload
from workloads.cnn import CNN
from workloads.mlp import MLP
from workloads.model_file import FAMILY as MODEL_FILE
from workloads.model_file import ModelFile
from workloads.optim import ADAM_BETA1, ADAM_BETA2, ADAM_EPS, ADAMW_WEIGHT_DECAY
from workloads.rnn import RNNCaption
from workloads.transformer import Transformer

#: The workload families whose loss is a masked mean over time steps (the mask as sample weights).
_MASKED = ("rnn-caption", "transformer")


def build_model(keras, spec: Workload) -> tuple[Any, dict[str, Any]]:
    """The spec's model and its weighted layers by canonical prefix (for the transformer, its
    variables by canonical parameter name: adapters/_keras_transformer.py)."""
    if spec.family == "transformer":
        assert isinstance(spec, Transformer)
        return _keras_transformer.build_model(keras, spec)
    if spec.family == MODEL_FILE:
        assert isinstance(spec, ModelFile)
        keras.utils.set_random_seed(spec.seed)  # the weights are replaced: load_params
        model = spec.module().build()
        model(spec.sample_inputs())  # builds a subclassed model, as the file's description did
        return model, {"model": model}
    L = keras.layers
    layers: dict[str, Any] = {}
    if spec.family == "rnn-caption":
        assert isinstance(spec, RNNCaption)
        features = keras.Input((spec.feature_dim,), name="features")
        tokens = keras.Input((None,), dtype="int32", name="tokens")
        layers["img"] = L.Dense(spec.hidden, activation="tanh")
        layers["embed"] = L.Embedding(spec.vocab, spec.embed_dim)
        layers["gru"] = L.GRU(spec.hidden, return_sequences=True, reset_after=True)
        layers["out"] = L.Dense(spec.vocab)
        seq = layers["gru"](layers["embed"](tokens), initial_state=[layers["img"](features)])
        return keras.Model([features, tokens], layers["out"](seq)), layers
    assert isinstance(spec, (MLP, CNN))
    stack: list[Any] = [keras.Input(spec.input_shape)]
    if spec.family == "cnn":
        assert isinstance(spec, CNN)
        for i, width in enumerate(spec.channels):
            layers[f"conv{i}"] = L.Conv2D(width, 3, padding="same", activation="relu")
            stack += [layers[f"conv{i}"], L.MaxPooling2D(2)]
    sizes = cast(CNN, spec).dense_sizes if spec.family == "cnn" else cast(MLP, spec).layer_sizes
    stack.append(L.Flatten())
    for i, width in enumerate(sizes[1:]):
        layers[f"dense{i}"] = L.Dense(width, activation="relu" if i < len(sizes) - 2 else None)
        stack.append(layers[f"dense{i}"])
    return keras.Sequential(stack), layers


def model_file_reason(spec: Workload, backend: str) -> str | None:
    """Why a Keras adapter on ``backend`` skips ``spec``: a model file whose model builds on another
    Keras backend but not on this one (a layer calling one framework's API directly); else None."""
    fault = cast(ModelFile, spec).backend_fault(backend) if spec.family == MODEL_FILE else None
    return f"the model does not build on Keras's {backend} backend (it does on another): {fault}" if fault else None


def fit_data(spec: Workload, batch: Any) -> tuple[Any, Any, Any]:
    """A placed batch as ``fit`` hands it to the train function: (x, y, sample_weight); the
    caption (and transformer) mask is the sample weight."""
    if spec.family == "transformer":
        return batch["tokens"], batch["targets"], batch["mask"]
    if spec.family == MODEL_FILE:
        assert isinstance(spec, ModelFile)
        return spec.inputs(batch), spec.targets(batch), None
    if spec.family == "rnn-caption":
        return [batch["features"], batch["tokens"]], batch["targets"], batch["mask"]
    return batch["x"], batch["y"], None


# Canonical (r, z, n) column blocks <-> Keras (z, r, n); the swap is its own inverse.
_gates_to_keras = swap_rz_gates


def load_params(layers: dict[str, Any], p: Params, spec: Workload) -> None:
    if spec.family == MODEL_FILE:
        _load_in_order(layers["model"], p)
        return
    if spec.family == "transformer":
        _keras_transformer.load_params(layers, p)
        return
    if spec.family == "rnn-caption":
        layers["img"].set_weights([p["img/kernel"], p["img/bias"]])
        layers["embed"].set_weights([p["embed/table"]])
        bias = np.stack([p["gru/bias"], p["gru/recurrent_bias"]])
        layers["gru"].set_weights(
            [_gates_to_keras(p["gru/kernel"]), _gates_to_keras(p["gru/recurrent_kernel"]), _gates_to_keras(bias)]
        )
        layers["out"].set_weights([p["out/kernel"], p["out/bias"]])
        return
    for prefix, layer in layers.items():
        layer.set_weights([p[f"{prefix}/kernel"], p[f"{prefix}/bias"]])


def save_params(layers: dict[str, Any], spec: Workload) -> Params:
    if spec.family == MODEL_FILE:
        weights = layers["model"].weights
        return {k: np.asarray(v.numpy(), np.float32) for k, v in zip(spec.init_params(), weights, strict=True)}
    if spec.family == "transformer":
        import keras

        assert isinstance(spec, Transformer)
        return _keras_transformer.save_params(keras, layers, spec)

    def w(name: str) -> list[np.ndarray]:
        return [np.asarray(a, dtype=np.float32) for a in layers[name].get_weights()]

    if spec.family == "rnn-caption":
        kernel, recurrent, bias = (_gates_to_keras(a) for a in w("gru"))
        (img_k, img_b), (table,), (out_k, out_b) = w("img"), w("embed"), w("out")
        return {
            "img/kernel": img_k,
            "img/bias": img_b,
            "embed/table": table,
            "gru/kernel": kernel,
            "gru/recurrent_kernel": recurrent,
            "gru/bias": bias[0],
            "gru/recurrent_bias": bias[1],
            "out/kernel": out_k,
            "out/bias": out_b,
        }
    out: Params = {}
    for prefix in layers:
        out[f"{prefix}/kernel"], out[f"{prefix}/bias"] = w(prefix)
    return out


def _load_in_order(model: Any, p: Params) -> None:
    """A model file's weights, by position: its description's order (``model.weights``), whose
    layer names a process that built another model first would number differently."""
    weights = model.weights
    if len(weights) != len(p):
        raise ValueError(f"the model has {len(weights)} weights here, its description {len(p)}")
    for variable, (key, value) in zip(weights, p.items(), strict=True):
        if tuple(variable.shape) != value.shape:
            raise ValueError(f"weight {key}: shape {value.shape} described, {tuple(variable.shape)} here")
        variable.assign(value)


def adam(keras: Any, spec: Workload) -> Any:
    """Keras's Adam, or AdamW (its decoupled decay, ``variable -= variable * wd * lr``, is the
    workloads' ``adamw``) for a spec that names it, with the workloads' constants. Keras puts
    epsilon before the bias correction: the adapter corrects it per step (``kit.adam_eps_hat``)."""
    if spec.optimizer == "adamw":
        return keras.optimizers.AdamW(
            spec.learning_rate, weight_decay=ADAMW_WEIGHT_DECAY, beta_1=ADAM_BETA1, beta_2=ADAM_BETA2, epsilon=ADAM_EPS
        )
    return keras.optimizers.Adam(spec.learning_rate, beta_1=ADAM_BETA1, beta_2=ADAM_BETA2, epsilon=ADAM_EPS)


def algorithm1_adam(keras: Any, learning_rate: float, weight_decay: float | None = None, densify: Any = None) -> Any:
    """Keras's own Adam (its ``update_step`` unchanged) running the workloads' Algorithm-1
    update; Keras's AdamW (the same update after its decoupled decay) where ``weight_decay`` is
    given. Keras adds epsilon to sqrt(v) before the bias correction (``eps_hat`` in Kingma &
    Ba); an epsilon of ``eps * sqrt(1 - beta2^t)`` makes that the same update. Inside a jitted
    step a Python float is a constant of the trace, so ``epsilon`` is a property computed from
    the optimiser's own ``iterations`` variable, in the compiled step. ``densify``, if
    given, makes an embedding's sparse gradient (TensorFlow's IndexedSlices) dense first: Keras's
    update on TensorFlow scatters the slices into the moments one by one, so a token that occurs
    twice in a batch adds the squares of its two gradients to ``v``, not the square of their sum
    (``tf.convert_to_tensor`` sums them first)."""
    ops = keras.ops
    base: Any = keras.optimizers.Adam if weight_decay is None else keras.optimizers.AdamW
    decay = {} if weight_decay is None else {"weight_decay": weight_decay}

    class Algorithm1Adam(base):
        @property
        def epsilon(self) -> Any:
            step = ops.cast(self.iterations + 1, "float32")
            return self._algorithm1_eps * ops.sqrt(1.0 - ops.power(ops.cast(self.beta_2, "float32"), step))

        @epsilon.setter
        def epsilon(self, value: float) -> None:
            self._algorithm1_eps = value  # Adam.__init__ assigns epsilon here

        def update_step(self, gradient: Any, variable: Any, learning_rate: Any) -> Any:
            if densify is not None:
                gradient = densify(gradient)
            return super().update_step(gradient, variable, learning_rate)

    return Algorithm1Adam(learning_rate, beta_1=ADAM_BETA1, beta_2=ADAM_BETA2, epsilon=ADAM_EPS, **decay)


def optimizer_kernel(spec: Workload, adam_note: str) -> str:
    """The Keras optimiser a cell runs, as settings() records it."""
    if spec.optimizer == "adam":
        return f"keras.optimizers.Adam, Keras's own update ({adam_note})"
    if spec.optimizer == "adamw":
        return (
            f"keras.optimizers.AdamW, Keras's own update ({adam_note}; weight decay {ADAMW_WEIGHT_DECAY}, "
            "biases and LayerNorm parameters excluded with exclude_from_weight_decay)"
        )
    return "keras.optimizers.SGD"


def _undecayed(layers: dict[str, Any], spec: Workload) -> list[Any]:
    """The variables AdamW must not decay (``workloads.optim.decays``): in the seed families'
    layers, the biases (a GRU's two canonical biases are its one ``bias``)."""
    if spec.family == "transformer":
        return _keras_transformer.undecayed(layers)
    if spec.family == MODEL_FILE:
        return []  # Keras's own AdamW: a model file decays every variable
    return [v for layer in layers.values() for v in layer.trainable_variables if v.name == "bias"]


def loss_of(keras: Any, loss: str) -> Any:
    """A model file's ``LOSS`` as ``compile`` takes it: a name, or the JSON its description wrote
    (workloads.model_file_child._serialized: a loss's config, a list of them, or ``{"by_output": ...}``)."""

    def rebuilt(tree: Any) -> Any:
        if isinstance(tree, list):
            return [rebuilt(v) for v in tree]
        if isinstance(tree, dict) and "by_output" in tree:
            return {k: rebuilt(v) for k, v in tree["by_output"].items()}
        return keras.losses.get(tree)

    return rebuilt(json.loads(loss) if loss[:1] in "{[" else loss)


def compile_model(
    keras: Any, model: Any, spec: Workload, adam: Any, jit_compile: bool | str, layers: dict[str, Any] | None = None
) -> None:
    """Compile with the spec's optimiser (``adam`` when it names Adam or AdamW, else SGD) and the
    masked mean cross-entropy: the caption (or sequence) mask arrives as sample weights, averaged
    over their sum. Under AdamW the variables the workloads do not decay (``layers`` from
    ``build_model`` names them) are excluded from Keras's weight decay."""
    optimizer = adam if spec.optimizer in ("adam", "adamw") else keras.optimizers.SGD(spec.learning_rate)
    if spec.optimizer == "adamw":
        assert layers is not None
        optimizer.exclude_from_weight_decay(var_list=_undecayed(layers, spec))
    reduction = "mean_with_sample_weight" if spec.family in _MASKED else "sum_over_batch_size"
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=reduction)
    if spec.family == MODEL_FILE:
        assert isinstance(spec, ModelFile)
        loss = loss_of(keras, spec.loss)
    model.compile(optimizer=optimizer, loss=loss, jit_compile=jit_compile)
