"""One owner per path, lock by lock, before anything is installed: ``locks/<lock>.files.json``
(``python -m harness.install.wheel_files``, run by ``make lock``) lists the paths two or more of a
lock's wheels install, read from each wheel's zip central directory. Checked offline: the listing
is of the wheels the lock's ``.meta.json`` names, only what cannot be reached is left unlisted,
and every shared path is the same file (CRC-32 and size) in each owner. The reader itself runs
on zips built here, served by file:// URLs."""

from __future__ import annotations

import json
import urllib.parse
import zipfile

import pytest

from harness.install import lock, variant, wheel_files, zip_directory
from tests.conftest import REPO


def _stored(name: str) -> tuple[dict, dict]:
    path = REPO / "locks" / f"{name}.files.json"
    assert path.is_file(), f"locks/{name}.files.json is missing: run python -m harness.install.wheel_files {name}"
    return json.loads(path.read_text()), json.loads((REPO / "locks" / f"{name}.meta.json").read_text())


@pytest.mark.parametrize("name", variant.LOCK_NAMES)
def test_the_listing_is_of_the_locks_wheels_and_leaves_out_only_what_cannot_be_reached(name):
    files, meta = _stored(name)
    partial = meta.get("partial") or {}
    listed, unlisted = files["wheels"], files["not_listed"]
    stale = {
        d: (w["file"], urllib.parse.unquote(meta["packages"].get(d, {}).get("file", "")))
        for d, w in listed.items()
        if w["file"] != urllib.parse.unquote(meta["packages"].get(d, {}).get("file", ""))
    }
    assert stale == {}, f"stale listing: run python -m harness.install.wheel_files {name}"
    assert set(listed) | set(unlisted) == set(meta["packages"]) | set(partial.get("left_to_install", []))
    assert not set(listed) & set(unlisted)
    # Unlisted: the project (an editable install, no wheel); in a PARTIAL lock, the packages its
    # extra index serves (PyTorch's, unreachable from the machine that made it) and the CUDA
    # libraries left to install with them. Every wheel of the registry, and the cpu lock's local
    # wheels, are listed.
    expected = {lock.PROJECT, *partial.get("served", []), *partial.get("left_to_install", [])}
    assert set(unlisted) == expected, {d: unlisted[d]["reason"] for d in set(unlisted) ^ expected if d in unlisted}
    assert all(u["reason"] for u in unlisted.values())
    if name == "cuda12":  # from the registry alone since 2026-11-26: every wheel listed
        assert "torch" in listed and "nvidia-cudnn-cu12" in listed and set(unlisted) == {lock.PROJECT}
    assert sum(w["paths"] for w in listed.values()) > 0  # (a metapackage, cuda-toolkit, installs none)


@pytest.mark.parametrize("name", variant.LOCK_NAMES)
def test_shared_paths_are_stored_with_every_owner_and_counted(name):
    files, _ = _stored(name)
    shared = files["shared"]
    assert all(len(owners) > 1 and set(owners) <= set(files["wheels"]) for owners in shared.values())
    assert all(not p.split("/")[0].endswith(".dist-info") for p in shared)
    assert files["summary"] == wheel_files.summary(shared)


@pytest.mark.parametrize("name", variant.LOCK_NAMES)
def test_no_path_is_installed_by_two_distributions_of_a_lock_with_different_files(name):
    files, _ = _stored(name)
    # (cuda12 had onnxruntime and onnxruntime-gpu, 17 of their 317 shared paths different, until 2026-11-26)
    bad = wheel_files.conflicts(files["shared"])
    owners = {", ".join(o) for o in bad.values()}
    assert bad == {}, f"{len(bad)} paths differ between {'; '.join(sorted(owners))}"


# --- the central-directory reader, on zips built here ------------------------------------------------------------


def _wheel(path, members: dict[str, bytes], compression: int = zipfile.ZIP_DEFLATED) -> str:
    with zipfile.ZipFile(path, "w", compression=compression) as z:
        z.writestr("pkg/", b"")  # a directory entry: not a file
        for name, data in members.items():
            z.writestr(name, data)
    return path.as_uri()


