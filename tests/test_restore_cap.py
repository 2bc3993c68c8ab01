"""`footnote restore` against an archive bomb: a few hundred kilobytes of compressed zeros
whose own list declares hundreds of megabytes is refused from that list, before a byte is
unpacked (it used to write ~1 GB before the checksum failed); so is an archive that would not
fit the disk; and no member is ever read past the size the list gives it."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import tarfile
from pathlib import Path
from typing import Any

import pytest

from footnote.cli import backup as backup_module
from footnote.cli.backup import MANIFEST, BackupError, restore

VERSION = "v20260101T000000-1-abcdef"
BOMB_BYTES = 256 << 20


class Zeros(io.RawIOBase):
    """`size` zero bytes, made as they are read (the bomb is never held in memory)."""

    def __init__(self, size: int) -> None:
        self.left = size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        n = min(len(buffer), self.left)
        buffer[:n] = bytes(n)
        self.left -= n
        return n


def zeros_sha256(size: int) -> str:
    digest = hashlib.sha256()
    block = bytes(1 << 20)
    for _ in range(size >> 20):
        digest.update(block)
    return digest.hexdigest()


def bomb(path: Path, size: int = BOMB_BYTES) -> Path:
    """A well-formed backup whose one file is `size` zero bytes, honestly listed."""
    name = f"index/versions/{VERSION}/vectors.faiss"
    manifest = {
        "format": "footnote-backup",
        "format_version": 1,
        "created_at": "2026-01-01T00:00:00+00:00",
        "index_version": VERSION,
        "index_format_version": 1,
        "feedback_schema": None,
        "files": {name: {"size": size, "sha256": zeros_sha256(size)}},
    }
    data = json.dumps(manifest).encode()
    with tarfile.open(path, "w:gz", compresslevel=1) as tar:
        head = tarfile.TarInfo(MANIFEST)
        head.size = len(data)
        tar.addfile(head, io.BytesIO(data))
        member = tarfile.TarInfo(name)
        member.size = size
        tar.addfile(member, io.BufferedReader(Zeros(size)))
    return path


@pytest.fixture
def written(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the members restore unpacked."""
    sizes: list[int] = []
    copy = backup_module._copy_member

    def counted(reader: Any, target: Path, size: int) -> str:
        sizes.append(size)
        return copy(reader, target, size)

    monkeypatch.setattr(backup_module, "_copy_member", counted)
    return sizes


def test_an_archive_bomb_is_refused_from_its_own_list_before_unpacking(
    tmp_path: Path, written: list[int]
) -> None:
    archive = bomb(tmp_path / "bomb.tar.gz")
    assert archive.stat().st_size * 100 < BOMB_BYTES  # compressed zeros: a real bomb
    index = tmp_path / "index"
    with pytest.raises(BackupError, match="more than 50 times its size"):
        restore(archive, str(index), with_feedback=False)
    assert written == []
    assert list(index.iterdir()) == []  # the scratch folder went too


def test_an_archive_that_would_not_fit_the_disk_is_refused_before_unpacking(
    tmp_path: Path, written: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = bomb(tmp_path / "small.tar.gz", size=4 << 20)  # within the expansion allowance
    real = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(
        backup_module.shutil, "disk_usage", lambda path: real._replace(free=1 << 20)
    )
    with pytest.raises(BackupError, match="bytes are free"):
        restore(archive, str(tmp_path / "index"), with_feedback=False)
    assert written == []


def test_a_member_is_never_read_past_its_declared_size(tmp_path: Path) -> None:
    """Whatever the reader would give beyond it (a header that lies about what follows)."""
    endless = io.BufferedReader(Zeros(1 << 40))
    target = tmp_path / "member"
    digest = backup_module._copy_member(endless, target, 3 << 20)
    assert target.stat().st_size == 3 << 20
    assert digest == zeros_sha256(3 << 20)


def test_a_member_shorter_than_its_declared_size_is_refused(tmp_path: Path) -> None:
    with pytest.raises(BackupError, match="shorter than"):
        backup_module._copy_member(io.BytesIO(b"abc"), tmp_path / "member", 10)
