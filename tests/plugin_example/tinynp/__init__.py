"""tinynp: a stand-in framework for the tests of a plugin's hooks (tests/test_plugin_hooks.py).

NumPy underneath, with what a framework brings that the hooks reach: its own op recorder (read by
its profiler, ``tinynp.hooks.profile``), its own kernels (``tinynp.hooks.kernels``) and a device
of its own, ``tinynp-host`` (the host under a second name: ``tinynp.hooks.host_device``). The
package registers all of them in tests/plugin_example/pyproject.toml and imports nothing of
dlcompare here, so discovery stays cheap.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

__version__ = "0.1"

#: (name, category, start, end) in perf_counter seconds of each op run while recording; None: not recording.
recorded: list[tuple[str, str, float, float]] | None = None


def op(name: str, category: str, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` run as one op, recorded while ``recorded`` is a list."""
    if recorded is None:
        return fn(*args)
    t0 = time.perf_counter()
    out = fn(*args)
    recorded.append((name, category, t0, time.perf_counter()))
    return out