def _reference(path) -> dict[str, tuple[int, int]]:
    with zipfile.ZipFile(path) as z:
        return {i.filename: (i.CRC, i.file_size) for i in z.infolist() if not i.is_dir()}


def test_the_reader_lists_every_member_with_its_crc_and_size(tmp_path):
    members = {"pkg/a.py": b"x = 1\n" * 500, "pkg/b.bin": bytes(range(256)), "pkg/empty": b""}
    url = _wheel(tmp_path / "p-1.0-py3-none-any.whl", members)
    read, total = zip_directory.http_reader(url)
    found = zip_directory.central_directory(read, total)
    assert {m.path: (m.crc, m.size) for m in found} == _reference(tmp_path / "p-1.0-py3-none-any.whl")
    assert {m.path: zip_directory.read_member(read, m) for m in found} == members
    # the same, from bytes with a comment and data before the archive (offsets shift)
    data = b"prefix" * 100 + (tmp_path / "p-1.0-py3-none-any.whl").read_bytes()
    with zipfile.ZipFile(tmp_path / "c.zip", "w") as z:
        z.comment = b"PK\x05\x06 a comment that looks like a record"
        z.writestr("pkg/a.py", b"y = 2\n")
    found = zip_directory.central_directory(*zip_directory.zip_bytes_reader(data))
    assert {m.path: (m.crc, m.size) for m in found} == _reference(tmp_path / "p-1.0-py3-none-any.whl")
    comment = zip_directory.central_directory(*zip_directory.file_reader(tmp_path / "c.zip"))
    assert [m.path for m in comment] == ["pkg/a.py"]


def test_the_reader_reads_zip64_records(tmp_path, monkeypatch):
    """Sizes, offsets and the end record in ZIP64 form (zipfile writes them past 4 GiB; here past 0)."""
    members = {f"pkg/m{i}.py": f"v = {i}\n".encode() * (i + 1) for i in range(5)}
    with monkeypatch.context() as m:
        m.setattr(zipfile, "ZIP64_LIMIT", 0)
        _wheel(tmp_path / "big.whl", members, zipfile.ZIP_STORED)  # deflate's empty directory entry is 2 bytes
    raw = (tmp_path / "big.whl").read_bytes()
    assert b"PK\x06\x06" in raw and b"PK\x06\x07" in raw
    read, total = zip_directory.file_reader(tmp_path / "big.whl")
    found = zip_directory.central_directory(read, total)
    assert {m.path: (m.crc, m.size) for m in found} == _reference(tmp_path / "big.whl")
    assert {m.path: zip_directory.read_member(read, m) for m in found} == members


def test_members_map_to_the_paths_pip_installs_them_at():
    path = wheel_files.install_path
    assert path("pkg/a.py", "p", "3.11") == "pkg/a.py"
    assert path("p-1.0.data/purelib/pkg/a.py", "p", "3.11") == "pkg/a.py"
    assert path("p-1.0.data/platlib/nvidia/__init__.py", "p", "3.11") == "nvidia/__init__.py"
    assert path("p-1.0.data/scripts/tool", "p", "3.11") == "../../../bin/tool"
    assert path("p-1.0.data/data/share/x.txt", "p", "3.11") == "../../../share/x.txt"
    assert path("p-1.0.data/headers/x.h", "p", "3.11") == "../../../include/site/python3.11/p/x.h"
    assert path("p-1.0.dist-info/METADATA", "p", "3.11") is None


