"""Zip containers (DOCX, PPTX, XLSX, EPUB) and their XML, opened so hostile files stay small.

A zip bomb is refused from its central directory before anything is inflated: too many
members, too many bytes unpacked in all, or a member that would inflate far past its
compressed size. The declared sizes are enough: Python's zipfile never yields more than a
member declares (a lying header ends in a CRC error). XML is parsed with entities left
unexpanded, no DTD loaded, nothing fetched from the network and libxml2's default size
limits (no `huge_tree`); a document declaring entities (or any internal DTD subset) is
refused outright, since none of these formats needs one and an entity bomb is what such a
declaration is for. A bare `<!DOCTYPE html>` or a public DTD's name (EPUB chapters and NCX
files carry them) is harmless with no DTD loaded, and allowed.
"""

from __future__ import annotations

import io
import re
import zipfile
from typing import Any

from lxml import etree

from footnote.ingest.documents import ParseError

MAX_MEMBERS = 10_000
MAX_UNPACKED = 300_000_000
"""Bytes all members may inflate to together."""
MAX_RATIO = 200
"""How many times its compressed size one member may inflate to (text compresses ~10×)."""
RATIO_FLOOR = 1_000_000
"""Members smaller than this unpacked are not held to the ratio: tiny files compress oddly."""
_DECLARATION = re.compile(rb"<!\s*ENTITY|<!\s*DOCTYPE[^>\[]*\[", re.IGNORECASE)
PROLOG_SCAN = 65_536
"""Bytes read from each XML member to find a DOCTYPE before its root element."""


def open_zip(data: bytes, kind: str) -> zipfile.ZipFile:
    """The archive, once its central directory shows no bomb; `kind` names the format in
    the reasons ("not a readable .xlsx file")."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        members = archive.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, OSError) as exc:
        raise ParseError(f"not a readable {kind} file ({type(exc).__name__})") from exc
    if len(members) > MAX_MEMBERS:
        raise ParseError(f"{kind}: {len(members):,} archive members, over {MAX_MEMBERS:,}")
    total = 0
    for member in members:
        total += member.file_size
        if total > MAX_UNPACKED:
            raise ParseError(f"{kind}: unpacks to more than {MAX_UNPACKED:,} bytes (a zip bomb?)")
        ratio = member.file_size // max(member.compress_size, 1)
        if member.file_size > RATIO_FLOOR and ratio > MAX_RATIO:
            raise ParseError(
                f"{kind}: {member.filename} inflates {ratio:,} times its size (a zip bomb?)"
            )
    return archive


def read_member(archive: zipfile.ZipFile, name: str, kind: str) -> bytes:
    try:
        return archive.read(name)
    except KeyError:
        raise ParseError(f"{kind}: {name} is missing") from None
    except (zipfile.BadZipFile, NotImplementedError, RuntimeError, OSError) as exc:
        raise ParseError(f"{kind}: cannot unpack {name} ({exc})") from exc


def refuse_xml_declarations(archive: zipfile.ZipFile, kind: str) -> None:
    """Refuse any XML member whose prolog declares entities or a DTD subset, before a
    library (python-docx, openpyxl) parses it with settings not ours."""
    for member in archive.infolist():
        if not member.filename.lower().endswith((".xml", ".rels", ".opf", ".ncx", ".xhtml")):
            continue
        try:
            with archive.open(member) as handle:
                head = handle.read(PROLOG_SCAN)
        except (zipfile.BadZipFile, NotImplementedError, RuntimeError, OSError) as exc:
            raise ParseError(f"{kind}: cannot unpack {member.filename} ({exc})") from exc
        if _DECLARATION.search(_prolog(head)):
            raise ParseError(f"{kind}: {member.filename} declares entities (refused)")


def _prolog(head: bytes) -> bytes:
    """The bytes before the root element: declarations, comments and processing
    instructions, with the comments' text blanked so a tag inside one ends nothing."""
    head = re.sub(rb"<!--.*?-->", b"", head, flags=re.DOTALL)
    root = re.search(rb"<[A-Za-z_]", head)
    return head[: root.start()] if root else head


_PARSER_OPTIONS: dict[str, Any] = {
    "resolve_entities": False,
    "no_network": True,
    "load_dtd": False,
    "dtd_validation": False,
    "huge_tree": False,
    "remove_comments": True,
    "remove_pis": True,
}


def refuse_declarations(data: bytes, what: str) -> None:
    """Refuse one XML or XHTML document that declares entities or a DTD subset."""
    if _DECLARATION.search(_prolog(data[:PROLOG_SCAN])):
        raise ParseError(f"{what} declares entities (refused)")


def parse_xml(data: bytes, what: str) -> Any:
    """The root element of one XML document, parsed safely (see the module docstring)."""
    refuse_declarations(data, what)
    try:
        root = etree.fromstring(data, parser=etree.XMLParser(**_PARSER_OPTIONS))
    except etree.XMLSyntaxError as exc:
        raise ParseError(f"{what} is not well-formed XML ({exc})") from exc
    if root is None:
        raise ParseError(f"{what} is empty")
    return root
