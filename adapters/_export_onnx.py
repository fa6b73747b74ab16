"""ONNX Runtime, the common runtime of the export task: it serves any framework's ONNX graph.

Which execution provider serves a cell is chosen from the device the cell asked for and the
providers the installed build has (``providers``); ORT silently falls back to the CPU when a
provider it was given fails to start, so ``serve`` checks the session's own list and refuses to
time a CUDA cell on the CPU. ``onnxruntime`` is the CPU build; ``onnxruntime-gpu`` adds
``CUDAExecutionProvider``, documented at
https://onnxruntime.ai/docs/execution-providers/CUDA-ExecutionProvider.html. On both GPU install
variants it is in TensorFlow's environment (.venv-tf, ``locks/tf-cuda12.in``: the CUDA 12 build,
beside TensorFlow's CUDA 12 libraries), where tf-function's and keras-tf's ONNX graphs are
served; ``.venv`` holds the CPU build. A CUDA session first has ONNX Runtime load the CUDA and
cuDNN libraries of its own major from the environment's ``nvidia-*`` wheels (``preload_dlls``,
onnxruntime 1.21 and later), which its provider library does not find by itself.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

from adapters.base import DeviceUnavailable
from adapters.exporting import Forward

CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"
#: The file name of an ONNX artifact in its cell's folder.
FILE = "model.onnx"


def runtime_reason() -> str | None:
    """None if ONNX Runtime can be imported, else the reason with the install command."""
    if importlib.util.find_spec("onnxruntime") is None:
        return "onnxruntime not installed: pip install 'dlcompare[export]'"
    return None


def providers(device: str, available: list[str]) -> list[str | tuple[str, dict[str, str]]]:
    """The providers to ask for, in order, on ``device`` given the build's ``available`` ones.
    CPU cells run on the CPU provider alone, so they never touch a GPU; CUDA cells need the CUDA
    provider (the CPU one is kept after it for the few ops CUDA lacks, as ORT's docs advise), with
    TF32 off (``use_tf32``, on by default): full float32, as every other served program."""
    if device == "cpu":
        return [CPU]
    if device == "cuda":
        if CUDA not in available:
            raise DeviceUnavailable(
                f"onnxruntime has no {CUDA} (available: {', '.join(available) or 'none'}): this environment "
                "has the CPU build; onnxruntime-gpu is in the GPU variants' .venv-tf (locks/tf-cuda12.in), "
                "which serves tf-function's and keras-tf's ONNX graphs (docs/export.md)"
            )
        return [(CUDA, {"use_tf32": "0"}), CPU]
    raise ValueError(f"device {device!r} is not one of cpu, cuda")


def check_placed(device: str, used: list[str]) -> None:
    """Raise DeviceUnavailable when a CUDA session did not get the CUDA provider (ORT falls back
    to the CPU with only a log line when the provider's libraries fail to load)."""
    if device == "cuda" and (not used or used[0] != CUDA):
        raise DeviceUnavailable(f"onnxruntime could not start {CUDA}; the session got {', '.join(used)}")


def serve(artifact: Path, device: str, threads: int) -> Forward:
    """An InferenceSession over ``artifact`` with ``threads`` intra-op threads on ``device``; on
    cuda, after ``onnxruntime.preload_dlls()`` where the build has it. Raises DeviceUnavailable
    where the CUDA provider is missing or did not start."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    chosen = providers(device, ort.get_available_providers())
    if device == "cuda" and hasattr(ort, "preload_dlls"):  # onnxruntime >= 1.21
        # The CUDA provider's library finds libcudart and cuDNN only on the loader's path; this
        # loads them from the environment's nvidia-* wheels first, else the session would fall
        # back to the CPU (and check_placed fail the row).
        ort.preload_dlls()
    session = ort.InferenceSession(str(artifact), options, providers=chosen)
    check_placed(device, session.get_providers())
    name = session.get_inputs()[0].name

    def forward(x: np.ndarray) -> np.ndarray:
        # run() copies the input to the device and the outputs back to host memory: synchronous.
        return session.run(None, {name: x})[0]

    return forward


def version() -> dict[str, str]:
    import onnxruntime

    return {"onnxruntime": onnxruntime.__version__}
