"""Which files the wheels of a lock install, and which paths two of them install:
``python -m harness.install.wheel_files [LOCK ...]`` (run at the end of ``make lock``).

Two distributions of one environment must never install the same path unless the files are
byte-identical: pip keeps whichever it wrote last, and uninstalling either deletes the other's
file (``nvidia-cudnn-cu12`` and ``nvidia-cudnn-cu13`` both install
``nvidia/cudnn/lib/libcudnn.so.9``; a namespace's empty ``__init__.py`` that several wheels ship
is the same file in each, and allowed). ``harness/checks/ownership.py`` checks an installed
environment; this checks a lock before anything is installed, on any machine: each wheel's zip
central directory (every member's path, CRC-32 and size) is read with two HTTP range requests
(its end record, then the directory; two more for its ``entry_points.txt``), without
downloading the wheel (harness.install.zip_directory), and its members are mapped to the paths
pip installs them at.

``locks/<lock>.files.json`` keeps, per lock: the wheel file each distribution was listed from
(stale when the lock's ``.meta.json`` names another), the wheels that could not be listed and
why, and every path two or more distributions install, with each owner's CRC-32 and size (not
every path of every wheel). The test suite checks it offline (tests/test_lock_ownership.py).

Install paths are written as pip's RECORD writes them, relative to site-packages: a wheel's
root members and its ``X.data/purelib/`` and ``X.data/platlib/`` members install at
site-packages' root; ``X.data/scripts/`` into the environment's ``bin/``, ``X.data/data/``
into its prefix, ``X.data/headers/`` into ``include/site/pythonM.N/<dist>/`` (so
``../../../bin/tool``); ``.dist-info`` files belong to one distribution and are left out. The
console and GUI scripts pip generates from ``entry_points.txt`` are paths too
(``../../../bin/<name>``): the CRC-32 and size stored for one are those of its target's text
(``module:attr``), the same target making the same script. Standard library only.
"""

from __future__ import annotations

import configparser
import json
import posixpath
import re
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
import zlib
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from harness.install.lock import INDEX_OPTION, LOCKS, PROJECT, REGISTRY, normalise, reachable
from harness.install.zip_directory import (
    Read,
    ZipError,
    central_directory,
    file_reader,
    http_reader,
    open_url,
    read_member,
)

SIMPLE_ACCEPT = "application/vnd.pypi.simple.v1+json, text/html;q=0.1"


class Unlisted(Exception):
    """A wheel that could not be listed; the message says why."""


# --- where a wheel's members install --------------------------------------------------------------------------


def install_path(member: str, dist: str, python_version: str) -> str | None:
    """Where pip installs a wheel member, relative to site-packages as RECORD writes it (None:
    a ``.dist-info`` file, the distribution's own)."""
    top, _, rest = member.partition("/")
    if top.endswith(".dist-info"):
        return None
    if top.endswith(".data") and rest:
        scheme, _, inner = rest.partition("/")
        prefix = {
            "purelib": "SP",
            "platlib": "SP",
            "scripts": "bin",
            "data": "",
            "headers": f"include/site/python{python_version}/{dist}",
        }.get(scheme)
        if prefix is None or not inner:
            return member  # not a scheme pip knows: it refuses the wheel; keep the name as is
        if prefix == "SP":
            return posixpath.normpath(inner)
        return _from_site(posixpath.join(prefix, inner), python_version)
    return posixpath.normpath(member)


def _from_site(prefixed: str, python_version: str) -> str:
    return posixpath.relpath(posixpath.normpath(prefixed), f"lib/python{python_version}/site-packages")


