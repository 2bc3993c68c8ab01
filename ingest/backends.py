"""Where an index lives: a directory (FAISS + BM25 files, the zero-setup default) or a
PostgreSQL database (pgvector + full-text), chosen by the `--index` value alone.

Ingest writes through `IndexBackend`; `tools.retrieval.get_retriever` reads the same
location, so the graph's context only ever names the index by that string.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from footnote.ingest.documents import Chunk
from footnote.ingest.store import FileRecord, Index, current_version, load_index, write_index

STORED: Any = object()
"""Stands for the vector of a chunk the backend already holds and keeps as it is."""

Lookup = Callable[[list[str], bool], list[tuple[Chunk, Any]] | None]


@dataclass(kw_only=True)
class PreviousState:
    """What ingest needs of the live version to work out what changed."""

    version: str
    manifest: dict[str, Any]
    files: dict[str, FileRecord]
    lookup: Lookup
    """Chunks (and vectors, or STORED) for chunk ids; None if any id is missing, unless
    `partial` (the second argument), which skips the missing ones."""


class IndexBackend(Protocol):
    """The write side of an index, as incremental ingest uses it."""

    location: str

    def previous(self) -> PreviousState | None:
        """The live version, or None when there is none (or it cannot be read)."""

    def publish(
        self,
        *,
        entries: list[tuple[Chunk, Any]],
        files: dict[str, FileRecord],
        manifest: dict[str, Any],
        embedding_dimension: int,
    ) -> str:
        """Make exactly `entries` the live index, atomically; returns the new version."""


def is_postgres(location: str | Path) -> bool:
    return str(location).startswith(("postgresql://", "postgres://"))


class FaissBackend:
    """The embedded default: one directory of versioned files (see ingest/store.py)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.location = str(self.root)

    def previous(self) -> PreviousState | None:
        from footnote.ingest.store import IndexError_

        if current_version(self.root) is None:
            return None
        try:
            index = load_index(self.root)
        except IndexError_:
            return None
        return PreviousState(
            version=index.version,
            manifest=index.manifest,
            files=index.files,
            lookup=_faiss_lookup(index),
        )

    def publish(
        self,
        *,
        entries: list[tuple[Chunk, Any]],
        files: dict[str, FileRecord],
        manifest: dict[str, Any],
        embedding_dimension: int,
    ) -> str:
        vectors = np.zeros((len(entries), embedding_dimension), dtype=np.float32)
        for i, (_, vec) in enumerate(entries):
            vectors[i] = vec
        return write_index(
            self.root,
            chunks=[chunk for chunk, _ in entries],
            vectors=vectors,
            files=files,
            manifest=manifest,
        )


def _faiss_lookup(index: Index) -> Lookup:
    cache: dict[str, np.ndarray] = {}

    def lookup(ids: list[str], partial: bool) -> list[tuple[Chunk, Any]] | None:
        rows = [index.row(cid) for cid in ids]
        if not partial and any(r is None for r in rows):
            return None
        if "all" not in cache:
            cache["all"] = index.all_vectors()
        return [(index.chunks[r], cache["all"][r]) for r in rows if r is not None]

    return lookup


def open_backend(location: str | Path) -> IndexBackend:
    """The backend for an `--index` value: a PostgreSQL URL or a directory."""
    if is_postgres(location):
        from footnote.ingest.postgres import PostgresBackend

        return PostgresBackend(str(location))
    return FaissBackend(location)
