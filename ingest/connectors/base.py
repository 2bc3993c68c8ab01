"""What every connector shares: the `Connector` protocol a source system implements, the
`SourceDocument` it hands over, its `Permissions`, and the `Checkpoint` a sync resumes from.

A connector reads a system where a team keeps its knowledge (a git repository, a wiki, an
issue tracker) and knows nothing of the index: `connectors.candidates` turns what it gives
into the candidates every other source gives, so limits, access rules, change detection and
the atomic publish are the same for all of them.
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from footnote.ingest.documents import ParsedDocument
from footnote.store.types import EVERYONE


class ConnectorError(ValueError):
    """A source that cannot be read at all (no such repository, a clone that failed): one
    line for the user, never a traceback. A ValueError, as every invalid request is, so the
    command line and the served indexer show its message."""


class CheckpointLost(ConnectorError):
    """The position a sync would resume from is gone (a force-pushed branch): the source is
    read in full instead."""


@dataclass(frozen=True)
class Checkpoint:
    """Where a source stood when the index last published what it gave: a cursor the
    source system understands (a commit, a revision id) and when it was reached. Stored as
    JSON with the index's source list, so it is published atomically with the chunks: a
    sync killed before its publish resumes from the last checkpoint, never past it."""

    cursor: str
    reached_at: str = ""
    detail: dict[str, Any] = field(default_factory=dict)
    """What the source lists beside its cursor (the branch read, how many documents)."""

    def to_dict(self) -> dict[str, Any]:
        return {"cursor": self.cursor, "reached_at": self.reached_at, "detail": self.detail}

    @classmethod
    def from_dict(cls, data: Any) -> Checkpoint | None:
        """The checkpoint a source list records; None for none or a malformed one (the
        source is then read in full, never trusted half-way)."""
        if not isinstance(data, dict) or not isinstance(data.get("cursor"), str):
            return None
        detail = data.get("detail")
        return cls(
            cursor=data["cursor"],
            reached_at=str(data.get("reached_at") or ""),
            detail=dict(detail) if isinstance(detail, dict) else {},
        )


@dataclass(frozen=True)
class Permissions:
    """Who may read a document: named users, groups, or everyone. A document whose
    permissions cannot be read gets `Permissions.nobody()`, never public."""

    users: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    public: bool = False
    problem: str | None = None
    """Why the permissions could not be read; the document is then for admins only."""

    @classmethod
    def nobody(cls, problem: str) -> Permissions:
        return cls(problem=problem)

    def access_groups(self) -> list[str] | None:
        """The index's access groups for these readers: `everyone` when public, none at all
        when they could not be read, and None (the index's default, as for a folder added
        without `--access`) when the source names no one."""
        if self.problem is not None:
            return []
        if self.public:
            return [EVERYONE]
        named = [*self.groups, *(f"user:{u}" for u in self.users)]
        return named or None

    def record(self) -> dict[str, Any]:
        """These readers as JSON, for a document's version: a change of readers alone is
        a new version (re-published without re-embedding), the same on every connector."""
        return {
            "users": list(self.users),
            "groups": list(self.groups),
            "public": self.public,
            "problem": self.problem,
        }


@dataclass(frozen=True, kw_only=True)
class SourceDocument:
    """One document a connector gives: its content (read only when the index needs it,
    so an unchanged document costs nothing), where a citation links back to, who changed it
    last and when, and who may read it."""

    id: str
    """Stable within its source (a path in a repository, a page id)."""
    name: str
    """The readable name it is cited by."""
    version: str
    """Changes whenever its content does (a git blob id, a revision id)."""
    link: str
    """Where the document stands in its source at this version."""
    read: Callable[[], bytes]
    """Its content; raises ParseError with a reason for one bad item."""
    parse: Callable[[bytes, str], ParsedDocument]
    """parse(content, source name) -> the document, sections cited back to the source."""
    author: str | None = None
    updated: str | None = None
    """When it last changed (ISO 8601, UTC)."""
    permissions: Permissions = field(default_factory=Permissions)


@dataclass(frozen=True)
class Batch:
    """What a load or a poll gives: documents to (re)read, ids gone since the checkpoint,
    items that could not be handed over (id -> reason; the rest goes on), and the checkpoint
    to record once this batch is published."""

    documents: list[SourceDocument]
    checkpoint: Checkpoint
    deleted: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)


class Connector(Protocol):
    """A source system, read in full once and then by what changed since a checkpoint."""

    def full_load(self) -> Batch:
        """Every document the source gives now."""

    def poll(self, since: Checkpoint) -> Batch:
        """The documents changed since `since` and the ids deleted since; raises
        CheckpointLost when `since` can no longer be compared with now."""

    def list_ids(self) -> dict[str, str]:
        """Every document id the source gives now, with its version: what is not listed is
        pruned, and a listed version the index already holds is not read again."""

    def permissions(self, doc_id: str) -> Permissions:
        """Who may read the document; `Permissions.nobody(reason)` when that cannot be read."""


def retry_after_seconds(value: str) -> float | None:
    """The wait a `Retry-After` value names, in seconds (a number of seconds or an HTTP
    date, never less than none), or None when it names none: the one reading of it that
    every connector's rate-limit wait starts from."""
    value = value.strip()
    if value.isdigit():
        return float(value)
    if not value:
        return None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())
