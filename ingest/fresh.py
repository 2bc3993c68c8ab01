"""A new or changed document's way into the new version: parsed, chunked and given its
contexts inside its time budget (`DocumentChunker`), then embedded with the other documents
waiting and spooled for the writer (`EmbedQueue`), the rest of the same budget."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import numpy as np

from footnote.ingest.candidates import Candidate
from footnote.ingest.chunking import Chunker
from footnote.ingest.context import chunk_contexts
from footnote.ingest.documents import ParsedDocument, ParseError
from footnote.ingest.index_settings import IndexSettings
from footnote.ingest.limits import FileBudget, TimeBudgetExceeded
from footnote.ingest.model_context import ContextFailed
from footnote.ingest.options import FileLimits, Progress
from footnote.ingest.roots import now
from footnote.ingest.run import IndexRun
from footnote.ingest.version import Entries, Fresh, Kept, NewVersion
from footnote.models.cached import embed_together, embed_with_cache
from footnote.models.embedding_choice import IndexEmbeddings
from footnote.store.embedding_cache import EmbeddingCache
from footnote.store.files import write_batch_rows
from footnote.store.text import embedding_text
from footnote.store.types import Chunk, FileRecord


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


class EmbedQueue:
    """Documents chunked and waiting for their vectors. They are embedded together, so
    short texts of many documents share each model step, and spooled to disk once the
    queue holds a write batch's rows: the run's fresh work waits on disk, not in memory."""

    def __init__(
        self, run: IndexRun, dense_context: bool, progress: Progress | None, version: NewVersion
    ) -> None:
        self.model = run.model
        self.cache = run.cache
        self.spool = run.spool
        self.summary = run.summary
        self.dense_context = dense_context
        self.progress = progress
        self.version = version
        self.pending: dict[str, tuple[FileBudget, Fresh]] = {}
        self.flush_rows = write_batch_rows()

    def add(self, budget: FileBudget, fresh: Fresh) -> None:
        self.pending[fresh.source] = (budget, fresh)

    def flush_when_full(self) -> None:
        if sum(len(fresh.chunks) for _, fresh in self.pending.values()) >= self.flush_rows:
            self.flush()

    def flush(self) -> None:
        """Embed every document waiting, their texts together (shortest first, each step
        charged to the documents it served), then spool each document for the writer. A
        document over budget fails whole (`NewVersion.drop`)."""
        pending = self.pending
        self.summary.embedded_texts += embed_together(
            self.model,
            {
                s: [embedding_text(c, self.dense_context) for c in f.chunks]
                for s, (_, f) in pending.items()
            },
            self.cache,
            charge=lambda source, seconds: pending[source][0].charge(seconds),
            progress=self.progress,
        )
        for budget, fresh in pending.values():
            try:
                with budget.running():
                    vectors, embedded = _embed(
                        self.model, fresh.chunks, budget, self.cache, self.dense_context
                    )
                self.summary.embedded_texts += embedded
            except TimeBudgetExceeded as exc:
                self.version.drop(fresh, str(exc))
                continue
            self.spool.put(fresh.source, fresh.chunks, vectors)
            fresh.spooled, fresh.chunks = len(fresh.chunks), []
            self.summary.embedded_chunks += fresh.spooled
        pending.clear()

    def spooled(self, fresh: Fresh | None) -> Entries:
        """A flushed document's chunks and vectors, let go from the spool."""
        return self.spool.take(fresh.source) if fresh and fresh.spooled else []


class DocumentChunker:
    """Parses and chunks one new or changed document inside its time budget, which its
    embedding (`EmbedQueue`) spends the rest of. A parser bug costs one file, not the run;
    a context provider that fails stops the whole run, and nothing is published."""

    def __init__(
        self,
        model: IndexEmbeddings,
        settings: IndexSettings,
        limits: FileLimits,
        version: NewVersion,
        queue: EmbedQueue,
    ) -> None:
        self.model = model
        self.settings = settings
        self.limits = limits
        self.version = version
        self.queue = queue
        self._chunker: Chunker | None = None

    @property
    def chunker(self) -> Chunker:
        """Made on first use: a run with nothing to chunk never loads its tokenizer."""
        if self._chunker is None:
            self._chunker = Chunker(self.model, self.settings.chunking)
        return self._chunker

    def chunk(
        self, item: Candidate, source: str, data: bytes, digest: str, known: bool
    ) -> Fresh | None:
        """The document's chunks, queued for embedding; None (and a reason) if it fails."""
        failed = self.version.summary.failed
        budget = FileBudget(self.limits.max_seconds)
        try:
            with budget.running():
                doc = item.parse(data, source)
                chunks, access = self._chunks(item, doc, digest)
        except ContextFailed:
            raise  # the provider failed: the whole run stops, nothing is published
        except (ParseError, TimeBudgetExceeded) as exc:
            failed[source] = str(exc)
            return None
        except Exception as exc:  # a parser bug must cost one file, not the run
            failed[source] = f"{type(exc).__name__}: {exc}"
            return None
        record = FileRecord(
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
        self.version.add_fresh(source, record, chunks, known)
        fresh = Fresh(source, chunks)
        self.queue.add(budget, fresh)
        return fresh

    def _chunks(
        self, item: Candidate, doc: ParsedDocument, digest: str
    ) -> tuple[list[Chunk], list[str] | None]:
        """The parsed document split, checked and given its contexts, with its access."""
        settings = self.settings
        front_access = doc.access if doc.access is not None else doc.metadata.get("access")
        access = normalize_access(front_access, item.access or settings.default_access)
        chunks = self.chunker.split_document(
            doc, date=file_date(doc.date, item.mtime()), access=access
        )
        check_chunks(chunks, self.limits.max_chunks, self.version.claimed)
        texts = [c.text for c in chunks]
        contexts = (
            settings.contexts.contexts(digest, doc.title, texts, [c.section for c in chunks])
            if settings.contexts is not None
            else chunk_contexts(
                doc.title, texts, settings.context, [c.id.rpartition(":")[0] for c in chunks]
            )
        )
        for chunk, situated in zip(chunks, contexts, strict=True):
            chunk.context = situated
        return chunks, access

    def chunk_again(self, part: Kept) -> Entries:
        """An unchanged document whose chunks the live version lacks, chunked and embedded
        again as it is written."""
        assert part.unchanged is not None
        record = self.version.unkeep(part)
        item = part.unchanged
        again = self.chunk(item, part.source, item.read(), record.sha256, True)
        self.queue.flush()
        return self.queue.spooled(again)


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
