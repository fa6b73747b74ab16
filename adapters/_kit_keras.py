"""adapters.kit's Keras helpers: the backend's start-up settings and the mixed-precision policy.

Private: adapters import these names from ``adapters.kit``. Nothing here imports Keras at module
level: each helper imports it, or takes it as an argument, when called (``adapters.kit`` must
stay cheap to import).
"""

from __future__ import annotations

from typing import Any

from adapters._kit_jax import jax_env
from adapters._kit_tf import tf_env
from adapters._kit_torch import torch_env


def keras_env(backend: str, threads: int, device: str) -> dict[str, str]:
    """Keras picks its backend once per process (``KERAS_BACKEND``), plus that backend's own
    start-up settings."""
    extra = {"jax": jax_env, "tensorflow": tf_env, "torch": torch_env}.get(backend)
    return {**(extra(threads, device) if extra else {}), "KERAS_BACKEND": backend}


def keras_policy(keras: Any, bf16: bool) -> str:
    """Set Keras's global dtype policy for the model about to be built (``mixed_bfloat16`` or
    ``float32``) and return its name. Set it on every ``setup``: the policy is global to the
    process, and a conformance worker builds fp32 and bf16 models one after another."""
    name = "mixed_bfloat16" if bf16 else "float32"
    keras.mixed_precision.set_global_policy(name)
    return name
