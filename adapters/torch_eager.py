"""PyTorch eager mode: the dynamic-graph baseline.

Written as a PyTorch user writes a fast loop: an ``nn.Sequential`` of ``nn.Linear``,
``torch.optim`` with multi-tensor (foreach) updates, ``zero_grad(set_to_none=True)``, and the
loss returned as a detached device tensor so that nothing forces a host round trip inside the
step. ``sync`` reads the loss with ``.item()``, which waits for the CUDA stream.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from adapters.base import Adapter, pick_device
from workloads import Batch, Params, Workload
from workloads.mlp import ADAM_BETA1, ADAM_BETA2, ADAM_EPS


class TorchEager(Adapter):
    name = "torch-eager"
    framework = "torch"
    graph = "dynamic"
    requires = ("torch",)
    extra = "torch"

    def version(self) -> dict[str, str]:
        import torch

        return {"torch": torch.__version__}

    def resolve_device(self, device: str) -> str:
        import torch

        return pick_device(device, torch.cuda.is_available(), "torch")

    def setup(self, spec: Workload, params: Params, device: str, threads: int) -> None:
        import torch

        torch.set_num_threads(threads)
        # Equal footing: full fp32 matmuls on every framework unless the run asks otherwise.
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        self.device = torch.device(device)
        self.n_layers = len(spec.layer_sizes) - 1
        layers: list[torch.nn.Module] = []
        for i in range(self.n_layers):
            kernel = params[f"dense{i}/kernel"]
            linear = torch.nn.Linear(*kernel.shape)
            with torch.no_grad():
                linear.weight.copy_(torch.from_numpy(kernel.T.copy()))
                linear.bias.copy_(torch.from_numpy(params[f"dense{i}/bias"]))
            layers += [linear, torch.nn.ReLU()] if i < self.n_layers - 1 else [linear]
        self.model = torch.nn.Sequential(torch.nn.Flatten(), *layers).to(self.device)
        if spec.optimizer == "sgd":
            self.opt = torch.optim.SGD(self.model.parameters(), lr=spec.learning_rate, foreach=True)
        else:
            self.opt = torch.optim.Adam(
                self.model.parameters(),
                lr=spec.learning_rate,
                betas=(ADAM_BETA1, ADAM_BETA2),
                eps=ADAM_EPS,
                foreach=True,
            )
        self.loss_fn = torch.nn.CrossEntropyLoss()

    def to_device(self, batch: Batch) -> Any:
        import torch

        return (
            torch.from_numpy(batch["x"]).to(self.device),
            torch.from_numpy(batch["y"].astype(np.int64)).to(self.device),
        )

    def train_step(self, batch: Any) -> Any:
        x, y = batch
        self.opt.zero_grad(set_to_none=True)
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        self.opt.step()
        return loss.detach()

    def sync(self, handle: Any) -> float:
        return float(handle.item())

    def params(self) -> Params:
        linears = [m for m in self.model if hasattr(m, "weight")]
        out: Params = {}
        for i, lin in enumerate(linears):
            out[f"dense{i}/kernel"] = lin.weight.detach().cpu().numpy().T.copy()
            out[f"dense{i}/bias"] = lin.bias.detach().cpu().numpy().copy()
        return out

    def settings(self) -> dict[str, Any]:
        import torch

        return {
            "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
            "cudnn_benchmark": torch.backends.cudnn.benchmark,
            "intra_op_threads": torch.get_num_threads(),
        }
