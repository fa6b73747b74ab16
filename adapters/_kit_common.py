"""adapters.kit, the part no framework needs: thread pools, canonical layouts, Adam, mixed-precision names.

Private: adapters import these names from ``adapters.kit``.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import math
import os
from collections.abc import Iterator

import numpy as np

from adapters.base import Options, threads_env  # noqa: F401 - kit's threads_env is base's
from workloads.optim import ADAM_BETA2, ADAM_EPS

# --------------------------------------------------------------------------- worker environments

#: A folder the test suite names (tests/conftest.py) so that its many small runs share compiler
#: caches; users never set it, and their workers compile cold, as on a fresh machine. Each
#: record's ``settings`` says which (``inductor_caches``, ``persistent_compile_cache``).
SHARED_COMPILE_CACHE = "DLCOMPARE_SHARED_COMPILE_CACHE"


#: A run's compiler cache of one cell (harness.running.turns.compile_cache): set by ``compile_cache``
#: while the parent computes that cell's worker environment, never by users.
RUN_COMPILE_CACHE = "DLCOMPARE_RUN_COMPILE_CACHE"


def shared_compile_cache(compiler: str) -> str | None:
    """The folder ``compiler``'s cache may use: the test suite's (SHARED_COMPILE_CACHE), else the
    cell's own for the run (RUN_COMPILE_CACHE); None: compile cold."""
    folder = os.environ.get(SHARED_COMPILE_CACHE) or os.environ.get(RUN_COMPILE_CACHE)
    return os.path.join(folder, compiler) if folder else None


def suite_compile_cache() -> bool:
    """Whether the cache is the test suite's, shared by its many small runs (small compiles too)."""
    return bool(os.environ.get(SHARED_COMPILE_CACHE))


@contextlib.contextmanager
def compile_cache(folder: str | None) -> Iterator[None]:
    """Within it, ``shared_compile_cache`` answers under ``folder`` (a run's cache of one cell:
    empty for its first process, filled for the later ones), unless the test suite named one;
    ``None`` changes nothing. The parent computes a worker's environment inside it (each
    ``*_env`` is read there, before the framework is imported); it runs one at a time."""
    if folder is None:
        yield
        return
    os.environ[RUN_COMPILE_CACHE] = folder
    try:
        yield
    finally:
        del os.environ[RUN_COMPILE_CACHE]


# ------------------------------------------------------------------ canonical layouts, optimisers


def hwio_to_oihw(kernel: np.ndarray) -> np.ndarray:
    """A canonical conv kernel (H, W, in, out) in PyTorch's (out, in, H, W) order."""
    return np.ascontiguousarray(kernel.transpose(3, 2, 0, 1))


def oihw_to_hwio(kernel: np.ndarray) -> np.ndarray:
    """The inverse of ``hwio_to_oihw``."""
    return np.ascontiguousarray(kernel.transpose(2, 3, 1, 0))


def swap_rz_gates(a: np.ndarray) -> np.ndarray:
    """GRU gate blocks along the last axis, canonical (r, z, n) <-> Keras's (z, r, n); the swap
    is its own inverse."""
    r, z, n = np.split(a, 3, axis=-1)
    return np.concatenate([z, r, n], axis=-1)


def adam_eps_hat(step: int) -> float:
    """The epsilon that makes an Adam kernel adding epsilon *before* the bias correction (Keras,
    TensorFlow's ``ResourceApplyAdam``) run the workloads' Algorithm 1 at ``step`` (1-based):
    ``eps * sqrt(1 - beta2^step)``. optax's and torch's Adam need no correction."""
    return ADAM_EPS * math.sqrt(1.0 - ADAM_BETA2**step)


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


# ------------------------------------------------------------ mixed precision (``--precision bf16``)
#
# ``options.bf16``: float32 master weights and optimiser state, bfloat16 compute in the training
# step's forward and backward, loss in float32. Each framework's own mechanism, applied to the
# whole step or model, never layer by layer, so a new workload family gets it with no edit:
#
# - PyTorch: ``torch.autocast(device_type, dtype=torch.bfloat16)`` around forward and loss
#   (``torch_autocast``); the backward runs outside it, as torch's AMP docs teach.
# - Keras: the ``mixed_bfloat16`` dtype policy, set before the model's layers are built
#   (``keras_policy``): float32 variables, bfloat16 layer compute, losses in float32.
# - TensorFlow without Keras: mixed-precision *policies* are a Keras concept (TensorFlow's mixed
#   precision guide is ``tf.keras.mixed_precision``); a raw-TF step casts explicitly
#   (``tf_mixed_loss``): the variables and float inputs to bfloat16 at the loss function's
#   entry, the loss back to float32; gradients flow through the casts into the float32 variables.
# - JAX and Flax: the same explicit casts (``jax_mixed_loss``, ``flax_mixed_loss``), the usual way
#   in JAX (jmp, the "mixed precision" pattern of the JAX/Flax docs). nnx layers take
#   ``dtype``/``param_dtype`` arguments, but only layer by layer; casting the module's state at the
#   loss's entry does the same for every layer of every family.
#
# ``MIXED_PRECISION`` names each mechanism as records keep it (settings()["mixed_precision"]).

MIXED_PRECISION = {
    "torch": "torch.autocast(bfloat16) around forward and loss; float32 master weights, backward outside autocast",
    "keras": "keras.mixed_precision policy mixed_bfloat16 (float32 variables, bfloat16 compute, float32 loss)",
    "tensorflow": "explicit tf.cast of variables and float inputs to bfloat16 at the loss's entry, float32 "
    "loss; float32 variables and optimiser slots (no Keras policy in a raw-TF step)",
    "jax": "explicit astype(bfloat16) of the parameter tree and float inputs at the loss's entry, float32 "
    "loss; float32 master parameters and optax state",
    "flax": "explicit astype(bfloat16) of the nnx module's state and float inputs at the loss's entry "
    "(nnx.split/merge), float32 loss; float32 nnx.Param and optax state",
}


def mixed_precision(framework: str, options: Options) -> str:
    """``settings()["mixed_precision"]``: the mechanism that ran (``MIXED_PRECISION``), or "off"."""
    return MIXED_PRECISION[framework] if options.bf16 else "off"
