"""PDF: one section per page with its number, headings from the outline when there is one."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from footnote.ingest.documents import ParsedDocument, ParseError, Section
from footnote.ingest.parsers.common import scalar_text, short_title

SUFFIXES = frozenset({".pdf"})


def parse(data: bytes, path: Path, source: str) -> ParsedDocument:
    from pypdf import PdfReader  # imported here: only PDF ingest pays for it

    try:
        reader = PdfReader(io.BytesIO(data))
        encrypted = reader.is_encrypted
    except Exception as exc:  # pypdf raises many types on malformed input
        raise ParseError(f"corrupt PDF: {_reason(exc)}") from exc
    if encrypted:
        # Many PDFs are encrypted only to restrict printing: the empty password opens them.
        try:
            opened = reader.decrypt("")
        except Exception as exc:
            raise ParseError(f"encrypted PDF: cannot decrypt ({_reason(exc)})") from exc
        if not opened:
            raise ParseError("encrypted PDF: a password is required")
    try:
        pages = list(reader.pages)
    except Exception as exc:
        raise ParseError(f"corrupt PDF: {_reason(exc)}") from exc

    outline = _pdf_outline(reader)
    sections: list[Section] = []
    for number, page in enumerate(pages, start=1):
        try:
            text = page.extract_text() or ""
        except Exception as exc:
            raise ParseError(f"corrupt PDF: page {number}: {_reason(exc)}") from exc
        text = "\n".join(line.rstrip() for line in text.replace("\x00", "").split("\n")).strip()
        if text:
            sections.append(Section(text=text, headings=outline.get(number, []), page=number))
    if not sections:
        raise ParseError("no text found (a scanned PDF without a text layer?)")
    return ParsedDocument(
        source=source,
        title=_pdf_title(reader) or short_title(sections[0].text) or path.stem,
        sections=sections,
    )


def _reason(exc: Exception) -> str:
    return str(exc) or type(exc).__name__


def _pdf_title(reader: Any) -> str | None:
    try:
        info = reader.metadata
        title = info.title if info is not None else None
    except Exception:  # metadata is optional; a broken /Info must not lose the text
        return None
    return scalar_text(title)


def _pdf_outline(reader: Any) -> dict[int, list[str]]:
    """Map each 1-based page to the outline path in force there (latest entry at or before it).

    The outline is a nicety: when it is missing or broken, pages get no headings.
    """
    try:
        entries = sorted(
            (page, order, path) for order, (page, path) in enumerate(_outline_entries(reader))
        )
        page_count = len(reader.pages)
    except Exception:
        return {}
    result: dict[int, list[str]] = {}
    current: list[str] = []
    position = 0
    for number in range(1, page_count + 1):
        while position < len(entries) and entries[position][0] <= number:
            current = entries[position][2]
            position += 1
        if current:
            result[number] = current
    return result


def _outline_entries(reader: Any) -> Iterator[tuple[int, list[str]]]:
    def walk(items: list[Any], parents: list[str]) -> Iterator[tuple[int, list[str]]]:
        last: list[str] = parents
        for item in items:
            if isinstance(item, list):
                yield from walk(item, last)
                continue
            title = scalar_text(getattr(item, "title", None))
            page = reader.get_destination_page_number(item)
            if title is None or page is None or page < 0:
                continue
            last = [*parents, title]
            yield page + 1, last

    yield from walk(reader.outline, [])
