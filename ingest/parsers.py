"""Turn files into `ParsedDocument`s, keeping the structure citations need.

Each format keeps what a reader would use to find the passage again: heading
paths and line ranges for Markdown, anchors for HTML (including Sphinx API
entries such as `library/os.html#os.getcwd`), page numbers for PDF. Every
failure is a `ParseError` whose message is a short, human reason, so the
pipeline can report a bad file and carry on.
"""

from __future__ import annotations

import codecs
import datetime as dt
import io
import logging
import re
import stat
import unicodedata
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bs4 import BeautifulSoup
from bs4.element import (
    NavigableString,
    PageElement,
    PreformattedString,
    Script,
    Stylesheet,
    Tag,
    TemplateString,
)

from footnote.ingest.documents import ParsedDocument, ParseError, Section

yaml: Any
try:
    import yaml
except ImportError:  # pragma: no cover - PyYAML comes with the app's dependencies
    yaml = None

__all__ = ["SUPPORTED_SUFFIXES", "is_supported", "parse_file"]

MARKDOWN_SUFFIXES = frozenset({".md", ".markdown"})
TEXT_SUFFIXES = frozenset({".txt", ".rst"})
CODE_SUFFIXES = frozenset(
    {
        ".py", ".pyi", ".js", ".mjs", ".jsx", ".ts", ".tsx", ".go", ".rs", ".java",
        ".c", ".h", ".cc", ".cpp", ".hpp", ".sh", ".bash", ".rb",
        ".toml", ".yaml", ".yml",
    }
)  # fmt: skip
HTML_SUFFIXES = frozenset({".html", ".htm"})
PDF_SUFFIXES = frozenset({".pdf"})

SUPPORTED_SUFFIXES: frozenset[str] = (
    MARKDOWN_SUFFIXES | TEXT_SUFFIXES | CODE_SUFFIXES | HTML_SUFFIXES | PDF_SUFFIXES
)
"""Lower-case suffixes `parse_file` handles. Files without a suffix are read as text too."""

_BINARY_SNIFF_BYTES = 8192
_TITLE_MAX = 100

log = logging.getLogger(__name__)


def is_supported(path: Path) -> bool:
    """Whether `parse_file` would try this file; a cheap name check, nothing is read.

    Suffix-less files (README, LICENSE) count as text; dotfiles do not, since
    they are configuration rather than documents.
    """
    suffix = path.suffix.lower()
    if suffix:
        return suffix in SUPPORTED_SUFFIXES
    return not path.name.startswith(".")


def parse_file(path: Path, source: str, *, max_bytes: int = 20_000_000) -> ParsedDocument:
    """Parse one file into sections.

    `source` is the path relative to the ingest root (with `/`); it becomes the
    document's `source` and the base of HTML section URLs. Raises `ParseError`
    for anything that cannot be read or yields no text, and never any other
    exception, so one bad file cannot stop an ingest run.
    """
    suffix = path.suffix.lower()
    parser = _parser_for(path, suffix)
    data = _read_bytes(path, max_bytes)
    try:
        doc = parser(data, path, source)
    except ParseError:
        raise
    except Exception as exc:  # a parser bug must still surface as a per-file reason
        log.debug("parser crashed on %s", path, exc_info=True)
        raise ParseError(f"parse failed: {type(exc).__name__}: {exc}") from exc
    if not doc.sections:
        raise ParseError("no text found")
    return doc


def _parser_for(path: Path, suffix: str) -> Callable[[bytes, Path, str], ParsedDocument]:
    if suffix in MARKDOWN_SUFFIXES:
        return _parse_markdown
    if suffix in HTML_SUFFIXES:
        return _parse_html
    if suffix in PDF_SUFFIXES:
        return _parse_pdf
    if suffix in CODE_SUFFIXES:
        return _parse_code
    if suffix in TEXT_SUFFIXES or not suffix:
        return _parse_text
    raise ParseError(f"unsupported file type {suffix}")


def _read_bytes(path: Path, max_bytes: int) -> bytes:
    """Read the file, refusing oversized and non-regular files before reading them."""
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            raise ParseError("not a regular file")
        if info.st_size > max_bytes:
            raise ParseError(f"file too large: {info.st_size} bytes > limit {max_bytes}")
        with path.open("rb") as handle:
            data = handle.read(max_bytes + 1)
    except PermissionError as exc:
        raise ParseError("permission denied") from exc
    except FileNotFoundError as exc:
        raise ParseError("file not found") from exc
    except OSError as exc:
        raise ParseError(f"cannot read file: {exc.strerror or exc}") from exc
    if len(data) > max_bytes:  # grew between stat and read
        raise ParseError(f"file too large: more than {max_bytes} bytes > limit {max_bytes}")
    if not data:
        raise ParseError("empty file")
    return data


