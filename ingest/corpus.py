"""Managing an index's corpus: add, remove, list and sync sources, and add LangChain
`Document`s. Each is one call of `pipeline.update_index`, so every path shares its limits,
access rules, atomic publish and writer lock, and none deletes a document it was not asked to.
"""

from __future__ import annotations

import fnmatch
import json
import os
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from footnote.ingest.candidates import Candidate
from footnote.ingest.documents import ParsedDocument, Section
from footnote.ingest.options import IngestOptions, RunScope
from footnote.ingest.pipeline import update_index
from footnote.ingest.roots import (
    CONNECTOR_KINDS,
    SourceRoot,
    connector_scheme,
    is_url,
    read_roots,
    root_for,
)
from footnote.ingest.run import live_state
from footnote.ingest.summary import IngestSummary
from footnote.store.backends import open_writer
from footnote.store.redaction import redact
from footnote.store.types import FileRecord, IndexError_

if TYPE_CHECKING:
    from footnote.ingest.permission_sync import PermissionSummary


def add(
    index: str | Path,
    paths_or_urls: Sequence[str | Path],
    *,
    access: list[str] | None = None,
    include: list[str] | None = None,
    exclude: list[str] | None = None,
    follow_symlinks: bool = False,
    crawl: dict[str, Any] | None = None,
    allow_private: bool | None = None,
    **options: Any,
) -> IngestSummary:
    """Add these sources (or update how they are read) and bring in what they give; every
    other document stays as it is. `allow_private=True` is remembered with URL sources, so
    `sync` reaches them the same way."""
    roots = [
        root_for(
            p,
            access=access,
            include=include,
            exclude=exclude,
            follow_symlinks=follow_symlinks,
            crawl=crawl,
            allow_private=bool(allow_private),
        )
        for p in paths_or_urls
    ]
    return update_index(index, roots, IngestOptions.of(allow_private=allow_private, **options))


def sync(index: str | Path, *, rebuild: bool = False, **options: Any) -> IngestSummary:
    """Read every remembered root again: new documents added, changed ones updated, those
    gone from a root deleted; a root that cannot be read at all keeps its documents. A
    damaged live version is refused; `rebuild` re-reads every root it remembers instead."""
    _, kept = live_state(open_writer(index), rebuild=rebuild)
    roots = read_roots(kept)
    if rebuild and not roots:  # rebuilding from nothing would publish an empty index
        raise IndexError_(
            f"index {redact(str(index))} remembers no sources to rebuild from: name them, "
            "`footnote ingest --rebuild PATH... --index INDEX`"
        )
    return update_index(index, roots, IngestOptions.of(rebuild=rebuild, **options))


def sync_permissions(
    index: str | Path, *, allow_private: bool | None = None, embeddings: str = ""
) -> PermissionSummary:
    """Ask every connector source who reads each of its indexed documents now, and publish
    the documents whose readers changed with their new access; no content read, nothing
    embedded (`footnote sync --permissions-only`; see `ingest.permission_sync`)."""
    from footnote.ingest.permission_sync import sync_permissions as permissions_pass

    return permissions_pass(index, allow_private=allow_private, embeddings=embeddings)


def remove(
    index: str | Path, patterns: Sequence[str], *, rebuild: bool = False, **options: Any
) -> IngestSummary:
    """Delete documents (and their chunks) named by source name, glob, or root path/URL.

    A removed root is forgotten with all its documents. A document removed from a root that
    stays is added to that root's excludes, so the next `sync` does not bring it back."""
    live, kept = live_state(open_writer(index), rebuild=rebuild)
    roots = read_roots(kept)
    files = live.files if live is not None else {}
    wanted = [str(p) for p in patterns]
    gone_roots = {r.id for r in roots if any(_names_root(p, r.id) for p in wanted)}

    def owned(source: str, record: FileRecord) -> bool:
        return record.root in gone_roots or any(fnmatch.fnmatchcase(source, p) for p in wanted)

    kept_roots = []
    for root in roots:
        if root.id in gone_roots:
            continue
        extra = sorted(
            record.origin
            for source, record in files.items()
            if record.root == root.id
            and record.origin
            and owned(source, record)
            and root.kind in ("folder", "file", *CONNECTOR_KINDS)
            and record.origin not in root.exclude
        )
        if extra:
            kept_roots.append(
                SourceRoot.from_dict({**root.to_dict(), "exclude": [*root.exclude, *extra]})
            )
    scope = RunScope(
        owned=owned,
        forget=frozenset(gone_roots),
        unread=kept_roots,
        why_deleted="removed by `footnote remove`",
    )
    return update_index(index, [], IngestOptions.of(rebuild=rebuild, **options), scope)


