"""The optimisers every workload may name, written out so every framework runs the same maths.

``sgd``:  p -= lr * g
``adam``: Kingma & Ba (2015) Algorithm 1, as torch.optim.Adam and optax.adam do it:
          m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
          p -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)
          with b1=0.9, b2=0.999, eps=1e-8. (Keras puts eps before the bias correction;
          its adapter compensates, see adapters/keras_torch.py.)
``adamw``: Loshchilov & Hutter's decoupled weight decay around that Adam, as
          torch.optim.AdamW, optax.adamw and keras.optimizers.AdamW do it:
          p -= lr * wd * p  (wd = ADAMW_WEIGHT_DECAY, on the parameter before this step's update,
          only on parameters ``decays`` names: canonical names ending in ``/kernel`` or ``/table``;
          never biases, LayerNorm scales or biases), then the Adam update above, same constants.
          The decay is lr * wd (torch's and optax's convention), not wd alone.
"""

from __future__ import annotations

import numpy as np

from workloads.arrays import Params

ADAM_BETA1 = 0.9
ADAM_BETA2 = 0.999
ADAM_EPS = 1e-8
ADAMW_WEIGHT_DECAY = 0.01
OPTIMIZERS = ("sgd", "adam", "adamw")


def decays(name: str) -> bool:
    """Whether AdamW's weight decay applies to the parameter of this canonical name: weight
    matrices and embedding tables, not biases or normalisation parameters."""
    return name.endswith("/kernel") or name.endswith("/table")


class SGD:
    def __init__(self, lr: float, p: Params) -> None:
        self.lr = lr

    def apply(self, p: Params, g: Params) -> None:
        for k in p:
            p[k] -= self.lr * g[k]


class Adam:
    """Algorithm 1 with the module's constants; ``beta2`` and ``eps`` may be changed only to
    train deliberately wrong models in tests."""

    def __init__(self, lr: float, p: Params, beta2: float = ADAM_BETA2, eps: float = ADAM_EPS) -> None:
        self.lr, self.t, self.beta2, self.eps = lr, 0, beta2, eps
        self.m = {k: np.zeros_like(v) for k, v in p.items()}
        self.v = {k: np.zeros_like(v) for k, v in p.items()}

    def apply(self, p: Params, g: Params) -> None:
        self.t += 1
        for k in p:
            self.m[k] = ADAM_BETA1 * self.m[k] + (1 - ADAM_BETA1) * g[k]
            self.v[k] = self.beta2 * self.v[k] + (1 - self.beta2) * g[k] ** 2
            m_hat = self.m[k] / (1 - ADAM_BETA1**self.t)
            v_hat = self.v[k] / (1 - self.beta2**self.t)
            p[k] -= self.lr * m_hat / (np.sqrt(v_hat) + self.eps)


class AdamW(Adam):
    """``adamw`` of the module docstring: decoupled decay, then Algorithm 1."""

    def __init__(self, lr: float, p: Params, weight_decay: float = ADAMW_WEIGHT_DECAY) -> None:
        super().__init__(lr, p)
        self.weight_decay = weight_decay

    def apply(self, p: Params, g: Params) -> None:
        for k in p:
            if decays(k):
                p[k] -= self.lr * self.weight_decay * p[k]
        super().apply(p, g)


def make(name: str, lr: float, p: Params) -> SGD | Adam:
    return {"sgd": SGD, "adam": Adam, "adamw": AdamW}[name](lr, p)
