"""The shapes that flow through ingest: parsed documents, their sections, and chunks.

Parsers produce `ParsedDocument`s made of `Section`s (structure kept: headings,
pages, lines, anchors). The chunker turns sections into `Chunk`s (footnote.store.types),
which are what the index stores and what citations point at.
"""

from __future__ import annotations

from dataclasses import dataclass, field
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
    metadata: dict[str, Any] = field(default_factory=dict)
    """Fields of this section's own (one message's sender in a mailbox), added to the
    document's metadata on its chunks, for filters."""


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
    access_problem: str | None = None
    """Why the document's access cannot be trusted (malformed front matter); it is then
    visible to admins only and the reason is reported."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """Other front-matter keys, kept for filters."""
