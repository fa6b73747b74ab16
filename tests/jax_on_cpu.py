"""JAX in the pytest process, on the CPU alone (tests/test_input_pipeline.py's Grain pipeline).

JAX starts every backend it has at its first device query, ``jax.devices("cpu")`` included: on a
GPU machine that is the CUDA backend, which takes 75% of the GPU's memory for the rest of the test
session, under the GPU tests' workers. ``jax_platforms`` set to "cpu" before that first query starts
the CPU backend alone. It is set through ``jax.config``, this process's own, not as JAX_PLATFORMS or
XLA_PYTHON_CLIENT_PREALLOCATE in ``os.environ``: every worker the suite starts inherits os.environ
(harness.running.runner.worker_env), where either would confine or change the GPU tests' JAX
workers; and JAX reads those variables once, at its import, which an earlier test may have done.
"""

from __future__ import annotations

from types import ModuleType


def jax_on_the_cpu() -> ModuleType:
    """``jax``, its platforms set to the CPU alone; effective where no backend has started yet in
    this process (tests/test_input_pipeline.py checks that none but the CPU's did)."""
    import jax

    jax.config.update("jax_platforms", "cpu")
    return jax
