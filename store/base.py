"""What every index backend offers, so ingest and retrieval never ask which one it is."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from footnote.store.types import Chunk, FileRecord

STORED: Any = object()
"""Stands for the vector of a chunk the backend already holds and keeps as it is."""

Lookup = Callable[[list[str], bool], list[tuple[Chunk, Any]] | None]
FileFailure = Callable[[str, str], None]
"""Called as on_failure(source, reason) for a file a backend could not store."""


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
        on_failure: FileFailure | None = None,
    ) -> str:
        """Make exactly `entries` the live index, atomically; returns the new version. A
        source whose chunks the backend refuses is left out and reported to `on_failure`."""

    def writer(self) -> AbstractContextManager[None]:
        """Held by ingest from reading the live version to publishing: one writer at a time."""
