"""A permission-only sync: each connector document's readers asked again, and a new index
version published in which only the documents whose readers changed carry new access.

A full sync reads readers too, but it also lists, polls and re-reads what changed, so it is
too heavy to run every few minutes. This pass asks each connector only `permissions(doc_id)`
for the documents the index holds: no content is read, nothing is chunked or embedded (the
chunks and vectors of the live version are carried over, only their access rewritten), and
the publish is the same atomic one under the writer lock. A document whose readers cannot be
read becomes no one's (admins only, with the reason), never kept as it was: a revoked reader
must not keep access because the source stopped answering.

Only connectors whose readers are a document's whole access take part. A git repository has
no per-file readers (its files get the source's `--access` or their own front matter, which
only a read of the content can tell), so git sources are left to the full sync.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from footnote.ingest.connectors.base import ConnectorError, Permissions
from footnote.ingest.connectors.registry import Opening, kind_of
from footnote.ingest.fresh import normalize_access
from footnote.ingest.index_settings import IndexSettings
from footnote.ingest.options import DEFAULT_MAX_BYTES, IngestOptions
from footnote.ingest.roots import CONNECTOR_KINDS, SourceRoot, read_roots
from footnote.ingest.run import IndexRun
from footnote.store.base import STORED, PreviousState
from footnote.store.redaction import redact
from footnote.store.types import Chunk, FileRecord, IndexMismatch

_CARRIED = ("embedding", "chunking", "context", "default_access")
"""The settings a version records of how its chunks were made (`IndexSettings.recorded`)."""
Access = tuple[list[str] | None, str | None]
"""A document's access groups (None: admins only) and why it is restricted, if it is."""


@dataclass
class PermissionSummary:
    """What a permission-only sync did: how many documents it asked about, which changed
    access (and to what), which are now admins only, and the sources it could not open
    (their documents keep their access; the command exits 1)."""

    index: str
    version: str | None = None
    checked: int = 0
    changed: dict[str, list[str] | None] = field(default_factory=dict)
    restricted: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    sources: int = 0
    chunks: int = 0
    embedded_texts: int = 0
    """Texts sent to the model: zero unless a backend keeps no vector to carry over and the
    embedding cache lacks it too."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "version": self.version,
            "permissions_only": True,
            "sources": self.sources,
            "checked": self.checked,
            "access_changed": len(self.changed),
            "restricted": len(self.restricted),
            "failed": len(self.failed),
            "chunks": self.chunks,
            "embedded_texts": self.embedded_texts,
            "changes": [{"source": s, "access": a} for s, a in sorted(self.changed.items())],
            "restrictions": [
                {"source": s, "reason": r} for s, r in sorted(self.restricted.items())
            ],
            "errors": [{"source": s, "error": e} for s, e in sorted(self.failed.items())],
        }


def sync_permissions(
    index: str | Path, *, allow_private: bool | None = None, embeddings: str = ""
) -> PermissionSummary:
    """Ask every connector source for its indexed documents' readers and publish the
    changed ones' new access, atomically; nothing is published when nothing changed."""
    options = IngestOptions(embeddings=embeddings, allow_private=allow_private)
    with IndexRun.open(index, options) as run:
        summary = PermissionSummary(index=str(run.location))
        live = run.live
        if live is None:
            return summary
        summary.version = live.version
        settings = IndexSettings.settle(run.model, run.kept, run.cache, options)
        built_with = live.manifest.get("embedding", {}).get("model")
        if built_with != run.model.model_id:  # a changed chunk may need its vector again
            raise IndexMismatch(
                f"index {redact(str(index))} was built with embeddings {built_with!r}, "
                f"not {run.model.model_id!r}"
            )
        access: dict[str, Access] = {}
        for root in read_roots(run.kept):
            if root.kind in CONNECTOR_KINDS and kind_of(root.id).name != "git":
                summary.sources += 1
                found = _root_access(root, live, run, allow_private, summary)
                access.update({s: _access_of(r, settings.default_access) for s, r in found.items()})
        for source, (groups, problem) in access.items():
            record = live.files[source]
            if problem is not None:
                summary.restricted[source] = problem
            if (record.access, record.restricted) != (groups, problem):
                summary.changed[source] = groups
        if summary.changed:
            files = dict(live.files)
            for source in summary.changed:
                groups, problem = access[source]
                files[source] = replace(files[source], access=groups, restricted=problem)
            manifest = {  # the live version's settings: its chunks are carried over as made
                **{k: live.manifest[k] for k in _CARRIED if k in live.manifest},
                "sources": list(live.manifest.get("sources") or []),
                "failures": dict(live.manifest.get("failures") or {}),
            }
            entries = _entries(live, files, set(summary.changed), run, settings, summary)
            run.publish(entries, files, manifest)
            summary.version = run.summary.version
    return summary


