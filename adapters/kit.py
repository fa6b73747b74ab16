"""The adapter-author API: what an adapter needs to run on the same footing as the built-in ones.

Every built-in adapter imports its shared helpers from here and from ``adapters.base`` only, so
these names are exercised by the whole test suite and cannot drift from what the harness expects.
A third-party adapter should use the same names; under ``adapters/`` only this module, ``base`` (the
contract, whose names this one re-exports) and ``exporting`` (the export task's optional mixin) are
public (the underscore modules hold model code private to their adapters). A plugin's hooks
(profiler, idiomatic script, kernels, devices) are entry points, not names here: ``adapters.HOOK_GROUPS``.

The helpers live in one private module per framework (``_kit_jax``, ``_kit_torch``, ``_kit_tf``,
``_kit_keras``) and one for what no framework needs (``_kit_common``); this module re-exports
them, and only these names are public. Nothing imports a framework at module level: each helper
imports, or takes, the framework it works on when called, so an adapter module that imports
this one stays cheap to discover.

Sections, by the adapter method that uses them:

- ``resolve_device``: ``pick_device`` (shared rule), ``jax_resolve_device``,
  ``torch_resolve_device``, ``tf_resolve_device``; ``build_info``: ``jax_build_info``,
  ``torch_build_info``, ``tf_build_info``.
- ``worker_env``: ``threads_env`` (what ``Adapter.worker_env`` returns), ``jax_env``,
  ``tf_env``, ``torch_env``, ``keras_env``. Overriding ``worker_env`` replaces the base settings unless you
  merge them: ``{**super().worker_env(threads, device), **jax_env(threads, device)}``.
- ``setup``, precision (``options.tf32``): ``jax_precision``, ``torch_precision``,
  ``tf_precision``; placement: ``jax_place`` (committed device arrays; see its docstring).
- ``compile_stats``: ``JaxCompileEvents``, ``torch_compile_stats``, ``tf_compile_stats``.
- ``device_memory_peak``: ``jax_peak_bytes``, ``torch_peak_bytes``, ``tf_peak_bytes``.
- ``device_busy``: ``jax_device_busy``, ``torch_device_busy``.
- ``settings``: ``jax_settings``, ``torch_settings``.
- ``setup``, mixed precision (``options.bf16``): ``torch_autocast``, ``keras_policy``,
  ``tf_mixed_loss``, ``jax_mixed_loss``, ``flax_mixed_loss``; ``settings``: ``mixed_precision``.
- Canonical layouts: ``hwio_to_oihw``, ``oihw_to_hwio``, ``swap_rz_gates``; Adam:
  ``adam_eps_hat`` (the epsilon that makes an "epsilon before bias correction" kernel run the
  workloads' Algorithm 1), ``ADAM_BETA1``, ``ADAM_BETA2``, ``ADAM_EPS``.
"""

from __future__ import annotations

from adapters._kit_common import (
    MIXED_PRECISION,  # noqa: F401 - public, as CUDA_PLUGINS and GPU_AUTOTUNE_LEVEL, though not in __all__
    adam_eps_hat,
    compile_cache,
    hwio_to_oihw,
    mixed_precision,
    oihw_to_hwio,
    swap_rz_gates,
    threads_env,
)
from adapters._kit_jax import (
    CUDA_PLUGINS,  # noqa: F401
    GPU_AUTOTUNE_LEVEL,  # noqa: F401
    JaxCompileEvents,
    flax_mixed_loss,
    gpu_autotune_level,
    jax_build_info,
    jax_device_busy,
    jax_env,
    jax_mixed_loss,
    jax_peak_bytes,
    jax_place,
    jax_precision,
    jax_resolve_device,
    jax_settings,
)
from adapters._kit_keras import keras_env, keras_policy
from adapters._kit_tf import (
    tf_build_info,
    tf_compile_stats,
    tf_env,
    tf_mixed_loss,
    tf_peak_bytes,
    tf_precision,
    tf_resolve_device,
)
from adapters._kit_torch import (
    torch_autocast,
    torch_build_info,
    torch_compile_stats,
    torch_device_busy,
    torch_env,
    torch_peak_bytes,
    torch_precision,
    torch_resolve_device,
    torch_settings,
)
from adapters.base import Adapter, DeviceUnavailable, Options, no_cuda, pick_device
from workloads.optim import ADAM_BETA1, ADAM_BETA2, ADAM_EPS

__all__ = [
    "compile_cache",
    "ADAM_BETA1",
    "ADAM_BETA2",
    "ADAM_EPS",
    "Adapter",
    "DeviceUnavailable",
    "JaxCompileEvents",
    "Options",
    "adam_eps_hat",
    "gpu_autotune_level",
    "hwio_to_oihw",
    "jax_build_info",
    "jax_device_busy",
    "jax_env",
    "jax_peak_bytes",
    "jax_place",
    "jax_precision",
    "jax_resolve_device",
    "jax_settings",
    "flax_mixed_loss",
    "jax_mixed_loss",
    "keras_env",
    "keras_policy",
    "mixed_precision",
    "no_cuda",
    "oihw_to_hwio",
    "pick_device",
    "swap_rz_gates",
    "tf_build_info",
    "tf_compile_stats",
    "tf_env",
    "tf_mixed_loss",
    "tf_peak_bytes",
    "tf_precision",
    "tf_resolve_device",
    "threads_env",
    "torch_build_info",
    "torch_compile_stats",
    "torch_autocast",
    "torch_device_busy",
    "torch_env",
    "torch_peak_bytes",
    "torch_precision",
    "torch_resolve_device",
    "torch_settings",
]