def _decode_text(data: bytes) -> str:
    """Decode a text-type file as UTF-8 (BOM allowed); no silent Latin-1 guessing."""
    if b"\x00" in data[:_BINARY_SNIFF_BYTES]:
        raise ParseError("binary file")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ParseError(f"not valid UTF-8 text (bad byte at offset {exc.start})") from exc
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _split_lines(text: str) -> list[str]:
    """Split on newlines only, so line numbers match what an editor shows."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def _trim_range(lines: list[str], start: int, end: int) -> tuple[int, int] | None:
    """Shrink the 0-based half-open range [start, end) to drop blank edge lines."""
    while start < end and not lines[start].strip():
        start += 1
    while end > start and not lines[end - 1].strip():
        end -= 1
    return (start, end) if start < end else None


def _short_title(text: str) -> str | None:
    for line in text.split("\n"):
        line = " ".join(line.split())
        if line:
            return line[:_TITLE_MAX]
    return None


# --- plain text and code -------------------------------------------------------------


def _whole_file(data: bytes, path: Path, source: str, *, is_code: bool) -> ParsedDocument:
    lines = _split_lines(_decode_text(data))
    span = _trim_range(lines, 0, len(lines))
    if span is None:
        raise ParseError("no text found")
    start, end = span
    section = Section(
        text="\n".join(lines[start:end]),
        line_start=start + 1,
        line_end=end,
        is_code=is_code,
    )
    title = path.name if is_code else (_short_title(section.text) or path.stem)
    return ParsedDocument(source=source, title=title, sections=[section])


def _parse_text(data: bytes, path: Path, source: str) -> ParsedDocument:
    return _whole_file(data, path, source, is_code=False)


def _parse_code(data: bytes, path: Path, source: str) -> ParsedDocument:
    return _whole_file(data, path, source, is_code=True)


# --- Markdown ------------------------------------------------------------------------

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


def _parse_markdown(data: bytes, path: Path, source: str) -> ParsedDocument:
    lines = _split_lines(_decode_text(data))
    front, body_start = _front_matter(lines)

    sections: list[Section] = []
    stack: list[_MdHeading] = []
    slugs: dict[str, int] = {}
    first_h1: str | None = None
    anchor: str | None = None
    block_start = body_start
    fence: tuple[str, int] | None = None

    def close(end: int) -> None:
        span = _trim_range(lines, block_start, end)
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

    title = _scalar_text(front.pop("title", None)) or first_h1 or path.stem
    date = _iso_date(front.get("date"))
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


def _scalar_text(value: Any) -> str | None:
    if value is None or isinstance(value, (list, dict)):
        return None
    text = " ".join(str(value).split())
    return text or None


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


def _iso_date(value: Any) -> str | None:
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


# --- HTML ----------------------------------------------------------------------------

_HEADINGS = ("h1", "h2", "h3", "h4", "h5", "h6")
_BLOCK_TAGS = frozenset(
    {
        "address", "article", "blockquote", "br", "caption", "dd", "details", "dialog",
        "div", "dl", "dt", "fieldset", "figcaption", "figure", "hr", "li", "main", "ol",
        "p", "section", "summary", "table", "tbody", "tfoot", "thead", "ul",
    }
)  # fmt: skip
_TIGHT_TAGS = frozenset({"li", "tr"})
_CELL_TAGS = ["td", "th"]
_SECTION_WRAPPERS = frozenset({"section", "div", "article"})
_DROP_TAGS = frozenset(
    {"script", "style", "noscript", "template", "iframe", "form", "button", "nav", "footer"}
)
_DROP_ROLES = frozenset({"navigation", "search", "banner", "contentinfo"})
_DROP_CLASSES = frozenset(
    {
        "headerlink", "mobile-nav", "sphinxsidebar", "breadcrumbs", "wy-breadcrumbs",
        "prev-next-area", "rst-footer-buttons", "related-pages", "this-page-menu",
    }
)  # fmt: skip
_DROP_DIV_CLASSES = frozenset({"related", "footer", "header"})
_DROP_IDS = frozenset({"search", "searchbox", "sidebarbutton"})
_DROP_LABELS = frozenset({"breadcrumb", "breadcrumbs", "source link"})
_CONTENTS_TITLES = frozenset({"contents", "table of contents", "on this page", "in this article"})
_DOCUTILS_ASIDES = frozenset(
    {"topic", "sidebar", "footnote", "footnote-list", "citation", "citation-list", "admonition"}
)
_TITLE_SUFFIX = re.compile(r"\s+(?:—|–|\||-)\s+[^—–|]*\bdocumentation\s*$", re.IGNORECASE)
_META_DATES = (
    "date", "dc.date", "dcterms.date", "dcterms.created", "dcterms.issued",
    "article:published_time", "article:modified_time",
)  # fmt: skip
_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?([A-Za-z0-9_.:-]+)""", re.IGNORECASE)
_SPACE = re.compile(r"\s+")


