"""tinynp-eager: the guide's NumPy example (docs/adding-an-adapter.md, section 3) as tinynp ops,
on the CPU or on tinynp's own device name."""

from __future__ import annotations

from typing import Any

import numpy as np

from adapters import kit
from workloads import optim

#: The device tinynp registers (tinynp.hooks.host_device).
HOST = "tinynp-host"


class TinynpEager(kit.Adapter):
    name = "tinynp-eager"
    framework = "tinynp"
    graph = "dynamic"
    requires = ("tinynp",)
    install_hint = "pip install tests/plugin_example"
    families = ("mlp",)

    def version(self) -> dict[str, str]:
        import tinynp

        return {"tinynp": tinynp.__version__}

    def resolve_device(self, device: str) -> str:
        if device == "cuda":
            raise kit.DeviceUnavailable("no CUDA device visible to tinynp: it computes on the host")
        return HOST if device == HOST else "cpu"

    def setup(self, spec: Any, params: Any, device: str, options: kit.Options) -> None:
        self.spec, self.p = spec, {k: v.astype(np.float64) for k, v in params.items()}
        self.opt = optim.make(spec.optimizer, spec.learning_rate, self.p)

    def to_device(self, batch: Any) -> Any:
        return batch

    def train_step(self, batch: Any) -> Any:
        import tinynp

        loss, grads = tinynp.op("loss and gradients", "matmul/conv", self.spec.reference_loss_and_grads, self.p, batch)
        tinynp.op("update", "optimizer update", self.opt.apply, self.p, grads)
        return loss

    def sync(self, handle: Any) -> float:
        return float(handle)

    def params(self) -> dict[str, np.ndarray]:
        return {k: v.astype(np.float32) for k, v in self.p.items()}

    def settings(self) -> dict[str, Any]:
        return {"optimizer_kernel": f"workloads.optim.{self.spec.optimizer} (NumPy float64)"}
