"""What one ingest run holds open from start to publish: the writer lock, the embedding
cache, the spool its fresh chunks wait in, the live version, the model and the summary."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from footnote.ingest.options import IngestOptions
from footnote.ingest.spool import FreshSpool
from footnote.ingest.summary import IngestSummary
from footnote.models.embedding_choice import IndexEmbeddings, as_index_embeddings
from footnote.models.embedding_choice import remember as remember_embeddings
from footnote.models.embedding_choice import remembered as remembered_embeddings
from footnote.store import revocations
from footnote.store.backends import is_postgres, open_writer
from footnote.store.base import IndexWriter, PreviousState
from footnote.store.embedding_cache import EmbeddingCache, prune_cache
from footnote.store.types import Chunk, FileRecord, IndexError_


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


@dataclass
class IndexRun:
    """One run's open resources and what it read before changing anything: `live` (None
    when there is none, or it is unreadable and `rebuild` was asked) and `kept`, the sources
    and settings the index remembers."""

    location: str | Path
    """A folder, or a `postgresql://` URL as given."""
    backend: IndexWriter
    model: IndexEmbeddings
    cache: EmbeddingCache
    spool: FreshSpool
    summary: IngestSummary
    live: PreviousState | None
    kept: dict[str, Any]
    published_nothing: bool = False

    @classmethod
    @contextlib.contextmanager
    def open(cls, index_dir: str | Path, options: IngestOptions) -> Iterator[IndexRun]:
        """The run under the index's writer lock. A run that published nothing into an
        index folder it created leaves no empty folder behind, only what it made is removed."""
        created = not is_postgres(index_dir) and not Path(index_dir).exists()
        backend = open_writer(index_dir)
        location = index_dir if is_postgres(index_dir) else Path(index_dir)
        model = as_index_embeddings(options.embeddings or remembered_embeddings(location))
        cache = EmbeddingCache(location)
        with (
            backend.writer(),
            contextlib.closing(cache),
            # Made inside: a writer that cannot start (the index is locked) leaves no folder.
            contextlib.closing(FreshSpool(model.dimension)) as spool,
        ):
            live, kept = live_state(backend, rebuild=options.rebuild)
            summary = IngestSummary(index=str(location))
            run = cls(location, backend, model, cache, spool, summary, live, kept)
            yield run
        if run.published_nothing and created:
            folder = Path(index_dir)
            (folder / "LOCK").unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                folder.rmdir()

    def publish(
        self,
        entries: Iterator[tuple[Chunk, Any]],
        files: dict[str, FileRecord],
        manifest: dict[str, Any],
    ) -> None:
        """Write the new version, unless nothing could be read into a new index: then
        publish nothing rather than an empty one. Documents the backend refused at publish
        leave `added` and `updated` for `failed`."""
        summary = self.summary
        manifest = {**manifest, revocations.MANIFEST_KEY: self.revocations_after(files)}
        if self.live is None and not files and summary.failed:
            self.published_nothing = True
        else:
            summary.version = self.backend.publish(
                entries=entries,
                files=files,
                manifest=manifest,
                embedding_dimension=self.model.dimension,
                on_failure=summary.failed.__setitem__,
            )
            # So search reloads a provider model by itself.
            remember_embeddings(self.location, self.model.model_id)
            prune_cache(self.cache)
        for listed in (summary.added, summary.updated):
            listed[:] = [source for source in listed if source not in summary.failed]

    def revocations_after(self, files: dict[str, FileRecord]) -> dict[str, str]:
        """The revocation log the new version carries: the live one's (or, rebuilding a
        damaged index, the one remembered beside it), plus the groups this publish takes
        a document from (`footnote.store.revocations`)."""
        kept = self.live.manifest if self.live is not None else self.kept
        log = revocations.checked_log(kept.get(revocations.MANIFEST_KEY))
        lost = revocations.revoked_groups(self.live.files, files) if self.live else set()
        return revocations.with_revocations(log, lost)