def _names_root(pattern: str, root_id: str) -> bool:
    """A `remove` pattern names a source by its path (relative paths count from here), its
    URL or connector source (`git+file:///srv/repo`), or a glob over either."""
    named_as_given = is_url(pattern) or connector_scheme(pattern) is not None
    absolute = pattern if named_as_given else os.path.abspath(pattern)
    return root_id == absolute or fnmatch.fnmatchcase(root_id, pattern)


def unmatched(index: str | Path, patterns: Sequence[str]) -> list[str]:
    """The `remove` patterns that name no document and no source of the index, so the
    command can say so instead of succeeding silently."""
    live = open_writer(index).previous()
    roots = read_roots(live.manifest if live is not None else None)
    documents = list(live.files) if live is not None else []
    return [
        p
        for p in map(str, patterns)
        if not any(_names_root(p, r.id) for r in roots)
        and not any(fnmatch.fnmatchcase(source, p) for source in documents)
    ]


def sources(index: str | Path) -> dict[str, Any]:
    """What the index holds: each root with how it was added and its documents (chunks,
    size, last ingested, access, admins-only reason), and each failure with its reason. A
    damaged index raises IndexCorrupt rather than listing as empty."""
    live = open_writer(index).previous()
    if live is None:
        return {
            "index": str(index),
            "version": None,
            "sources": [],
            "documents": [],
            "failures": [],
        }
    roots = read_roots(live.manifest)
    failures = live.manifest.get("failures") or {}
    documents = [
        {
            "source": source,
            "root": record.root,
            "origin": record.origin,
            "chunks": len(record.chunk_ids),
            "size": record.size,
            "ingested_at": record.ingested_at,
            "access": record.access,
            "restricted": record.restricted,
            "failure": failures.get(source),
        }
        for source, record in sorted(live.files.items())
    ]
    by_root: dict[str | None, int] = {}
    for record in live.files.values():
        by_root[record.root] = by_root.get(record.root, 0) + 1
    return {
        "index": str(index),
        "version": live.version,
        "default_access": live.manifest.get("default_access"),
        "sources": [{**root.to_dict(), "documents": by_root.get(root.id, 0)} for root in roots],
        "documents": documents,
        "failures": [{"source": s, "reason": r} for s, r in sorted(failures.items())],
    }


def add_documents(
    index: str | Path,
    documents: Iterable[Any],
    *,
    ids: Sequence[str] | None = None,
    name: str = "documents",
    access: list[str] | None = None,
    **options: Any,
) -> list[str]:
    """Add LangChain `Document`s (from any loader) to the index, as LangChain's
    `VectorStore.add_documents` does: what was added before stays, a document whose id is
    already there is replaced, and the ids come back, one per document, in order.

    A document's id is `ids[i]`, else its `Document.id`, else its `source` (or `url`)
    metadata, else a new uuid4. Documents with the same id become one indexed document whose
    sections keep each one's `page` and `url`, so citations point at them (a PDF loader's
    pages share their file's `source`, hence its id); a `title`, `date` or `access` in the
    metadata is used as front matter would be (malformed access: admins only, with the
    reason). They are kept under the source `documents:NAME`; `replace_documents` replaces
    everything that source gave, `delete` removes documents by id. A document that cannot be
    indexed raises `ValueError` with its reason."""
    docs = list(documents)
    if ids is not None and len(ids) != len(docs):
        raise ValueError(f"{len(ids)} ids for {len(docs)} documents: give one id per document")
    given = list(ids) if ids is not None else [getattr(d, "id", None) for d in docs]
    origins = [str(i) if i else _origin(d) for d, i in zip(docs, given, strict=True)]
    summary = _index_documents(index, docs, origins, name, access, append=True, **options)
    if summary.failed:
        failures = "; ".join(f"{s}: {r}" for s, r in sorted(summary.failed.items()))
        raise ValueError(f"could not index every document (the others were added): {failures}")
    return origins


def replace_documents(
    index: str | Path,
    documents: Iterable[Any],
    *,
    name: str = "documents",
    access: list[str] | None = None,
    **options: Any,
) -> IngestSummary:
    """Make these LangChain `Document`s all that the source `documents:NAME` gives: those
    it gave before and are not among them are deleted ("no longer in documents"). Handed the
    same batch again, nothing changes. Ids, pages and metadata as in `add_documents`; the
    summary says what was added, updated, deleted or failed, with reasons."""
    docs = list(documents)
    origins = [str(getattr(d, "id", None) or _origin(d)) for d in docs]
    return _index_documents(index, docs, origins, name, access, append=False, **options)


