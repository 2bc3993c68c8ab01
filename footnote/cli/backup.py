"""`footnote backup DEST` / `footnote restore SRC`: an index and its feedback store, as one
checksummed archive.

What goes in (files backend; a `postgresql://` index or feedback store is backed up with
`pg_dump`, see docs/deployment.md):

    footnote-backup.json            what the archive holds: every file's size and SHA-256,
                                    the index's live version and format, the feedback schema
    index/versions/<live>/...       the live version only (older ones are not needed)
    index/sources.json              the remembered sources and settings (for a rebuild)
    index/embedding-cache.sqlite    the embedding cache, if any (a rebuild re-embeds nothing)
    feedback.sqlite3                the feedback store, if any

Consistent: the index's writer lock is held while it is read (no publish or prune meanwhile),
the live version is verified first (a damaged index is refused, not backed up), and SQLite
files are copied with SQLite's backup API, so a server writing feedback meanwhile still
gives a whole database. The archive is written mode 600 (feedback holds users' questions).

Restore treats the archive as untrusted: only regular files at the names the archive's own
list gives, no links, no absolute or `..` paths, every size and checksum matched, the index
version verified as `footnote search` would, the feedback store's integrity and schema
checked; only then is anything replaced (each file by an atomic rename; the live version
last, by replacing CURRENT). Stop the server while restoring.

Nothing is unpacked whose sizes, as the archive's own list declares them, would not fit the
disk or would expand the archive more than MAX_EXPANSION times (real index files compress
2-4 times; a few megabytes of compressed zeros declaring a gigabyte is a bomb), and no member
is read past its declared size, so a lying archive is refused before it fills the disk.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import io
import json
import os
import shutil
import sqlite3
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import IO, Any

from footnote.cli.options import add_index_option
from footnote.feedback.records import SCHEMA_VERSION, feedback_location
from footnote.store.backends import is_postgres
from footnote.store.embedding_cache import CACHE_FILE
from footnote.store.file_checks import VERSION_NAME, read_current
from footnote.store.files import REMEMBERED, read_catalogue
from footnote.store.lock import writer_lock
from footnote.store.types import IndexError_

BACKUP_FORMAT = "footnote-backup"
BACKUP_VERSION = 1
"""This archive layout's version: restore refuses any other."""
MANIFEST = "footnote-backup.json"
MAX_MANIFEST_BYTES = 16 << 20
MAX_MEMBERS = 100_000
MAX_EXPANSION = 50
"""How many times its own size an archive's files may declare (gzip's limit is ~1,000)."""
EXPANSION_ALLOWANCE = 16 << 20
"""Bytes any archive may declare beyond that: a small index in a tiny archive restores."""
_CHUNK = 1 << 20


