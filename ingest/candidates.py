"""What every kind of source hands to ingest: one `Candidate` per document, whatever it
came from (a file, a fetched page, a LangChain `Document`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from footnote.ingest.documents import ParsedDocument


@dataclass(kw_only=True)
class Candidate:
    """One document some root gives: a file, a fetched page, a LangChain `Document`.
    Naming, change detection, limits, access and publish are the same for all of them."""

    root: str
    """Id of the root that gives it (see `roots.SourceRoot`)."""
    origin: str
    """Where in that root: the path relative to it, or the page URL."""
    name: str
    """The source name it would like: its relative path, or a readable form of its URL."""
    label: str
    """Readable prefix that tells it apart when another root already gives `name`."""
    read: Callable[[], bytes]
    """Its bytes; raises ParseError (a reason) or OSError. Sizes are checked by ingest."""
    parse: Callable[[bytes, str], ParsedDocument]
    """parse(data, source name) -> the document."""
    mtime: Callable[[], float]
    access: list[str] | None = None
    """The root's access for documents that state none; None: the index's default."""
    fetch: dict[str, str] | None = None
    """HTTP validators to remember for the next sync."""
    not_modified: bool = False
    """The origin said it has not changed (HTTP 304): keep what the index holds."""