def delete(
    index: str | Path, ids: Sequence[str], *, name: str = "documents", **options: Any
) -> bool:
    """Remove the documents with these ids (as `add_documents` returned them) from the
    source `documents:NAME`, as LangChain's `VectorStore.delete(ids)` does. True when every
    id named a document; an unknown id is ignored and makes it False."""
    root_id = f"documents:{name}"
    wanted = {str(i) for i in ids}
    live = open_writer(index).previous()
    present = {
        record.origin
        for record in (live.files.values() if live is not None else [])
        if record.root == root_id and record.origin in wanted
    }
    if present:
        scope = RunScope(
            owned=lambda _source, record: record.root == root_id and record.origin in present,
            why_deleted="deleted by id (footnote.delete)",
        )
        update_index(index, [], IngestOptions.of(**options), scope)
    return present == wanted


def _origin(doc: Any) -> str:
    meta = dict(getattr(doc, "metadata", {}) or {})
    return str(meta.get("source") or meta.get("url") or uuid.uuid4())


def _index_documents(
    index: str | Path,
    docs: list[Any],
    origins: list[str],
    name: str,
    access: list[str] | None,
    *,
    append: bool,
    **options: Any,
) -> IngestSummary:
    root = SourceRoot(id=f"documents:{name}", kind="documents", label=name, access=access)
    groups: dict[str, list[Any]] = {}
    for doc, origin in zip(docs, origins, strict=True):
        groups.setdefault(origin, []).append(doc)
    stamp = time.time()
    candidates = [_document_candidate(root, origin, docs, stamp) for origin, docs in groups.items()]
    scope = RunScope(documents={root.id: candidates}, append=append)
    return update_index(index, [root], IngestOptions.of(**options), scope)


def _document_candidate(root: SourceRoot, origin: str, docs: list[Any], stamp: float) -> Candidate:
    payload = json.dumps(
        [{"text": d.page_content, "metadata": _plain(d.metadata)} for d in docs],
        sort_keys=True,
        ensure_ascii=False,
    ).encode("utf-8")
    meta = dict(getattr(docs[0], "metadata", {}) or {})
    # Cited by where it came from; by its id only when its metadata names no source.
    name = _readable_name(str(meta.get("source") or meta.get("url") or origin))
    return Candidate(
        root=root.id,
        origin=origin,
        name=name,
        label=root.label,
        read=lambda: payload,
        parse=lambda data, source: _parsed(json.loads(data), source, name),
        mtime=lambda: stamp,
        access=root.access,
    )


def _parsed(items: list[dict[str, Any]], source: str, name: str) -> ParsedDocument:
    from footnote.ingest.parsers.markdown import _access_problem

    first = items[0]["metadata"] if items else {}
    sections = []
    for item in items:
        meta = item["metadata"]
        page = meta.get("page")
        url = meta.get("url") or (meta.get("source") if is_url(str(meta.get("source"))) else None)
        sections.append(
            Section(
                text=item["text"],
                headings=[str(meta["section"])] if meta.get("section") else [],
                url=str(url) if url else None,
                # LangChain's PDF loaders count pages from 0; citations count from 1.
                page=int(page) + 1
                if isinstance(page, int) and not isinstance(page, bool)
                else None,
            )
        )
    sections = [s for s in sections if s.text.strip()]
    problem = _access_problem(first)
    access = first.get("access")
    if isinstance(access, str):
        access = [g.strip() for g in access.split(",")]
    reserved = {"source", "page", "url", "title", "date", "access", "section"}
    return ParsedDocument(
        source=source,
        title=str(first.get("title") or name),
        sections=sections,
        date=str(first["date"])[:10] if first.get("date") else None,
        access=[] if problem else access,
        access_problem=problem,
        metadata={k: v for k, v in first.items() if k not in reserved},
    )


def _plain(meta: dict[str, Any]) -> dict[str, Any]:
    """Metadata as JSON keeps it (dates and other objects as strings)."""
    return json.loads(json.dumps(meta, default=str))


def _readable_name(origin: str) -> str:
    if is_url(origin):
        rest = origin.split("://", 1)[1].split("#", 1)[0].rstrip("/")
        return rest or origin
    return Path(origin).name or origin


def watch(
    index: str | Path,
    *,
    debounce: float = 0.5,
    stop: Any = None,
    on_start: Callable[[list[str]], None] | None = None,
    **options: Any,
) -> Iterator[IngestSummary]:
    """Sync again each time a file under a remembered folder or file root changes (watched
    by `watchfiles`, the operating system's notifications, not polling by hand); yields each
    sync's summary. `stop` (a `threading.Event`) ends the watch; `on_start` is told the
    watched paths once the watch begins (so a user is not left at a silent prompt)."""
    import watchfiles

    _, kept = live_state(open_writer(index))
    roots = read_roots(kept)
    paths = [r.id for r in roots if r.kind in ("folder", "file") and os.path.exists(r.id)]
    if not paths:
        raise ValueError(f"index {index} has no folder or file sources to watch")
    if on_start is not None:
        on_start(paths)
    for _changes in watchfiles.watch(
        *paths, debounce=int(debounce * 1000), stop_event=stop, raise_interrupt=False
    ):
        yield sync(index, **options)
