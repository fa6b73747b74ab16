"""What the docs tests share: whether a dotted name a page mentions resolves."""

from __future__ import annotations

import importlib


def unresolved(dotted: str) -> str | None:
    """None when ``dotted`` (``harness.stats.verdicts.pair_verdict``) resolves: its longest
    importable prefix, then attributes; else what is missing, in words."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                return f"{dotted}: {'.'.join(parts[:i])} has no {attr}"
            obj = getattr(obj, attr)
        return None
    return f"{dotted} does not import"
