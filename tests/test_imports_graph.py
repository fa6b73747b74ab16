"""The import graph of the harness's parts flows one way: no cycle, no upward arrow.

Drawn from the source with ``ast`` (nothing is imported or executed): every ``import`` and
``from ... import`` in harness/, at module level or inside a function, is an arrow from the part
holding it to the part it names. A *part* is a subpackage (``harness/running/``) or a top-level
module (``harness/records.py``). tests/test_imports.py checks the other rule: importing the
harness imports no framework.

The allowed direction, lowest first (a part may import only the parts listed for it in ALLOWED)::

    records  env  install  processes the record and its tags (over jsonlines, its crash-safe file, and
                                     record_types, its declared keys);
       ^      ^      ^        ^      the machine; install variants and the NVIDIA driver query (stdlib
                                     only: it runs before any environment); starting a process (the
                                     one launcher every part above uses)
    stats                            statistics over records (verdicts, combining rounds)
       ^
    measuring                        the step clock, peaks, floors, contention (records, env, stats,
                                     install: a framework's own environment for its floors)
       ^
    running                          plan, rounds, workers, executors (+ measuring, install)
       ^
    checks                           conformance, fidelity, doctor (+ running)
       ^
    session  calibrate  gpu_study    a bench run from plan to report; A/A calibration; the GPU study's
                                     runs (+ checks, reporting, run_folder: a run folder's name, lock,
                                     test write and one-line errors)
       ^
    export                           the export task, from plan to report (+ run_folder)
       ^
    cli  <-  __main__                argument parsing, one call per command

    reporting                        records and statistics only: a report is rebuilt from a run's
                                     records alone, so it needs nothing that runs or measures

A constant that two parts on different branches both need lives in the lower one: the
``contended`` tag's CONTENDED_CORES is a record rule (harness.records), read by measuring,
running and reporting.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from tests.conftest import REPO

HARNESS = REPO / "harness"

_BASE = {"records", "env", "install", "processes"}
ALLOWED: dict[str, set[str]] = {
    "harness": set(),  # harness/__init__.py
    "records": {"jsonlines", "record_types"},
    "record_types": set(),
    "jsonlines": set(),
    "env": set(),
    "install": set(),
    "processes": set(),
    "run_folder": {"records"},
    "stats": {"records"},
    "measuring": {"records", "env", "stats", "install", "processes"},
    "reporting": {"records", "stats"},
    "running": _BASE | {"stats", "measuring"},
    "checks": _BASE | {"stats", "measuring", "running"},
    "session": _BASE | {"stats", "measuring", "running", "checks", "reporting", "run_folder"},
    "calibrate": _BASE | {"stats", "measuring", "running", "checks", "reporting"},
    "gpu_study": _BASE | {"stats", "measuring", "running", "checks", "reporting"},
    "export": _BASE | {"stats", "measuring", "running", "checks", "reporting", "run_folder"},
    "cli": _BASE
    | {"stats", "measuring", "running", "checks", "reporting", "session", "calibrate", "export", "run_folder"},
    "__main__": {"cli"},
}


def part_of(module: str) -> str | None:
    """The part of the harness a dotted module name belongs to; None outside the harness."""
    names = module.split(".")
    if names[0] != "harness":
        return None
    return names[1] if len(names) > 1 else "harness"


def _module_name(path: Path, root: Path) -> str:
    names = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(names[:-1] if names[-1] == "__init__" else names)


def _imported(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    """Dotted names an import statement reaches (``from harness import records`` reaches harness.records)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:  # relative: resolved against the importing module's package
        package = module.split(".")
        package = package if is_package else package[:-1]
        package = package[: len(package) - (node.level - 1)]
        base = ".".join([*package, *([base] if base else [])])
    return [base, *(f"{base}.{alias.name}" for alias in node.names)]


def import_graph(root: Path = HARNESS) -> dict[tuple[str, str], list[str]]:
    """(importing part, imported part) -> where: ``path:line`` of each import making that arrow.
    ``import harness`` alone is no arrow: harness/__init__.py imports nothing (its own part in ALLOWED)."""
    arrows: dict[tuple[str, str], list[str]] = defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        module = _module_name(path, root)
        source = part_of(module)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            reached = _imported(node, module, path.name == "__init__.py")
            if isinstance(node, ast.ImportFrom) and len(reached) > 1 and reached[0] == "harness":
                reached = reached[1:]  # ``from harness import records``: the names are the parts
            for target in {part_of(name) for name in reached} - {None, source, "harness"}:
                arrows[source, target].append(f"{path.relative_to(root.parent)}:{node.lineno}")
    return dict(arrows)


