"""The plain NumPy containers every workload, optimiser and adapter passes around."""

from __future__ import annotations

import numpy as np

Params = dict[str, np.ndarray]
"""Parameters by canonical name (``dense0/kernel``), each in the spec's canonical layout."""
Batch = dict[str, np.ndarray]
"""One batch's arrays by name (``x``, ``y``; the caption decoder's ``features``, ``tokens``)."""
