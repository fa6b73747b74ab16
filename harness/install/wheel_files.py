"""Which files the wheels of a lock install, and which paths two of them install:
``python -m harness.install.wheel_files [LOCK ...]`` (run at the end of ``make lock``).

Two distributions of one environment must never install the same path unless the files are
byte-identical: pip keeps whichever it wrote last, and uninstalling either deletes the other's
file (``nvidia-cudnn-cu12`` and ``nvidia-cudnn-cu13`` both install
``nvidia/cudnn/lib/libcudnn.so.9``; a namespace's empty ``__init__.py`` that several wheels ship
is the same file in each, and allowed). ``harness/checks/ownership.py`` checks an installed
environment; this checks a lock before anything is installed, on any machine: each wheel's zip
central directory (every member's path, CRC-32 and size) is read with two HTTP range requests
(its end record, then the directory; two more for its ``entry_points.txt``), without downloading
the wheel, and its members are mapped to the paths pip installs them at.

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
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import zlib
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.install.lock import INDEX_OPTION, LOCKS, PROJECT, REGISTRY, normalise, reachable

TIMEOUT_S = 60
SIMPLE_ACCEPT = "application/vnd.pypi.simple.v1+json, text/html;q=0.1"

# The zip records (APPNOTE.TXT 4.3), as zipfile's private struct formats spell them.
EOCD = struct.Struct("<4s4H2LH")  # end of central directory
EOCD64_LOCATOR = struct.Struct("<4sLQL")
EOCD64 = struct.Struct("<4sQ2H2L4Q")
CENTRAL = struct.Struct("<4s4B4HL2L5H2L")  # a central directory file header
LOCAL = struct.Struct("<4s2B4HL2L2H")  # a local file header
TAIL = EOCD.size + 0xFFFF + EOCD64_LOCATOR.size + EOCD64.size  # the end record, its longest comment, ZIP64's


class ZipError(ValueError):
    """Not a zip file this reader understands."""


class Unlisted(Exception):
    """A wheel that could not be listed; the message says why."""


@dataclass(frozen=True)
class Member:
    """One file of a zip: its path in the archive, CRC-32 and uncompressed size; where its local
    header starts, its compressed size and compression method (to read it)."""

    path: str
    crc: int
    size: int
    offset: int = 0
    compressed: int = 0
    method: int = 0


# --- the zip central directory --------------------------------------------------------------------------------


Read = Callable[[int, int], bytes]  # read(start, stop): the bytes [start, stop) of the file


def central_directory(read: Read, total: int) -> list[Member]:
    """Every file (not directory) of the zip of ``total`` bytes that ``read`` reads: the end
    record from the file's last bytes, then the central directory (ZIP64 where the end record
    says so)."""
    start = max(0, total - TAIL)
    tail = read(start, total)
    at = tail.rfind(b"PK\x05\x06")
    while at >= 0 and (len(tail) - at < EOCD.size or at + EOCD.size + EOCD.unpack_from(tail, at)[7] > len(tail)):
        at = tail.rfind(b"PK\x05\x06", 0, at)
    if at < 0:
        raise ZipError("no end of central directory record")
    _, _, _, _, count, size, offset, _ = EOCD.unpack_from(tail, at)
    end = start + at  # where the central directory (and ZIP64's records) stop
    locator = at - EOCD64_LOCATOR.size
    if locator >= 0 and tail[locator : locator + 4] == b"PK\x06\x07":
        record = locator - EOCD64.size
        if record >= 0 and tail[record : record + 4] == b"PK\x06\x06":
            fields, end = EOCD64.unpack_from(tail, record), start + record
        else:  # an end record with extensible data: where the locator says (no prepended data then)
            where = EOCD64_LOCATOR.unpack_from(tail, locator)[2]
            fields, end = EOCD64.unpack(read(where, where + EOCD64.size)), where
            if fields[0] != b"PK\x06\x06":
                raise ZipError("a ZIP64 locator without its end record")
        count, size, offset = fields[7], fields[8], fields[9]
    # Data prepended to the archive shifts every offset it records (zipfile's "concat").
    shift = end - size - offset
    if shift < 0:
        raise ZipError("the central directory lies outside the file")
    first = offset + shift
    data = tail[first - start : end - start] if first >= start else read(first, end)
    return parse_central_directory(data, count, shift)


def parse_central_directory(data: bytes, count: int | None = None, shift: int = 0) -> list[Member]:
    """The file entries of a central directory's bytes; ``count``: the entries the end record
    announces (checked)."""
    members, pos, entries = [], 0, 0
    while pos + CENTRAL.size <= len(data) and data[pos : pos + 4] == b"PK\x01\x02":
        fields = CENTRAL.unpack_from(data, pos)
        flags, method, crc, compressed, size = fields[5], fields[6], fields[9], fields[10], fields[11]
        name_len, extra_len, comment_len, header = fields[12], fields[13], fields[14], fields[18]
        pos += CENTRAL.size
        raw = data[pos : pos + name_len]
        name = raw.decode("utf-8" if flags & 0x800 else "cp437")
        extra = data[pos + name_len : pos + name_len + extra_len]
        pos += name_len + extra_len + comment_len
        size, compressed, header = _zip64(extra, size, compressed, header)
        entries += 1
        if not name.endswith("/"):
            members.append(Member(name, crc, size, header + shift, compressed, method))
    if count is not None and entries != count:
        raise ZipError(f"the central directory holds {entries} entries, its end record says {count}")
    return members


def _zip64(extra: bytes, size: int, compressed: int, header: int) -> tuple[int, int, int]:
    """The sizes and header offset where the ZIP64 extra field holds them (those stored as 0xFFFFFFFF)."""
    pos = 0
    while pos + 4 <= len(extra):
        tag, length = struct.unpack_from("<2H", extra, pos)
        if tag == 0x0001:
            values = list(struct.unpack_from(f"<{length // 8}Q", extra, pos + 4))
            if size == 0xFFFFFFFF:
                size = values.pop(0)
            if compressed == 0xFFFFFFFF:
                compressed = values.pop(0)
            if header == 0xFFFFFFFF:
                header = values.pop(0)
            break
        pos += 4 + length
    return size, compressed, header


def read_member(read: Read, member: Member) -> bytes:
    """One member's content (stored or deflated), through its local header."""
    head = read(member.offset, member.offset + LOCAL.size)
    fields = LOCAL.unpack(head)
    if fields[0] != b"PK\x03\x04":
        raise ZipError(f"no local header for {member.path}")
    start = member.offset + LOCAL.size + fields[10] + fields[11]
    raw = read(start, start + member.compressed)
    if member.method == 0:
        return raw
    if member.method == 8:
        return zlib.decompressobj(-15).decompress(raw)
    raise ZipError(f"{member.path}: compression method {member.method}")


