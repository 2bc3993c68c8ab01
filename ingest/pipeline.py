"""Incremental ingest: walk sources, parse, chunk, embed only what changed, publish atomically."""

from __future__ import annotations

import contextlib
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

import numpy as np

from footnote.ingest.candidates import Candidate
from footnote.ingest.chunking import Chunker, ChunkSettings
from footnote.ingest.context import (
    DEFAULT_CONTEXT,
    ContextSettings,
    chunk_contexts,
    recorded_context,
)
from footnote.ingest.documents import ParseError
from footnote.ingest.limits import FileBudget, TimeBudgetExceeded
from footnote.ingest.model_context import ContextFailed, ContextUsage, ModelContexts
from footnote.ingest.parsers import parse_bytes, unsupported_reason
from footnote.ingest.roots import SourceRoot, merge_roots, now, read_roots, root_for
from footnote.ingest.spool import FreshSpool
from footnote.models.cached import embed_together, embed_with_cache
from footnote.models.embedding_choice import (
    EmbeddingsSetting,
    as_index_embeddings,
)
from footnote.models.embedding_choice import remember as remember_embeddings
from footnote.models.embedding_choice import remembered as remembered_embeddings
from footnote.store.backends import is_postgres, open_writer
from footnote.store.base import IndexWriter, PreviousState
from footnote.store.embedding_cache import EmbeddingCache, prune_cache
from footnote.store.files import write_batch_rows
from footnote.store.text import embedding_text
from footnote.store.types import DEFAULT_ACCESS, Chunk, FileRecord, IndexError_, IndexMismatch