def _parts() -> set[str]:
    found = {p.name for p in HARNESS.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    return found | ({p.stem for p in HARNESS.glob("*.py")} - {"__init__"}) | {"harness"}


def _cycles(edges: set[tuple[str, str]]) -> list[list[str]]:
    """Every strongly connected set of more than one part (Tarjan), each sorted."""
    graph: dict[str, set[str]] = defaultdict(set)
    for a, b in edges:
        graph[a].add(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted({x for edge in edges for x in edge}):
        if v not in index:
            visit(v)
    return found


def test_every_part_of_the_harness_has_a_place_in_the_allowed_direction():
    unplaced = sorted(_parts() - set(ALLOWED))
    assert not unplaced, f"add these parts of harness/ to ALLOWED in {Path(__file__).name}: {unplaced}"


def test_the_allowed_direction_itself_has_no_cycle():
    assert _cycles({(a, b) for a, bs in ALLOWED.items() for b in bs}) == []


def test_no_import_cycle_between_parts_of_the_harness():
    arrows = import_graph()
    cycles = _cycles(set(arrows))
    where = [f"{a} -> {b}: {', '.join(arrows[a, b])}" for c in cycles for a, b in arrows if a in c and b in c]
    assert not cycles, f"import cycles between {cycles}:\n" + "\n".join(where)


def test_no_upward_arrow_between_parts_of_the_harness():
    upward = [
        f"{a} -> {b}: {', '.join(where)} ({a} may import: {', '.join(sorted(ALLOWED.get(a, ()))) or 'nothing'})"
        for (a, b), where in sorted(import_graph().items())
        if b not in ALLOWED.get(a, set())
    ]
    assert not upward, "imports against the allowed direction:\n" + "\n".join(upward)


def test_the_graph_is_drawn_from_every_kind_of_import(tmp_path):
    """The drawing itself: absolute, ``from harness import part``, relative and in-function imports;
    imports within a part and of other packages are no arrows."""
    root = tmp_path / "harness"
    (root / "checks").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "checks" / "__init__.py").write_text("from . import doctor\n")
    (root / "checks" / "doctor.py").write_text(
        "import json\n"
        "import harness\n"
        "import harness.running.runner\n"
        "from harness import records, env\n"
        "from . import conformance\n"
        "from ..stats.cells import combine_all\n"
        "from adapters import discover\n"
        "def f():\n"
        "    from harness.reporting import report\n"
    )
    (root / "cli.py").write_text("from harness.checks import doctor\n")
    graph = import_graph(root)
    assert graph == {
        ("checks", "running"): ["harness/checks/doctor.py:3"],
        ("checks", "records"): ["harness/checks/doctor.py:4"],
        ("checks", "env"): ["harness/checks/doctor.py:4"],
        ("checks", "stats"): ["harness/checks/doctor.py:6"],
        ("checks", "reporting"): ["harness/checks/doctor.py:9"],
        ("cli", "checks"): ["harness/cli.py:1"],
    }


#: The project's packages whose modules the module-level graph covers.
PACKAGES = ("adapters", "workloads", "harness", "fidelity")


def module_graph(root: Path = REPO) -> dict[str, set[str]]:
    """Module -> the project modules it imports, anywhere in it: ``from pkg import sub`` is an
    arrow to ``pkg.sub`` where that is a module, else to ``pkg``; ``import a.b.c`` to its longest
    module prefix."""
    files = {_module_name(p, root / pkg): p for pkg in PACKAGES for p in sorted((root / pkg).rglob("*.py"))}
    graph: dict[str, set[str]] = {m: set() for m in files}
    for module, path in files.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                base = _imported(node, module, path.name == "__init__.py")[0]
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [max((p for p in files if a.name == p or a.name.startswith(p + ".")), key=len, default="")
                           for a in node.names]  # fmt: skip
            else:
                continue
            graph[module] |= {t for t in targets if t in files and t != module}
    return graph


def test_no_import_cycle_between_any_two_modules_of_the_project():
    """Finer than the parts above: adapters/, workloads/, fidelity/ and every module of harness/,
    one node each (a circle of two modules within one part is still a circle)."""
    graph = module_graph()
    assert graph["adapters._export_torch"] >= {"adapters._torch_model"}  # the drawing reads real imports
    cycles = _cycles({(a, b) for a, bs in graph.items() for b in bs})
    assert not cycles, f"import cycles between modules: {cycles}"
