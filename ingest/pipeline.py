"""Incremental ingest: walk sources, parse, chunk, embed only what changed, publish atomically."""

from __future__ import annotations

import datetime as dt
import errno
import hashlib
import json
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from footnote.ingest.chunking import Chunker, ChunkSettings
from footnote.ingest.documents import ParseError
from footnote.ingest.embed_cached import embed_with_cache
from footnote.ingest.embeddings import load_embeddings
from footnote.ingest.limits import TimeBudgetExceeded, time_budget
from footnote.ingest.parsers import is_supported, parse_bytes
from footnote.store.backends import is_postgres, open_writer
from footnote.store.embedding_cache import EmbeddingCache, prune_cache
from footnote.store.text import embedding_text
from footnote.store.types import DEFAULT_ACCESS, Chunk, FileRecord, IndexMismatch

DEFAULT_MAX_BYTES = 20_000_000
DEFAULT_MAX_CHUNKS = 20_000
"""Per file: the whole R reference manual (2,415 pages) gives about half of this."""
DEFAULT_MAX_SECONDS = 300.0
"""Per file, parsing and chunking (embedding is counted apart)."""
Progress = Callable[[str, int, int], None]
"""Called as progress(stage, done, total) while ingest works."""


@dataclass
class IngestSummary:
    """What an ingest run did, per file. Every path met is in exactly one place: ingested
    (`added`, `updated`, `unchanged`), `failed` (source -> reason), or `skipped` (path ->
    reason: hidden, a symlink not followed, a special file, an unsupported type);
    `restricted` (source -> reason) names ingested files whose access could not be read
    and which only admins can see."""

    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    restricted: dict[str, str] = field(default_factory=dict)
    chunks: int = 0
    embedded_chunks: int = 0
    embedded_texts: int = 0
    """Distinct texts sent to the model; the other chunks' vectors came from the cache."""
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
            "restricted": len(self.restricted),
            "chunks": self.chunks,
            "embedded_chunks": self.embedded_chunks,
            "embedded_texts": self.embedded_texts,
            "errors": [{"source": s, "error": e} for s, e in sorted(self.failed.items())],
            "skips": [{"path": s, "reason": r} for s, r in sorted(self.skipped.items())],
            "restrictions": [
                {"source": s, "reason": r} for s, r in sorted(self.restricted.items())
            ],
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


def discover(
    paths: list[Path], summary: IngestSummary, *, follow_symlinks: bool = False
) -> Iterator[SourceFile]:
    """Walk the given roots once each; every path not yielded gets a reason in `summary`.

    The roots are a boundary. Symlinks found inside them are not followed unless
    `follow_symlinks`, and then only when they resolve inside one of the roots, so a link to
    `/etc/passwd` or `/proc/self/status` is never read. Special files (FIFOs, devices,
    sockets) are never opened. A root named on the command line is the caller's choice and
    is used as given, link or not.
    """
    boundary = [os.path.realpath(p) for p in paths]
    sources: set[str] = set()
    seen_dirs: set[str] = set()

    def accept(path: Path, source: str) -> Iterator[SourceFile]:
        if source in sources:  # two roots with the same relative path: ids must stay unique
            summary.skipped[path.as_posix()] = (
                f"another root already gave a file with the source name {source!r}"
            )
        elif not is_supported(path):
            summary.skipped[source] = f"unsupported file type {path.suffix.lower() or '(none)'}"
        else:
            sources.add(source)
            yield SourceFile(path, source)

    for root in paths:
        try:
            mode = os.stat(root).st_mode
        except OSError as exc:
            summary.failed[str(root)] = _stat_reason(root, exc)
            continue
        if stat.S_ISREG(mode):
            yield from accept(root, root.name)
            continue
        if not stat.S_ISDIR(mode):
            summary.skipped[str(root)] = _special_reason(mode)
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
                source = _rel(path, root)
                try:
                    mode = entry.stat(follow_symlinks=False).st_mode
                    if entry.is_symlink():
                        mode = _symlink_target_mode(path, real, boundary, follow_symlinks)
                except _Refused as refused:
                    if refused.failed:
                        summary.failed[source] = str(refused)
                    else:
                        summary.skipped[source] = str(refused)
                    continue
                except OSError as exc:
                    summary.failed[source] = _stat_reason(path, exc)
                    continue
                if entry.name.startswith("."):
                    hidden = "hidden folder" if stat.S_ISDIR(mode) else "hidden file"
                    summary.skipped[source] = f"{hidden} (its name starts with a dot)"
                elif stat.S_ISDIR(mode):
                    stack.append(path)
                elif stat.S_ISREG(mode):
                    yield from accept(path, source)
                else:
                    summary.skipped[source] = _special_reason(mode)


class _Refused(Exception):
    """A path discovery will not follow; `failed` marks a broken one (loop, dead link)."""

    def __init__(self, reason: str, *, failed: bool = False) -> None:
        super().__init__(reason)
        self.failed = failed


