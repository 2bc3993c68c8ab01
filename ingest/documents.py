"""The shapes that flow through ingest: parsed documents, their sections, and chunks.

Parsers produce `ParsedDocument`s made of `Section`s (structure kept: headings,
pages, lines, anchors). The chunker turns sections into `Chunk`s, which are what
the index stores and what citations point at.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


class ParseError(Exception):
    """A file could not be turned into text; the message is the per-file reason."""


@dataclass(kw_only=True)
class Section:
    """A run of text under one heading path, with the location a citation needs."""

    text: str
    headings: list[str] = field(default_factory=list)
    """Heading path from the document's top, e.g. ["API keys", "Rotation"]."""
    anchor: str | None = None
    """Fragment id of the section (HTML `id`, Markdown slug), without `#`."""
    url: str | None = None
    """Link to the section, e.g. `library/os.html#os.getcwd`."""
    page: int | None = None
    """1-based PDF page the text comes from."""
    line_start: int | None = None
    """1-based first line in the source file (text, Markdown, code)."""
    line_end: int | None = None
    """1-based last line in the source file, inclusive."""
    is_code: bool = False
    """True for source code or a fenced code block: split on code boundaries."""


@dataclass(kw_only=True)
class ParsedDocument:
    """One source file, parsed."""

    source: str
    """Path relative to the ingest root, with `/` separators."""
    title: str
    sections: list[Section]
    date: str | None = None
    """ISO date from front matter or metadata, if the document states one."""
    access: list[str] | None = None
    """Access groups stated by the document itself (front matter `access:`)."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """Other front-matter keys, kept for filters."""


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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Chunk:
        return cls(**data)