def zip_bytes_reader(data: bytes) -> tuple[Read, int]:
    return (lambda a, b: data[a:b]), len(data)


def file_reader(path: Path) -> tuple[Read, int]:
    def read(a: int, b: int) -> bytes:
        with open(path, "rb") as f:
            f.seek(a)
            return f.read(b - a)

    return read, path.stat().st_size


def _open(request: urllib.request.Request | str):
    """``urlopen``, tried again twice after a network error (an HTTP error is an answer: raised)."""
    for attempt in range(2):
        try:
            return urllib.request.urlopen(request, timeout=TIMEOUT_S)
        except urllib.error.HTTPError:
            raise
        except OSError:
            time.sleep(2 * (attempt + 1))
    return urllib.request.urlopen(request, timeout=TIMEOUT_S)


def http_reader(url: str) -> tuple[Read, int]:
    """A reader of the file at ``url`` by HTTP range requests, and its size (from the first
    request, its last bytes). A file:// URL is read from its path."""
    if url.startswith("file:"):
        return file_reader(Path(urllib.request.url2pathname(urllib.parse.urlparse(url).path)))
    with _open(urllib.request.Request(url, headers={"Range": f"bytes=-{TAIL}"})) as resp:
        body = resp.read()
        if resp.status != 206:  # no range support: the whole file came
            return zip_bytes_reader(body)
        total = int(resp.headers["Content-Range"].rsplit("/", 1)[1])
    first = total - len(body)

    def read(a: int, b: int) -> bytes:
        if a >= first:
            return body[a - first : b - first]
        with _open(urllib.request.Request(url, headers={"Range": f"bytes={a}-{b - 1}"})) as r:
            data = r.read()
            if r.status != 206:
                data = data[a:b]
        if len(data) != b - a:
            raise ZipError(f"asked for {b - a} bytes at {a}, got {len(data)}")
        return data

    return read, total


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
            with _open(urllib.request.Request(url, headers={"Accept": SIMPLE_ACCEPT})) as resp:
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