@dataclass
class _Block:
    text: str
    tight: bool


@dataclass
class _HtmlSection:
    """Text gathered under one heading or API entry while walking the page."""

    headings: list[str]
    anchor: str | None
    blocks: list[_Block] = field(default_factory=list)
    inline: list[str] = field(default_factory=list)
    prefix: str = ""
    tight: bool = False

    def add_inline(self, text: str) -> None:
        self.inline.append(text)

    def break_block(self, *, tight: bool = False, prefix: str = "") -> None:
        """End the paragraph in progress; the next one starts tight/with a prefix."""
        text = _SPACE.sub(" ", "".join(self.inline)).strip()
        self.inline.clear()
        if text:
            self.blocks.append(_Block(self.prefix + text, self.tight))
            self.prefix, self.tight = "", False
        if tight or prefix:
            self.prefix, self.tight = prefix, tight

    def end_item(self) -> None:
        """Close a list item or table row; an unused `- ` must not mark the next paragraph."""
        self.break_block()
        self.prefix, self.tight = "", False

    def add_pre(self, text: str) -> None:
        self.break_block()
        self.prefix, self.tight = "", False
        lines = [line.rstrip() for line in text.split("\n")]
        while lines and not lines[0].strip():
            lines.pop(0)
        while lines and not lines[-1]:
            lines.pop()
        if lines:
            self.blocks.append(_Block("\n".join(lines), tight=False))

    def text(self) -> str:
        self.break_block()
        parts: list[str] = []
        previous_tight = False
        for block in self.blocks:
            if parts:
                parts.append("\n" if block.tight and previous_tight else "\n\n")
            parts.append(block.text)
            previous_tight = block.tight
        return "".join(parts)


class _HtmlWalker:
    """Walks the content tree once, cutting sections at headings and API entries."""

    def __init__(self, root: Tag) -> None:
        self.root = root
        self.preamble = _HtmlSection(headings=[], anchor=None)
        self.sections: list[_HtmlSection] = [self.preamble]
        self.heading_stack: list[tuple[int, str, _HtmlSection]] = []
        self.api_stack: list[tuple[str, _HtmlSection, Tag]] = []
        self.current = self.preamble
        self.in_cell = 0

    def walk(self) -> list[_HtmlSection]:
        pending: list[tuple[PageElement, bool]] = [(self.root, True)]
        while pending:
            node, entering = pending.pop()
            if isinstance(node, Tag):
                if entering:
                    if self._enter(node):
                        pending.append((node, False))
                        pending.extend((child, True) for child in reversed(node.contents))
                else:
                    self._exit(node)
            elif _is_text(node):
                self.current.add_inline(str(node))
        return self.sections

    def _enter(self, tag: Tag) -> bool:
        """Handle an opening tag; False means its children were consumed already."""
        if _is_boilerplate(tag):
            return False
        name = tag.name
        if name in _HEADINGS:
            self._heading(tag)
            return False
        if name == "pre":
            if self.in_cell:
                self.current.add_inline(" " + tag.get_text() + " ")
            else:
                self.current.add_pre(tag.get_text())
            return False
        if name == "dl":
            self._maybe_open_api(tag)
        if name in _CELL_TAGS:
            if self.in_cell == 0 and _previous_cell(tag):
                self.current.add_inline(" | ")
            self.in_cell += 1
        elif name in _TIGHT_TAGS and not self.in_cell:
            self.current.break_block(tight=True, prefix="- " if name == "li" else "")
        elif name in _BLOCK_TAGS:
            self._block_break()
        return True

    def _exit(self, tag: Tag) -> None:
        name = tag.name
        if name in _CELL_TAGS:
            self.in_cell -= 1
        elif name in _TIGHT_TAGS and not self.in_cell:
            self.current.end_item()
        elif name in _BLOCK_TAGS:
            self._block_break()
        if name == "dl" and self.api_stack and self.api_stack[-1][2] is tag:
            self.api_stack.pop()
            self.current.break_block()
            self.current = self._innermost()

    def _block_break(self) -> None:
        if self.in_cell:
            self.current.add_inline(" ")
        else:
            self.current.break_block()

    def _innermost(self) -> _HtmlSection:
        if self.api_stack:
            return self.api_stack[-1][1]
        if self.heading_stack:
            return self.heading_stack[-1][2]
        return self.preamble

    def _heading(self, tag: Tag) -> None:
        text = _visible_text(tag)
        if not text:
            return
        self.current.break_block()
        level = int(tag.name[1])
        while self.heading_stack and self.heading_stack[-1][0] >= level:
            self.heading_stack.pop()
        path = [entry[1] for entry in self.heading_stack] + [text]
        section = _HtmlSection(headings=path, anchor=_heading_anchor(tag, self.root))
        self.heading_stack.append((level, text, section))
        self.sections.append(section)
        self.current = section

    def _maybe_open_api(self, dl: Tag) -> None:
        anchor = _api_id(dl)
        if anchor is None:
            return
        dt_tag = dl.find("dt", id=anchor, recursive=False)
        name = _api_name(dt_tag) if isinstance(dt_tag, Tag) else anchor
        path = [entry[1] for entry in self.heading_stack] + [entry[0] for entry in self.api_stack]
        self.current.break_block()
        section = _HtmlSection(headings=[*path, name], anchor=anchor)
        self.api_stack.append((name, section, dl))
        self.sections.append(section)
        self.current = section


