"""What the describing child runs (workloads.model_file's ``CHILD``): one model file, described on
the Keras backend its ``KERAS_BACKEND`` names.

``child_main`` writes into its folder what ``model_file._load`` reads (``settings.json``,
``params.npz``, ``batch{i}.npz``), or says the file's fault as one line on stdout. Only that child
imports this module (its functions import Keras); the helpers both sides use live in
workloads.model_file, which never imports this one.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from workloads.model_file import DEFAULTS, _fault, _import, _rows, _signature, _structured
from workloads.spec import SpecError


def child_main(argv: list[str]) -> None:
    """The describing child: FILE BATCH_SIZE (0: the file's) SEED NUM_BATCHES OUT; a fault of the
    file is one line on stdout and exit 2, or 3 where another backend may not have it."""
    path, size, seed, count, folder = argv
    try:
        _child(Path(path), int(size), int(seed), int(count), Path(folder))
    except SpecError as error:
        print(error)
        raise SystemExit(3 if isinstance(error, _OnThisBackend) else 2) from None


def _child(file: Path, batch_size: int, seed: int, num_batches: int, out: Path) -> None:
    """Describe ``file`` into ``out`` on Keras's NumPy backend (this process's KERAS_BACKEND)."""
    import keras

    module = _import(file)
    where = f"model file {str(file)!r}"
    missing = [f for f in ("build", "data") if not callable(getattr(module, f, None))]
    if missing:
        raise SpecError(f"{where} defines no {' and no '.join(f + '()' for f in missing)} (docs/your-keras-model.md)")
    settings = {k: getattr(module, k, v) for k, v in DEFAULTS.items()}
    if not isinstance(settings["LOSS"], str):  # Loss objects (a list or dict of them): their configs, as JSON
        try:
            settings["LOSS"] = json.dumps(_serialized(keras, settings["LOSS"]))
        except Exception as exc:  # noqa: BLE001
            raise SpecError(f"{where}: LOSS is neither a loss name nor a Keras loss: {_fault(exc)}") from exc
    if settings["OPTIMIZER"] not in ("sgd", "adam", "adamw"):
        raise SpecError(f"{where}: OPTIMIZER {settings['OPTIMIZER']!r} is not one of: sgd, adam, adamw")
    size = batch_size or int(settings["BATCH_SIZE"])
    batches, settings["structure"] = _batches(module, where, size, seed, num_batches)
    if not batch_size:  # the file's settings only (from_file): the model is built with the run's batch size
        return _write(out, settings, {}, [])
    keras.utils.set_random_seed(seed)
    try:
        model = module.build()
        if not isinstance(model, keras.Model):
            raise SpecError(f"{where}: build() returned {type(model).__name__}, not a keras.Model")
    except SpecError:
        raise
    except MemoryError as exc:
        settings["too_large"] = f"build() asks for more memory than this machine has: {_fault(exc)}"
        return _write(out, settings, {}, batches)
    except Exception as exc:  # noqa: BLE001
        layer = _layer_in(exc, file)
        raise (_OnThisBackend if layer else SpecError)(f"{where}: build() fails{layer}: {_fault(exc)}") from exc
    try:
        model(_rows(settings["structure"], batches[0], 2))  # builds a subclassed model; fails on inputs it rejects
    except MemoryError as exc:
        settings["too_large"] = f"the model's first call asks for more memory than this machine has: {_fault(exc)}"
        return _write(out, settings, {}, batches)
    except Exception as exc:  # noqa: BLE001
        shapes = ", ".join(f"{k} {v.shape}" if k != "x" else str(v.shape) for k, v in batches[0].items() if k[0] == "x")
        layer = _layer_in(exc, file)
        said = f"{where}: the model rejects data()'s inputs of shape {shapes}{layer}: {_fault(exc)}"
        raise (_OnThisBackend if layer else SpecError)(said) from exc
    params = {f"{i:03d}:{v.path}": np.asarray(v.numpy(), np.float32) for i, v in enumerate(model.weights)}
    on_numpy = keras.backend.backend() == "numpy"  # (the count reads the NumPy backend's calls)
    settings["kernels"] = _kernels(model, batches, settings["structure"]) if on_numpy else {}
    _write(out, settings, params, batches)


class _OnThisBackend(SpecError):
    """A fault of ``build()`` or of the model's first call raised in one of the file's own layers,
    which another Keras backend may not have (a layer that calls one framework's API directly)."""


def _layer_in(exc: BaseException | None, file: Path) -> str:
    """`` in layer 'name' (Class)``: the innermost layer of ``file`` the traceback passes
    through, or "" where none does."""
    import keras

    found = ""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        tb = exc.__traceback__
        while tb is not None:
            me = tb.tb_frame.f_locals.get("self")
            if tb.tb_frame.f_code.co_filename == str(file) and isinstance(me, keras.layers.Layer):
                found = f" in layer {me.name!r} ({type(me).__name__})"
            tb = tb.tb_next
        exc = exc.__cause__ or exc.__context__
    return found


def _serialized(keras: Any, loss: Any) -> Any:
    """LOSS as JSON-able data: names stay, a Loss becomes its config, lists and dicts (one loss per
    output) keep their shape (a dict under ``by_output``); ``adapters._keras_common.loss_of``
    rebuilds it."""
    if isinstance(loss, str):
        return loss
    if isinstance(loss, dict):
        return {"by_output": {k: _serialized(keras, v) for k, v in loss.items()}}
    if isinstance(loss, (list, tuple)):
        return [_serialized(keras, v) for v in loss]
    config = keras.losses.serialize(loss)
    if not isinstance(config, dict):
        raise TypeError(f"{type(loss).__name__} is not a Keras loss")
    return config


def _batches(module: Any, where: str, size: int, seed: int, count: int) -> tuple[list[dict[str, np.ndarray]], dict]:
    """The run's ``count`` batches as flat dicts (``_flat``) and their one structure: batch ``i``
    is ``data(size, seed + i)``, or the ``i``-th a generator ``data(size, seed)`` yields."""
    try:
        first = module.data(size, seed)
        stream = first if isinstance(first, Iterator) else None
        got = [next(stream) if stream else module.data(size, seed + i) if i else first for i in range(count)]
    except StopIteration:
        raise SpecError(f"{where}: data({size}, {seed}) yielded fewer than the {count} batches a run takes") from None
    except Exception as exc:  # noqa: BLE001
        raise SpecError(f"{where}: data({size}, {seed}) fails: {_fault(exc)}") from exc
    batches, structures = [], []
    for i, pair in enumerate(got):
        if not (isinstance(pair, tuple) and len(pair) == 2):
            raise SpecError(f"{where}: data() must return (inputs, targets), got {type(pair).__name__}")
        x, sx = _flat(pair[0], "x")
        y, sy = _flat(pair[1], "y")
        rows = {len(v) if v.ndim else 0 for v in (x | y).values()}
        if rows != {size}:
            said = "a generator's" if stream else f"data({size}, {seed + i})'s"
            raise SpecError(
                f"{where}: {said} batch {i} has {' and '.join(map(str, sorted(rows)))} rows in its inputs and targets, "
                f"not {size}"
            )
        batches.append(x | y)
        structures.append({"x": sx, "y": sy})
    if any(s != structures[0] for s in structures):
        raise SpecError(f"{where}: data() gave batches of different structures: {structures[0]} and then others")
    return batches, structures[0]


def _flat(value: Any, side: str) -> tuple[dict[str, np.ndarray], Any]:
    """One side of a batch (an array, a list or tuple of arrays, or a dict by name) as flat batch
    entries (``x``, ``x:0``..., ``x:name``...) and its structure (None, a count, or the names)."""
    if isinstance(value, dict):
        return {f"{side}:{k}": np.asarray(v) for k, v in value.items()}, {"names": list(value)}
    if isinstance(value, (list, tuple)):
        return {f"{side}:{i}": np.asarray(v) for i, v in enumerate(value)}, {"count": len(value)}
    return {side: np.asarray(value)}, None


def _kernels(model: Any, batches: list[dict[str, np.ndarray]], structure: dict) -> dict[str, list]:
    """Each batch shape's training-step kernels (workloads.model_flops), by ``_signature``."""
    from workloads import model_flops

    found: dict[str, list] = {}
    for batch in batches:
        key = _signature(batch)
        if key not in found:
            found[key] = model_flops.step_kernels(model, _structured(batch, "x", structure["x"]))
    return found


def _write(out: Path, settings: dict[str, Any], params: dict[str, np.ndarray], batches: list[dict]) -> None:
    np.savez(out / "params.npz", **params)  # type: ignore[arg-type]  # numpy stubs: a key could be allow_pickle
    for i, b in enumerate(batches):
        np.savez(out / f"batch{i}.npz", **b)
    settings["param_order"] = list(params)
    (out / "settings.json").write_text(json.dumps(settings))
