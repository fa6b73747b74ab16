"""GPU utilisation sampled with NVML (nvidia-ml-py) while the steady window runs, on the GPU
the cell's framework calls device 0, and its energy counter read around each turn's steps."""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from typing import Any


def cell_gpu(environ: Mapping[str, str] = os.environ) -> tuple[str, str]:
    """How NVML finds the cell's GPU: ("uuid", "GPU-...") or ("index", "N").

    Frameworks number the GPUs that ``CUDA_VISIBLE_DEVICES`` lists, from 0; NVML numbers every
    GPU in PCI bus order. The worker runs GPU cells with ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` so a
    plain index means the same GPU to both."""
    visible = environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    if visible.startswith(("GPU-", "MIG-")):
        return "uuid", visible
    return "index", visible if visible.isdigit() else "0"


class UtilSampler:
    """Context manager sampling the cell's GPU's utilisation every ``interval_s`` and once more on
    leaving, so a steady window shorter than the interval (a few ms on an H100) still has a
    sample; ``mean`` is None when NVML is unavailable (no driver, no package). NVML's figure is
    the share of its own last sample period (1/6 s to 1 s by GPU) in which a kernel ran, so the
    leaving sample covers the window's end. ``gpu`` names the GPU sampled."""

    def __init__(self, interval_s: float = 0.01) -> None:
        self.interval_s = interval_s
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._nvml: Any = None
        self._handle: Any = None
        self.gpu: str | None = None

    def __enter__(self) -> UtilSampler:
        self._stop.clear()  # entered again (around each block of a resident worker): samples add up
        try:
            import pynvml

            pynvml.nvmlInit()
            kind, key = cell_gpu()
            if kind == "uuid":
                handle = pynvml.nvmlDeviceGetHandleByUUID(key)
            else:
                handle = pynvml.nvmlDeviceGetHandleByIndex(int(key))
            self.gpu = f"{key}: {pynvml.nvmlDeviceGetName(handle)}"
        except Exception:  # noqa: BLE001 - no NVML: utilisation is reported as unavailable
            return self
        self._nvml = pynvml
        self._handle = handle

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
            self._thread = None
            self.samples.append(self._nvml.nvmlDeviceGetUtilizationRates(self._handle).gpu)
            self._nvml.nvmlShutdown()
            self._handle = None

    def energy_mj(self) -> int | None:
        """The GPU's energy counter (millijoules since the driver loaded; NVML's total energy,
        Volta and later) while entered; None where NVML or the counter is unavailable."""
        if self._handle is None or self._nvml is None:
            return None
        try:
            return int(self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle))
        except Exception:  # noqa: BLE001 - NVMLError_NotSupported before Volta: energy not measured
            return None

    @property
    def mean(self) -> float | None:
        return sum(self.samples) / len(self.samples) if self.samples else None