DEFAULT_MAX_BYTES = 20_000_000
DEFAULT_MAX_CHUNKS = 20_000
"""Per file: the whole R reference manual (2,415 pages) gives about half of this."""
DEFAULT_MAX_SECONDS = 300.0
"""Per file, all its work: parsing, chunking and embedding."""
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
    deleted_why: dict[str, str] = field(default_factory=dict)
    """Why each deleted document went: gone from its root, renamed, removed."""
    chunks: int = 0
    embedded_chunks: int = 0
    embedded_texts: int = 0
    """Distinct texts sent to the model; the other chunks' vectors came from the cache."""
    version: str | None = None
    index: str = ""
    context: ContextUsage | None = None
    """With a context model: its requests, tokens and cost."""

    def to_dict(self) -> dict[str, Any]:
        return {
            **({"context": self.context.to_dict()} if self.context is not None else {}),
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
            "deletions": [{"source": s, "reason": r} for s, r in sorted(self.deleted_why.items())],
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
    """Path relative to its root, with `/` (the root's own name for a file root)."""
    root: Path = Path()


def discover(
    paths: list[Path],
    summary: IngestSummary,
    *,
    follow_symlinks: bool = False,
    selected: Callable[[str], bool] = lambda source: True,
    boundary_roots: list[Path] | None = None,
) -> Iterator[SourceFile]:
    """Walk the given roots once each; every path not yielded gets a reason in `summary`.

    The roots are a boundary. Symlinks found inside them are not followed unless
    `follow_symlinks`, and then only when they resolve inside one of the roots, so a link to
    `/etc/passwd` or `/proc/self/status` is never read. Special files (FIFOs, devices,
    sockets) are never opened. A root named on the command line is the caller's choice and
    is used as given, link or not. `selected` keeps a file by its relative path (a
    source's include/exclude globs); `boundary_roots` widens the boundary to other roots.
    """
    boundary = [os.path.realpath(p) for p in (boundary_roots or paths)]
    seen_dirs: set[str] = set()

    def accept(path: Path, source: str) -> Iterator[SourceFile]:
        if unsupported := unsupported_reason(path):
            summary.skipped[source] = unsupported
        elif not selected(source):
            summary.skipped[source] = "left out by the source's --include/--exclude globs"
        else:
            yield SourceFile(path, source, root)

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


def file_date(doc_date: str | None, mtime: float) -> str:
    """The document's own date if it states one, else the file's modification date."""
    if doc_date:
        return str(doc_date)[:10]
    return dt.datetime.fromtimestamp(mtime, dt.UTC).date().isoformat()


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


Owned = Callable[[str, FileRecord], bool]
"""Whether a document the index holds is this run's to keep up to date (and to delete when
its root no longer gives it); any other document is carried over untouched."""


def file_candidates(root: SourceRoot, found: list[SourceFile], max_bytes: int) -> list[Candidate]:
    """Candidates for files `discover` found under a folder or file root."""

    def one(item: SourceFile) -> Candidate:
        def read() -> bytes:
            try:
                size = _still_regular(item.path, root.follow_symlinks).st_size
                if size > max_bytes:  # refused before reading: a huge file must not fill memory
                    raise ParseError(f"file too large: {size} bytes > limit {max_bytes}")
                return item.path.read_bytes()
            except OSError as exc:
                raise ParseError(f"cannot read: {exc.strerror}") from exc

        return Candidate(
            root=root.id,
            origin=item.source,
            name=item.source,
            label=root.label,
            read=read,
            parse=lambda data, source: parse_bytes(data, item.path, source),
            mtime=lambda: item.path.stat().st_mtime,
            access=root.access,
        )

    return [one(item) for item in found]


def ingest(
    paths: list[str | Path],
    index_dir: str | Path,
    *,
    embeddings: EmbeddingsSetting = "",
    settings: ChunkSettings | None = None,
    context: ContextSettings | None = None,
    default_access: list[str] | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_chunks: int = DEFAULT_MAX_CHUNKS,
    max_seconds: float = DEFAULT_MAX_SECONDS,
    follow_symlinks: bool = False,
    rebuild: bool = False,
    progress: Progress | None = None,
) -> IngestSummary:
    """Bring the documents under `paths` (folders or files; a directory or a `postgresql://`
    URL as `index_dir`) into the index, and remember each path as a source for `sync`.

    Only documents these roots gave are updated or, when gone from them, deleted: a document
    another root gave is never touched. Two roots giving the same relative name both keep
    theirs; the second is named `ROOT/NAME` after its folder. Per-file limits: `max_bytes`
    (checked before reading), `max_chunks` and `max_seconds` (the file's parsing, chunking
    and embedding; see `limits.FileBudget`). A file over one fails with a reason, nothing of
    it is published, and the run goes on."""
    roots = [root_for(p, follow_symlinks=follow_symlinks) for p in paths]
    return update_index(
        index_dir,
        roots,
        embeddings=embeddings,
        settings=settings,
        context=context,
        default_access=default_access,
        max_bytes=max_bytes,
        max_chunks=max_chunks,
        max_seconds=max_seconds,
        rebuild=rebuild,
        progress=progress,
    )


def live_state(
    backend: IndexWriter, *, rebuild: bool = False
) -> tuple[PreviousState | None, dict[str, Any]]:
    """The live version and the sources and settings it remembers. A live version that
    cannot be read is refused (IndexCorrupt, naming `--rebuild`) unless `rebuild`: then
    nothing of it is reused, and its sources come from where the backend keeps them apart."""
    try:
        live = backend.previous()
    except IndexError_:
        if not rebuild:
            raise
        return None, backend.remembered() or {}
    if live is None:
        return None, {}
    return live, live.manifest


def update_index(
    index_dir: str | Path,
    roots: list[SourceRoot],
    *,
    documents: dict[str, list[Candidate]] | None = None,
    append: bool = False,
    remember: bool = True,
    owned: Owned | None = None,
    forget: set[str] | frozenset[str] = frozenset(),
    unread: list[SourceRoot] | None = None,
    why_deleted: str = "",
    embeddings: EmbeddingsSetting = "",
    settings: ChunkSettings | None = None,
    context: ContextSettings | None = None,
    default_access: list[str] | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_chunks: int = DEFAULT_MAX_CHUNKS,
    max_seconds: float = DEFAULT_MAX_SECONDS,
    rebuild: bool = False,
    progress: Progress | None = None,
    allow_private: bool | None = None,
) -> IngestSummary:
    """The one write path: read `roots` again, update what they give, delete what they no
    longer give (and whatever `owned` names besides), and publish atomically under the
    writer lock. `documents` holds ready candidates for `documents:` roots (with `append`,
    they add to or update what those roots gave before, rather than replacing it); `remember`
    records `roots` in the index's sources, `unread` records roots without reading them,
    `forget` drops ids from them. `allow_private` lets URL roots reach private addresses
    (True), forbids it (False), or, None, leaves it to each root's remembered setting.
    `context` (default: what the index was built with, else `DEFAULT_CONTEXT`) is what each
    chunk is embedded and keyword-indexed with."""
    created = not is_postgres(index_dir) and not Path(index_dir).exists()
    backend = open_writer(index_dir)
    index_dir = index_dir if is_postgres(index_dir) else Path(index_dir)
    model = as_index_embeddings(embeddings or remembered_embeddings(index_dir))
    settings = settings or ChunkSettings(max_tokens=model.max_tokens)
    summary = IngestSummary(index=str(index_dir))
    cache = EmbeddingCache(index_dir)
    with (
        backend.writer(),
        contextlib.closing(cache),
        # Made inside: a writer that cannot start (the index is locked) leaves no folder.
        contextlib.closing(FreshSpool(model.dimension)) as spool,
    ):
        live, kept = live_state(backend, rebuild=rebuild)
        remembered = read_roots(kept)
        if default_access is None:
            default_access = list(kept.get("default_access") or DEFAULT_ACCESS)
        if context is None:
            context = recorded_context(kept or None)
        context = context or DEFAULT_CONTEXT
        manifest_settings: dict[str, Any] = {
            "embedding": {
                "model": model.model_id,
                "dimension": model.dimension,
                "max_tokens": model.max_tokens,
            },
            "chunking": settings.to_dict(),
            "context": context.to_dict(),
            "default_access": default_access,
        }
        writer = ModelContexts(context.model, cache) if context.kind == "model" else None
        dense_context = context.fields == "both"
        if writer is not None:
            summary.context = writer.usage
        previous = None if rebuild else live
        if previous is not None and (
            previous.manifest["embedding"] != manifest_settings["embedding"]
            or previous.manifest.get("chunking") != manifest_settings["chunking"]
            # Every chunk of a version has the same context: a change redoes them all.
            or recorded_context(previous.manifest) != context
            or previous.manifest.get("default_access") != default_access
        ):
            if previous.manifest["embedding"]["model"] != model.model_id:
                raise IndexMismatch(
                    f"index {index_dir} was built with embeddings "
                    f"{previous.manifest['embedding']['model']!r}, not {model.model_id!r}: "
                    "pass --rebuild to re-embed everything with the new model"
                )
            previous = None
        if previous is None and remembered:
            # Nothing can be reused: every remembered root is read again with the given ones,
            # so a rebuild loses no document another root gave (nor one a damaged version held).
            given = {r.id for r in roots}
            roots = roots + [r for r in remembered if r.id not in given and r.id not in forget]
        registry = merge_roots(
            remembered, [*(roots if remember else []), *(unread or [])], set(forget)
        )
        registry_dicts = [r.to_dict() for r in registry]
        manifest_settings["sources"] = registry_dicts
        before = {r.id: r for r in remembered}
        # A root whose access or globs changed has every document re-read.
        reread = {
            r.id
            for r in roots
            if r.id in before
            and (before[r.id].access, before[r.id].include, before[r.id].exclude)
            != (r.access, r.include, r.exclude)
        }

        candidates: list[Candidate] = []
        read_roots_ok: set[str] = set()
        for root in roots:
            if root.kind in ("folder", "file"):
                failed_before = len(summary.failed)
                found = list(
                    discover(
                        [Path(root.id)],
                        summary,
                        follow_symlinks=root.follow_symlinks,
                        selected=root.selected,
                        boundary_roots=[Path(r.id) for r in roots if r.kind in ("folder", "file")],
                    )
                )
                if root.id in summary.failed or (len(summary.failed) > failed_before and not found):
                    continue  # a root that cannot be read keeps its documents
                candidates.extend(file_candidates(root, found, max_bytes))
            elif root.kind in ("url", "site"):
                from footnote.ingest.web import page_candidates

                old_pages = {
                    r.origin: r
                    for r in (previous.files.values() if previous else [])
                    if r.root == root.id and r.origin
                }
                got = page_candidates(
                    root,
                    old_pages,
                    summary.failed,
                    summary.skipped,
                    max_bytes=max_bytes,
                    allow_private=root.allow_private if allow_private is None else allow_private,
                )
                if got is None:
                    continue
                candidates.extend(got)
            elif documents and root.id in documents:
                candidates.extend(documents[root.id])
                if append:
                    continue  # not a full re-read: the root's other documents stay
            else:
                continue  # documents handed in from Python cannot be read again
            read_roots_ok.add(root.id)

        def is_owned(source: str, record: FileRecord) -> bool:
            if record.root is not None and record.root in read_roots_ok:
                return True
            return owned is not None and owned(source, record)

        files: dict[str, FileRecord] = {}
        # Every document's chunks for the new version, in order: fresh ones with vectors, or
        # the chunk ids of a kept document, whose chunks and vectors are looked up only if a
        # new version is written (an ingest with nothing to do never reads them).
        parts: list[_Fresh | tuple[list[str], Candidate | None, str]] = []
        claimed: set[str] = set()  # chunk ids already in `parts`: a second claim is refused
        old_files = previous.files if previous is not None else {}
        ambiguous = _ambiguous_ids(old_files)
        by_origin = {(r.root, r.origin): s for s, r in old_files.items() if r.root}
        names: set[str] = set()
        chunkers: list[Chunker] = []
        pending: dict[str, tuple[FileBudget, _Fresh]] = {}
        flush_rows = write_batch_rows()  # embed and spool what waits once it reaches this

        def name_for(item: Candidate) -> str:
            """Its name in the last version if it had one; else its own name unless another
            document holds it; else `LABEL/name` (then `LABEL~2/name`...)."""
            old = by_origin.get((item.root, item.origin))
            if old is not None and old not in names:
                return old
            taken = names | {
                s for s, r in old_files.items()
                if r.root is not None and (r.root, r.origin) != (item.root, item.origin)
            }  # fmt: skip
            if item.name not in taken:
                return item.name
            n = 1
            while True:
                label = item.label if n == 1 else f"{item.label}~{n}"
                name = f"{label}/{item.name}"
                if name not in taken:
                    return name
                n += 1

        def chunk_file(
            item: Candidate, source: str, data: bytes, digest: str, known: bool
        ) -> _Fresh | None:
            """Parse and chunk one new or changed document inside its time budget, which
            its embedding (`embed_pending`) spends the rest of; None (and a reason) if it
            fails."""
            if not chunkers:
                chunkers.append(Chunker(model, settings))
            budget = FileBudget(max_seconds)
            try:
                with budget.running():
                    doc = item.parse(data, source)
                    front_access = (
                        doc.access if doc.access is not None else doc.metadata.get("access")
                    )
                    access = normalize_access(front_access, item.access or default_access)
                    chunks = chunkers[0].split_document(
                        doc, date=file_date(doc.date, item.mtime()), access=access
                    )
                    check_chunks(chunks, max_chunks, claimed)
                    texts = [c.text for c in chunks]
                    contexts = (
                        writer.contexts(digest, doc.title, texts, [c.section for c in chunks])
                        if writer is not None
                        else chunk_contexts(
                            doc.title, texts, context, [c.id.rpartition(":")[0] for c in chunks]
                        )
                    )
                    for chunk, situated in zip(chunks, contexts, strict=True):
                        chunk.context = situated
            except ContextFailed:
                raise  # the provider failed: the whole run stops, nothing is published
            except (ParseError, TimeBudgetExceeded) as exc:
                summary.failed[source] = str(exc)
                return None
            except Exception as exc:  # a parser bug must cost one file, not the run
                summary.failed[source] = f"{type(exc).__name__}: {exc}"
                return None
            claimed.update(chunk.id for chunk in chunks)
            if doc.access_problem:
                summary.restricted[source] = doc.access_problem
            files[source] = FileRecord(
                sha256=digest,
                chunk_ids=[c.id for c in chunks],
                size=len(data),
                mtime=item.mtime(),
                restricted=doc.access_problem,
                root=item.root,
                origin=item.origin,
                ingested_at=now(),
                fetch=item.fetch,
                access=access,
            )
            (summary.updated if known else summary.added).append(source)
            fresh = _Fresh(source, chunks)
            pending[source] = (budget, fresh)
            return fresh

        def embed_pending() -> None:
            """Embed every document chunked since the last call, their texts together
            (shortest first, each step charged to the documents it served), then spool each
            document for the writer. A document over budget fails whole: its record and
            chunks are dropped and its last good version, if any, stays."""
            summary.embedded_texts += embed_together(
                model,
                {
                    s: [embedding_text(c, dense_context) for c in f.chunks]
                    for s, (_, f) in pending.items()
                },
                cache,
                charge=lambda source, seconds: pending[source][0].charge(seconds),
                progress=progress,
            )
            for source, (budget, fresh) in pending.items():
                try:
                    with budget.running():
                        vectors, embedded = _embed(
                            model, fresh.chunks, budget, cache, dense_context
                        )
                    summary.embedded_texts += embedded
                except TimeBudgetExceeded as exc:
                    summary.failed[source] = str(exc)
                    summary.restricted.pop(source, None)
                    for listed in (summary.added, summary.updated):
                        if source in listed:
                            listed.remove(source)
                    files.pop(source, None)
                    claimed.difference_update(chunk.id for chunk in fresh.chunks)
                    fresh.chunks = []
                    continue
                spool.put(source, fresh.chunks, vectors)
                fresh.spooled, fresh.chunks = len(fresh.chunks), []
                summary.embedded_chunks += fresh.spooled
            pending.clear()

        def keep(source: str, record: FileRecord, item: Candidate | None) -> None:
            """Carry a document over as it is: unchanged (`item`), or not this run's."""
            ids = list(record.chunk_ids)
            if item is None:
                ids = [cid for cid in ids if cid not in ambiguous | claimed]
            parts.append((ids, item, source))
            claimed.update(ids)
            files[source] = record
            if item is not None:
                summary.unchanged.append(source)
                if record.restricted:
                    summary.restricted[source] = record.restricted

        for done, item in enumerate(candidates, 1):
            if progress:
                progress("parse", done, len(candidates))
            source = name_for(item)
            names.add(source)
            old = old_files.get(source)
            if old is not None and old.root is None:  # an older index's record: adopted
                old = FileRecord(**{**old.__dict__, "root": item.root, "origin": item.origin})
            reusable = (
                old is not None
                and item.root not in reread
                and ambiguous.isdisjoint(old.chunk_ids)
                and claimed.isdisjoint(old.chunk_ids)
            )
            if item.not_modified and reusable and old is not None:
                keep(source, old, item)
                continue
            try:
                data = item.read()
            except ParseError as exc:
                summary.failed[source] = str(exc)
                continue
            if len(data) > max_bytes:  # grew after the size check
                summary.failed[source] = f"file too large: over the limit {max_bytes}"
                continue
            digest = hashlib.sha256(data).hexdigest()
            if reusable and old is not None and old.sha256 == digest:
                if item.fetch and item.fetch != old.fetch:
                    old = FileRecord(**{**old.__dict__, "fetch": item.fetch})
                keep(source, old, item)
                continue
            fresh = chunk_file(item, source, data, digest, old is not None)
            if fresh is not None:
                parts.append(fresh)
                if sum(len(f.chunks) for _, f in pending.values()) >= flush_rows:
                    embed_pending()  # the run's fresh work waits on disk, not in memory

        embed_pending()
        for source, record in sorted(old_files.items()):
            if source in files:
                continue
            if source in summary.failed or not is_owned(source, record):
                # Not this run's to change, or it failed this time: its last good chunks stay.
                keep(source, record, None)
                continue
            summary.deleted.append(source)
            summary.deleted_why[source] = why_deleted or _gone_reason(record, files)

        # The last failure of each document, kept until its root is read again.
        old_failures = dict(live.manifest.get("failures") or {}) if live is not None else {}
        failures = {
            source: reason
            for source, reason in old_failures.items()
            if source in files and files[source].root not in read_roots_ok
        }
        failures.update(summary.failed)
        manifest_settings["failures"] = failures
        changed_registry = (
            live is None
            or previous is None
            or registry_dicts != [r.to_dict() for r in remembered]
            or failures != (live.manifest.get("failures") or {})
        )
        fresh_parts = any(isinstance(part, _Fresh) and part.spooled for part in parts)
        if previous is not None and not (changed_registry or summary.deleted or fresh_parts):
            summary.chunks = sum(len(part[0]) for part in parts if isinstance(part, tuple))
            summary.version = previous.version
            return summary

        def new_version() -> Iterator[tuple[Chunk, Any]]:
            """Every chunk of the new version with its vector (an array, or STORED), one
            document at a time as the backend writes them: a kept document's chunks are read
            from the live version, and a fresh one's from the spool, only when their turn
            comes, so the run never holds the whole index."""
            for part in parts:
                entries: list[tuple[Chunk, Any]]
                if isinstance(part, _Fresh):
                    entries = spool.take(part.source) if part.spooled else []
                else:
                    ids, unchanged, source = part
                    assert previous is not None
                    reused = previous.lookup(ids, unchanged is None)
                    if reused is not None:
                        entries = reused
                    elif unchanged is None:
                        continue
                    else:  # its chunks are missing from the index: chunk it again
                        summary.unchanged.remove(source)
                        claimed.difference_update(ids)
                        record = files.pop(source)
                        again = chunk_file(unchanged, source, unchanged.read(), record.sha256, True)
                        embed_pending()
                        entries = spool.take(source) if again and again.spooled else []
                summary.chunks += len(entries)
                yield from entries

        if live is None and not files and summary.failed:
            # Nothing could be read into a new index: publish nothing rather than an empty one.
            nothing = True
        else:
            nothing = False
            summary.version = backend.publish(
                entries=new_version(),
                files=files,
                manifest=manifest_settings,
                embedding_dimension=model.dimension,
                on_failure=summary.failed.__setitem__,
            )
            # So search reloads a provider model by itself.
            remember_embeddings(index_dir, model.model_id)
            prune_cache(cache)
        for listed in (summary.added, summary.updated):  # refused by the backend at publish
            listed[:] = [source for source in listed if source not in summary.failed]
    if nothing and created:  # leave no empty index folder behind, only what this run made
        folder = Path(index_dir)
        (folder / "LOCK").unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            folder.rmdir()
    return summary


@dataclass
class _Fresh:
    """A new or changed document of this run: its chunks until they are embedded, then how
    many of them wait in the run's spool for the writer."""

    source: str
    chunks: list[Chunk]
    spooled: int = 0


def _embed(
    model: Any,
    chunks: list[Chunk],
    budget: FileBudget,
    cache: EmbeddingCache,
    dense_context: bool,
) -> tuple[list[np.ndarray], int]:
    """One document's vectors and how many texts the model embedded: through the embedding
    cache (each distinct text once, none it holds, every finished batch kept for a resumed
    run), checking the file's time budget between batches."""
    texts = [embedding_text(chunk, dense_context) for chunk in chunks]
    vectors, embedded = embed_with_cache(model, texts, cache, check=budget.check)
    budget.check()
    return list(vectors), embedded


def _gone_reason(record: FileRecord, files: dict[str, FileRecord]) -> str:
    """Why a document its root no longer gives is deleted: renamed (same content under
    another name from the same root) or gone."""
    for source, other in files.items():
        if other.root == record.root and other.sha256 == record.sha256:
            return f"renamed to {source}"
    where = record.root or "its root"
    return f"no longer in {where}"