def _root_access(
    root: SourceRoot,
    live: PreviousState,
    run: IndexRun,
    allow_private: bool | None,
    summary: PermissionSummary,
) -> dict[str, Permissions]:
    """Each indexed document of `root` with its readers now. A source that
    cannot be opened at all (a malformed setting) keeps its documents as they are and is
    reported; once the source fails to say who reads a document (ConnectorError: it cannot
    be read at all), that document and the rest of the source's become no one's."""
    documents = {s: r.origin for s, r in live.files.items() if r.root == root.id and r.origin}
    if not documents:
        return {}
    try:
        connector = kind_of(root.id).open(
            Opening(
                source=root.id,
                index=str(run.location),
                access=root.access,
                selected=root.selected,
                max_bytes=DEFAULT_MAX_BYTES,
                check_host=lambda host, port: _check_host(
                    host, port, root.allow_private if allow_private is None else allow_private
                ),
            )
        )
    except ConnectorError as exc:
        summary.failed[root.id] = str(exc)
        return {}
    readers: dict[str, Permissions] = {}
    unreadable: str | None = None
    for source, origin in sorted(documents.items()):
        summary.checked += 1
        if unreadable is None:
            try:
                readers[source] = connector.permissions(origin)
                continue
            except ConnectorError as exc:
                unreadable = f"its readers could not be read: {exc}"
        readers[source] = Permissions.nobody(unreadable)
    return readers


def _access_of(readers: Permissions, default: list[str]) -> Access:
    """The access a full sync gives a connector document with these readers: none named
    means no one (a connector never widens to the index's default), unreadable means no one
    with the reason."""
    if readers.problem is not None:
        return None, readers.problem
    return normalize_access(readers.access_groups() or [], default), None


def _check_host(host: str, port: int, allow_private: bool) -> None:
    """The guard a full sync puts on where a source may connect (--allow-private when
    given, else the source's remembered setting)."""
    from footnote.ingest.web import FetchRefused, check_address

    try:
        check_address(host, port, allow_private)
    except FetchRefused as exc:
        raise ConnectorError(f"{host}: {exc}") from None


def _entries(
    live: PreviousState,
    files: dict[str, FileRecord],
    changed: set[str],
    run: IndexRun,
    settings: IndexSettings,
    summary: PermissionSummary,
) -> Iterator[tuple[Chunk, Any]]:
    """Every chunk of the live version with its vector, a document at a time; a changed
    document's chunks with its new access. A backend that keeps vectors by chunk id (STORED)
    would keep the old chunk too, so a changed chunk is handed over with its vector, from
    the embedding cache."""
    from footnote.models.cached import embed_with_cache
    from footnote.store.text import embedding_text

    seen: set[str] = set()
    for source, record in live.files.items():
        ids = [cid for cid in record.chunk_ids if cid not in seen]
        seen.update(ids)
        found = live.lookup(ids, True) or []
        if source in changed:
            for chunk, _ in found:
                chunk.access = files[source].access
            if any(vector is STORED for _, vector in found):
                texts = [embedding_text(chunk, settings.dense_context) for chunk, _ in found]
                vectors, embedded = embed_with_cache(run.model, texts, run.cache)
                summary.embedded_texts += embedded
                found = [(chunk, vectors[i]) for i, (chunk, _) in enumerate(found)]
        summary.chunks += len(found)
        yield from found
