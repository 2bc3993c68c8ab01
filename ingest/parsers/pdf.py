"""PDF: one section per page with its number, headings from the outline when there is one.

A page with no text layer (a scan) is read by OCR when Tesseract and Pillow are installed
(see `ocr`): the images drawn on it, each checked for size before it is decoded.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from footnote.ingest.documents import ParsedDocument, ParseError, Section
from footnote.ingest.parsers import ocr
from footnote.ingest.parsers.common import scalar_text, short_title

SUFFIXES = frozenset({".pdf"})
MAX_PAGE_CONTENT = 4_000_000
"""Bytes of decompressed content stream one page may hold."""
MAX_PAGE_IMAGES = 20
"""Images OCR reads on one scanned page; a page of hundreds of tiles is no scan."""


def _reader(data: bytes) -> Any:
    """A `PdfReader` over `data`, with pypdf's legacy module-level settings ignored.

    pypdf compares its deprecated module constants with its configuration on every reader
    and raises when they differ; `JBIG2DEC_BINARY` is `shutil.which("jbig2dec")` taken when
    `pypdf.filters` is first imported, so a process whose PATH changed since (a host, or a
    test hiding a program) could read no PDF at all. Footnote sets none of those constants.
    """
    import pypdf  # imported here: only PDF ingest pays for it

    apply = getattr(pypdf, "apply_configuration", None)  # releases before it had no check
    settings = apply(disable_legacy_handling=True) if apply else contextlib.nullcontext()
    with settings:
        return pypdf.PdfReader(io.BytesIO(data))


def parse(data: bytes, path: Path, source: str) -> ParsedDocument:
    try:
        reader = _reader(data)
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
    scanned: list[int] = []
    cannot_ocr = ocr.missing()
    for number, page in enumerate(pages, start=1):
        try:
            _check_content_size(page, number)
            text = page.extract_text() or ""
        except ParseError:
            raise
        except Exception as exc:
            raise ParseError(f"corrupt PDF: page {number}: {_reason(exc)}") from exc
        text = "\n".join(line.rstrip() for line in text.replace("\x00", "").split("\n")).strip()
        if not text and not cannot_ocr:
            text = _ocr_page(page, number)
            if text:
                scanned.append(number)
        if text:
            sections.append(Section(text=text, headings=outline.get(number, []), page=number))
    if not sections:
        hint = f"; to read it by OCR, {cannot_ocr}" if cannot_ocr else ""
        raise ParseError(f"no text found (a scanned PDF without a text layer?{hint})")
    return ParsedDocument(
        source=source,
        title=_pdf_title(reader) or short_title(sections[0].text) or path.stem,
        sections=sections,
        metadata={"ocr_pages": ", ".join(map(str, scanned))} if scanned else {},
    )


def _ocr_page(page: Any, number: int) -> str:
    """The text OCR reads in the images of a page that has no text layer.

    Only image XObjects named in the page's resources are read (a scanner puts the page
    there): finding inline images would walk the whole content stream, which a hostile
    page makes slow. Each image's declared size is checked before it is decoded.
    """
    try:
        resources = page.get("/Resources")
        xobjects = resources.get_object().get("/XObject") if resources is not None else None
        named = list(xobjects.get_object().values()) if xobjects is not None else []
        images = [obj for obj in (ref.get_object() for ref in named) if _is_image(obj)]
    except Exception as exc:
        raise ParseError(f"corrupt PDF: page {number}: {_reason(exc)}") from exc
    texts = []
    for image in images[:MAX_PAGE_IMAGES]:
        width, height = _declared_size(image)
        if width * height > ocr.MAX_PIXELS:
            raise ParseError(
                f"page {number}: an image of {width}×{height} pixels is over {ocr.MAX_PIXELS:,}"
            )
        try:
            decoded = image.decode_as_image()
        except Exception:  # an image pypdf cannot decode is skipped, not the page
            continue
        if decoded is not None:
            texts.append(ocr.recognize(decoded, f"page {number}"))
    return "\n\n".join(t for t in texts if t)


def _is_image(obj: Any) -> bool:
    return hasattr(obj, "get") and obj.get("/Subtype") == "/Image"


def _declared_size(image: Any) -> tuple[int, int]:
    try:
        return int(image.get("/Width", 0)), int(image.get("/Height", 0))
    except (TypeError, ValueError):
        return 0, 0


def _check_content_size(page: Any, number: int) -> None:
    """Refuse a page whose drawing instructions inflate past `MAX_PAGE_CONTENT`: a few KB
    of compressed stream can hold millions of operators that text extraction would walk
    one by one for minutes. Real pages are far below it."""
    contents = page.get_contents()
    size = len(contents.get_data()) if contents is not None else 0
    if size > MAX_PAGE_CONTENT:
        raise ParseError(
            f"page {number}: content stream of {size:,} bytes is over {MAX_PAGE_CONTENT:,}"
        )


def _reason(exc: Exception) -> str:
    return str(exc) or type(exc).__name__


def _pdf_title(reader: Any) -> str | None:
    try:
        info = reader.metadata
        title = info.title if info is not None else None
    except Exception:  # metadata is optional; a broken /Info must not lose the text
        return None
    return scalar_text(title)


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
            title = scalar_text(getattr(item, "title", None))
            page = reader.get_destination_page_number(item)
            if title is None or page is None or page < 0:
                continue
            last = [*parents, title]
            yield page + 1, last

    yield from walk(reader.outline, [])
