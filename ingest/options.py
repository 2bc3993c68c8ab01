"""What an ingest run is told: how to build the index (`IngestOptions`, with its per-file
`FileLimits`) and which documents it may change beyond what its roots give (`RunScope`).

Two objects rather than one long keyword list, so each step of `pipeline.update_index` takes
only the part it needs, and a caller cannot pass a setting a step silently ignores."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from footnote.ingest.candidates import Candidate
from footnote.ingest.chunking import ChunkSettings
from footnote.ingest.context import ContextSettings
from footnote.ingest.roots import SourceRoot
from footnote.models.embedding_choice import EmbeddingsSetting
from footnote.store.types import FileRecord

DEFAULT_MAX_BYTES = 20_000_000
DEFAULT_MAX_CHUNKS = 20_000
"""Per file: the whole R reference manual (2,415 pages) gives about half of this."""
DEFAULT_MAX_SECONDS = 300.0
"""Per file, all its work: parsing, chunking and embedding."""
Progress = Callable[[str, int, int], None]
"""Called as progress(stage, done, total) while ingest works."""
Owned = Callable[[str, FileRecord], bool]
"""Whether a document the index holds is this run's to keep up to date (and to delete when
its root no longer gives it); any other document is carried over untouched."""


@dataclass(frozen=True)
class FileLimits:
    """Per-file limits: `max_bytes` (checked before reading), `max_chunks`, and `max_seconds`
    (the file's parsing, chunking and embedding; see `limits.FileBudget`). A file over one
    fails with a reason, nothing of it is published, and the run goes on."""

    max_bytes: int = DEFAULT_MAX_BYTES
    max_chunks: int = DEFAULT_MAX_CHUNKS
    max_seconds: float = DEFAULT_MAX_SECONDS


@dataclass(frozen=True)
class IngestOptions:
    """How a run builds the index. `None` settings mean what the index was built with:
    `embeddings` its remembered model, `chunking` sized to the model, `context` its recorded
    context (else `DEFAULT_CONTEXT`), `default_access` its remembered groups. `rebuild`
    reuses nothing of the live version; `allow_private` lets URL roots reach private
    addresses (True), forbids it (False), or, None, leaves it to each root's remembered
    setting."""

    embeddings: EmbeddingsSetting = ""
    chunking: ChunkSettings | None = None
    context: ContextSettings | None = None
    default_access: list[str] | None = None
    limits: FileLimits = field(default_factory=FileLimits)
    rebuild: bool = False
    progress: Progress | None = None
    allow_private: bool | None = None

    @classmethod
    def of(
        cls,
        *,
        settings: ChunkSettings | None = None,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_chunks: int = DEFAULT_MAX_CHUNKS,
        max_seconds: float = DEFAULT_MAX_SECONDS,
        **rest: Any,
    ) -> IngestOptions:
        """The options from the flat keywords the public calls take (`ingest`, `corpus.add`,
        `sync`, `remove`, the served jobs): `settings` and the three limits named as there.
        An unknown keyword is a TypeError, never ignored."""
        limits = FileLimits(max_bytes=max_bytes, max_chunks=max_chunks, max_seconds=max_seconds)
        return cls(chunking=settings, limits=limits, **rest)


@dataclass(frozen=True)
class RunScope:
    """Which documents a run changes besides re-reading its roots. `documents` holds ready
    candidates for `documents:` roots (with `append`, they add to or update what those roots
    gave before, rather than replacing it); `remember` records the roots in the index's
    sources, `unread` records roots without reading them, `forget` drops root ids from them;
    `owned` names more documents to delete, each with the reason `why_deleted`."""

    documents: dict[str, list[Candidate]] | None = None
    append: bool = False
    remember: bool = True
    owned: Owned | None = None
    forget: frozenset[str] = frozenset()
    unread: list[SourceRoot] = field(default_factory=list)
    why_deleted: str = ""
