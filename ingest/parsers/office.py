"""Word (.docx) and PowerPoint (.pptx) through python-docx and python-pptx (the `office`
extra): Word sections at heading paragraphs, slides one section each, cited by slide number
(`deck.pptx#slide-3`). Both are zip containers, opened first with the zip and XML bomb
guards of `archive`."""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

from footnote.ingest.documents import ParsedDocument, ParseError, Section
from footnote.ingest.parsers.archive import open_zip, refuse_xml_declarations
from footnote.models.providers import install_hint

DOCX_SUFFIXES = frozenset({".docx"})
PPTX_SUFFIXES = frozenset({".pptx"})
_HEADING_STYLE = re.compile(r"^(?:Heading|Überschrift|Titre)\s*(\d)$", re.IGNORECASE)


def _require(module: str) -> Any:
    try:
        return __import__(module)
    except ImportError as exc:
        raise ParseError(f"reading this format needs {module}: {install_hint('office')}") from exc


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "section"


def _guard(data: bytes, kind: str) -> None:
    refuse_xml_declarations(open_zip(data, kind), kind)


_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_BREAKS = {f"{_W}br", f"{_W}cr"}


def _paragraph_text(element: Any) -> str:
    """A `w:p`'s text (runs' text, tabs and breaks, runs inside links and insertions
    included), read in one pass: python-docx's `paragraph.text` runs XPath per paragraph
    and per run, whose cost is most of a file of many small paragraphs."""
    parts: list[str] = []
    for run in element.iter(f"{_W}r"):
        for node in run:
            if node.tag == f"{_W}t":
                parts.append(node.text or "")
            elif node.tag == f"{_W}tab":
                parts.append("\t")
            elif node.tag in _BREAKS:
                parts.append("\n")
    return "".join(parts)


def parse_docx(data: bytes, path: Path, source: str) -> ParsedDocument:
    docx = _require("docx")
    _guard(data, ".docx")
    try:
        document = docx.Document(io.BytesIO(data))
    except Exception as exc:  # python-docx raises zipfile, KeyError, lxml errors
        raise ParseError(f"not a readable .docx file ({type(exc).__name__})") from exc
    title = (document.core_properties.title or "").strip()
    # Style names by id, read once: python-docx's `paragraph.style` scans every style of the
    # document for each paragraph (milliseconds each: minutes for a small file of many).
    style_names = {style.style_id: style.name or "" for style in document.styles}
    from docx.enum.style import WD_STYLE_TYPE

    default = document.styles.default(WD_STYLE_TYPE.PARAGRAPH)
    default_style = (default.name or "") if default is not None else ""
    stack: list[tuple[int, str]] = []
    sections: list[Section] = []
    lines: list[str] = []
    slugs: dict[str, int] = {}
    """Each slug given, with the last number tried after it: repeated headings cost one step."""
    anchor: str | None = None

    def close() -> None:
        text = "\n\n".join(lines).strip()
        if text:
            sections.append(
                Section(
                    text=text,
                    headings=[h for _, h in stack],
                    anchor=anchor,
                    url=f"{source}#{anchor}" if anchor else source,
                )
            )
        lines.clear()

    for paragraph in document.paragraphs:
        text = _paragraph_text(paragraph._p).strip()
        style_id = paragraph._p.style
        style = style_names.get(style_id, "") if style_id is not None else default_style
        level = 1 if style == "Title" else None
        match = _HEADING_STYLE.match(style)
        if match:
            level = int(match.group(1))
        if level is not None and text:
            close()
            title = title or text
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, text))
            slug = base = _slug(text)
            n = slugs.get(base, 0) if base in slugs else 0
            while slug in slugs:
                n += 1
                slug = f"{base}-{n}"
            slugs[base] = n
            slugs.setdefault(slug, 0)
            anchor = slug
        elif text:
            lines.append(text)
    for table in document.tables:
        rows = [" | ".join(cell.text.strip() for cell in row.cells) for row in table.rows]
        lines.append("\n".join(rows))
    close()
    return ParsedDocument(source=source, title=title or path.stem, sections=sections)


def parse_pptx(data: bytes, path: Path, source: str) -> ParsedDocument:
    pptx = _require("pptx")
    _guard(data, ".pptx")
    try:
        deck = pptx.Presentation(io.BytesIO(data))
    except Exception as exc:
        raise ParseError(f"not a readable .pptx file ({type(exc).__name__})") from exc
    sections: list[Section] = []
    deck_title = (deck.core_properties.title or "").strip()
    for number, slide in enumerate(deck.slides, 1):
        heading = ""
        if slide.shapes.title is not None and slide.shapes.title.has_text_frame:
            heading = slide.shapes.title.text_frame.text.strip()
        texts = []
        for shape in slide.shapes:
            if shape == slide.shapes.title:
                continue
            if shape.has_text_frame:
                texts.append(shape.text_frame.text.strip())
            if getattr(shape, "has_table", False) and shape.has_table:
                texts.extend(
                    " | ".join(cell.text.strip() for cell in row.cells) for row in shape.table.rows
                )
        if slide.has_notes_slide:
            texts.append(slide.notes_slide.notes_text_frame.text.strip())
        body = "\n\n".join(t for t in texts if t)
        if not (body or heading):
            continue
        anchor = f"slide-{number}"
        sections.append(
            Section(
                text=body or heading,
                headings=[f"Slide {number}: {heading}" if heading else f"Slide {number}"],
                anchor=anchor,
                url=f"{source}#{anchor}",
                page=number,
            )
        )
        deck_title = deck_title or heading
    return ParsedDocument(source=source, title=deck_title or path.stem, sections=sections)
