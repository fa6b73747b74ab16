"""A user's Keras 3 model file as a workload (``python -m harness bench --model my_model.py``).

The file defines (docs/your-keras-model.md):

- ``build()``: an uncompiled ``keras.Model`` (functional, sequential or subclassed), written with
  ``keras.layers`` and ``keras.ops`` so that it runs on every backend;
- ``data(batch_size, seed)``: one batch as NumPy ``(inputs, targets)``, the same for the same
  arguments;
- optionally ``LOSS`` (a name ``keras.losses.get`` knows; default
  ``"sparse_categorical_crossentropy"``), ``OPTIMIZER`` (``"sgd"``, ``"adam"`` or ``"adamw"``;
  default ``"adam"``), ``LEARNING_RATE`` (default 1e-3) and ``BATCH_SIZE`` (default 32).

Nothing here imports Keras or the file into the process that asks. Everything the harness
needs from the file (its initial weights, its batches, its settings) comes from one run of it in
a child process on Keras's NumPy backend (``describe``), which touches no deep-learning
framework. The initial weights are Keras's own initialisers drawn there with the spec's seed,
so every backend starts from the same numbers. The result is cached by the file's content
and the spec's settings. A file that does not import, lacks ``build`` or ``data``, builds no
model, or gives data the model rejects is a SpecError with the child's one line.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from workloads.spec import Batch, Params, SpecError, Workload, _positive

FAMILY = "keras-model"
REPO = Path(__file__).resolve().parents[1]
#: Seconds the describing child may take (a Keras import and one forward pass on NumPy).
DESCRIBE_TIMEOUT_S = 300
DEFAULTS = {"LOSS": "sparse_categorical_crossentropy", "OPTIMIZER": "adam", "LEARNING_RATE": 1e-3, "BATCH_SIZE": 32}


@dataclasses.dataclass(frozen=True)
class ModelFile(Workload):
    """The workload of one model file; ``name`` and ``path`` are the file's path as the run names it
    (``canonical_name``: relative to the repository where it lies inside it, so records and
    reports read the same on every machine)."""

    family = FAMILY
    fixed_fields = ("name", "path")

    path: str = ""
    optimizer: str = "adam"
    learning_rate: float = 1e-3
    num_batches: int = 8
    loss: str = DEFAULTS["LOSS"]

    def validate(self) -> None:
        super().validate()
        _positive(self, "num_batches")
        self.described()  # the file's own faults, as one line

    def file(self) -> Path:
        """The file: ``path`` as the run names it (relative to the repository, or absolute)."""
        return _located(self.path)

    def described(self) -> dict[str, Any]:
        """What ``describe`` found: ``{"params": {...}, "batches": [...], "settings": {...}}``."""
        return _describe(self.file(), self.batch_size, self.seed, self.num_batches)

    def init_params(self) -> Params:
        return dict(self.described()["params"])

    def batches(self) -> list[Batch]:
        return list(self.described()["batches"])

    def reference_loss_and_grads(self, params: Params, batch: Batch, relu_tie: float = 0.0) -> tuple[float, Params]:
        raise SpecError(
            f"{self.name}: a model file has no NumPy reference; its backends are held to each other "
            "(harness.checks.backends), not to one"
        )

    def module(self) -> Any:
        """The file, imported in this process (a Keras adapter's worker, whose backend is set)."""
        return _import(self.file())


def from_file(path: str) -> ModelFile:
    """The spec of ``path`` with the file's own settings (``OPTIMIZER`` ...); SpecError names a
    missing file or any fault of it."""
    file = _located(path)
    if not file.is_file():
        raise SpecError(f"model file {path!r} does not exist")
    settings = _describe(file, None, 0, 1)["settings"]
    spec = ModelFile(
        name=path,
        path=path,
        batch_size=int(settings["BATCH_SIZE"]),
        optimizer=str(settings["OPTIMIZER"]),
        learning_rate=float(settings["LEARNING_RATE"]),
        loss=str(settings["LOSS"]),
    )
    spec.validate()
    return spec


def is_model_file(name: str) -> bool:
    return name.endswith(".py")


def canonical_name(path: str) -> str:
    """``path`` (relative to the working directory) as a run names it: relative to the repository
    where it lies inside it (workers run from there, and reports stay the same on every machine),
    else absolute."""
    file = Path(path).resolve()
    return str(file.relative_to(REPO)) if file.is_relative_to(REPO) else str(file)


def _located(path: str) -> Path:
    return Path(path) if Path(path).is_absolute() else REPO / path


# --- the child process ------------------------------------------------------------------------


def _cache_dir(file: Path, batch_size: int | None, seed: int, num_batches: int) -> Path:
    key = hashlib.sha256(file.read_bytes() + repr((batch_size, seed, num_batches)).encode()).hexdigest()[:24]
    root = Path(os.environ.get("DLCOMPARE_CACHE", Path(tempfile.gettempdir()) / "dlcompare-model-files"))
    return root / key


def _describe(file: Path, batch_size: int | None, seed: int, num_batches: int) -> dict[str, Any]:
    if not file.is_file():
        raise SpecError(f"model file {str(file)!r} does not exist")
    out = _cache_dir(file, batch_size, seed, num_batches)
    if not (out / "settings.json").is_file():
        out.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, KERAS_BACKEND="numpy", CUDA_VISIBLE_DEVICES="")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        args = [sys.executable, "-c", CHILD, str(file), str(batch_size or 0), str(seed)]
        try:
            proc = subprocess.run(
                [*args, str(num_batches), str(out)], env=env, capture_output=True, text=True, timeout=DESCRIBE_TIMEOUT_S
            )
        except subprocess.TimeoutExpired:
            raise SpecError(f"model file {str(file)!r}: no description within {DESCRIBE_TIMEOUT_S} s") from None
        if proc.returncode != 0:
            said = proc.stdout.strip() if proc.returncode == 2 else ""  # the child's one line
            raise SpecError(said or _one_line((proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]))
    return _load(out, num_batches if batch_size else 0)


