"""What every format parser shares: decoding, line handling, titles and dates."""

from __future__ import annotations

import codecs
import datetime as dt
from typing import Any

from footnote.ingest.documents import ParseError

BINARY_SNIFF_BYTES = 8192
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
TITLE_MAX = 100
HEADING_MAX = 200
"""Characters of a heading kept in its sections' heading paths. Every section under a
heading repeats its path, so a heading a megabyte long would otherwise cost a megabyte
per section: what the parse builds would grow with the square of the file."""
TEXT_FLOOR = 16_000_000
TEXT_RATIO = 16
"""Characters of text a parse may build from one file: `TEXT_FLOOR` plus this many times
its size in bytes. Text formats yield about their own size; a zip's members or a cell's
shared string repeated across a sheet can yield far more (see `TextBudget`)."""


def bom_encoding(data: bytes) -> str | None:
    """The encoding a byte-order mark announces (UTF-32 checked before UTF-16, whose BOM
    it starts with), or None."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return encoding
    return None


def decode_text(data: bytes) -> str:
    """Decode a text-type file: UTF-16/32 when a BOM says so, else UTF-8 (BOM allowed).

    No silent Latin-1 guessing. A NUL character anywhere is refused, not only in the
    first bytes sniffed: it means binary data, and PostgreSQL cannot store it either.
    """
    encoding = bom_encoding(data)
    if encoding is None and b"\x00" in data[:BINARY_SNIFF_BYTES]:
        raise ParseError("binary file")
    try:
        text = data.decode(encoding or "utf-8-sig")
    except UnicodeDecodeError as exc:
        name = (encoding or "UTF-8").upper()
        raise ParseError(f"not valid {name} text (bad byte at offset {exc.start})") from exc
    return normalize_newlines(refuse_nul(text))


def refuse_nul(text: str) -> str:
    nul = text.find("\x00")
    if nul >= 0:
        raise ParseError(f"binary data: a NUL character at offset {nul}")
    return text


def normalize_newlines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


def split_lines(text: str) -> list[str]:
    """Split on newlines only, so line numbers match what an editor shows."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def trim_range(lines: list[str], start: int, end: int) -> tuple[int, int] | None:
    """Shrink the 0-based half-open range [start, end) to drop blank edge lines."""
    while start < end and not lines[start].strip():
        start += 1
    while end > start and not lines[end - 1].strip():
        end -= 1
    return (start, end) if start < end else None


class TextBudget:
    """The text one file's parse may build, spent as it is built, so that a file whose
    text multiplies (a zip of highly compressed chapters, a long string referenced by
    every cell) fails early with the reason instead of filling memory."""

    def __init__(self, size: int, kind: str) -> None:
        self.limit = TEXT_FLOOR + TEXT_RATIO * size
        self.left = self.limit
        self.kind = kind

    def spend(self, text: str) -> str:
        self.left -= len(text)
        if self.left < 0:
            raise ParseError(
                f"{self.kind}: its text runs past {self.limit:,} characters, over "
                f"{TEXT_RATIO} times the file's size (a decompression bomb?)"
            )
        return text


def short_title(text: str) -> str | None:
    for line in text.split("\n"):
        line = " ".join(line.split())
        if line:
            return line[:TITLE_MAX]
    return None


def scalar_text(value: Any) -> str | None:
    if value is None or isinstance(value, (list, dict)):
        return None
    text = " ".join(str(value).replace("\x00", "").split())
    return text or None


def iso_date(value: Any) -> str | None:
    """ISO form of a date or timestamp; None when the value is not one."""
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip()
    try:
        return dt.date.fromisoformat(text).isoformat()
    except ValueError:
        pass
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).isoformat()
    except ValueError:
        return None
