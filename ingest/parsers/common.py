"""What every format parser shares: decoding, line handling, titles and dates."""

from __future__ import annotations

import datetime as dt
from typing import Any

from footnote.ingest.documents import ParseError

BINARY_SNIFF_BYTES = 8192
TITLE_MAX = 100


def decode_text(data: bytes) -> str:
    """Decode a text-type file as UTF-8 (BOM allowed); no silent Latin-1 guessing."""
    if b"\x00" in data[:BINARY_SNIFF_BYTES]:
        raise ParseError("binary file")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ParseError(f"not valid UTF-8 text (bad byte at offset {exc.start})") from exc
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


def short_title(text: str) -> str | None:
    for line in text.split("\n"):
        line = " ".join(line.split())
        if line:
            return line[:TITLE_MAX]
    return None


def scalar_text(value: Any) -> str | None:
    if value is None or isinstance(value, (list, dict)):
        return None
    text = " ".join(str(value).split())
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
