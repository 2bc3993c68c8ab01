"""HTML: boilerplate removed, sections cut at headings and Sphinx API entries, anchors kept."""

from __future__ import annotations

import codecs
import re
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
from footnote.ingest.parsers.common import (
    BINARY_SNIFF_BYTES,
    HEADING_MAX,
    TITLE_MAX,
    bom_encoding,
    decode_text,
    iso_date,
    refuse_nul,
)

SUFFIXES = frozenset({".html", ".htm"})

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
_HIDDEN_STYLE = re.compile(
    r"(?:^|;)\s*(?:display\s*:\s*none|visibility\s*:\s*(?:hidden|collapse)"
    r"|opacity\s*:\s*(?:0+(?:\.0*)?|\.0+)|font-size\s*:\s*(?:0+(?:\.0*)?|\.0+)(?:px|em|rem|pt|%)?)"
    r"\s*(?:!\s*important\s*)?(?:;|$)",
    re.IGNORECASE,
)


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
        text = _visible_text(tag)[:HEADING_MAX]
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
            return text[:TITLE_MAX]
    return _inline_text(dt_tag)[:TITLE_MAX]


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
    """A byte-order mark's encoding, else UTF-8; a charset the page itself declares is
    honoured, nothing is guessed."""
    if bom_encoding(data) is not None:
        return decode_text(data)
    if b"\x00" in data[:BINARY_SNIFF_BYTES]:
        raise ParseError("binary file")
    try:
        return refuse_nul(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        declared = _CHARSET.search(data[:4096])
        if declared:
            try:
                encoding = codecs.lookup(declared.group(1).decode("ascii")).name
            except (LookupError, UnicodeDecodeError):
                encoding = "utf-8"
            if encoding != "utf-8":
                try:
                    return refuse_nul(data.decode(encoding))
                except (UnicodeDecodeError, LookupError):
                    pass
        raise ParseError(f"not valid UTF-8 text (bad byte at offset {exc.start})") from exc


def _is_boilerplate(tag: Tag) -> bool:
    """Page chrome (navigation, sidebars, footers, permalinks, "Contents" boxes) and text
    a reader never sees.

    Decided per tag during the walk, by name and attributes only: a CSS selector
    pass over every tag costs more than parsing the page.
    """
    name = tag.name
    if name in _DROP_TAGS or (tag.attrs and _is_hidden(tag.attrs)):
        return True
    if name == "header":
        # A page-level header is a banner; one inside an article holds its title.
        return tag.find_parent(["article", "main"]) is None
    classes = _classes(tag) if tag.attrs else []
    if tag.attrs and (
        tag.attrs.get("role") in _DROP_ROLES
        or tag.attrs.get("id") in _DROP_IDS
        or tag.attrs.get("aria-label") in _DROP_LABELS
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


def _is_hidden(attrs: dict[str, Any]) -> bool:
    """Hidden from readers: the `hidden` attribute, `aria-hidden="true"`, or an inline style
    (`display: none`, `visibility: hidden`, zero opacity or font size). Such text must not
    be indexed or quoted: a page could otherwise plant words no reader of it ever saw.
    Rules in stylesheets are not evaluated."""
    if "hidden" in attrs:
        return True
    aria = attrs.get("aria-hidden")
    if isinstance(aria, str) and aria.strip().lower() == "true":
        return True
    style = attrs.get("style")
    return isinstance(style, str) and _HIDDEN_STYLE.search(style) is not None


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
            date = iso_date(meta.get("content"))
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


def parse(data: bytes, path: Path, source: str) -> ParsedDocument:
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
