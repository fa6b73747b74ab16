"""PyTorch with ``torch.compile`` (TorchDynamo + Inductor): PyTorch's static-graph mode.

The same modules as torch-eager (adapters/torch_eager.py) with their hot functions compiled,
``dynamic=False`` (shapes specialised; the record says so): the whole loss (forward; the
backward is compiled by AOTAutograd) of the MLPs and the convnet; for the caption decoder the
GRU step and the greedy-decode step (fixed shapes: compiled once) and the output head with a
symbolic time length (``dynamic=True``), while the time loop stays in Python, the usual way to
compile a recurrent model without unrolling it per length. The optimiser runs eagerly, with
torch-eager's kernels (fused Adam, foreach SGD). There is no loop inside the graph, so ``graph-loop`` is skipped.
The transformer's whole loss is compiled, ``dynamic=False``: one graph per sequence length under
``exact``, per bucket under ``bucketed``, one under ``padded`` (TorchDynamo's recompile limit is
raised to the number of lengths the spec can produce, so none falls back to eager).

Compile counts and seconds come from TorchDynamo's own instrumentation (``unique_graphs``,
``compilation_time_metrics``); graph breaks are recorded in ``settings``.
"""

from __future__ import annotations

from typing import Any

from adapters import kit
from adapters.torch_eager import TorchEager
from workloads.transformer import Transformer


class TorchCompile(TorchEager):
    name = "torch-compile"
    graph = "static"
    export_paths = ()  # torch's export paths are torch-eager's: one artifact per framework

    def _compile(self, fn: Any, dynamic: bool = False) -> Any:
        if self.spec.family == "transformer":
            assert isinstance(self.spec, Transformer)
            # One graph per sequence length under ``exact``: TorchDynamo's default limit (8
            # recompiles of a function, then it runs eagerly) would hide every later one.
            config = self.torch._dynamo.config
            config.recompile_limit = max(config.recompile_limit, self.spec.max_len + 1)
            config.accumulated_recompile_limit = max(config.accumulated_recompile_limit, 4 * (self.spec.max_len + 1))
        return self.torch.compile(fn, dynamic=dynamic, mode="default")

    def compile_stats(self) -> dict[str, Any]:
        return kit.torch_compile_stats()

    def settings(self) -> dict[str, Any]:
        from torch._dynamo.utils import counters

        breaks = int(sum(counters["graph_break"].values()))
        return {
            **super().settings(),
            "backend": "inductor",
            "mode": "default",
            "dynamic": False,
            "graph_breaks": breaks,
            # False under worker_env: compiles are cold (kit.torch_env)
            "inductor_caches": not self.torch.compiler.config.force_disable_caches,
        }
