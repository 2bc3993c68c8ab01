"""JSON and JSON Lines: records cited by where they sit.

A record is an object in an array (`$.items[3]`), one line of a JSONL file (`line 12`), or
the scalar fields of an object at the top. Its text is `key: value` lines, nested objects
flattened into dotted keys (`address.city: Lyon`); an array of objects inside a record
makes records of its own, so a citation names the innermost record that holds the passage.
Nesting deeper than `MAX_DEPTH` is refused: real data is far shallower, and a deep file is
built to exhaust the stack.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from footnote.ingest.documents import ParsedDocument, ParseError, Section
from footnote.ingest.parsers.common import decode_text, split_lines

JSON_SUFFIXES = frozenset({".json"})
JSONL_SUFFIXES = frozenset({".jsonl", ".ndjson"})
MAX_DEPTH = 64
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def parse_json(data: bytes, path: Path, source: str) -> ParsedDocument:
    value = _load(decode_text(data), "JSON")
    sections: list[Section] = []
    _records(value, "$", source, sections, depth=0)
    return ParsedDocument(source=source, title=_title(value) or path.stem, sections=sections)


def parse_jsonl(data: bytes, path: Path, source: str) -> ParsedDocument:
    sections: list[Section] = []
    for number, line in enumerate(split_lines(decode_text(data)), 1):
        if not line.strip():
            continue
        value = _load(line, f"JSON on line {number}")
        found: list[Section] = []
        _records(value, f"line {number}", source, found, depth=0)
        for section in found:
            section.line_start = section.line_end = number
        sections.extend(found)
    return ParsedDocument(source=source, title=path.stem, sections=sections)


def _load(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except RecursionError:
        raise ParseError(f"{what} nests too deep") from None
    except json.JSONDecodeError as exc:
        raise ParseError(f"not valid {what}: {exc.msg} at line {exc.lineno}") from exc


def _records(value: Any, where: str, source: str, out: list[Section], *, depth: int) -> None:
    """Append the records found in `value` (at path `where`), outermost first."""
    if depth > MAX_DEPTH:
        raise ParseError(f"nested deeper than {MAX_DEPTH} levels at {where}")
    if isinstance(value, list) and not _is_record_list(value):
        lines = _flatten(value, "", depth=depth)
        if lines:
            out.append(_section(where, lines, source))
        return
    if isinstance(value, list):
        for i, item in enumerate(value):
            _records(item, f"{where}[{i}]", source, out, depth=depth + 1)
        return
    if not isinstance(value, dict):
        text = _scalar(value)
        if text:
            out.append(_section(where, [text], source))
        return
    fields: list[str] = []
    nested: list[tuple[str, Any]] = []
    for key, item in value.items():
        if isinstance(item, list) and _is_record_list(item):
            nested.append((_child(where, key), item))
        else:
            fields.extend(_flatten(item, str(key), depth=depth + 1))
    if fields:
        out.append(_section(where, fields, source))
    for child, item in nested:
        _records(item, child, source, out, depth=depth + 1)


def _is_record_list(value: list[Any]) -> bool:
    return any(isinstance(item, dict | list) for item in value)


def _flatten(value: Any, key: str, *, depth: int) -> list[str]:
    if depth > MAX_DEPTH:
        raise ParseError(f"nested deeper than {MAX_DEPTH} levels at {key}")
    if isinstance(value, dict):
        lines: list[str] = []
        for name, item in value.items():
            lines.extend(_flatten(item, f"{key}.{name}" if key else str(name), depth=depth + 1))
        return lines
    if isinstance(value, list):
        if not _is_record_list(value):
            texts = [t for t in (_scalar(item) for item in value) if t]
            joined = ", ".join(texts)
            return [f"{key}: {joined}" if key else joined] if texts else []
        lines = []
        for i, item in enumerate(value):
            lines.extend(_flatten(item, f"{key}[{i}]", depth=depth + 1))
        return lines
    text = _scalar(value)
    if not text:
        return []
    return [f"{key}: {text}" if key else text]


def _scalar(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return " ".join(str(value).replace("\x00", "").split())


def _child(where: str, key: Any) -> str:
    key = str(key)
    return f"{where}.{key}" if _IDENTIFIER.match(key) else f"{where}[{json.dumps(key)}]"


def _section(where: str, lines: list[str], source: str) -> Section:
    anchor = _anchor(where)
    return Section(text="\n".join(lines), headings=[where], anchor=anchor, url=f"{source}#{anchor}")


def _anchor(where: str) -> str:
    """A fragment for the path: `$.items[3]` stays readable; `line 12` becomes `line-12`;
    characters a URL fragment cannot hold (quotes, spaces in keys) become `-`."""
    return re.sub(r"[^A-Za-z0-9$._\[\]-]+", "-", where).strip("-") or "$"


def _title(value: Any) -> str | None:
    """A top-level `title` or `name` string, as the document's title."""
    if isinstance(value, dict):
        for key in ("title", "name"):
            if isinstance(value.get(key), str) and (text := _scalar(value[key])):
                return text[:100]
    return None
