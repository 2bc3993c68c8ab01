"""Turn files into `ParsedDocument`s, keeping the structure citations need.

One module per format, each with its `SUFFIXES` and a `parse(data, path, source)`
function; `PARSERS` maps a lower-case suffix to the parser that reads it. Each
format keeps what a reader would use to find the passage again: heading paths
and line ranges for Markdown, anchors for HTML (including Sphinx API entries
such as `library/os.html#os.getcwd`), page numbers for PDF. Every failure is a
`ParseError` whose message is a short, human reason, so the pipeline can report
a bad file and carry on.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Callable
from functools import partial
from pathlib import Path

from footnote.ingest.documents import ParsedDocument, ParseError
from footnote.ingest.isolation import WORKER_ENV, parse_isolated
from footnote.ingest.parsers import (
    epub,
    html,
    mail,
    markdown,
    ocr,
    office,
    pdf,
    sheets,
    structured,
    text,
)

__all__ = [
    "PARSERS",
    "SUPPORTED_SUFFIXES",
    "Parser",
    "is_supported",
    "unsupported_reason",
    "parse_bytes",
    "parse_file",
    "parse_here",
]

Parser = Callable[[bytes, Path, str], ParsedDocument]
"""parse(data, path, source): the file's bytes, its path (for names), its index source."""

PARSERS: dict[str, Parser] = {
    **dict.fromkeys(markdown.SUFFIXES, markdown.parse),
    **dict.fromkeys(html.SUFFIXES, html.parse),
    **dict.fromkeys(pdf.SUFFIXES, pdf.parse),
    **dict.fromkeys(text.CODE_SUFFIXES, text.parse_code),
    **dict.fromkeys(text.TEXT_SUFFIXES, text.parse_text),
    **dict.fromkeys(office.DOCX_SUFFIXES, office.parse_docx),
    **dict.fromkeys(office.PPTX_SUFFIXES, office.parse_pptx),
    **dict.fromkeys(sheets.CSV_SUFFIXES, sheets.parse_csv),
    **dict.fromkeys(sheets.XLSX_SUFFIXES, sheets.parse_xlsx),
    **dict.fromkeys(structured.JSON_SUFFIXES, structured.parse_json),
    **dict.fromkeys(structured.JSONL_SUFFIXES, structured.parse_jsonl),
    **dict.fromkeys(epub.SUFFIXES, epub.parse),
    **dict.fromkeys(ocr.IMAGE_SUFFIXES, ocr.parse_image),
}
"""The suffix registry: lower-case suffix to the parser for that format."""
PARSERS.update(
    {  # e-mail reads its attachments with the registry itself
        **dict.fromkeys(mail.EML_SUFFIXES, partial(mail.parse_eml, parsers=PARSERS)),
        **dict.fromkeys(mail.MBOX_SUFFIXES, partial(mail.parse_mbox, parsers=PARSERS)),
    }
)

SUPPORTED_SUFFIXES: frozenset[str] = frozenset(PARSERS)
"""Lower-case suffixes `parse_file` handles. Files without a suffix are read as text too."""

log = logging.getLogger(__name__)


def is_supported(path: Path) -> bool:
    """Whether ingest would parse this file; a cheap name check, nothing is read."""
    return unsupported_reason(path) is None


def unsupported_reason(path: Path) -> str | None:
    """Why ingest skips this file by its name alone, or None when it parses it.

    Suffix-less files (README, LICENSE) count as text; dotfiles do not, since they are
    configuration rather than documents. Images count only where OCR is installed: without
    it a folder's pictures (screenshots beside the docs) are skipped with the hint, not
    failures of the run.
    """
    suffix = path.suffix.lower()
    if not suffix:
        return "unsupported file type (none)" if path.name.startswith(".") else None
    if suffix not in SUPPORTED_SUFFIXES:
        return f"unsupported file type {suffix}"
    if suffix in ocr.IMAGE_SUFFIXES and ocr.tesseract() is None:
        return f"unsupported file type {suffix} without OCR: {ocr.INSTALL_HINT}"
    return None


def parse_file(path: Path, source: str, *, max_bytes: int = 20_000_000) -> ParsedDocument:
    """Parse one file into sections.

    `source` is the path relative to the ingest root (with `/`); it becomes the
    document's `source` and the base of HTML section URLs. Raises `ParseError`
    for anything that cannot be read or yields no text, and never any other
    exception, so one bad file cannot stop an ingest run. It parses in this process, with
    no memory cap, for tools and tests that read files they trust; ingest reads what it is
    given with `parse_bytes`, in the capped worker.
    """
    _parser_for(path.suffix.lower())
    return parse_here(_read_bytes(path, max_bytes), path, source)


def parse_bytes(data: bytes, path: Path, source: str) -> ParsedDocument:
    """Parse a file's content already read (ingest reads once, to hash and parse the same
    bytes); `path` gives the format by its suffix. The parse runs in a worker process under
    the memory cap and the file's time budget (`isolation`), whatever the format: any parser
    can meet a file that makes it build far more than its size. Raises only `ParseError`."""
    _parser_for(path.suffix.lower())
    if not data:
        raise ParseError("empty file")
    if os.environ.get(WORKER_ENV):  # already in the worker: never a worker of its own
        return parse_here(data, path, source)
    return parse_isolated(data, path, source)


def parse_here(data: bytes, path: Path, source: str) -> ParsedDocument:
    """`parse_bytes` in this process, with no memory cap: the parse worker's own call."""
    parser = _parser_for(path.suffix.lower())
    if not data:
        raise ParseError("empty file")
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


def _parser_for(suffix: str) -> Parser:
    if not suffix:
        return text.parse_text
    try:
        return PARSERS[suffix]
    except KeyError:
        raise ParseError(f"unsupported file type {suffix}") from None


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
