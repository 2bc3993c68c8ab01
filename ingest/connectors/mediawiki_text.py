"""Wikitext as plain text cut at its section headings, so each chunk is titled by its section
and cited by the section's anchor.

This is no parser of MediaWiki's full grammar: templates, references, comments, files and
categories are dropped, links keep their shown text, tables keep their cells' text, and
bold, italics and HTML tags are removed with their content kept. The text is data: nothing
in it is run, expanded or fetched, so a page cannot reach anything through it.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass

_HEADING = re.compile(r"^(={1,6})\s*(.+?)\s*\1\s*$", re.MULTILINE)
_COMMENT = re.compile(r"<!--.*?(?:-->|\Z)", re.DOTALL)
_REF = re.compile(r"<ref\b[^>/]*/>|<ref\b[^>]*>.*?</ref\s*>", re.DOTALL | re.IGNORECASE)
_DROPPED_TAGS = re.compile(
    r"<(gallery|math|score|timeline)\b[^>]*>.*?</\1\s*>",
    re.DOTALL | re.IGNORECASE,
)
_TEMPLATE = re.compile(r"\{\{(?:[^{}]|\{(?!\{)|\}(?!\}))*\}\}", re.DOTALL)
_FILE_LINK = re.compile(
    r"\[\[\s*(?:file|image|category|media)\s*:[^\[\]]*(?:\[\[[^\]]*\]\][^\[\]]*)*\]\]",
    re.IGNORECASE,
)
_LINK = re.compile(r"\[\[([^\[\]|]*)(?:\|([^\[\]]*))?\]\]")
_EXTERNAL = re.compile(r"\[(?:https?:)?//[^\s\]]+(?:\s+([^\]]*))?\]")
_QUOTES = re.compile(r"'{2,5}")
_TAG = re.compile(r"</?[A-Za-z][A-Za-z0-9-]*(?:\s[^<>]*)?/?>")
_MAGIC = re.compile(r"__[A-Z]+__")
_LIST = re.compile(r"^[*#:;]+\s*", re.MULTILINE)
_BLANKS = re.compile(r"\n{3,}")
_MAX_TEMPLATE_PASSES = 20


@dataclass(frozen=True)
class WikiSection:
    """One section: its heading path below the page title, its anchor (MediaWiki's: the
    heading with spaces as underscores), and its plain text."""

    headings: tuple[str, ...]
    anchor: str | None
    text: str


def sections(wikitext: str) -> list[WikiSection]:
    """The page's lead and each headed section, in order; sections without text are kept
    out, but their headings still head the sections below them."""
    source = _COMMENT.sub("", wikitext.replace("\r\n", "\n"))
    found: list[WikiSection] = []
    path: list[tuple[int, str]] = []
    start, heading = 0, None
    for match in _HEADING.finditer(source):
        _keep(found, path, heading, source[start : match.start()])
        level, title = len(match.group(1)), plain(match.group(2)).strip()
        while path and path[-1][0] >= level:
            path.pop()
        path.append((level, title))
        start, heading = match.end(), title
    _keep(found, path, heading, source[start:])
    return found


def _keep(
    found: list[WikiSection], path: list[tuple[int, str]], heading: str | None, raw: str
) -> None:
    text = plain(raw).strip()
    if not text:
        return
    headings = tuple(title for _, title in path) if heading is not None else ()
    anchor = heading.replace(" ", "_") if heading else None
    found.append(WikiSection(headings=headings, anchor=anchor, text=text))


def plain(wikitext: str) -> str:
    """Wikitext markup removed, its readable text kept."""
    text = _REF.sub("", _DROPPED_TAGS.sub("", wikitext))
    for _ in range(_MAX_TEMPLATE_PASSES):  # innermost templates first, nested ones after
        text, count = _TEMPLATE.subn("", text)
        if not count:
            break
    text = _FILE_LINK.sub("", text)
    text = _LINK.sub(lambda m: (m.group(2) or m.group(1)).strip().lstrip(":"), text)
    text = _EXTERNAL.sub(lambda m: (m.group(1) or "").strip(), text)
    text = _table_text(text)
    text = _QUOTES.sub("", _MAGIC.sub("", _TAG.sub("", text)))
    text = _LIST.sub("", text)
    return _BLANKS.sub("\n\n", html.unescape(text))


def _table_text(text: str) -> str:
    """A table's cells as lines of text: `{|`, `|-`, `|}` and captions' markers dropped,
    each row's cells joined by ` | `."""
    lines = []
    for line in text.split("\n"):
        stripped = line.strip()
        if stripped.startswith(("{|", "|}", "|-")):
            continue
        if stripped.startswith(("|+", "|", "!")):
            cells = re.split(r"\|\||!!", stripped.lstrip("|+!"))
            line = " | ".join(_cell(c) for c in cells)
        lines.append(line)
    return "\n".join(lines)


def _cell(cell: str) -> str:
    """A cell's text without its attributes (`style="..." | text`)."""
    attributes, sep, content = cell.partition("|")
    return (content if sep and "=" in attributes else cell).strip()
