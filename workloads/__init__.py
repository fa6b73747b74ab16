"""Framework-free workload specs. Importing this package imports no deep-learning framework."""

from __future__ import annotations

import functools

from workloads import model_file
from workloads.cnn import CNN
from workloads.mlp import MLP
from workloads.rnn import STRATEGIES, RNNCaption
from workloads.spec import Batch, Params, SpecError, Workload, override
from workloads.transformer import Transformer

#: The named workloads, with the defaults taken from the seed articles.
WORKLOADS: dict[str, Workload] = {
    # Seed 003: MNIST-shaped Keras MLP, 266,610 parameters, SGD.
    "mlp": MLP(name="mlp"),
    # Seed 003: CIFAR-100-shaped MLP, 3,623,600 parameters, Adam.
    "mlp-wide": MLP(
        name="mlp-wide",
        input_shape=(32, 32, 3),
        hidden=(1000, 500),
        num_classes=100,
        optimizer="adam",
        learning_rate=1e-3,
    ),
    # CIFAR-shaped convnet: two conv 3x3 + ReLU + max-pool blocks, Dense 128, Dense 10.
    "cnn": CNN(name="cnn"),
    # Captioning decoder: GRU over captions whose length changes from batch to batch.
    "rnn-caption": RNNCaption(name="rnn-caption"),
    # The same decoder generating greedily until every caption has ended: a data-dependent loop.
    "rnn-decode": RNNCaption(name="rnn-decode", task="decode"),
    # Decoder-only language model: pre-LayerNorm causal attention blocks, sequence lengths varying
    # per batch (16..128), AdamW.
    "transformer": Transformer(name="transformer"),
}


def get_workload(name: str) -> Workload:
    """A named workload, or a Keras model file's (a path ending in ``.py``: workloads.model_file)."""
    if name in WORKLOADS:
        return WORKLOADS[name]
    if model_file.is_model_file(name):
        return _model_file(name)
    raise SpecError(f"unknown workload {name!r}; valid: {', '.join(WORKLOADS)}, or a Keras model file (a .py path)")


@functools.cache
def _model_file(path: str) -> Workload:
    return model_file.from_file(path)


__all__ = [
    "CNN",
    "MLP",
    "STRATEGIES",
    "WORKLOADS",
    "Batch",
    "Params",
    "RNNCaption",
    "SpecError",
    "Transformer",
    "Workload",
    "get_workload",
    "override",
]
