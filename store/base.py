"""What every index backend offers, so ingest and retrieval never ask which one it is.

A backend is one home holding both sides of an index: an `IndexWriter` that incremental
ingest publishes through, and an `IndexReader` over one published version. Readers search
with query vectors and keyword text, never with text to embed: embedding, fusion, decay,
relevance features and reranking are written once, above the store, in `footnote.tools`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from footnote.store.types import Caller, Chunk, FileRecord, Filters, Ranked

if TYPE_CHECKING:  # only annotations need it: the command line starts without numpy
    import numpy as np

    from footnote.store.communities import Communities

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


REMEMBERED_KEYS = ("sources", "default_access", "embedding", "chunking", "context", "revocations")
"""What a manifest holds that a rebuild needs again: the sources to read and how, and the
revocation log (`footnote.store.revocations`), so a rebuild does not bring old threads back."""


def remembered_settings(manifest: dict[str, Any]) -> dict[str, Any]:
    """The part of a manifest a backend keeps apart from its versions (`remembered`)."""
    return {key: manifest[key] for key in REMEMBERED_KEYS if key in manifest}


class IndexWriter(Protocol):
    """The write side of an index, as incremental ingest uses it."""

    location: str

    def previous(self) -> PreviousState | None:
        """The live version, or None when there is none. A live version that cannot be read
        raises IndexCorrupt: building on it as if it were empty would publish an index
        without its documents and prune the damaged one."""

    def remembered(self) -> dict[str, Any] | None:
        """The sources and settings of the last publish (`remembered_settings`), kept apart
        from the versions so they survive a damaged one; None when there are none."""

    def publish(
        self,
        *,
        entries: Iterable[tuple[Chunk, Any]],
        files: dict[str, FileRecord],
        manifest: dict[str, Any],
        embedding_dimension: int,
        on_failure: FileFailure | None = None,
    ) -> str:
        """Make exactly `entries` the live index, atomically; returns the new version. A
        source whose chunks the backend refuses is left out and reported to `on_failure`.
        `entries` is read once, in order: ingest hands them over as it reads them."""

    def writer(self) -> AbstractContextManager[None]:
        """Held by ingest from reading the live version to publishing: one writer at a time."""


S = TypeVar("S")
"""A backend's own form of a selection: a boolean row mask, a SQL condition."""


class IndexReader(Protocol[S]):
    """The read side of one published version of an index.

    Every search is pre-filtered by a selection (access control and metadata filters applied
    before ranking), so a selective filter still returns k hits when k exist and a chunk the
    caller may not see is never scored. Searches return `Ranked` rows (the backend's stable
    row ids); `chunks` reads the few that are kept.
    """

    location: str
    version: str
    manifest: dict[str, Any]

    def select(self, caller: Caller, filters: Filters | None = None) -> S:
        """The rows `caller` may see that pass `filters`; a malformed filter fails here."""

    def keyword(self, query: str, k: int, selection: S) -> list[Ranked]:
        """Up to k keyword matches for the query's words, best first."""

    def dense(self, vector: np.ndarray, k: int, selection: S) -> list[Ranked]:
        """The k rows whose stored vectors have the highest inner product with `vector`."""

    def chunks(self, rows: Sequence[int]) -> list[Chunk]:
        """The chunks at `rows`, in order."""

    def vectors(self, rows: Sequence[int]) -> np.ndarray:
        """The stored vectors of `rows`, in order (zeros for a row this version lacks)."""

    def document_frequencies(self, tokens: Sequence[str]) -> tuple[int, dict[str, int]]:
        """How many chunks there are, and how many contain each keyword token."""

    def snapshot(self) -> AbstractContextManager[None]:
        """Inside it, every search reads the same version, whatever ingest publishes."""


class EntityGraph(Protocol):
    """A version's entity graph as the graph stage and `footnote graph` read it, on either
    backend (store/graph_files.py's arrays; store/graph_postgres.py loads its tables into
    the same shape). A reader that holds one offers it as `graph()`."""

    rows: int
    arrays: dict[str, np.ndarray]
    communities: Communities | None
    """Its communities over the same rows; None for a version published before them."""

    @property
    def entities(self) -> int: ...

    def row_mask(self, selection: Any) -> np.ndarray:
        """The reader's selection as a boolean mask over the graph's rows."""

    def lookup(self, hashes: Sequence[int]) -> np.ndarray: ...

    def matrix(self, power: float = 1.0) -> Any: ...

    def binary(self) -> Any: ...

    def by_entity(self) -> Any: ...

    def visible_weights(
        self, mask: np.ndarray, power: float, hub_share: float, hub_min: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]: ...

    def names(self) -> list[str]: ...

    def access_values(self) -> list[Any]: ...

    def kind(self, entity: int) -> str: ...
