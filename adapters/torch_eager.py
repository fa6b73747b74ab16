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
from typing import Any

import numpy as np

from adapters import _export_onnx, _export_torch, _torch_transformer, kit
from adapters._torch_data import IMAGE_LOADER_KIND, LOADER_KIND, data_loader, image_loader
from adapters.base import Adapter, Forward, Options
from workloads import Batch, Params, Workload
from workloads.optim import ADAM_BETA1, ADAM_BETA2, ADAM_EPS, ADAMW_WEIGHT_DECAY
from workloads.rnn import BOS, EOS, PAD


class TorchEager(Adapter):
    name = "torch-eager"
    framework = "torch"
    graph = "dynamic"
    requires = ("torch",)
    extra = "torch"
    loader_kind = LOADER_KIND
    image_loader_kind = IMAGE_LOADER_KIND
    families = ("mlp", "cnn", "rnn-caption", "transformer")
    precisions = ("fp32", "tf32", "bf16")
    export_paths = _export_torch.PATHS
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
            self.opt = torch.optim.SGD(self.model.parameters(), lr=spec.learning_rate, foreach=True)
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


def _build(torch, spec: Workload, compile_fn: Any):
    """The spec's model as an nn.Module with load_canonical / canonical / loss (/ decode).

    ``compile_fn(fn, dynamic)`` wraps the hot functions: the whole loss of the feed-forward
    models; for the caption decoder the GRU step (fixed shapes) and the batched output head
    (time length symbolic), so the Python time loop never needs a recompile."""
    nn, F = torch.nn, torch.nn.functional

    def t(a: np.ndarray) -> Any:
        return torch.from_numpy(np.ascontiguousarray(a))

    def dense_stack(sizes: list[int]) -> Any:
        return nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:], strict=True))

    def run_dense(layers, h):
        for i, layer in enumerate(layers):
            h = layer(h)
            if i < len(layers) - 1:
                h = F.relu(h)
        return h

    class Dense(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.dense = dense_stack(spec.layer_sizes)
            self._loss = compile_fn(self._uncompiled_loss)

        def forward(self, x):
            return run_dense(self.dense, x.flatten(1))

        def _uncompiled_loss(self, x, y):
            return F.cross_entropy(self(x), y)

        def loss(self, batch):
            return self._loss(batch["x"], batch["y"])

        def load_canonical(self, p: Params) -> None:
            with torch.no_grad():
                for i, layer in enumerate(self.dense):
                    layer.weight.copy_(t(p[f"dense{i}/kernel"].T))
                    layer.bias.copy_(t(p[f"dense{i}/bias"]))

        def canonical(self) -> Params:
            out = {}
            for i, layer in enumerate(self.dense):
                out[f"dense{i}/kernel"] = layer.weight.detach().cpu().numpy().T.copy()
                out[f"dense{i}/bias"] = layer.bias.detach().cpu().numpy().copy()
            return out

    class Conv(Dense):
        def __init__(self) -> None:
            nn.Module.__init__(self)
            cins = [spec.input_shape[2], *spec.channels[:-1]]
            self.convs = nn.ModuleList(nn.Conv2d(a, b, 3, padding=1) for a, b in zip(cins, spec.channels, strict=True))
            self.dense = dense_stack(spec.dense_sizes)
            self._loss = compile_fn(self._uncompiled_loss)

        def forward(self, x):
            for conv in self.convs:
                x = F.max_pool2d(F.relu(conv(x)), 2)
            # flatten in (H, W, C) order, the canonical one
            return run_dense(self.dense, x.permute(0, 2, 3, 1).flatten(1))

        def load_canonical(self, p: Params) -> None:
            super().load_canonical(p)
            with torch.no_grad():
                for i, conv in enumerate(self.convs):
                    conv.weight.copy_(t(kit.hwio_to_oihw(p[f"conv{i}/kernel"])))
                    conv.bias.copy_(t(p[f"conv{i}/bias"]))

        def canonical(self) -> Params:
            out = super().canonical()
            for i, conv in enumerate(self.convs):
                out[f"conv{i}/kernel"] = kit.oihw_to_hwio(conv.weight.detach().cpu().numpy())
                out[f"conv{i}/bias"] = conv.bias.detach().cpu().numpy().copy()
            return out

    class Caption(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.img = nn.Linear(spec.feature_dim, spec.hidden)
            self.embed = nn.Embedding(spec.vocab, spec.embed_dim)
            self.cell = nn.GRUCell(spec.embed_dim, spec.hidden)
            self.out = nn.Linear(spec.hidden, spec.vocab)
            self._step = compile_fn(self.cell)
            self._head = compile_fn(self._uncompiled_head, dynamic=True)
            self._next = compile_fn(self._uncompiled_next)

        def _uncompiled_head(self, states, targets, mask):
            logits = self.out(states)
            ce = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none")
            return (ce * mask.flatten()).sum() / mask.sum()

        def _uncompiled_next(self, token, h, done):
            h = self.cell(self.embed(token), h)
            return h, torch.where(done, PAD, self.out(h).argmax(dim=1))

        def loss(self, batch):
            h = torch.tanh(self.img(batch["features"]))
            emb = self.embed(batch["tokens"].t())  # time-major: each step's slice is contiguous
            states = []
            for step in range(emb.shape[0]):
                h = self._step(emb[step], h)
                states.append(h)
            return self._head(torch.stack(states, dim=1), batch["targets"], batch["mask"])

        def decode(self, features, max_len: int):
            h = torch.tanh(self.img(features))
            token = torch.full((len(features),), BOS, dtype=torch.long, device=features.device)
            done = torch.zeros(len(features), dtype=torch.bool, device=features.device)
            out = torch.full((len(features), max_len), PAD, dtype=torch.long, device=features.device)
            for step in range(max_len):
                h, token = self._next(token, h, done)
                out[:, step] = token
                done |= token == EOS
                if bool(done.all()):  # the data-dependent exit: a host sync every step
                    break
            return out

        def load_canonical(self, p: Params) -> None:
            with torch.no_grad():
                self.img.weight.copy_(t(p["img/kernel"].T))
                self.img.bias.copy_(t(p["img/bias"]))
                self.embed.weight.copy_(t(p["embed/table"]))
                self.cell.weight_ih.copy_(t(p["gru/kernel"].T))
                self.cell.weight_hh.copy_(t(p["gru/recurrent_kernel"].T))
                self.cell.bias_ih.copy_(t(p["gru/bias"]))
                self.cell.bias_hh.copy_(t(p["gru/recurrent_bias"]))
                self.out.weight.copy_(t(p["out/kernel"].T))
                self.out.bias.copy_(t(p["out/bias"]))

        def canonical(self) -> Params:
            def n(x):
                return x.detach().cpu().numpy().copy()

            return {
                "img/kernel": n(self.img.weight).T.copy(),
                "img/bias": n(self.img.bias),
                "embed/table": n(self.embed.weight),
                "gru/kernel": n(self.cell.weight_ih).T.copy(),
                "gru/recurrent_kernel": n(self.cell.weight_hh).T.copy(),
                "gru/bias": n(self.cell.bias_ih),
                "gru/recurrent_bias": n(self.cell.bias_hh),
                "out/kernel": n(self.out.weight).T.copy(),
                "out/bias": n(self.out.bias),
            }

    if spec.family == "transformer":
        return _torch_transformer.build(torch, spec, compile_fn)
    return {"mlp": Dense, "cnn": Conv, "rnn-caption": Caption}[spec.family]()
