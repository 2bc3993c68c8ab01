"""Plain text and source code: the whole file is one section with its line range. A text
file may open with front matter (`access:`, `title:`...), read exactly as Markdown's is."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from footnote.ingest.documents import ParsedDocument, ParseError, Section
from footnote.ingest.parsers.common import (
    decode_text,
    iso_date,
    scalar_text,
    short_title,
    split_lines,
    trim_range,
)
from footnote.ingest.parsers.markdown import jsonable_fields, read_front_matter

TEXT_SUFFIXES = frozenset({".txt", ".rst"})
CODE_SUFFIXES = frozenset(
    {
        ".py", ".pyi", ".js", ".mjs", ".jsx", ".ts", ".tsx", ".go", ".rs", ".java",
        ".c", ".h", ".cc", ".cpp", ".hpp", ".sh", ".bash", ".rb",
        ".toml", ".yaml", ".yml",
    }
)  # fmt: skip


def _whole_file(data: bytes, path: Path, source: str, *, is_code: bool) -> ParsedDocument:
    lines = split_lines(decode_text(data))
    body_start = 0
    front: dict[str, Any] = {}
    access: list[str] | None = None
    problem: str | None = None
    if not is_code:  # a text file's front matter is honoured (or refused) as Markdown's is
        front, body_start, access, problem = read_front_matter(lines)
    span = trim_range(lines, body_start, len(lines))
    if span is None:
        raise ParseError("no text found")
    start, end = span
    section = Section(
        text="\n".join(lines[start:end]),
        line_start=start + 1,
        line_end=end,
        is_code=is_code,
    )
    title = path.name if is_code else (short_title(section.text) or path.stem)
    title = scalar_text(front.pop("title", None)) or title
    date = iso_date(front.get("date"))
    if date is not None:
        del front["date"]
    return ParsedDocument(
        source=source,
        title=title,
        sections=[section],
        date=date,
        access=access,
        access_problem=problem,
        metadata=jsonable_fields(front),
    )


def parse_text(data: bytes, path: Path, source: str) -> ParsedDocument:
    return _whole_file(data, path, source, is_code=False)


def parse_code(data: bytes, path: Path, source: str) -> ParsedDocument:
    return _whole_file(data, path, source, is_code=True)