@functools.cache
def _load(out: Path, num_batches: int) -> dict[str, Any]:
    """A description read once per process (a worker asks for the weights at every snapshot)."""
    settings = json.loads((out / "settings.json").read_text())
    with np.load(out / "params.npz") as f:
        params = {k: f[k] for k in settings["param_order"]}
    batches = []
    for i in range(num_batches):
        with np.load(out / f"batch{i}.npz") as f:
            batches.append({k: f[k] for k in f.files})
    return {"params": params, "batches": batches, "settings": settings}


def _one_line(text: str, limit: int = 600) -> str:
    """Keras's multi-line, coloured exception text as one plain line."""
    plain = re.sub(r"\x1b\[[0-9;]*m", "", text)
    flat = " ".join(plain.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _fault(exc: BaseException) -> str:
    return _one_line(f"{type(exc).__name__}: {exc}")


def _import(file: Path) -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"dlcompare_model_{file.stem}", file)
    if spec is None or spec.loader is None:
        raise SpecError(f"model file {str(file)!r} is not a Python module")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 - whatever the file raises is its fault, told in one line
        raise SpecError(f"model file {str(file)!r} does not import: {_fault(exc)}") from exc
    return module


def _child(file: Path, batch_size: int, seed: int, num_batches: int, out: Path) -> None:
    """Describe ``file`` into ``out`` on Keras's NumPy backend (this process's KERAS_BACKEND)."""
    import keras

    module = _import(file)
    where = f"model file {str(file)!r}"
    missing = [f for f in ("build", "data") if not callable(getattr(module, f, None))]
    if missing:
        raise SpecError(f"{where} defines no {' and no '.join(f + '()' for f in missing)} (docs/your-keras-model.md)")
    settings = {k: getattr(module, k, v) for k, v in DEFAULTS.items()}
    if not isinstance(settings["LOSS"], str):  # a Loss object: its config, which keras.losses.get rebuilds
        try:
            settings["LOSS"] = json.dumps(keras.losses.serialize(settings["LOSS"]))
        except Exception as exc:  # noqa: BLE001
            raise SpecError(f"{where}: LOSS is neither a loss name nor a Keras loss: {_fault(exc)}") from exc
    if settings["OPTIMIZER"] not in ("sgd", "adam", "adamw"):
        raise SpecError(f"{where}: OPTIMIZER {settings['OPTIMIZER']!r} is not one of: sgd, adam, adamw")
    size = batch_size or int(settings["BATCH_SIZE"])
    keras.utils.set_random_seed(seed)
    try:
        model = module.build()
    except Exception as exc:  # noqa: BLE001
        raise SpecError(f"{where}: build() fails: {_fault(exc)}") from exc
    if not isinstance(model, keras.Model):
        raise SpecError(f"{where}: build() returned {type(model).__name__}, not a keras.Model")
    batches = []
    for i in range(num_batches):
        try:
            got = module.data(size, seed + i)
        except Exception as exc:  # noqa: BLE001
            raise SpecError(f"{where}: data({size}, {seed + i}) fails: {_fault(exc)}") from exc
        if not (isinstance(got, tuple) and len(got) == 2):
            raise SpecError(f"{where}: data() must return (inputs, targets), got {type(got).__name__}")
        x, y = np.asarray(got[0]), np.asarray(got[1])
        if len(x) != size or len(y) != size:
            raise SpecError(f"{where}: data({size}, {seed + i}) gave {len(x)} inputs and {len(y)} targets, not {size}")
        batches.append({"x": x, "y": y})
    try:
        model(batches[0]["x"][:2])  # builds a subclassed model; fails on inputs the model rejects
    except Exception as exc:  # noqa: BLE001
        shape = batches[0]["x"].shape
        raise SpecError(f"{where}: the model rejects data()'s inputs of shape {shape}: {_fault(exc)}") from exc
    keys = [f"{i:03d}:{v.path}" for i, v in enumerate(model.weights)]
    np.savez(
        out / "params.npz", **{k: np.asarray(v.numpy(), np.float32) for k, v in zip(keys, model.weights, strict=True)}
    )
    for i, b in enumerate(batches if batch_size else []):
        np.savez(out / f"batch{i}.npz", **b)
    settings["param_order"] = keys
    (out / "settings.json").write_text(json.dumps(settings))


def child_main(argv: list[str]) -> None:
    """The describing child: FILE BATCH_SIZE (0: the file's) SEED NUM_BATCHES OUT; a fault of the
    file is one line on stdout and exit 2."""
    path, size, seed, count, folder = argv
    try:
        _child(Path(path), int(size), int(seed), int(count), Path(folder))
    except SpecError as error:
        print(error)
        raise SystemExit(2) from None


CHILD = "import sys; from workloads.model_file import child_main; child_main(sys.argv[1:])"