def entry_point_scripts(text: str) -> dict[str, str]:
    """{script name: its target} of an ``entry_points.txt``'s console and GUI scripts."""
    parser = configparser.ConfigParser(delimiters=("=",), interpolation=None, strict=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(text)
    scripts = {}
    for group in ("console_scripts", "gui_scripts"):
        if parser.has_section(group):
            scripts.update({name.strip(): value.strip() for name, value in parser.items(group)})
    return scripts


def installed_files(read: Read, total: int, dist: str, python_version: str) -> dict[str, tuple[int, int]]:
    """{install path: (CRC-32, size)} of one wheel, its generated scripts included."""
    members = central_directory(read, total)
    files = {}
    for member in members:
        path = install_path(member.path, dist, python_version)
        if path is not None:
            files[path] = (member.crc, member.size)
    entry_points = [m for m in members if re.fullmatch(r"[^/]+\.dist-info/entry_points\.txt", m.path)]
    for member in entry_points[:1]:
        text = read_member(read, member).decode("utf-8")
        for name, target in entry_point_scripts(text).items():
            spec = target.encode()
            files[_from_site(f"bin/{name}", python_version)] = (zlib.crc32(spec), len(spec))
    return files


# --- where a lock's wheels are ---------------------------------------------------------------------------------


_INDEX_CACHE: dict[str, dict[str, str]] = {}


def index_files(index: str, name: str) -> dict[str, str]:
    """{file name: URL} a simple index (PEP 503 HTML or PEP 691 JSON) lists for a project.
    Raises OSError when the index cannot be reached."""
    url = f"{index.rstrip('/')}/{normalise(name)}/"
    if url in _INDEX_CACHE:
        return _INDEX_CACHE[url]
    if url.startswith("file:"):
        page = Path(urllib.request.url2pathname(urllib.parse.urlparse(url).path)) / "index.html"
        body, json_type = (page.read_bytes() if page.is_file() else b""), False
    else:
        try:
            with open_url(urllib.request.Request(url, headers={"Accept": SIMPLE_ACCEPT})) as resp:
                body, json_type = resp.read(), "json" in resp.headers.get("Content-Type", "")
        except urllib.error.HTTPError as exc:
            if exc.code != 404:
                raise
            body, json_type = b"", False
    if json_type:
        found = {f["filename"]: urllib.parse.urljoin(url, f["url"]) for f in json.loads(body)["files"]}
    else:
        found = {}
        for href in re.findall(rb'href="([^"]+)"', body):
            link = urllib.parse.urljoin(url, href.decode())
            found[urllib.parse.unquote(link.split("#", 1)[0].rsplit("/", 1)[-1])] = link.split("#", 1)[0]
    _INDEX_CACHE[url] = found
    return found


def machine_sources() -> tuple[list[Path], list[str]]:
    """This machine's pip configuration: its find-links folders and its indexes (where the
    ``cpu`` lock's local wheels came from)."""
    proc = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True)
    folders, indexes = [], []
    for line in proc.stdout.splitlines():
        key, _, value = line.partition("=")
        values = value.strip().strip("'\"").split()
        if key.endswith(".find-links"):
            folders += [Path(urllib.request.url2pathname(v[5:]) if v.startswith("file:") else v) for v in values]
        elif key.endswith("index-url"):
            indexes += values
    return list(dict.fromkeys(folders)), list(dict.fromkeys(indexes))


def local_wheel(name: str, filename: str, sources: tuple[list[Path], list[str]]) -> Path | None:
    folders, indexes = sources
    for folder in folders:
        if (folder / filename).is_file():
            return folder / filename
    for index in indexes:
        if index.startswith("file:"):
            url = index_files(index, name).get(filename)
            path = url and Path(urllib.request.url2pathname(urllib.parse.urlparse(url).path))
            if path and path.is_file():
                return path
    return None


# --- a lock's listing -----------------------------------------------------------------------------------------


def listing(lock: str, locks: Path = LOCKS, workers: int = 8) -> dict[str, Any]:
    """What ``locks/<lock>.files.json`` holds (see the module's docstring)."""
    meta = json.loads((locks / f"{lock}.meta.json").read_text())
    python_version = meta["marker_environment"]["python_version"]
    inputs = (locks / f"{lock}.in").read_text().splitlines()
    extra_indexes = [m.group(2) for ln in inputs if (m := INDEX_OPTION.match(ln.strip()))]
    partial = meta.get("partial") or {}
    served = set(partial.get("served", []))
    unreachable = [i for i in extra_indexes if not reachable(i)] if extra_indexes else []
    local = any(p.get("local") for d, p in meta["packages"].items() if d != PROJECT)
    sources = machine_sources() if local else ([], [])
    not_listed: dict[str, dict[str, Any]] = {}
    todo = {}
    for dist, package in meta["packages"].items():
        filename = urllib.parse.unquote(package["file"])
        if dist == PROJECT:
            reason = "the project itself: an editable install of this checkout (-e .), not a wheel"
            not_listed[dist] = {"file": None, "reason": reason}
        elif dist in served:
            not_listed[dist] = {
                "file": None,
                "reason": f"installs from {', '.join(extra_indexes)} (PARTIAL lock: unreachable when it was made, so "
                f"its file is unknown; the meta holds the registry build's metadata, {filename})",
            }
        else:
            todo[dist] = filename
    for dist in partial.get("left_to_install", []):
        not_listed[dist] = {
            "file": None,
            "reason": "PARTIAL lock: a CUDA library chosen at install with the build of "
            f"{', '.join(sorted(served))} from {', '.join(extra_indexes)}; not pinned, no file",
        }

    def one(item: tuple[str, str]) -> tuple[str, dict[str, tuple[int, int]] | str]:
        dist, filename = item
        try:
            reader = _reader(dist, filename, meta, extra_indexes, unreachable, sources)
            return dist, installed_files(*reader, dist, python_version)
        except Unlisted as exc:
            return dist, str(exc)
        except (OSError, ZipError, ValueError, KeyError, configparser.Error) as exc:
            return dist, f"could not read its central directory: {type(exc).__name__}: {exc}"

    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = dict(pool.map(one, sorted(todo.items())))
    wheels, files = {}, {}
    for dist, result in results.items():
        if isinstance(result, str):
            not_listed[dist] = {"file": todo[dist], "reason": result}
        else:
            wheels[dist] = {"file": todo[dist], "paths": len(result)}
            files[dist] = result
    shared = shared_paths(files)
    return {
        "lock": lock,
        "python_version": python_version,
        "about": "paths relative to site-packages, as RECORD writes them; owners: [CRC-32 (hex), size]",
        "unreachable": unreachable,
        "summary": summary(shared),
        "wheels": dict(sorted(wheels.items())),
        "not_listed": dict(sorted(not_listed.items())),
        "shared": {path: {d: [f"{c:08x}", s] for d, (c, s) in owners.items()} for path, owners in shared.items()},
    }


