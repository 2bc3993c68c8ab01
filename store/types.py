"""The shapes every backend stores and every reader returns, and the rules they share:
chunks, files, hits, filters, who is asking and what they may see, index errors."""

from __future__ import annotations

import datetime as dt
import fnmatch
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

FORMAT_VERSION = 1
EVERYONE = "everyone"
"""The group every caller is in (unless a caller asks for strict groups)."""
DEFAULT_ACCESS = [EVERYONE]
"""Groups given to documents that state none; recorded in every manifest."""


def caller_groups(groups: Any, *, strict: bool = False) -> tuple[str, ...]:
    """The groups a caller searches as, the same on every surface (CLI, retriever, embedded
    graph, server): the given ones plus `everyone`, so naming a group never hides what is
    open to all; exactly the given ones when `strict`. A string or a non-string group is
    refused (a list of names is expected)."""
    if isinstance(groups, str) or not all(isinstance(g, str) for g in groups or ()):
        raise TypeError(f"groups must be a list of group names, not {groups!r}")
    given = [g for g in groups or () if g]  # names are compared exactly, never trimmed
    return tuple(dict.fromkeys(given if strict else [*given, EVERYONE]))


class IndexError_(Exception):
    """Base for index problems a user can act on; the message says what to do."""


class IndexNotFound(IndexError_):
    pass


class IndexUnreachable(IndexError_):
    """The index's server could not be reached: on the command line exit status 3, as for a
    provider that could not be reached, rather than 2 (a set-up the user changes)."""


class IndexCorrupt(IndexError_):
    pass


REBUILD_HINT = (
    "Rebuild it from the sources it remembers with `footnote sync --rebuild` "
    "(or `footnote ingest --rebuild PATH...`)"
)
"""How every damage message ends: a writer refuses a damaged index rather than build on it."""


class IndexMismatch(IndexError_):
    pass


def check_embeddings(
    manifest: dict[str, Any], root: str | Path, embedding_model: str | None, dimension: int | None
) -> None:
    """Refuse to search an index with embeddings other than those it was built with."""
    built_with = manifest["embedding"]
    if embedding_model is not None and built_with["model"] != embedding_model:
        raise IndexMismatch(
            f"index {root} was built with embeddings {built_with['model']!r} "
            f"(dimension {built_with['dimension']}), but {embedding_model!r} was requested: "
            "use the same embeddings or rebuild the index with `footnote ingest --rebuild`"
        )
    if dimension is not None and built_with["dimension"] != dimension:
        raise IndexMismatch(
            f"index {root} holds {built_with['dimension']}-dimensional vectors, but the "
            f"embeddings give {dimension}: rebuild the index with these embeddings"
        )


@dataclass(kw_only=True)
class FileRecord:
    """What the index knows of one source file, for incremental ingest."""

    sha256: str
    chunk_ids: list[str]
    size: int
    mtime: float
    restricted: str | None = None
    """Why the file's access could not be read (it is visible to admins only), if so."""
    root: str | None = None
    """The source root (path or URL) that gives this document; None in older indexes."""
    origin: str | None = None
    """Where in that root: the path relative to it, or the page URL."""
    ingested_at: str | None = None
    """When its content was last read and indexed (UTC, ISO 8601)."""
    fetch: dict[str, str] | None = None
    """HTTP validators of a fetched page (`etag`, `last_modified`), for conditional sync."""
    access: list[str] | None = None
    """The groups its chunks carry, so listing sources reads no chunk."""


@dataclass(kw_only=True)
class Chunk:
    """A piece of a document small enough to embed, with everything a citation needs."""

    id: str
    """Stable, readable id: `source#section-slug:position`."""
    text: str
    source: str
    title: str
    section: str
    """Heading path joined with ` > `."""
    anchor: str | None = None
    url: str | None = None
    page: int | None = None
    lines: list[int] | None = None
    """[first, last] line in the source file, 1-based, inclusive."""
    date: str | None = None
    access: list[str] | None = None
    """Groups allowed to see this chunk. None or malformed means nobody but an admin."""
    metadata: dict[str, Any] = field(default_factory=dict)
    context: str | None = None
    """What situates the chunk in its document (see `ingest.context`): embedded and
    keyword-indexed with the text, never quoted as it."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Chunk:
        return cls(**data)


@dataclass(frozen=True)
class Hit:
    """One retrieved chunk and its score under the stage that produced it."""

    chunk: Chunk
    score: float
    row: int


@dataclass(frozen=True)
class Ranked:
    """A row one search ranked, before its chunk is read: fusion and section decay need only
    the row, its score and the chunk's position in its section, so a query reads the chunks
    of its final top k, not of every candidate each stage returned."""

    row: int
    score: float
    position: int


@dataclass(kw_only=True)
class Filters:
    """Metadata filters; every given condition must hold."""

    source: str | None = None
    """Glob on the source path, e.g. `library/*.html`."""
    section: str | None = None
    """Case-insensitive substring of the heading path."""
    date_from: str | None = None
    """ISO date, inclusive."""
    date_to: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    """Exact matches on other metadata keys (front-matter fields)."""

    def matches(self, chunk: Chunk) -> bool:
        if self.source and not fnmatch.fnmatchcase(chunk.source, self.source):
            return False
        if self.section and self.section.lower() not in chunk.section.lower():
            return False
        if self.date_from or self.date_to:
            date = parse_date(chunk.date)
            if date is None:
                return False
            if self.date_from and date < require_date(self.date_from):
                return False
            if self.date_to and date > require_date(self.date_to):
                return False
        return all(chunk.metadata.get(k) == v for k, v in self.metadata.items())


@dataclass(frozen=True)
class Caller:
    """Who is asking, the one shape every surface carries: made once where the caller is known
    (the command line, the server's authentication, the embedding host) and handed down,
    never built from a model's or a client's arguments."""

    groups: frozenset[str]
    admin: bool = False

    @classmethod
    def of_groups(cls, groups: Any, *, strict: bool = False, admin: bool = False) -> Caller:
        """A caller in `groups` plus `everyone` (exactly `groups` when `strict`), by the rule
        of `caller_groups`; TypeError for a string or a non-string group."""
        return cls(groups=frozenset(caller_groups(groups, strict=strict)), admin=admin)

    @classmethod
    def operator(cls) -> Caller:
        """The trusted in-process view that sees every chunk (evaluation measures the whole
        index): an admin in no group."""
        return cls(groups=frozenset(), admin=True)

    def may_see(self, chunk: Chunk) -> bool:
        if self.admin:
            return True
        groups = access_groups(chunk.access)
        return groups is not None and not self.groups.isdisjoint(groups)


def access_groups(access: Any) -> list[str] | None:
    """The groups a chunk's stored access names, or None when malformed or empty: such a
    chunk matches no group (fail closed), so only an admin sees it."""
    if not isinstance(access, list) or not access:
        return None
    if not all(isinstance(g, str) and g for g in access):
        return None
    return list(access)


def parse_date(value: str | None) -> dt.date | None:
    """The date a chunk states (ISO, time part ignored), or None."""
    try:
        return dt.date.fromisoformat(str(value)[:10]) if value else None
    except ValueError:
        return None


def require_date(value: str) -> dt.date:
    """A filter's date: a malformed one is the caller's error, not an empty result."""
    date = parse_date(value)
    if date is None:
        raise ValueError(f"not an ISO date: {value!r}")
    return date


def chunk_position(chunk_id: str) -> int:
    """Position of a chunk within its section, from the `source#section:N` id."""
    tail = chunk_id.rsplit(":", 1)[-1]
    return int(tail) if tail.isdigit() else 0