def _symlink_target_mode(link: Path, folder: str, boundary: list[str], follow: bool) -> int:
    """The mode of what a symlink found while walking points at, if it may be followed."""
    try:
        target = os.path.realpath(link, strict=True)
        mode = os.stat(target).st_mode
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _Refused("symlink loop", failed=True) from exc
        raise _Refused("broken symlink", failed=True) from exc
    if stat.S_ISDIR(mode) and _is_ancestor(target, folder):
        raise _Refused("symlink loop: links back to a parent folder", failed=True)
    if not follow:
        raise _Refused("symlink, not followed (--follow-symlinks follows links inside the roots)")
    if not any(_is_ancestor(root, target) for root in boundary):
        raise _Refused("symlink to a path outside the ingest roots, not followed")
    return mode


def _special_reason(mode: int) -> str:
    kinds = (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    )
    kind = next((name for test, name in kinds if test(mode)), "not a regular file")
    return f"special file ({kind}), not read"


def _stat_reason(path: Path, exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "symlink loop"
    if exc.errno == errno.ENOENT:
        return "broken symlink" if path.is_symlink() else "no such file or directory"
    return str(exc.strerror or exc)


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


def check_chunks(chunks: list[Chunk], max_chunks: int, claimed: set[str]) -> None:
    """Refuse (as a per-file reason) what either backend could not store or would mix up:
    too many chunks, text that is not valid Unicode or holds NUL, an id already in use."""
    if not chunks:
        raise ParseError("no text found")
    if len(chunks) > max_chunks:
        raise ParseError(f"too many chunks: {len(chunks)} > limit {max_chunks} (--max-chunks)")
    ids: set[str] = set()
    for chunk in chunks:
        if chunk.id in ids or chunk.id in claimed:
            raise ParseError(f"chunk id {chunk.id!r} is already used by another chunk")
        ids.add(chunk.id)
        try:
            stored = json.dumps(chunk.to_dict(), ensure_ascii=False).encode("utf-8")
        except (UnicodeEncodeError, TypeError, ValueError) as exc:
            raise ParseError(f"cannot be stored: {type(exc).__name__}") from exc
        if b"\\u0000" in stored:
            raise ParseError("cannot be stored: a NUL character in its text or front matter")


def _ambiguous_ids(files: dict[str, FileRecord]) -> set[str]:
    """Chunk ids an older index gave to more than one chunk: such chunks are never reused,
    since a lookup by id cannot tell them apart."""
    seen: set[str] = set()
    repeated: set[str] = set()
    for record in files.values():
        for chunk_id in record.chunk_ids:
            (repeated if chunk_id in seen else seen).add(chunk_id)
    return repeated


def _still_regular(path: Path, follow_symlinks: bool) -> os.stat_result:
    """Re-check a discovered file just before reading it: a path swapped for a link or a
    FIFO since the walk is refused, never opened."""
    info = os.stat(path) if follow_symlinks else os.lstat(path)
    if not stat.S_ISREG(info.st_mode):
        raise ParseError("no longer a regular file: it changed while ingest ran")
    return info


def ingest(
    paths: list[str | Path],
    index_dir: str | Path,
    *,
    embeddings: str = "",
    settings: ChunkSettings | None = None,
    default_access: list[str] | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_chunks: int = DEFAULT_MAX_CHUNKS,
    max_seconds: float = DEFAULT_MAX_SECONDS,
    follow_symlinks: bool = False,
    rebuild: bool = False,
    progress: Progress | None = None,
) -> IngestSummary:
    """Bring the index at `index_dir` (a directory or a `postgresql://` URL) in line with
    `paths`: the given paths are the corpus.

    Per-file limits: `max_bytes` (checked before reading), `max_chunks` and `max_seconds`
    (parsing and chunking one file; see `limits.time_budget`). A file over one fails with a
    reason and the run goes on."""
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
    with backend.writer():
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
        # Every file's chunks for the new version, in order: fresh ones (vector None: embed it),
        # or the chunk ids of an unchanged (or failed) file, whose chunks and vectors are looked
        # up only if a new version is written (an ingest with nothing to do never reads them).
        parts: list[list[tuple[Chunk, Any]] | tuple[list[str], SourceFile | None]] = []
        claimed: set[str] = set()  # chunk ids already in `parts`: a second claim is refused
        ambiguous = _ambiguous_ids(previous.files) if previous is not None else set()
        chunkers: list[Chunker] = []

        def chunk_file(
            item: SourceFile, data: bytes, digest: str, known: bool
        ) -> list[tuple[Chunk, Any]] | None:
            """Parse and chunk one new or changed file; None (and a reason) if it fails."""
            if not chunkers:
                chunkers.append(Chunker(model, settings))
            try:
                with time_budget(max_seconds):
                    doc = parse_bytes(data, item.path, item.source)
                    front_access = (
                        doc.access if doc.access is not None else doc.metadata.get("access")
                    )
                    access = normalize_access(front_access, default_access)
                    chunks = chunkers[0].split_document(
                        doc, date=file_date(doc.date, item.path), access=access
                    )
                check_chunks(chunks, max_chunks, claimed)
            except (ParseError, TimeBudgetExceeded) as exc:
                summary.failed[item.source] = str(exc)
                return None
            except Exception as exc:  # a parser bug must cost one file, not the run
                summary.failed[item.source] = f"{type(exc).__name__}: {exc}"
                return None
            claimed.update(chunk.id for chunk in chunks)
            if doc.access_problem:
                summary.restricted[item.source] = doc.access_problem
            files[item.source] = FileRecord(
                sha256=digest,
                chunk_ids=[c.id for c in chunks],
                size=len(data),
                mtime=item.path.stat().st_mtime,
                restricted=doc.access_problem,
            )
            (summary.updated if known else summary.added).append(item.source)
            return [(chunk, None) for chunk in chunks]

        sources = list(discover([Path(p) for p in paths], summary, follow_symlinks=follow_symlinks))
        for done, item in enumerate(sources, 1):
            if progress:
                progress("parse", done, len(sources))
            try:
                size = _still_regular(item.path, follow_symlinks).st_size
                if size > max_bytes:  # refused before reading: a huge file must not fill memory
                    summary.failed[item.source] = (
                        f"file too large: {size} bytes > limit {max_bytes}"
                    )
                    continue
                data = item.path.read_bytes()
            except ParseError as exc:
                summary.failed[item.source] = str(exc)
                continue
            except OSError as exc:
                summary.failed[item.source] = f"cannot read: {exc.strerror}"
                continue
            if len(data) > max_bytes:  # grew after the size check
                summary.failed[item.source] = f"file too large: over the limit {max_bytes}"
                continue
            digest = hashlib.sha256(data).hexdigest()
            old = previous.files.get(item.source) if previous else None
            if (
                previous is not None
                and old is not None
                and old.sha256 == digest
                and ambiguous.isdisjoint(old.chunk_ids)
                and claimed.isdisjoint(old.chunk_ids)
            ):
                parts.append((list(old.chunk_ids), item))
                claimed.update(old.chunk_ids)
                files[item.source] = old
                summary.unchanged.append(item.source)
                if old.restricted:
                    summary.restricted[item.source] = old.restricted
                continue
            fresh = chunk_file(item, data, digest, old is not None)
            if fresh is not None:
                parts.append(fresh)

        if previous is not None:
            summary.deleted = sorted(set(previous.files) - set(files) - set(summary.failed))
            # A file that failed this time keeps its last good chunks rather than vanishing.
            for source in sorted(set(previous.files) & set(summary.failed)):
                record = previous.files[source]
                ids = [cid for cid in record.chunk_ids if cid not in ambiguous | claimed]
                parts.append((ids, None))
                claimed.update(ids)
                files[source] = record
            if not summary.deleted and not any(isinstance(part, list) for part in parts):
                summary.chunks = sum(len(part[0]) for part in parts)
                summary.version = previous.version
                return summary

        # Every chunk of the new version with its vector: an array, STORED, or None (embed it).
        kept: list[tuple[Chunk, Any]] = []
        for part in parts:
            if isinstance(part, list):
                kept.extend(part)
                continue
            ids, unchanged = part
            assert previous is not None
            reused = previous.lookup(ids, unchanged is None)
            if reused is not None:
                kept.extend(reused)
            elif unchanged is not None:  # its chunks are missing from the index: chunk it again
                summary.unchanged.remove(unchanged.source)
                claimed.difference_update(ids)
                record = files.pop(unchanged.source)
                data = unchanged.path.read_bytes()
                kept.extend(chunk_file(unchanged, data, record.sha256, True) or [])

        to_embed = [i for i, (_, vec) in enumerate(kept) if vec is None]
        summary.embedded_chunks = len(to_embed)
        summary.chunks = len(kept)
        if not to_embed and previous is not None and not summary.deleted:
            summary.version = previous.version
            return summary
        cache = EmbeddingCache(index_dir)
        try:
            vectors, summary.embedded_texts = embed_with_cache(
                model, [embedding_text(kept[r][0]) for r in to_embed], cache, progress
            )
        finally:
            cache.close()
        for r, vector in zip(to_embed, vectors, strict=True):
            kept[r] = (kept[r][0], vector)
        summary.version = backend.publish(
            entries=kept,
            files=files,
            manifest=manifest_settings,
            embedding_dimension=model.dimension,
            on_failure=summary.failed.__setitem__,
        )
        for listed in (summary.added, summary.updated):  # refused by the backend at publish
            listed[:] = [source for source in listed if source not in summary.failed]
        prune_cache(cache)
    return summary
