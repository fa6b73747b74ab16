"""The type checker's run over the tree, and the reads of record keys it cannot check.

``python -m tests.record_reads [FILE ...]`` runs mypy once, as pyproject.toml's [tool.mypy] sets it
(the tree, plus any FILE), and prints JSON: ``errors``, mypy's error lines, and ``unchecked``,
every read in harness/ (and in each FILE) of a key that ``Record``, ``Cell`` or ``ExportRecord``
declares (``x["median_s"]``, ``x.get("median_s")``) from a value whose type is not one of those
TypedDicts (a ``Mapping[str, Any]``, a ``dict[str, Any]``, ``Any``): the reads a misspelt or
undeclared key passes silently. A read of such a key from another kind of dict (a plan's ``"workload"``) counts too: the
count is an upper bound. tests/test_types.py holds it under a ceiling.
"""

from __future__ import annotations

import json
import sys
import typing
from pathlib import Path

from mypy import build
from mypy.config_parser import parse_config_file
from mypy.find_sources import create_source_list
from mypy.nodes import CallExpr, IndexExpr, MemberExpr, StrExpr
from mypy.options import Options
from mypy.types import Instance, Type, TypedDictType, UnionType, get_proper_type

REPO = Path(__file__).resolve().parents[1]


def record_keys() -> set[str]:
    from harness.record_types import ExportRecord

    return set(typing.get_type_hints(ExportRecord))


def _checked(t: Type | None) -> bool:
    """Whether mypy checks a string key read from a value of type ``t``: a TypedDict, or a union of
    TypedDicts and None."""
    proper = get_proper_type(t)
    if isinstance(proper, TypedDictType):
        return True
    if isinstance(proper, UnionType):
        return all(
            _checked(i) or (isinstance(p := get_proper_type(i), Instance) and p.type.fullname == "builtins.NoneType")
            for i in proper.items
        )
    return False


def run(extra: list[str]) -> dict[str, list]:
    options = Options()
    parse_config_file(options, lambda: None, str(REPO / "pyproject.toml"), sys.stdout, sys.stderr)
    options.export_types = True
    options.incremental = False
    sources = create_source_list([*options.files, *extra], options)
    result = build.build(sources, options)
    read = [Path(f).resolve() for f in extra]
    lines = {
        s.path: Path(s.path).read_text().splitlines()
        for s in sources
        if s.path and (Path(s.path).resolve().is_relative_to(REPO / "harness") or Path(s.path).resolve() in read)
    }
    keys = record_keys()
    unchecked = []
    for e in result.types:
        if isinstance(e, IndexExpr) and isinstance(e.index, StrExpr):
            key, base, text = e.index.value, e.base, f'["{e.index.value}"]'
        elif (
            isinstance(e, CallExpr)
            and isinstance(e.callee, MemberExpr)
            and e.callee.name == "get"
            and e.args
            and isinstance(e.args[0], StrExpr)
        ):
            key, base, text = e.args[0].value, e.callee.expr, f'.get("{e.args[0].value}"'
        else:
            continue
        if key not in keys or _checked(result.types.get(base)):
            continue
        # an expression knows its line, not its file: the harness file with this read on that line
        where = [p for p, src in lines.items() if len(src) >= e.line and text in src[e.line - 1]]
        if where:
            path = Path(where[0]).resolve()
            unchecked.append([str(path.relative_to(REPO) if path.is_relative_to(REPO) else path), e.line, key])
    return {"errors": [m for m in result.errors if ": error:" in m], "unchecked": sorted(unchecked)}


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1:])))
