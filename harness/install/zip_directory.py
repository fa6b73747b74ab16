"""A zip's central directory read without downloading the zip: every member's path, CRC-32 and
size from its end record and directory (two HTTP range requests for a wheel on an index, or a
local file's bytes), and one member's bytes on demand. Standard library only; ZIP64 included
(APPNOTE.TXT 4.3)."""

from __future__ import annotations

import struct
import time
import urllib.error
import urllib.parse
import urllib.request
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

#: Seconds an HTTP request may take.
TIMEOUT_S = 60

# The zip records (APPNOTE.TXT 4.3), as zipfile's private struct formats spell them.
EOCD = struct.Struct("<4s4H2LH")  # end of central directory
EOCD64_LOCATOR = struct.Struct("<4sLQL")
EOCD64 = struct.Struct("<4sQ2H2L4Q")
CENTRAL = struct.Struct("<4s4B4HL2L5H2L")  # a central directory file header
LOCAL = struct.Struct("<4s2B4HL2L2H")  # a local file header
TAIL = EOCD.size + 0xFFFF + EOCD64_LOCATOR.size + EOCD64.size  # the end record, its longest comment, ZIP64's


class ZipError(ValueError):
    """Not a zip file this reader understands."""


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


def open_url(request: urllib.request.Request | str):
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
    with open_url(urllib.request.Request(url, headers={"Range": f"bytes=-{TAIL}"})) as resp:
        body = resp.read()
        if resp.status != 206:  # no range support: the whole file came
            return zip_bytes_reader(body)
        total = int(resp.headers["Content-Range"].rsplit("/", 1)[1])
    first = total - len(body)

    def read(a: int, b: int) -> bytes:
        if a >= first:
            return body[a - first : b - first]
        with open_url(urllib.request.Request(url, headers={"Range": f"bytes={a}-{b - 1}"})) as r:
            data = r.read()
            if r.status != 206:
                data = data[a:b]
        if len(data) != b - a:
            raise ZipError(f"asked for {b - a} bytes at {a}, got {len(data)}")
        return data

    return read, total
