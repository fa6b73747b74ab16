"""GPU utilisation sampled with NVML (nvidia-ml-py) while the steady window runs."""

from __future__ import annotations

import threading
from typing import Any


class UtilSampler:
    """Context manager sampling GPU 0's utilisation every ``interval_s``; ``mean`` is None
    when NVML is unavailable (no driver, no package) or no sample was taken."""

    def __init__(self, interval_s: float = 0.05) -> None:
        self.interval_s = interval_s
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._nvml: Any = None

    def __enter__(self) -> UtilSampler:
        try:
            import pynvml

            pynvml.nvmlInit()
            handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        except Exception:  # noqa: BLE001 - no NVML: utilisation is reported as unavailable
            return self
        self._nvml = pynvml

        def sample() -> None:
            while not self._stop.wait(self.interval_s):
                self.samples.append(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)

        self._thread = threading.Thread(target=sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._thread:
            self._stop.set()
            self._thread.join()
            self._nvml.nvmlShutdown()

    @property
    def mean(self) -> float | None:
        return sum(self.samples) / len(self.samples) if self.samples else None
