"""EPUB (2 and 3): the chapters in reading order, each cited by its place and title.

The container names the package document (OPF); its spine gives the chapters in order and
the table of contents (EPUB 3 `nav`, else EPUB 2 NCX) their titles. Each chapter's XHTML
goes through the HTML parser, so headings inside it keep their anchors:
`book.epub#chapter-3`, `book.epub#chapter-3-the-rules`, under `Chapter title > heading`.
The archive is opened with the zip-bomb and XML-bomb guards of `archive`.
"""

from __future__ import annotations

import posixpath
import re
import zipfile
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from footnote.ingest.documents import ParsedDocument, ParseError, Section
from footnote.ingest.parsers import html
from footnote.ingest.parsers.archive import open_zip, parse_xml, read_member, refuse_declarations
from footnote.ingest.parsers.common import TextBudget, iso_date

SUFFIXES = frozenset({".epub"})
_KIND = ".epub"
_CONTAINER = "META-INF/container.xml"
_XML_DECLARATION = re.compile(rb"^(?:\xef\xbb\xbf)?\s*<\?xml[^>]*\?>")
_XHTML_TYPES = frozenset({"application/xhtml+xml", "text/html"})


def parse(data: bytes, path: Path, source: str) -> ParsedDocument:
    archive = open_zip(data, _KIND)
    container = parse_xml(read_member(archive, _CONTAINER, _KIND), _CONTAINER)
    rootfile = next(
        (el.get("full-path") for el in container.iter() if _local(el) == "rootfile"), None
    )
    if not rootfile:
        raise ParseError(f"{_KIND}: {_CONTAINER} names no package document")
    opf_path = _clean(rootfile)
    opf = parse_xml(read_member(archive, opf_path, _KIND), opf_path)
    base = posixpath.dirname(opf_path)
    manifest = {el.get("id"): el for el in opf.iter() if _local(el) == "item" and el.get("id")}
    titles = _toc_titles(archive, opf, manifest, base)
    sections: list[Section] = []
    budget = TextBudget(len(data), _KIND)
    number = 0
    read: set[str] = set()
    for ref in (el for el in opf.iter() if _local(el) == "itemref"):
        item = manifest.get(ref.get("idref"))
        if item is None or item.get("media-type") not in _XHTML_TYPES or not item.get("href"):
            continue
        href = _resolve(base, item.get("href") or "")
        if href in read:  # a spine naming one chapter a thousand times reads it once
            continue
        read.add(href)
        markup = read_member(archive, href, _KIND)
        refuse_declarations(markup, href)
        # Without its XML declaration, XHTML reads as the HTML it is (no parser warning).
        chapter = html.parse(_XML_DECLARATION.sub(b"", markup, count=1), Path(href), href)
        if not chapter.sections:
            continue
        number += 1
        title = titles.get(href) or _first_heading(chapter, href) or f"Chapter {number}"
        anchor = f"chapter-{number}"
        for position, section in enumerate(chapter.sections):
            inner = section.headings
            if inner and inner[0] == title:
                inner = inner[1:]
            own = anchor if position == 0 or not section.anchor else f"{anchor}-{section.anchor}"
            sections.append(
                Section(
                    text=budget.spend(section.text),
                    headings=[title, *inner],
                    anchor=own,
                    url=f"{source}#{own}",
                    is_code=section.is_code,
                )
            )
    return ParsedDocument(
        source=source,
        title=_metadata(opf, "title") or path.stem,
        sections=sections,
        date=iso_date(_metadata(opf, "date")),
        metadata={k: v for k in ("creator", "language") if (v := _metadata(opf, k))},
    )


def _local(element: Any) -> str:
    tag = element.tag
    return tag.rpartition("}")[2] if isinstance(tag, str) else ""


def _clean(name: str) -> str:
    """An archive member name from a path inside the book; a path climbing out of the
    archive (`../`) names no member."""
    name = posixpath.normpath(unquote(name).lstrip("/"))
    if name.startswith(".."):
        raise ParseError(f"{_KIND}: a path outside the book ({name})")
    return name


def _resolve(base: str, href: str) -> str:
    return _clean(posixpath.join(base, href.split("#", 1)[0]))


def _metadata(opf: Any, name: str) -> str | None:
    for element in opf.iter():
        if _local(element) == name and element.text and element.text.strip():
            return " ".join(element.text.split())[:200]
    return None


def _toc_titles(
    archive: zipfile.ZipFile, opf: Any, manifest: dict[str, Any], base: str
) -> dict[str, str]:
    """Chapter file to its first title in the table of contents; an unreadable TOC only
    costs the titles (chapters then use their first heading)."""
    nav = next(
        (item for item in manifest.values() if "nav" in (item.get("properties") or "").split()),
        None,
    )
    spine = next((el for el in opf.iter() if _local(el) == "spine"), None)
    ncx = manifest.get(spine.get("toc")) if spine is not None else None
    titles: dict[str, str] = {}
    for item, entry, label in ((nav, "a", None), (ncx, "navPoint", "text")):
        if item is None or not item.get("href"):
            continue
        where = _resolve(base, item.get("href"))
        try:
            root = parse_xml(read_member(archive, where, _KIND), where)
        except ParseError:
            continue
        folder = posixpath.dirname(where)
        for element in root.iter():
            if _local(element) != entry:
                continue
            if entry == "a":
                target, text = element.get("href"), "".join(element.itertext())
            else:
                content = next((el for el in element if _local(el) == "content"), None)
                name = next((el for el in element.iter() if _local(el) == label), None)
                target = content.get("src") if content is not None else None
                text = "".join(name.itertext()) if name is not None else ""
            text = " ".join(text.split())
            if target and text:
                try:
                    titles.setdefault(_resolve(folder, target), text[:200])
                except ParseError:
                    continue
        if titles:
            break
    return titles


def _first_heading(chapter: ParsedDocument, href: str) -> str | None:
    """The chapter's first heading, else its `<title>` (the HTML parser falls back to the
    file's name, which is no title)."""
    for section in chapter.sections:
        if section.headings:
            return section.headings[0]
    return chapter.title if chapter.title != Path(href).stem else None
