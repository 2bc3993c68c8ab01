"""Incremental ingest: walk sources, parse, chunk, embed only what changed, publish atomically.

`update_index` is the one write path every caller shares (`ingest`, `corpus.add`, `sync`,
`remove`, the LangChain documents); each of its steps lives in a module of its own:
`gather` (the roots and their candidates), `run` (the writer lock and what the run holds),
`index_settings`, `fresh` (chunking and embedding) and `version` (the new version)."""

from __future__ import annotations

from pathlib import Path

from footnote.ingest.chunking import ChunkSettings
from footnote.ingest.context import ContextSettings
from footnote.ingest.fresh import DocumentChunker, EmbedQueue
from footnote.ingest.gather import RootPlan, gather_candidates
from footnote.ingest.index_settings import IndexSettings
from footnote.ingest.options import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_CHUNKS,
    DEFAULT_MAX_SECONDS,
    FileLimits,
    IngestOptions,
    Progress,
    RunScope,
)
from footnote.ingest.roots import SourceRoot, read_roots, root_for
from footnote.ingest.run import IndexRun
from footnote.ingest.summary import IngestSummary
from footnote.ingest.version import NewVersion, SourceNames
from footnote.models.embedding_choice import EmbeddingsSetting


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
    options = IngestOptions(
        embeddings=embeddings,
        chunking=settings,
        context=context,
        default_access=default_access,
        limits=FileLimits(max_bytes=max_bytes, max_chunks=max_chunks, max_seconds=max_seconds),
        rebuild=rebuild,
        progress=progress,
    )
    return update_index(index_dir, roots, options)


def update_index(
    index_dir: str | Path,
    roots: list[SourceRoot],
    options: IngestOptions | None = None,
    scope: RunScope | None = None,
) -> IngestSummary:
    """The one write path: read `roots` again, update what they give, delete what they no
    longer give (and whatever `scope` names besides), and publish atomically under the
    writer lock. `options` (default: what the index was built with) say how chunks are made."""
    options, scope = options or IngestOptions(), scope or RunScope()
    with IndexRun.open(index_dir, options) as run:
        settings = IndexSettings.settle(run.model, run.kept, run.cache, options)
        run.summary.context = settings.context_usage
        previous = settings.reusable(run.live, run.location, options.rebuild)
        plan = RootPlan.make(roots, read_roots(run.kept), previous, scope)
        candidates, read_in_full = gather_candidates(
            plan.roots, previous, run.summary, options, scope, frozenset(plan.reread)
        )
        plan.record_checkpoints(run.summary.checkpoints)
        version = NewVersion(previous, run.summary, plan.reread, options.limits.max_bytes)
        queue = EmbedQueue(run, settings.dense_context, options.progress, version)
        chunker = DocumentChunker(run.model, settings, options.limits, version, queue)
        names = SourceNames(version.old_files)
        for done, item in enumerate(candidates, 1):
            if options.progress:
                options.progress("parse", done, len(candidates))
            version.take(item, names.claim(item), chunker.chunk)
            queue.flush_when_full()
        queue.flush()
        version.settle_deletions(read_in_full, scope)
        failures = version.failures(run.live, read_in_full)
        if not version.is_unchanged(run.live, plan, failures):
            entries = version.entries(run.spool, chunker.chunk_again)
            run.publish(entries, version.files, settings.manifest(plan.sources, failures))
    return run.summary
