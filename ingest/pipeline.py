"""Incremental ingest: walk sources, parse, chunk, embed only what changed, publish atomically."""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from footnote.ingest.chunking import Chunker, ChunkSettings
from footnote.ingest.documents import ParseError
from footnote.ingest.embeddings import load_embeddings
from footnote.ingest.parsers import is_supported, parse_file
from footnote.store.backends import is_postgres, open_writer
from footnote.store.text import embedding_text
from footnote.store.types import DEFAULT_ACCESS, Chunk, FileRecord, IndexMismatch

DEFAULT_MAX_BYTES = 20_000_000
Progress = Callable[[str, int, int], None]
"""Called as progress(stage, done, total) while ingest works."""


@dataclass
class IngestSummary:
    """What an ingest run did, per file; `failed` maps a source to its reason."""

    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    chunks: int = 0
    embedded_chunks: int = 0
    version: str | None = None
    index: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "version": self.version,
            "added": len(self.added),
            "updated": len(self.updated),
            "unchanged": len(self.unchanged),
            "deleted": len(self.deleted),
            "failed": len(self.failed),
            "skipped": len(self.skipped),
            "chunks": self.chunks,
            "embedded_chunks": self.embedded_chunks,
            "errors": [{"source": s, "error": e} for s, e in sorted(self.failed.items())],
            "files": {
                "added": self.added,
                "updated": self.updated,
                "deleted": self.deleted,
            },
        }


@dataclass(frozen=True)
class SourceFile:
    path: Path
    source: str


def discover(paths: list[Path], summary: IngestSummary) -> Iterator[SourceFile]:
    """Walk the given paths once each; loops, dead links and unreadable folders are reported."""
    seen_dirs: set[str] = set()
    for root in paths:
        if root.is_file():
            yield SourceFile(root, root.name)
            continue
        if not root.exists():
            summary.failed[str(root)] = "no such file or directory"
            continue
        stack = [root]
        while stack:
            folder = stack.pop()
            real = os.path.realpath(folder)
            if real in seen_dirs:
                continue
            seen_dirs.add(real)
            try:
                entries = sorted(os.scandir(folder), key=lambda e: e.name)
            except OSError as exc:
                summary.failed[_rel(Path(folder), root)] = f"cannot list folder: {exc.strerror}"
                continue
            for entry in entries:
                path = Path(entry.path)
                if entry.name.startswith("."):
                    continue
                source = _rel(path, root)
                try:
                    mode = os.stat(path).st_mode
                except OSError as exc:
                    reason = "broken symlink" if entry.is_symlink() else exc.strerror
                    if "many levels" in str(exc.strerror):
                        reason = "symlink loop"
                    summary.failed[source] = str(reason)
                    continue
                if stat.S_ISDIR(mode):
                    if entry.is_symlink() and _is_ancestor(os.path.realpath(path), real):
                        summary.failed[source] = "symlink loop: links back to a parent folder"
                    else:
                        stack.append(path)
                elif stat.S_ISREG(mode):
                    if is_supported(path):
                        yield SourceFile(path, source)
                    else:
                        summary.skipped.append(source)


def _is_ancestor(target: str, folder: str) -> bool:
    """Whether `target` is `folder` or above it: descending there would never end."""
    return os.path.commonpath([target, folder]) == target


