"""The torch model of every workload, as one ``nn.Module`` built from the spec: torch-eager's and
torch-compile's training cells and torch's export paths (adapters/_export_torch.py) run this code."""

from __future__ import annotations

from typing import Any

import numpy as np

from adapters import _torch_transformer, kit
from workloads import Params, Workload
from workloads.cnn import CNN
from workloads.mlp import MLP
from workloads.rnn import BOS, EOS, PAD, RNNCaption
from workloads.transformer import Transformer


def build(torch: Any, spec: Workload, compile_fn: Any) -> Any:
    """The spec's model as an nn.Module with load_canonical / canonical / loss (/ decode).

    ``compile_fn(fn, dynamic)`` wraps the hot functions: the whole loss of the feed-forward
    models; for the caption decoder the GRU step (fixed shapes) and the batched output head
    (time length symbolic), so the Python time loop never needs a recompile."""
    nn, F = torch.nn, torch.nn.functional
    Module: Any = nn.Module

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

    class Dense(Module):
        def __init__(self) -> None:
            super().__init__()
            assert isinstance(spec, MLP)
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
            assert isinstance(spec, CNN)
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

    class Caption(Module):
        def __init__(self) -> None:
            super().__init__()
            assert isinstance(spec, RNNCaption)
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
        assert isinstance(spec, Transformer)
        return _torch_transformer.build(torch, spec, compile_fn)
    return {"mlp": Dense, "cnn": Conv, "rnn-caption": Caption}[spec.family]()
