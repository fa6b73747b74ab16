"""adapters.kit, the adapter-author API, keeps its names however its helpers are arranged.

Third-party adapters import ``adapters.kit`` (docs/adding-an-adapter.md); its helpers live in
private per-framework modules (``adapters/_kit_*.py``) that it re-exports.
"""

from __future__ import annotations

import subprocess

from adapters import kit
from tests.conftest import ADAPTERS, REPO

#: adapters.kit.__all__ as it stood when the helpers were split per framework: names may be
#: added (here too), never dropped or renamed.
PUBLIC = {
    "ADAM_BETA1", "ADAM_BETA2", "ADAM_EPS", "Adapter", "DeviceUnavailable", "JaxCompileEvents",
    "Options", "adam_eps_hat", "compile_cache", "flax_mixed_loss", "gpu_autotune_level", "hwio_to_oihw",
    "jax_build_info", "jax_device_busy", "jax_env", "jax_mixed_loss", "jax_peak_bytes",
    "jax_place", "jax_precision", "jax_resolve_device", "jax_settings", "keras_env",
    "keras_policy", "mixed_precision", "no_cuda", "oihw_to_hwio", "pick_device", "swap_rz_gates",
    "tf_build_info", "tf_compile_stats", "tf_env", "tf_mixed_loss", "tf_peak_bytes",
    "tf_precision", "tf_resolve_device", "threads_env", "torch_autocast", "torch_build_info",
    "torch_compile_stats", "torch_device_busy", "torch_env", "torch_peak_bytes", "torch_precision",
    "torch_resolve_device", "torch_settings",
}  # fmt: skip
#: Public constants importable from adapters.kit though not in __all__.
CONSTANTS = {"CUDA_PLUGINS", "GPU_AUTOTUNE_LEVEL", "MIXED_PRECISION"}


def test_kit_exports_the_same_names():
    assert set(kit.__all__) == PUBLIC
    assert len(kit.__all__) == len(PUBLIC)
    for name in PUBLIC | CONSTANTS:
        assert hasattr(kit, name), f"adapters.kit has no {name}"


def test_kit_parts_are_private_and_not_adapters():
    parts = sorted(p.name for p in (REPO / "adapters").glob("_kit_*.py"))
    assert parts, "adapters.kit's per-framework modules are gone"
    assert not any(info.module.startswith("adapters._kit") for info in ADAPTERS.values())


def test_kit_imports_no_framework(python):
    code = (
        "import sys\n"
        "import adapters.kit\n"
        "print(sorted(m for m in ('torch', 'tensorflow', 'jax', 'keras', 'flax', 'optax') if m in sys.modules))\n"
    )
    out = subprocess.run([python, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_tritons_kernel_cache_is_the_cells_or_empty_and_never_inductors_default(monkeypatch, tmp_path):
    """Triton's cache (GPU kernels) outlives a run under Inductor's default /tmp folder even with
    Inductor's caches off: a worker gets the cell's folder, or an empty one of its own."""
    import os

    from adapters import _kit_common
    from adapters._kit_torch import torch_env

    monkeypatch.delenv(_kit_common.SHARED_COMPILE_CACHE, raising=False)
    cold_a, cold_b = torch_env(1, "cuda"), torch_env(1, "cuda")
    assert cold_a["TORCHINDUCTOR_FORCE_DISABLE_CACHES"] == "1"
    assert cold_a["TRITON_CACHE_DIR"] != cold_b["TRITON_CACHE_DIR"]
    assert all(os.listdir(e["TRITON_CACHE_DIR"]) == [] for e in (cold_a, cold_b))
    with _kit_common.compile_cache(str(tmp_path)):
        warm = torch_env(1, "cuda")
    assert warm["TRITON_CACHE_DIR"] == os.path.join(str(tmp_path), "inductor", "triton")
    assert warm["TORCHINDUCTOR_CACHE_DIR"] == os.path.join(str(tmp_path), "inductor")
    for e in (cold_a, cold_b):
        os.rmdir(e["TRITON_CACHE_DIR"])


def test_a_runs_jax_cache_keeps_a_jitted_steps_compiles_not_eager_ops(monkeypatch, tmp_path):
    """rnn-caption's per-length compiles take 0.5-2 s on the 2-core VM: JAX's default 1 s floor left
    them out of a run's cache, and every later process compiled them again."""
    from adapters import _kit_common
    from adapters._kit_jax import RUN_CACHE_MIN_COMPILE_S, jax_env

    monkeypatch.delenv(_kit_common.SHARED_COMPILE_CACHE, raising=False)
    assert jax_env(1, "cpu")["JAX_ENABLE_COMPILATION_CACHE"] == "false"  # no run cache: cold
    with _kit_common.compile_cache(str(tmp_path)):
        env = jax_env(1, "cpu")
    assert env["JAX_ENABLE_COMPILATION_CACHE"] == "true" and env["JAX_COMPILATION_CACHE_DIR"].startswith(str(tmp_path))
    assert float(env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"]) == RUN_CACHE_MIN_COMPILE_S < 0.5
