"""The plain NumPy containers every workload, optimiser and adapter passes around."""

from __future__ import annotations

import numpy as np

Params = dict[str, np.ndarray]
"""Parameters by canonical name (``dense0/kernel``), each in the spec's canonical layout."""
Batch = dict[str, np.ndarray]
"""One batch's arrays by name (``x``, ``y``; the caption decoder's ``features``, ``tokens``)."""


def ulp_moved(arrays: dict[str, np.ndarray], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Every non-integral float32 array moved by one ulp up or down at random, element-wise
    (masks and other 0/1 arrays stay as they are): arrays that differ from ``arrays`` by
    float32 rounding alone."""
    out = {}
    for k, v in arrays.items():
        if v.dtype == np.float32 and not np.array_equal(v, np.round(v)):
            up = rng.random(v.shape) < 0.5
            v = np.where(up, np.nextafter(v, np.float32(np.inf)), np.nextafter(v, np.float32(-np.inf)))
        out[k] = v
    return out
