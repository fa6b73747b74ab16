"""Helpers shared by the JAX-based adapters: start-up environment, GPU visibility, and trace
and compile accounting from ``jax.monitoring``."""

from __future__ import annotations

from collections import defaultdict
from typing import Any


class CompileEvents:
    """Registers a duration listener; ``stats()`` counts traces and backend compiles and sums
    their seconds (tracing, lowering to MLIR, XLA compile)."""

    def __init__(self) -> None:
        import jax

        self._events: dict[str, list[float]] = defaultdict(list)
        jax.monitoring.register_event_duration_secs_listener(self._on_event)

    def _on_event(self, event: str, duration: float, **_: Any) -> None:
        self._events[event].append(duration)

    def _durations(self, event: str) -> list[float]:
        return self._events.get(f"/jax/core/compile/{event}_duration", [])

    def stats(self) -> dict[str, Any]:
        traces, lowers = self._durations("jaxpr_trace"), self._durations("jaxpr_to_mlir_module")
        compiles = self._durations("backend_compile")
        return {"traces": len(traces), "compiles": len(compiles), "compile_s": float(sum(traces + lowers + compiles))}


def jax_env(threads: int) -> dict[str, str]:
    """XLA reads these only at start-up: allocate GPU memory on demand (honest memory figures)
    and size the CPU thread pool like every other framework's."""
    return {
        "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
        "XLA_FLAGS": f"--xla_cpu_multi_thread_eigen=true intra_op_parallelism_threads={threads}",
    }


def cuda_visible() -> bool:
    import jax

    try:
        return bool(jax.devices("cuda"))
    except RuntimeError:
        return False


def peak_bytes(device: Any) -> int | None:
    """The device's peak allocation as JAX reports it; None on CPU, which reports none."""
    stats = device.memory_stats() if device.platform != "cpu" else None
    return stats.get("peak_bytes_in_use") if stats else None