class BackupError(RuntimeError):
    """The backup or restore cannot be done as asked; the message says why."""


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as source:
        while block := source.read(_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def _sqlite_copy(source: Path, target: Path) -> None:
    """A whole, consistent copy of a live SQLite database (SQLite's online backup)."""
    origin = sqlite3.connect(f"file:{source}?mode=ro", uri=True, timeout=30)
    try:
        copy = sqlite3.connect(target)
        try:
            origin.backup(copy)
        finally:
            copy.close()
    finally:
        origin.close()


def _file_index(index: str) -> Path:
    if is_postgres(index):
        raise BackupError(
            "a postgresql:// index is backed up with pg_dump (see docs/deployment.md)"
        )
    return Path(index)


def _sqlite_feedback(index: Path, db: str | None, with_feedback: bool) -> Path | None:
    if not with_feedback:
        return None
    location = db or feedback_location(index=str(index))
    if is_postgres(location):
        raise BackupError(
            "the feedback store is in PostgreSQL: back it up with pg_dump, and pass "
            "--no-feedback here (see docs/deployment.md)"
        )
    return Path(location)


def backup(
    index: str, dest: Path, *, db: str | None = None, with_feedback: bool = True
) -> dict[str, Any]:
    """Write the archive; returns its manifest. BackupError (or IndexError_ for a damaged
    or missing index) when it cannot."""
    root = _file_index(index)
    feedback = _sqlite_feedback(root, db, with_feedback)
    if dest.exists() or dest.is_symlink():
        raise BackupError(f"{dest} exists; choose a new file")
    with tempfile.TemporaryDirectory(prefix=".footnote-backup-", dir=dest.parent) as scratch:
        staged = Path(scratch)
        files: dict[str, Path] = {}
        with writer_lock(root):
            catalogue = read_catalogue(root)
            catalogue.checksums.wait()
            catalogue.checksums.check()
            vdir = catalogue.directory
            for path in sorted(vdir.rglob("*")):
                if path.is_symlink():
                    raise BackupError(f"{path} is a symlink; the index is damaged")
                if path.is_file():
                    files[
                        f"index/versions/{catalogue.version}/{path.relative_to(vdir).as_posix()}"
                    ] = path
            remembered = root / REMEMBERED
            if remembered.is_file() and not remembered.is_symlink():
                shutil.copyfile(remembered, staged / REMEMBERED)
                files[f"index/{REMEMBERED}"] = staged / REMEMBERED
            cache = root / CACHE_FILE
            if cache.is_file() and not cache.is_symlink():
                _sqlite_copy(cache, staged / CACHE_FILE)
                files[f"index/{CACHE_FILE}"] = staged / CACHE_FILE
            schema = None
            if feedback is not None and feedback.is_file():
                _sqlite_copy(feedback, staged / "feedback.sqlite3")
                files["feedback.sqlite3"] = staged / "feedback.sqlite3"
                schema = _feedback_schema(staged / "feedback.sqlite3")
            manifest = {
                "format": BACKUP_FORMAT,
                "format_version": BACKUP_VERSION,
                "created_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                "index_version": catalogue.version,
                "index_format_version": catalogue.manifest.get("format_version"),
                "feedback_schema": schema,
                "files": {
                    name: {"size": path.stat().st_size, "sha256": _sha256(path)}
                    for name, path in files.items()
                },
            }
            partial = staged / "archive.tar.gz"
            descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with (
                os.fdopen(descriptor, "wb") as sink,
                tarfile.open(fileobj=sink, mode="w:gz") as tar,
            ):
                data = json.dumps(manifest, indent=1).encode()
                info = tarfile.TarInfo(MANIFEST)
                info.size, info.mode = len(data), 0o600
                tar.addfile(info, io.BytesIO(data))
                for name, path in files.items():
                    info = tarfile.TarInfo(name)
                    info.size, info.mode = path.stat().st_size, 0o600
                    with path.open("rb") as source:
                        tar.addfile(info, source)
        os.replace(partial, dest)
    return manifest


def _feedback_schema(path: Path) -> int:
    """The store's schema version; BackupError unless it is a whole SQLite database."""
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            if conn.execute("PRAGMA integrity_check").fetchone() != ("ok",):
                raise BackupError("the feedback store in the archive is damaged")
            row = conn.execute("SELECT max(version) FROM footnote_feedback_schema").fetchone()
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        raise BackupError(f"the feedback store is not a usable database ({exc})") from None
    return int(row[0] or 0)


def _safe_name(name: str) -> bool:
    path = PurePosixPath(name)
    return (
        bool(name)
        and not path.is_absolute()
        and "\\" not in name
        and all(part not in ("", ".", "..") for part in name.split("/"))
    )


def _read_manifest(tar: tarfile.TarFile, first: tarfile.TarInfo | None) -> dict[str, Any]:
    if first is None or first.name != MANIFEST or not first.isreg():
        raise BackupError(f"not a Footnote backup: it does not start with {MANIFEST}")
    if first.size > MAX_MANIFEST_BYTES:
        raise BackupError(f"{MANIFEST} is too large")
    source = tar.extractfile(first)
    assert source is not None
    try:
        manifest = json.loads(source.read())
    except ValueError:
        raise BackupError(f"{MANIFEST} is not JSON") from None
    if not isinstance(manifest, dict) or manifest.get("format") != BACKUP_FORMAT:
        raise BackupError("not a Footnote backup")
    if manifest.get("format_version") != BACKUP_VERSION:
        raise BackupError(
            f"backup format {manifest.get('format_version')!r}; this Footnote reads "
            f"{BACKUP_VERSION} (see docs/deployment.md, Upgrades)"
        )
    version = manifest.get("index_version")
    files = manifest.get("files")
    if not isinstance(version, str) or not VERSION_NAME.fullmatch(version):
        raise BackupError("the backup names no index version")
    if not isinstance(files, dict) or not all(
        isinstance(v, dict)
        and type(v.get("size")) is int
        and v["size"] >= 0
        and isinstance(v.get("sha256"), str)
        for v in files.values()
    ):
        raise BackupError(f"{MANIFEST} lists its files wrongly")
    prefix = f"index/versions/{version}/"
    allowed = {f"index/{REMEMBERED}", f"index/{CACHE_FILE}", "feedback.sqlite3"}
    for name in files:
        if not _safe_name(name) or not (name in allowed or name.startswith(prefix)):
            raise BackupError(f"the backup names a file it may not restore: {name[:120]!r}")
    return manifest


def _check_room(declared: int, source: Path, staged: Path) -> None:
    """BackupError, before anything is written, when the sizes the archive declares could not
    come from an archive its size, or would not fit where it is unpacked."""
    packed = source.stat().st_size
    if declared > MAX_EXPANSION * packed + EXPANSION_ALLOWANCE:
        raise BackupError(
            f"the archive declares {declared} bytes of files in {packed} bytes: more than "
            f"{MAX_EXPANSION} times its size, which no Footnote backup is; refused unread"
        )
    free = shutil.disk_usage(staged).free
    if declared > free:
        raise BackupError(
            f"the archive declares {declared} bytes of files; {free} bytes are free at {staged}"
        )


def _copy_member(reader: IO[bytes], target: Path, size: int) -> str:
    """Write `size` bytes of the member to `target` (never more, whatever the archive holds
    beyond); returns their SHA-256."""
    digest = hashlib.sha256()
    descriptor = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as sink:
        remaining = size
        while remaining and (block := reader.read(min(_CHUNK, remaining))):
            digest.update(block)
            sink.write(block)
            remaining -= len(block)
    if remaining:
        raise BackupError(f"{target.name}: shorter than the archive's list says")
    return digest.hexdigest()


def _unpack(source: Path, staged: Path) -> dict[str, Any]:
    """Every listed file into `staged`, checked; BackupError at the first thing wrong."""
    try:
        tar = tarfile.open(source, mode="r:*")  # noqa: SIM115 - closed by `with tar` below
    except (OSError, tarfile.TarError) as exc:
        raise BackupError(f"{source} is not a readable archive ({exc})") from None
    with tar:
        try:
            manifest = _read_manifest(tar, tar.next())
            expected: dict[str, dict[str, Any]] = manifest["files"]
            _check_room(sum(v["size"] for v in expected.values()), source, staged)
            seen: set[str] = set()
            for count, member in enumerate(_members(tar)):
                if count >= MAX_MEMBERS:
                    raise BackupError("the archive holds too many files")
                name = member.name
                if not member.isreg():
                    raise BackupError(f"{name[:120]!r} in the archive is not a regular file")
                if name not in expected or name in seen:
                    raise BackupError(f"the archive holds {name[:120]!r}, which it does not list")
                if member.size != expected[name]["size"]:
                    raise BackupError(f"{name}: size differs from the archive's list")
                seen.add(name)
                target = staged.joinpath(*name.split("/"))
                target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                reader = tar.extractfile(member)
                assert reader is not None
                if _copy_member(reader, target, expected[name]["size"]) != expected[name]["sha256"]:
                    raise BackupError(f"{name}: checksum differs: the archive is damaged")
            if missing := sorted(set(expected) - seen):
                raise BackupError(f"the archive lacks {missing[0]!r}, which it lists")
        except (OSError, tarfile.TarError, EOFError) as exc:
            raise BackupError(f"{source} is damaged ({exc})") from None
    return manifest


def _members(tar: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
    while (member := tar.next()) is not None:
        yield member


def restore(
    source: Path, index: str, *, db: str | None = None, with_feedback: bool = True
) -> dict[str, Any]:
    """Check the whole archive, then make its version the index's live one (and put its
    feedback store in place); returns its manifest."""
    root = _file_index(index)
    feedback = _sqlite_feedback(root, db, with_feedback)
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".footnote-restore-", dir=root) as scratch:
        staged = Path(scratch)
        manifest = _unpack(source, staged)
        version = manifest["index_version"]
        index_part = staged / "index"
        (index_part / "CURRENT").write_text(version + "\n", encoding="utf-8")
        try:
            catalogue = read_catalogue(index_part)
            catalogue.checksums.wait()
            catalogue.checksums.check()
        except IndexError_ as exc:
            raise BackupError(f"the archive's index does not verify: {exc}") from None
        restored_db = staged / "feedback.sqlite3"
        if restored_db.is_file():
            schema = _feedback_schema(restored_db)
            if schema > SCHEMA_VERSION:
                raise BackupError(
                    f"the archive's feedback schema is {schema}, newer than this Footnote's "
                    f"({SCHEMA_VERSION}): upgrade Footnote first"
                )
        with writer_lock(root):
            versions = root / "versions"
            versions.mkdir(mode=0o700, exist_ok=True)
            target = versions / version
            if target.is_symlink() or target.is_file():
                target.unlink()
            elif target.exists():
                shutil.rmtree(target)
            os.rename(index_part / "versions" / version, target)
            for name in (REMEMBERED, CACHE_FILE):
                if (index_part / name).is_file():
                    os.replace(index_part / name, root / name)
            pointer = root / f"CURRENT.restore.{os.getpid()}.tmp"
            pointer.write_text(version + "\n", encoding="utf-8")
            os.replace(pointer, root / "CURRENT")
        if feedback is not None and restored_db.is_file():
            feedback.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            for stale in (
                Path(f"{feedback}-wal"),
                Path(f"{feedback}-shm"),
                Path(f"{feedback}-journal"),
            ):
                stale.unlink(missing_ok=True)
            os.replace(restored_db, feedback)
            os.chmod(feedback, 0o600)
    return manifest


def _report(exc: Exception) -> int:
    from footnote.store.redaction import redact

    print(f"footnote: {redact(str(exc))}", file=sys.stderr)
    return 2


def cmd_backup(args: argparse.Namespace) -> int:
    try:
        manifest = backup(
            args.index, Path(args.dest), db=args.db or None, with_feedback=not args.no_feedback
        )
    except (BackupError, IndexError_, OSError) as exc:
        return _report(exc)
    files = manifest["files"]
    print(
        f"{args.dest}: index version {manifest['index_version']}, {len(files)} files, "
        f"feedback: {'included' if 'feedback.sqlite3' in files else 'none'}"
    )
    return 0


def cmd_restore(args: argparse.Namespace) -> int:
    try:
        manifest = restore(
            Path(args.src), args.index, db=args.db or None, with_feedback=not args.no_feedback
        )
    except (BackupError, IndexError_, OSError) as exc:
        return _report(exc)
    live = read_current(Path(args.index))
    print(f"{args.index}: restored version {live} from {args.src} ({manifest['created_at']})")
    return 0


def register(sub: Any) -> None:
    for name, func, what, help_text in (
        ("backup", cmd_backup, "dest", "write the index and its feedback store to one archive"),
        ("restore", cmd_restore, "src", "put an archive's index and feedback store back"),
    ):
        p = sub.add_parser(name, help=help_text, description=(__doc__ or "").split("\n\n")[0])
        p.add_argument(what, metavar=what.upper(), help="the archive (.tar.gz)")
        add_index_option(p)
        p.add_argument(
            "--db", default="", help="the feedback store (default: as the server finds it)"
        )
        p.add_argument("--no-feedback", action="store_true", help="the index only")
        p.set_defaults(func=func)
