"""PyTorch eager mode: the dynamic-graph baseline.

Written as a PyTorch user writes a fast loop: ``nn.Module`` models, ``torch.optim`` with
multi-tensor kernels, ``zero_grad(set_to_none=True)``, and the loss returned as a detached
device tensor so nothing forces a host round trip inside the step.

Adam is torch's ``fused=True`` kernel (one kernel for all parameters, CPU and CUDA). torch's own
default is the ``foreach`` kernels on CUDA and a per-parameter for-loop on CPU; its documentation
calls fused the fastest and keeps it out of the default only for bake-in time. Fused is also the
like-for-like choice: TensorFlow's ``ResourceApplyAdam`` and XLA's fusion of optax's update are
fused kernels. On ``mlp-wide`` on the 2-core CPU VM (one process, interleaved) a step took 7.6 ms
fused, 11.0 ms foreach and 11.8 ms with the for-loop. SGD uses ``foreach``. ``sync`` reads the
loss with ``.item()``, which waits for the CUDA stream.

Layouts: Linear weights are (out, in), so canonical kernels are transposed; conv kernels go
from HWIO to OIHW and images from NHWC to NCHW when placed (placement is timed apart); the
convnet flattens in NHWC order so the first dense layer matches the canonical rows. The GRU
is ``nn.GRUCell`` (PyTorch's gate order is the canonical one) stepped in a Python loop, so
every batch runs exactly its own length; padded strategies just run more steps. The transformer
is adapters/_torch_transformer.py; AdamW is ``torch.optim.AdamW`` (fused), decay on the kernels
and tables only (two parameter groups).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from adapters import _export_onnx, _export_torch, _torch_transformer, kit
from adapters._torch_data import IMAGE_LOADER_KIND, LOADER_KIND, data_loader, image_loader
from adapters._torch_model import build as _build
from adapters.base import Adapter, Options
from adapters.exporting import Exports, Forward
from workloads import Batch, Params, Workload
from workloads.optim import ADAM_BETA1, ADAM_BETA2, ADAM_EPS, ADAMW_WEIGHT_DECAY
from workloads.rnn import PAD, RNNCaption


class TorchEager(Exports, Adapter):
    name = "torch-eager"
    framework = "torch"
    graph = "dynamic"
    requires = ("torch",)
    extra = "torch"
    loader_kind = LOADER_KIND
    image_loader_kind = IMAGE_LOADER_KIND
    families = ("mlp", "cnn", "rnn-caption", "transformer")
    precisions = ("fp32", "tf32", "bf16")
    export_paths: ClassVar[tuple[str, ...]] = _export_torch.PATHS
    in_process_forward = True

    @classmethod
    def worker_env(cls, threads: int, device: str = "cpu") -> dict[str, str]:
        # Cold Inductor compiles for torch-compile (a subclass) and this adapter's AOTInductor export.
        return {**super().worker_env(threads, device), **kit.torch_env(threads, device)}

    def version(self) -> dict[str, str]:
        import torch

        return {"torch": torch.__version__}

    def export_reason(self, path: str, spec: Workload) -> str | None:
        reason = super().export_reason(path, spec)
        if reason is None and path == "onnx":
            return _export_onnx.runtime_reason()
        return reason

    def forward(self, spec: Workload, params: Params, device: str, options: Options) -> Forward:
        import torch

        torch.set_num_threads(options.threads)
        kit.torch_precision(torch, options.tf32)
        self.torch, self.spec = torch, spec  # what _compile reads
        module = _export_torch.served_module(torch, spec, params, device)
        return _export_torch.forward_of(torch, self._compile(module), device)

    def export(self, path: str, spec: Workload, params: Params, device: str, directory: Path) -> Path:
        return _export_torch.export(path, spec, params, device, directory)

    @classmethod
    def serve(cls, path: str, artifact: Path, device: str, threads: int) -> Forward:
        return _export_torch.serve(path, artifact, device, threads)

    def resolve_device(self, device: str) -> str:
        return kit.torch_resolve_device(device, "torch")

    def build_info(self) -> dict[str, Any]:
        return kit.torch_build_info()

    def setup(self, spec: Workload, params: Params, device: str, options: Options) -> None:
        import torch

        torch.set_num_threads(options.threads)
        kit.torch_precision(torch, options.tf32)
        self.torch = torch
        self.device = torch.device(device)
        self.spec = spec
        self.options = options
        self.model = _build(torch, spec, self._compile).to(self.device)
        self.model.load_canonical(params)
        betas = (ADAM_BETA1, ADAM_BETA2)
        if spec.optimizer == "sgd":
            self.opt: torch.optim.Optimizer = torch.optim.SGD(
                self.model.parameters(), lr=spec.learning_rate, foreach=True
            )
        elif spec.optimizer == "adamw":
            # Decay on kernels and tables (workloads.optim.decays): in torch exactly the tensors of
            # two or more dimensions, as every canonical kernel and table is and no bias or norm.
            decay = [p for p in self.model.parameters() if p.ndim >= 2]
            rest = [p for p in self.model.parameters() if p.ndim < 2]
            groups = [{"params": decay, "weight_decay": ADAMW_WEIGHT_DECAY}, {"params": rest, "weight_decay": 0.0}]
            self.opt = torch.optim.AdamW(groups, lr=spec.learning_rate, betas=betas, eps=ADAM_EPS, fused=True)
        else:
            self.opt = torch.optim.Adam(
                self.model.parameters(), lr=spec.learning_rate, betas=betas, eps=ADAM_EPS, fused=True
            )

    def _compile(self, fn: Any, dynamic: bool = False) -> Any:
        """How model functions become executable: as they are here (torch-compile overrides)."""
        return fn

    def to_device(self, batch: Batch) -> Any:
        placed = self._place({k: self.torch.from_numpy(np.ascontiguousarray(v)) for k, v in batch.items()})
        if self.device.type == "cuda":
            # The permute/.long() kernels run asynchronously: placement is done when they are.
            self.torch.cuda.synchronize(self.device)
        return placed

    def _place(self, batch: dict[str, Any], non_blocking: bool = False) -> Any:
        placed = {}
        for key, t in batch.items():
            t = t.to(self.device, non_blocking=non_blocking)
            if key == "x" and self.spec.family == "cnn":
                t = t.permute(0, 3, 1, 2).contiguous()  # NHWC -> NCHW, PyTorch's native layout
            if key in ("y", "tokens", "targets"):
                t = t.long()
            placed[key] = t
        return placed

    def loader(self, batches: list[Batch]) -> Iterator[Any]:
        cuda = self.device.type == "cuda"
        return (self._place(b, non_blocking=cuda) for b in data_loader(self.torch, batches, cuda))

    def image_loader(self, images: Any, settings: Any) -> tuple[Iterator[Any], dict[str, Any]]:
        cuda = self.device.type == "cuda"
        stream, knobs = image_loader(self.torch, images, settings, cuda)
        return (self._place(b, non_blocking=cuda) for b in stream), knobs

    def device_memory_peak(self) -> int | None:
        return kit.torch_peak_bytes(self.torch, self.device)

    def train_step(self, batch: Any) -> Any:
        self.opt.zero_grad(set_to_none=True)
        with kit.torch_autocast(self.torch, self.device, self.options.bf16):
            loss = self.model.loss(batch)
        loss.backward()
        self.opt.step()
        return loss.detach()

    def infer_step(self, batch: Any) -> Any:
        assert isinstance(self.spec, RNNCaption)
        with self.torch.inference_mode():
            return self.model.decode(batch["features"], self.spec.max_len)

    def sync(self, handle: Any) -> float:
        if handle.dtype == self.torch.long:  # decoded tokens: mean caption length
            return float((handle != PAD).sum().item()) / len(handle)
        return float(handle.item())

    def fetch(self, handle: Any) -> np.ndarray:
        return handle.cpu().numpy()

    def params(self) -> Params:
        return self.model.canonical()

    def settings(self) -> dict[str, Any]:
        d = self.opt.defaults
        kind = "fused" if d.get("fused") else "foreach" if d.get("foreach") else "for-loop"
        attention = self.spec.family == "transformer"
        return {
            **kit.torch_settings(self.torch),
            "optimizer_kernel": f"torch.optim.{type(self.opt).__name__} ({kind})",
            **({"attention_kernel": _torch_transformer.ATTENTION_KERNELS[self.spec.attention]} if attention else {}),
            "mixed_precision": kit.mixed_precision("torch", self.options),
        }

    def device_busy(self) -> bool | None:
        return kit.torch_device_busy(self.torch, self.device)
