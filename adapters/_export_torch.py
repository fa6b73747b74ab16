"""torch's export paths (docs/export.md): the in-process forward, ``torch.export`` to an
ExportedProgram (``.pt2``, ``torch.export.save``/``load``), AOTInductor's compiled package
(``torch._inductor.aoti_compile_and_package``/``aoti_load_package``) and ONNX through
``torch.onnx.export`` (the dynamo exporter), served by ONNX Runtime.

The model is torch-eager's own ``nn.Module`` (adapters/torch_eager.py) in eval mode, wrapped so
it takes the workload's NHWC images and converts to NCHW inside the graph: an artifact answers
requests in the workload's layout, whatever layout its framework computes in.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from adapters import _export_onnx
from adapters.exporting import Forward
from workloads import CNN, MLP, Params, Workload

PATHS = ("torch-export", "torch-aoti", "onnx")
FILES = {"torch-export": "model.pt2", "torch-aoti": "model_aoti.pt2", "onnx": _export_onnx.FILE}
#: The example batch the programs are traced at; the batch dimension is exported symbolic.
EXAMPLE_BATCH = 2


def served_module(torch: Any, spec: Workload, params: Params, device: str) -> Any:
    """torch-eager's model of ``spec`` from canonical ``params``, taking NHWC, in eval mode."""
    from adapters._torch_model import build

    inner = build(torch, spec, lambda fn, dynamic=False: fn)
    inner.load_canonical(params)
    nhwc = spec.family == "cnn"

    class Served(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, x):
            return self.inner(x.permute(0, 3, 1, 2) if nhwc else x)

    return Served().eval().to(device)


def forward_of(torch: Any, module: Any, device: str) -> Forward:
    """A ``Forward`` over a callable torch model: NumPy in, placed, run without autograd, NumPy
    out (``.cpu()`` waits for the CUDA stream)."""
    dev = torch.device(device)

    def forward(x: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            return module(torch.from_numpy(x).to(dev)).cpu().numpy()

    return forward


def export(path: str, spec: Workload, params: Params, device: str, directory: Path) -> Path:
    import torch

    module = served_module(torch, spec, params, device)
    assert isinstance(spec, (MLP, CNN))
    example = (torch.zeros((EXAMPLE_BATCH, *spec.input_shape), device=device),)
    dynamic = ({0: torch.export.Dim("batch", min=1, max=65536)},)
    out = directory / FILES[path]
    if path == "onnx":
        torch.onnx.export(
            module, example, str(out), dynamo=True, dynamic_shapes=dynamic, input_names=["x"], output_names=["logits"]
        )
        return out
    program = torch.export.export(module, example, dynamic_shapes=dynamic)
    if path == "torch-export":
        torch.export.save(program, str(out))
    else:  # AOTInductor compiles the program to a shared library for the device it was exported on
        torch._inductor.aoti_compile_and_package(program, package_path=str(out))
    return out


def serve(path: str, artifact: Path, device: str, threads: int) -> Forward:
    if path == "onnx":
        return _export_onnx.serve(artifact, device, threads)
    import torch

    torch.set_num_threads(threads)
    module: Any
    if path == "torch-export":
        module = torch.export.load(str(artifact)).module().to(device)
    else:
        module = torch._inductor.aoti_load_package(str(artifact))
    return forward_of(torch, module, device)
