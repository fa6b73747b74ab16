"""The fidelity check: does an adapter time what its framework's users run?

Each script in ``fidelity/`` is the shortest training loop its framework's documentation teaches
for the ``mlp`` workload, and names the adapters it stands beside (``ADAPTERS = (...)``). A
fidelity run plans the adapters' ordinary bench cells and, for each, a twin cell that runs the
script instead of the worker, in the adapter's worker environment; the rounds of all of them are
interleaved (harness.running.rounds.schedule), so drift lands on adapter and script alike. The page
(harness.reporting.fidelity) gives adapter / script ratios of latency and throughput.

A plugin adds its framework's script as an entry point of ENTRY_POINT_GROUP whose value is the
script's module (docs/adding-an-adapter.md, section 9): it is run as ``python -m <module>`` like
the scripts here, and its ``ADAPTERS`` read the same way.
"""

from __future__ import annotations

import ast
import importlib.util
from collections.abc import Mapping
from pathlib import Path

from adapters import AdapterInfo, PluginError, hooks
from harness.records import IDIOMATIC, Cell

FIDELITY_DIR = Path(__file__).resolve().parents[2] / "fidelity"
WORKLOAD = "mlp"
DEFAULT_BATCH_SIZES = "32,1024"
#: A plugin's idiomatic script: an entry point of this group whose value is the script's module.
ENTRY_POINT_GROUP = "dlcompare.fidelity"


def adapters_of(source: str) -> list[str]:
    """The adapter names a script's source assigns to ``ADAPTERS`` (none: [])."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "ADAPTERS" for t in node.targets):
            return list(ast.literal_eval(node.value))
    return []


def scripts(folder: Path = FIDELITY_DIR, plugins: bool = True) -> dict[str, str]:
    """Adapter name -> the module of its idiomatic script, read from each script's ``ADAPTERS``
    without importing it (a script imports its framework): the scripts in ``folder``, then, with
    ``plugins``, the plugins' (their package's ``__init__`` is imported to find the file). Raises
    PluginError for a plugin's script that cannot be found or an adapter given two scripts."""
    found: dict[str, str] = {}
    for path in sorted(folder.glob("*.py")):
        if not path.name.startswith("_"):
            found.update(dict.fromkeys(adapters_of(path.read_text()), f"{folder.name}.{path.stem}"))
    for ep in hooks(ENTRY_POINT_GROUP).values() if plugins else ():
        try:
            spec = importlib.util.find_spec(ep.value)
        except Exception as exc:  # noqa: BLE001 - a parent package that does not import: the same error
            spec, why = None, f"{type(exc).__name__}: {exc}"
        else:
            why = "no such module"
        if spec is None or not spec.origin or not Path(spec.origin).is_file():
            raise PluginError(f"{ENTRY_POINT_GROUP} entry point {ep.name!r} names {ep.value!r}: {why}")
        names = adapters_of(Path(spec.origin).read_text())
        if not names:
            raise PluginError(f"{ENTRY_POINT_GROUP} entry point {ep.name!r}: {ep.value} assigns no ADAPTERS")
        for name in names:
            if name in found:
                raise PluginError(f"adapter {name!r} has two idiomatic scripts: {found[name]} and {ep.value}")
            found[name] = ep.value
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