def _reader(
    dist: str,
    filename: str,
    meta: dict,
    extra_indexes: list[str],
    unreachable: list[str],
    sources: tuple[list[Path], list[str]],
) -> tuple[Read, int]:
    """How to read the wheel ``filename`` of ``dist``: a local file, or the registry's (then the
    lock's extra indexes') URL. Raises Unlisted when neither has it."""
    if meta["packages"][dist].get("local"):
        path = local_wheel(dist, filename, sources)
        if path is None:
            raise Unlisted("a local wheel of the pip configuration of the machine that made the lock; not found here")
        return file_reader(path)
    problems = [f"{index} unreachable" for index in unreachable]
    for index in [REGISTRY, *(i for i in extra_indexes if i not in unreachable)]:
        try:
            url = index_files(index, dist).get(filename)
        except OSError as exc:
            problems.append(f"{index} unreachable ({exc})")
            continue
        if url:
            return http_reader(url)
        problems.append(f"not on {index}")
    raise Unlisted(f"{filename}: {'; '.join(problems)}")


def shared_paths(files: dict[str, dict[str, tuple[int, int]]]) -> dict[str, dict[str, tuple[int, int]]]:
    """{path: {distribution: (CRC-32, size)}} for every path two or more distributions install."""
    owners: dict[str, dict[str, tuple[int, int]]] = defaultdict(dict)
    for dist, paths in files.items():
        for path, crc_size in paths.items():
            owners[path][dist] = crc_size
    return {p: dict(sorted(o.items())) for p, o in sorted(owners.items()) if len(o) > 1}


def conflicts(shared: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The shared paths whose owners' files differ (CRC-32 or size)."""
    return {p: o for p, o in shared.items() if len({tuple(v) for v in o.values()}) > 1}


def summary(shared: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Counts: shared paths, the identical ones, and the conflicting paths per set of owners."""
    bad = conflicts(shared)
    by_owners: dict[str, int] = defaultdict(int)
    for owners in bad.values():
        by_owners[", ".join(owners)] += 1
    return {"shared": len(shared), "identical": len(shared) - len(bad), "conflicting": dict(sorted(by_owners.items()))}


def render(data: dict[str, Any]) -> str:
    """The JSON text, one line per owner's [CRC-32, size]."""
    text = json.dumps(data, indent=1)
    return re.sub(r'\[\s+("[0-9a-f]{8}"),\s+(\d+)\s+\]', r"[\1, \2]", text) + "\n"


def write(lock: str, locks: Path = LOCKS) -> str:
    """List a lock's wheels into ``locks/<lock>.files.json``; returns a one-line account."""
    data = listing(lock, locks)
    (locks / f"{lock}.files.json").write_text(render(data))
    return account(data)


def account(data: dict[str, Any]) -> str:
    s = data["summary"]
    line = (
        f"{data['lock']}: {len(data['wheels'])} wheels listed, {len(data['not_listed'])} not; "
        f"{s['shared']} paths installed by two or more distributions, {s['identical']} identical"
    )
    for owners, count in s["conflicting"].items():
        line += f"; CONFLICT: {count} paths differ between {owners}"
    return line


def main(argv: list[str]) -> int:
    from harness.install.variant import lock_names

    try:
        names = lock_names(argv)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    conflicting = 0
    for name in names:
        line = write(name)
        print(f"  {line} -> locks/{name}.files.json", flush=True)
        conflicting += "CONFLICT" in line
    return 1 if conflicting else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
