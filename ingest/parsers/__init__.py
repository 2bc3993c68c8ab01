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
from pathlib import Path

from footnote.ingest.documents import ParsedDocument, ParseError
from footnote.ingest.isolation import ISOLATED_SUFFIXES, WORKER_ENV
from footnote.ingest.parsers import html, markdown, office, pdf, text

__all__ = [
    "PARSERS",
    "SUPPORTED_SUFFIXES",
    "Parser",
    "is_supported",
    "parse_bytes",
    "parse_file",
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
}
"""The suffix registry: lower-case suffix to the parser for that format."""

SUPPORTED_SUFFIXES: frozenset[str] = frozenset(PARSERS)
"""Lower-case suffixes `parse_file` handles. Files without a suffix are read as text too."""

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
    _parser_for(path.suffix.lower())
    return parse_bytes(_read_bytes(path, max_bytes), path, source)


def parse_bytes(data: bytes, path: Path, source: str) -> ParsedDocument:
    """Parse a file's content already read (ingest reads once, to hash and parse the same
    bytes); `path` gives the format by its suffix. Raises only `ParseError`."""
    parser = _parser_for(path.suffix.lower())
    if not data:
        raise ParseError("empty file")
    if path.suffix.lower() in ISOLATED_SUFFIXES and not os.environ.get(WORKER_ENV):
        from footnote.ingest.isolation import parse_isolated

        return parse_isolated(data, path, source)  # time and memory capped in a worker
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
