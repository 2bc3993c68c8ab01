"""Plain text and source code: the whole file is one section with its line range."""

from __future__ import annotations

from pathlib import Path

from footnote.ingest.documents import ParsedDocument, ParseError, Section
from footnote.ingest.parsers.common import decode_text, short_title, split_lines, trim_range

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
    span = trim_range(lines, 0, len(lines))
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
    return ParsedDocument(source=source, title=title, sections=[section])


def parse_text(data: bytes, path: Path, source: str) -> ParsedDocument:
    return _whole_file(data, path, source, is_code=False)


def parse_code(data: bytes, path: Path, source: str) -> ParsedDocument:
    return _whole_file(data, path, source, is_code=True)
