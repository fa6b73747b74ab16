"""PyTorch with ``torch.compile`` (TorchDynamo + Inductor): PyTorch's static-graph mode.

The same modules as torch-eager (adapters/torch_eager.py) with their hot functions compiled,
``dynamic=False`` (shapes specialised; the record says so): the whole loss (forward; the
backward is compiled by AOTAutograd) of the MLPs and the convnet; for the caption decoder the
GRU step and the greedy-decode step (fixed shapes: compiled once) and the output head with a
symbolic time length (``dynamic=True``), while the time loop stays in Python, the usual way to
compile a recurrent model without unrolling it per length. The optimiser runs eagerly, with
torch-eager's kernels (fused Adam, foreach SGD). There is no loop inside the graph, so ``graph-loop`` is skipped.

Compile counts and seconds come from TorchDynamo's own instrumentation (``unique_graphs``,
``compilation_time_metrics``); graph breaks are recorded in ``settings``.
"""

from __future__ import annotations

from typing import Any

from adapters import kit
from adapters.torch_eager import TorchEager


class TorchCompile(TorchEager):
    name = "torch-compile"
    graph = "static"

    def _compile(self, fn: Any, dynamic: bool = False) -> Any:
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
        }
