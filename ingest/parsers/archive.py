"""Zip containers (DOCX, PPTX, XLSX, EPUB) and their XML, opened so hostile files stay small.

A zip bomb is refused from its central directory before anything is inflated: too many
members, too many bytes unpacked in all, or a member that would inflate far past its
compressed size. The declared sizes are enough: Python's zipfile never yields more than a
member declares (a lying header ends in a CRC error). XML is parsed with entities left
unexpanded, no DTD loaded, nothing fetched from the network and libxml2's default size
limits (no `huge_tree`); a document declaring entities (or any internal DTD subset) is
refused outright, since none of these formats needs one and an entity bomb is what such a
declaration is for. A bare `<!DOCTYPE html>` or a public DTD's name (EPUB chapters and NCX
files carry them) is harmless with no DTD loaded, and allowed. The prolog is read token by
token (processing instructions, comments and quoted DTD names skipped as XML defines them),
and one that does not reach its root element within PROLOG_SCAN bytes is refused too: no real
document pads its prolog, and one padded past the scan could hide a declaration behind it.
"""

from __future__ import annotations

import io
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
UNPACKED_FLOOR = 20_000_000
UNPACKED_RATIO = 100
"""All members together may inflate to `UNPACKED_FLOOR` plus this many times the archive's
size (and never past `MAX_UNPACKED`): members under `RATIO_FLOOR` escape the per-member
ratio, and thousands of them would otherwise unpack a 1 MB book to 300 MB of chapters."""
MAX_MEMBER = 20_000_000
"""Bytes one member read with `read_member` (an EPUB chapter) may inflate to: what a file
of its own could hold (`--max-bytes`'s default)."""
"""Members smaller than this unpacked are not held to the ratio: tiny files compress oddly."""
PROLOG_SCAN = 65_536
"""Bytes of each XML document its root element must start within: everything before it
(declarations, comments, processing instructions) is checked."""
_DECLARES = "declares entities"


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
    unpacked = min(MAX_UNPACKED, UNPACKED_FLOOR + UNPACKED_RATIO * len(data))
    for member in members:
        total += member.file_size
        if total > unpacked:
            raise ParseError(f"{kind}: unpacks to more than {unpacked:,} bytes (a zip bomb?)")
        ratio = member.file_size // max(member.compress_size, 1)
        if member.file_size > RATIO_FLOOR and ratio > MAX_RATIO:
            raise ParseError(
                f"{kind}: {member.filename} inflates {ratio:,} times its size (a zip bomb?)"
            )
    return archive


def read_member(archive: zipfile.ZipFile, name: str, kind: str) -> bytes:
    """One member's bytes, refused from its declared size when over `MAX_MEMBER` (zipfile
    never yields more than a member declares)."""
    try:
        size = archive.getinfo(name).file_size
        if size > MAX_MEMBER:
            raise ParseError(f"{kind}: {name} unpacks to {size:,} bytes, over {MAX_MEMBER:,}")
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
                head = handle.read(PROLOG_SCAN + 1)
        except (zipfile.BadZipFile, NotImplementedError, RuntimeError, OSError) as exc:
            raise ParseError(f"{kind}: cannot unpack {member.filename} ({exc})") from exc
        if reason := prolog_refusal(head):
            raise ParseError(f"{kind}: {member.filename} {reason} (refused)")


def _prolog_text(head: bytes) -> str:
    """The head as text: UTF-16 decoded (by its byte order mark, or `<` beside a NUL byte);
    anything else byte for byte, since the markup that matters here is ASCII in UTF-8 and
    every other encoding an XML parser guesses from the first bytes."""
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return head.decode("utf-16", "replace")
    if head.startswith(b"<\x00"):
        return head.decode("utf-16-le", "replace")
    if head.startswith(b"\x00<"):
        return head.decode("utf-16-be", "replace")
    return head.removeprefix(b"\xef\xbb\xbf").decode("latin-1")


def _doctype_end(text: str, start: int) -> int | None:
    """Where the DOCTYPE at `start` ends (its `>`), skipping quoted names; -1 when it opens
    an internal subset (`[`); None when it does not end in the text."""
    at = start + len("<!DOCTYPE")
    while at < len(text):
        char = text[at]
        if char in "\"'":
            close = text.find(char, at + 1)
            if close < 0:
                return None
            at = close + 1
        elif char == "[":
            return -1
        elif char == ">":
            return at
        else:
            at += 1
    return None


def prolog_refusal(head: bytes) -> str | None:
    """Why the document starting with `head` (up to PROLOG_SCAN + 1 bytes) is refused, or
    None: its prolog declares entities or a DTD subset, holds anything XML does not allow
    there, or does not reach the root element within PROLOG_SCAN bytes."""
    whole = len(head) <= PROLOG_SCAN
    text = _prolog_text(head[:PROLOG_SCAN])
    at = 0
    while True:
        while at < len(text) and text[at] in " \t\r\n":
            at += 1
        if at >= len(text):
            return None if whole else f"has a prolog over {PROLOG_SCAN:,} bytes"
        if text.startswith("<?", at):
            end, after = text.find("?>", at + 2), 2
        elif text.startswith("<!--", at):
            end, after = text.find("-->", at + 4), 3
        elif text[at : at + 9].upper() == "<!DOCTYPE":
            found, after = _doctype_end(text, at), 1
            if found == -1:
                return _DECLARES
            end = -1 if found is None else found
        elif text.startswith("<!", at):
            return _DECLARES
        elif text.startswith("<", at) and _starts_name(text[at + 1 : at + 2]):
            return None  # the root element
        else:
            return "has text before its root element"
        if end < 0:
            return f"has a prolog not closed within {PROLOG_SCAN:,} bytes"
        at = end + after


def _starts_name(char: str) -> bool:
    return bool(char) and (char.isalpha() or char in "_:" or ord(char) > 127)


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
    if reason := prolog_refusal(data[: PROLOG_SCAN + 1]):
        raise ParseError(f"{what} {reason} (refused)")


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
