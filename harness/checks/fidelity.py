"""The fidelity check: does an adapter time what its framework's users run?

Each script in ``fidelity/`` is the shortest training loop its framework's documentation teaches
for the ``mlp`` workload, and names the adapters it stands beside (``ADAPTERS = (...)``). A
fidelity run plans the adapters' ordinary bench cells and, for each, a twin cell that runs the
script instead of the worker, in the adapter's worker environment; the rounds of all of them are
interleaved (harness.running.rounds.schedule), so drift lands on adapter and script alike. The page
(harness.reporting.fidelity) gives adapter / script ratios of latency and throughput.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path

from adapters import AdapterInfo
from harness.records import IDIOMATIC, Cell

FIDELITY_DIR = Path(__file__).resolve().parents[2] / "fidelity"
WORKLOAD = "mlp"
DEFAULT_BATCH_SIZES = "32,1024"


def scripts(folder: Path = FIDELITY_DIR) -> dict[str, str]:
    """Adapter name -> the module of its idiomatic script, read from each script's ``ADAPTERS``
    without importing it (a script imports its framework)."""
    found: dict[str, str] = {}
    for path in sorted(folder.glob("*.py")):
        if path.name.startswith("_"):
            continue
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "ADAPTERS" for t in node.targets):
                for name in ast.literal_eval(node.value):
                    found[name] = f"{folder.name}.{path.stem}"
    return found


def with_scripts(cells: list[Cell], known: Mapping[str, str]) -> list[Cell]:
    """The adapter cells that have a script, each followed by its idiomatic twin (same spec,
    device and environment; its own cell id)."""
    out: list[Cell] = []
    for cell in cells:
        module = known.get(cell["adapter"])
        if module is None:
            continue
        twin: Cell = {**cell, "cell_id": f"{cell['cell_id']}|{IDIOMATIC}", "kind": IDIOMATIC, "script": module}
        out += [cell, twin]
    return out


def without_script(adapters: Mapping[str, AdapterInfo], names: list[str], known: Mapping[str, str]) -> list[str]:
    """The selected adapters that have no idiomatic script (the page names them)."""
    return [n for n in names if n in adapters and n not in known]