def _is_text(node: object) -> bool:
    return isinstance(node, NavigableString) and not isinstance(
        node, PreformattedString | Script | Stylesheet | TemplateString
    )


def _classes(tag: Tag) -> list[str]:
    value = tag.get("class")
    if isinstance(value, str):
        return value.split()
    return list(value or [])


def _visible_text(tag: Tag) -> str:
    """Inline text without chrome inside it, such as the `¶` permalink in a heading."""
    parts: list[str] = []
    pending: list[PageElement] = [tag]
    while pending:
        node = pending.pop()
        if isinstance(node, Tag):
            if node is tag or not _is_boilerplate(node):
                pending.extend(reversed(node.contents))
        elif _is_text(node):
            parts.append(str(node))
    return _SPACE.sub(" ", "".join(parts)).strip()


def _inline_text(tag: Tag) -> str:
    return _SPACE.sub(" ", tag.get_text()).strip()


def _previous_cell(tag: Tag) -> bool:
    return tag.find_previous_sibling(_CELL_TAGS) is not None


def _api_id(dl: Tag) -> str | None:
    """The anchor of a Sphinx object description (`dl.py`, `dt.sig-object`), if any."""
    dl_classes = _classes(dl)
    for dt_tag in dl.find_all("dt", recursive=False):
        anchor = dt_tag.get("id")
        if not isinstance(anchor, str) or not anchor:
            continue
        if "py" in dl_classes or "sig-object" in _classes(dt_tag):
            return anchor
    return None


def _api_name(dt_tag: Tag) -> str:
    """Short signature for the heading path: `os.getcwd()`, not the full parameter list."""
    name = dt_tag.find(class_="sig-name")
    if isinstance(name, Tag):
        prename = dt_tag.find(class_="sig-prename")
        text = (_inline_text(prename) if isinstance(prename, Tag) else "") + _inline_text(name)
        if dt_tag.find(class_="sig-paren") is not None:
            text += "()"
        if text:
            return text[:_TITLE_MAX]
    return _inline_text(dt_tag)[:_TITLE_MAX]


def _heading_anchor(heading: Tag, root: Tag) -> str | None:
    """The fragment that lands on this heading.

    The heading's own id wins; then an id'd child (`<h2><a id=...>`); then the
    nearest wrapper (`<section id=...>`) whose first heading this is, which is
    how Sphinx marks sections.
    """
    own = heading.get("id")
    if isinstance(own, str) and own:
        return own
    child = heading.find(lambda t: bool(t.get("id") or (t.name == "a" and t.get("name"))))
    if isinstance(child, Tag):
        value = child.get("id") or child.get("name")
        if isinstance(value, str) and value:
            return value
    for parent in heading.parents:
        if parent is root:
            break
        anchor = parent.get("id")
        if parent.name not in _SECTION_WRAPPERS or not isinstance(anchor, str) or not anchor:
            continue
        return anchor if parent.find(_HEADINGS) is heading else None
    return None


