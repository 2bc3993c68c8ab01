"""Markdown with front matter: sections at ATX headings, GitHub-style anchors, line ranges."""

from __future__ import annotations

import datetime as dt
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from footnote.ingest.documents import ParsedDocument, ParseError, Section
from footnote.ingest.parsers.common import (
    decode_text,
    iso_date,
    scalar_text,
    split_lines,
    trim_range,
)

yaml: Any
try:
    import yaml
except ImportError:  # pragma: no cover - PyYAML comes with the app's dependencies
    yaml = None

SUFFIXES = frozenset({".md", ".markdown"})

_FENCE_OPEN = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
_ATX_HEADING = re.compile(r"^ {0,3}(#{1,6})(?=[ \t]|$)(.*)$")
_ATX_CLOSING = re.compile(r"(?:^|[ \t]+)#+[ \t]*$")
_MD_IMAGE_OR_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_MD_EMPHASIS = re.compile(r"(\*\*|__)(.+?)\1")
_FRONT_MATTER_FENCE = "---"
_ACCESS_LINE = re.compile(r"^\s*access\s*:", re.MULTILINE)
_METADATA_NODE_BUDGET = 10_000


@dataclass
class _MdHeading:
    level: int
    text: str


def parse(data: bytes, path: Path, source: str) -> ParsedDocument:
    lines = split_lines(decode_text(data))
    front, body_start = _front_matter(lines)

    sections: list[Section] = []
    stack: list[_MdHeading] = []
    slugs: dict[str, int] = {}
    first_h1: str | None = None
    anchor: str | None = None
    block_start = body_start
    fence: tuple[str, int] | None = None

    def close(end: int) -> None:
        span = trim_range(lines, block_start, end)
        if span is None:
            return
        start, stop = span
        sections.append(
            Section(
                text="\n".join(lines[start:stop]),
                headings=[h.text for h in stack],
                anchor=anchor,
                line_start=start + 1,
                line_end=stop,
            )
        )

    for index in range(body_start, len(lines)):
        line = lines[index]
        if fence is not None:
            if _closes_fence(line, fence):
                fence = None
            continue
        opened = _FENCE_OPEN.match(line)
        if opened and not (opened.group(1)[0] == "`" and "`" in opened.group(2)):
            fence = (opened.group(1)[0], len(opened.group(1)))
            continue
        heading = _ATX_HEADING.match(line)
        if heading is None:
            continue
        close(index)
        level = len(heading.group(1))
        text = _plain_heading(_ATX_CLOSING.sub("", heading.group(2).strip()))
        while stack and stack[-1].level >= level:
            stack.pop()
        stack.append(_MdHeading(level, text))
        anchor = _unique_slug(text, slugs)
        if level == 1 and first_h1 is None and text:
            first_h1 = text
        block_start = index + 1
    close(len(lines))

    title = scalar_text(front.pop("title", None)) or first_h1 or path.stem
    date = iso_date(front.get("date"))
    if date is not None:
        del front["date"]  # an unparseable date stays in metadata, as written
    access = _access_list(front.pop("access")) if "access" in front else None
    budget = [_METADATA_NODE_BUDGET]
    return ParsedDocument(
        source=source,
        title=title,
        sections=sections,
        date=date,
        access=access,
        metadata={str(key): _jsonable(value, budget) for key, value in front.items()},
    )


def _closes_fence(line: str, fence: tuple[str, int]) -> bool:
    char, length = fence
    stripped = line.strip()
    indent = len(line) - len(line.lstrip(" "))
    return indent <= 3 and len(stripped) >= length and stripped == char * len(stripped)


def _plain_heading(text: str) -> str:
    """Heading text as rendered: link text without URLs, no code or bold markers."""
    text = _MD_IMAGE_OR_LINK.sub(r"\1", text)
    text = _MD_EMPHASIS.sub(r"\2", text)
    return " ".join(text.replace("`", "").split())


def _slugify(text: str) -> str:
    """GitHub-style anchor: lower case, punctuation dropped, spaces to hyphens."""
    text = unicodedata.normalize("NFKC", text).lower()
    text = "".join(ch for ch in text if ch.isalnum() or ch in " -_")
    return text.replace(" ", "-")


def _unique_slug(text: str, seen: dict[str, int]) -> str:
    """Repeat headings get `-1`, `-2`... as GitHub does, so anchors stay unique."""
    slug = _slugify(text)
    count = seen.get(slug, 0)
    seen[slug] = count + 1
    return slug if count == 0 else f"{slug}-{count}"


def _front_matter(lines: list[str]) -> tuple[dict[str, Any], int]:
    """Return (front matter, index of the first body line); ({}, 0) when there is none."""
    if not lines or lines[0].rstrip() != _FRONT_MATTER_FENCE:
        return {}, 0
    for end in range(1, len(lines)):
        if lines[end].rstrip() in (_FRONT_MATTER_FENCE, "..."):
            break
    else:
        return {}, 0
    raw = "\n".join(lines[1:end])
    parsed = _load_front_matter(raw)
    if parsed is None:
        if _ACCESS_LINE.search(raw):
            # It restricts access but cannot be read: fail closed rather than fall back
            # to the default groups. `access: None` reads as malformed downstream.
            return {"access": None}, end + 1
        return {}, 0
    return parsed, end + 1


def _load_front_matter(raw: str) -> dict[str, Any] | None:
    """YAML when it parses as a mapping; else the simple `key: value` reading.

    The fallback matters because hand-written front matter often breaks YAML
    (`title: Keys: how to rotate`) yet is perfectly clear to a human.
    """
    if not raw.strip():
        return {}
    if yaml is not None:
        try:
            loaded = yaml.safe_load(raw)
        except yaml.YAMLError:
            loaded = None
        if isinstance(loaded, dict):
            return loaded
    return _simple_front_matter(raw)


def _simple_front_matter(raw: str) -> dict[str, Any] | None:
    result: dict[str, Any] = {}
    for line in raw.split("\n"):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, sep, value = line.partition(":")
        if not sep or not key.strip() or key != key.lstrip():
            return None
        value = value.strip()
        if value.startswith("[") and value.endswith("]"):
            result[key.strip()] = [_unquote(v) for v in value[1:-1].split(",") if v.strip()]
        else:
            result[key.strip()] = _unquote(value)
    return result


def _unquote(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def _access_list(value: Any) -> list[str]:
    """Groups named by `access:`; anything malformed becomes [] (nobody but an admin).

    An empty list, not None, because None means "the document says nothing" and
    would let the pipeline apply a default that may be wider than intended.
    """
    if isinstance(value, str):
        items: Iterable[Any] = value.split(",")
    elif isinstance(value, list):
        items = value
    else:
        return []
    groups: list[str] = []
    for item in items:
        if isinstance(item, bool) or not isinstance(item, (str, int)):
            return []
        name = str(item).strip()
        if name and name not in groups:
            groups.append(name)
    return groups


def _jsonable(value: Any, budget: list[int]) -> Any:
    """Metadata must survive JSON (the index stores it): dates become ISO strings.

    `budget` caps the nodes visited, since YAML aliases can make a few lines of
    front matter expand exponentially (or refer to themselves).
    """
    budget[0] -= 1
    if budget[0] < 0:
        raise ParseError("front matter too complex")
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): _jsonable(v, budget) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [_jsonable(v, budget) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)