def test_a_path_two_fake_wheels_install_with_different_files_is_a_conflict(tmp_path):
    """The cu12/cu13 clash in small: one path, two wheels, two CRCs; an identical shared file is not one."""
    cu12 = _wheel(
        tmp_path / "nvidia_cudnn_cu12-9.0-py3-none-any.whl",
        {
            "nvidia/__init__.py": b"",
            "nvidia/cudnn/lib/libcudnn.so.9": b"cuda 12 build",
            "nvidia_cudnn_cu12-9.0.dist-info/METADATA": b"Name: nvidia-cudnn-cu12\n",
            "nvidia_cudnn_cu12-9.0.dist-info/entry_points.txt": b"[console_scripts]\ncudnn-info = nvidia.cudnn:main\n",
        },
    )
    cu13 = _wheel(
        tmp_path / "nvidia_cudnn_cu13-9.0-py3-none-any.whl",
        {
            "nvidia_cudnn_cu13-9.0.data/platlib/nvidia/__init__.py": b"",
            "nvidia_cudnn_cu13-9.0.data/platlib/nvidia/cudnn/lib/libcudnn.so.9": b"cuda 13 build",
            "nvidia_cudnn_cu13-9.0.dist-info/METADATA": b"Name: nvidia-cudnn-cu13\n",
            "nvidia_cudnn_cu13-9.0.dist-info/entry_points.txt": b"[console_scripts]\ncudnn-info = nvidia.cudnn:main\n",
        },
    )
    files = {
        dist: wheel_files.installed_files(*zip_directory.http_reader(url), dist, "3.11")
        for dist, url in (("nvidia-cudnn-cu12", cu12), ("nvidia-cudnn-cu13", cu13))
    }
    shared = wheel_files.shared_paths(files)
    assert set(shared) == {"nvidia/__init__.py", "nvidia/cudnn/lib/libcudnn.so.9", "../../../bin/cudnn-info"}
    assert set(wheel_files.conflicts(shared)) == {"nvidia/cudnn/lib/libcudnn.so.9"}
    assert wheel_files.summary(shared) == {
        "shared": 3,
        "identical": 2,
        "conflicting": {"nvidia-cudnn-cu12, nvidia-cudnn-cu13": 1},
    }
    stored = json.loads(
        wheel_files.render({"shared": {p: {d: [f"{c:08x}", s] for d, (c, s) in o.items()} for p, o in shared.items()}})
    )
    assert set(wheel_files.conflicts(stored["shared"])) == {"nvidia/cudnn/lib/libcudnn.so.9"}


def test_a_locks_listing_from_local_wheels_names_the_missing_one_and_the_conflict(tmp_path, monkeypatch):
    """``write`` end to end, offline: a lock of local wheels (as the cpu lock's), one of them absent here."""
    folder, locks = tmp_path / "wheels", tmp_path / "locks"
    folder.mkdir()
    locks.mkdir()
    _wheel(folder / "a-1.0-py3-none-any.whl", {"shared/x.so": b"a's build", "a/__init__.py": b""})
    _wheel(folder / "b-1.0-py3-none-any.whl", {"b-1.0.data/platlib/shared/x.so": b"b's build"})
    packages = {
        name: {"version": "1.0", "requires_dist": [], "file": f"{name}-1.0-py3-none-any.whl", "local": True}
        for name in ("a", "b", "gone")
    }
    packages[lock.PROJECT] = {"version": "0", "requires_dist": [], "file": "main", "local": True}
    meta = {"marker_environment": {"python_version": "3.11"}, "partial": None, "packages": packages}
    (locks / "t.meta.json").write_text(json.dumps(meta))
    (locks / "t.in").write_text("-e .\na\nb\ngone\n")
    monkeypatch.setattr(wheel_files, "machine_sources", lambda: ([folder], []))
    line = wheel_files.write("t", locks)
    assert line.endswith("CONFLICT: 1 paths differ between a, b"), line
    stored = json.loads((locks / "t.files.json").read_text())
    assert {d: w["file"] for d, w in stored["wheels"].items()} == {
        "a": "a-1.0-py3-none-any.whl",
        "b": "b-1.0-py3-none-any.whl",
    }
    assert set(stored["not_listed"]) == {"gone", lock.PROJECT}
    assert "not found here" in stored["not_listed"]["gone"]["reason"]
    assert set(wheel_files.conflicts(stored["shared"])) == {"shared/x.so"}