def _rel(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.as_posix()


def file_date(doc_date: str | None, path: Path) -> str:
    """The document's own date if it states one, else the file's modification date."""
    if doc_date:
        return str(doc_date)[:10]
    return dt.datetime.fromtimestamp(path.stat().st_mtime, dt.UTC).date().isoformat()


def normalize_access(value: Any, default: list[str]) -> list[str] | None:
    """Access groups from front matter; missing means the default, malformed means nobody."""
    if value is None:
        return list(default)
    if isinstance(value, str):
        value = [part.strip() for part in value.split(",")]
    if isinstance(value, list) and value and all(isinstance(g, str) and g.strip() for g in value):
        return sorted({g.strip() for g in value})
    return None


def ingest(
    paths: list[str | Path],
    index_dir: str | Path,
    *,
    embeddings: str = "",
    settings: ChunkSettings | None = None,
    default_access: list[str] | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    rebuild: bool = False,
    progress: Progress | None = None,
) -> IngestSummary:
    """Bring the index at `index_dir` (a directory or a `postgresql://` URL) in line with
    `paths`: the given paths are the corpus."""
    backend = open_writer(index_dir)
    index_dir = index_dir if is_postgres(index_dir) else Path(index_dir)
    model = load_embeddings(embeddings)
    settings = settings or ChunkSettings(max_tokens=model.max_tokens)
    default_access = default_access or list(DEFAULT_ACCESS)
    summary = IngestSummary(index=str(index_dir))
    manifest_settings = {
        "embedding": {
            "model": model.model_id,
            "dimension": model.dimension,
            "max_tokens": model.max_tokens,
        },
        "chunking": settings.to_dict(),
        "default_access": default_access,
    }
    previous = None
    if not rebuild:
        previous = backend.previous()
        if previous is not None and (
            previous.manifest["embedding"] != manifest_settings["embedding"]
            or previous.manifest.get("chunking") != manifest_settings["chunking"]
            or previous.manifest.get("default_access") != default_access
        ):
            if previous.manifest["embedding"]["model"] != model.model_id:
                raise IndexMismatch(
                    f"index {index_dir} was built with embeddings "
                    f"{previous.manifest['embedding']['model']!r}, not {model.model_id!r}: "
                    "pass --rebuild to re-embed everything with the new model"
                )
            previous = None

    files: dict[str, FileRecord] = {}
    # Every file's chunks for the new version, in order: fresh ones (vector None: embed it), or
    # an unchanged file's record, whose chunks and vectors are looked up only if a new version
    # is written (an ingest with nothing to do never reads the vectors).
    parts: list[list[tuple[Chunk, Any]] | tuple[FileRecord, SourceFile | None]] = []
    chunkers: list[Chunker] = []

    def chunk_file(item: SourceFile, digest: str, known: bool) -> list[tuple[Chunk, Any]] | None:
        """Parse and chunk one new or changed file; None (and a reason) if it fails."""
        if not chunkers:
            chunkers.append(Chunker(model, settings))
        try:
            doc = parse_file(item.path, item.source, max_bytes=max_bytes)
            front_access = doc.access if doc.access is not None else doc.metadata.get("access")
            access = normalize_access(front_access, default_access)
            chunks = chunkers[0].split_document(
                doc, date=file_date(doc.date, item.path), access=access
            )
            if not chunks:
                raise ParseError("no text found")
        except ParseError as exc:
            summary.failed[item.source] = str(exc)
            return None
        except Exception as exc:  # a parser bug must cost one file, not the run
            summary.failed[item.source] = f"{type(exc).__name__}: {exc}"
            return None
        stat_result = item.path.stat()
        files[item.source] = FileRecord(
            sha256=digest,
            chunk_ids=[c.id for c in chunks],
            size=stat_result.st_size,
            mtime=stat_result.st_mtime,
        )
        (summary.updated if known else summary.added).append(item.source)
        return [(chunk, None) for chunk in chunks]

    sources = list(discover([Path(p) for p in paths], summary))
    for done, item in enumerate(sources, 1):
        if progress:
            progress("parse", done, len(sources))
        try:
            size = item.path.stat().st_size
            if size > max_bytes:  # refused before reading: a huge file must not fill memory
                summary.failed[item.source] = f"file too large: {size} bytes > limit {max_bytes}"
                continue
            data = item.path.read_bytes()
        except OSError as exc:
            summary.failed[item.source] = f"cannot read: {exc.strerror}"
            continue
        digest = hashlib.sha256(data).hexdigest()
        old = previous.files.get(item.source) if previous else None
        if previous is not None and old is not None and old.sha256 == digest:
            parts.append((old, item))
            files[item.source] = old
            summary.unchanged.append(item.source)
            continue
        fresh = chunk_file(item, digest, old is not None)
        if fresh is not None:
            parts.append(fresh)

    if previous is not None:
        summary.deleted = sorted(set(previous.files) - set(files) - set(summary.failed))
        # A file that failed this time keeps its last good chunks rather than vanishing.
        for source in sorted(set(previous.files) & set(summary.failed)):
            record = previous.files[source]
            parts.append((record, None))
            files[source] = record
        if not summary.deleted and not any(isinstance(part, list) for part in parts):
            summary.chunks = sum(len(part[0].chunk_ids) for part in parts)
            summary.version = previous.version
            return summary

    # Every chunk of the new version with its vector: an array, STORED, or None (embed it).
    kept: list[tuple[Chunk, Any]] = []
    for part in parts:
        if isinstance(part, list):
            kept.extend(part)
            continue
        record, unchanged = part
        assert previous is not None
        reused = previous.lookup(record.chunk_ids, unchanged is None)
        if reused is not None:
            kept.extend(reused)
        elif unchanged is not None:  # its chunks are missing from the index: chunk it again
            summary.unchanged.remove(unchanged.source)
            kept.extend(chunk_file(unchanged, record.sha256, True) or [])

    to_embed = [i for i, (_, vec) in enumerate(kept) if vec is None]
    summary.embedded_chunks = len(to_embed)
    summary.chunks = len(kept)
    if not to_embed and previous is not None and not summary.deleted:
        summary.version = previous.version
        return summary
    texts = {r: embedding_text(kept[r][0]) for r in to_embed}
    # Shortest first across the whole run, as embed_array orders one call: batches of 64 taken
    # in file order mix short and long chunks and pad them all to the longest.
    order = sorted(to_embed, key=lambda r: model.count_tokens(texts[r]))
    batch = 64
    for start in range(0, len(order), batch):
        group = order[start : start + batch]
        embedded = np.asarray(model.embed_array([texts[r] for r in group]), dtype=np.float32)
        for r, vector in zip(group, embedded, strict=True):
            kept[r] = (kept[r][0], vector)
        if progress:
            progress("embed", min(start + batch, len(order)), len(order))
    summary.version = backend.publish(
        entries=kept,
        files=files,
        manifest=manifest_settings,
        embedding_dimension=model.dimension,
    )
    return summary