def _decode_html(data: bytes) -> str:
    """UTF-8 first; a charset the page itself declares is honoured, nothing is guessed."""
    if b"\x00" in data[:_BINARY_SNIFF_BYTES]:
        raise ParseError("binary file")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        declared = _CHARSET.search(data[:4096])
        if declared:
            try:
                encoding = codecs.lookup(declared.group(1).decode("ascii")).name
            except (LookupError, UnicodeDecodeError):
                encoding = "utf-8"
            if encoding != "utf-8":
                try:
                    return data.decode(encoding)
                except UnicodeDecodeError:
                    pass
        raise ParseError(f"not valid UTF-8 text (bad byte at offset {exc.start})") from exc


def _is_boilerplate(tag: Tag) -> bool:
    """Page chrome (navigation, sidebars, footers, permalinks, "Contents" boxes).

    Decided per tag during the walk, by name and attributes only: a CSS selector
    pass over every tag costs more than parsing the page.
    """
    name = tag.name
    if name in _DROP_TAGS:
        return True
    if name == "header":
        # A page-level header is a banner; one inside an article holds its title.
        return tag.find_parent(["article", "main"]) is None
    classes = _classes(tag) if tag.attrs else []
    if tag.attrs and (
        tag.attrs.get("role") in _DROP_ROLES
        or tag.attrs.get("id") in _DROP_IDS
        or tag.attrs.get("aria-label") in _DROP_LABELS
        or "hidden" in tag.attrs
        or not _DROP_CLASSES.isdisjoint(classes)
        or (name == "div" and not _DROP_DIV_CLASSES.isdisjoint(classes))
    ):
        return True
    if name == "aside":
        # docutils renders abstracts, "see the tutorial" notes and footnotes as asides:
        # those are content; any other aside is page chrome.
        if _DOCUTILS_ASIDES.isdisjoint(classes) or "contents" in classes:
            return True
        return _is_contents_box(tag, classes)
    if name == "div" and ("topic" in classes or "contents" in classes):
        return _is_contents_box(tag, classes)
    return False


def _is_contents_box(tag: Tag, classes: list[str]) -> bool:
    """A docutils table of contents: `div.contents.topic`, or any box titled "Contents"."""
    title = tag.find("p", class_=["topic-title", "sidebar-title"], recursive=False)
    title_text = _inline_text(title).lower() if isinstance(title, Tag) else ""
    if title_text in _CONTENTS_TITLES:
        return True
    # A bare div.contents is not a box: Doxygen wraps the whole page in one.
    boxed = bool(title_text) or "topic" in classes or "local" in classes
    return "contents" in classes and boxed


def _html_title(soup: BeautifulSoup, root: Tag, path: Path) -> str:
    if soup.title is not None:
        title = _TITLE_SUFFIX.sub("", _inline_text(soup.title)).strip()
        if title:
            return title
    heading = root.find("h1")
    if isinstance(heading, Tag):
        text = _visible_text(heading)
        if text:
            return text
    return path.stem


def _html_date(soup: BeautifulSoup) -> str | None:
    for meta in soup.find_all("meta"):
        key = meta.get("name") or meta.get("property") or meta.get("itemprop")
        if isinstance(key, str) and key.lower() in _META_DATES:
            date = _iso_date(meta.get("content"))
            if date is not None:
                return date
    return None


def _content_root(soup: BeautifulSoup) -> Tag:
    """The page's main content, so navigation around it never gets walked."""
    for found in (
        soup.find(role="main"),
        soup.find("main"),
        soup.find("div", class_="body"),
        soup.find("article"),
    ):
        if isinstance(found, Tag):
            return found
    return soup.body or soup


def _parse_html(data: bytes, path: Path, source: str) -> ParsedDocument:
    soup = BeautifulSoup(_decode_html(data), "lxml")
    date = _html_date(soup)
    root = _content_root(soup)
    title = _html_title(soup, root, path)
    sections: list[Section] = []
    for built in _HtmlWalker(root).walk():
        text = built.text()
        if not text.strip():
            continue
        url = f"{source}#{built.anchor}" if built.anchor else source
        sections.append(Section(text=text, headings=built.headings, anchor=built.anchor, url=url))
    return ParsedDocument(source=source, title=title, sections=sections, date=date)


# --- PDF -----------------------------------------------------------------------------


def _parse_pdf(data: bytes, path: Path, source: str) -> ParsedDocument:
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
        title=_pdf_title(reader) or _short_title(sections[0].text) or path.stem,
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
    return _scalar_text(title)


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
            title = _scalar_text(getattr(item, "title", None))
            page = reader.get_destination_page_number(item)
            if title is None or page is None or page < 0:
                continue
            last = [*parents, title]
            yield page + 1, last

    yield from walk(reader.outline, [])
