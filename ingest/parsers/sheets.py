"""Spreadsheets: CSV/TSV through the standard library, XLSX through openpyxl (the `office`
extra). The first non-empty row is the header; every later row becomes one record, a
section of `Header: value` lines cited by its row as a spreadsheet shows it
(`prices.csv#row-7`, `budget.xlsx#travel-row-3` under the heading path `Travel > Row 3`)."""

from __future__ import annotations

import csv
import datetime as dt
import io
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from footnote.ingest.documents import ParsedDocument, ParseError, Section
from footnote.ingest.parsers.archive import open_zip, refuse_xml_declarations
from footnote.ingest.parsers.common import HEADING_MAX, TextBudget, decode_text
from footnote.models.providers import install_hint

CSV_SUFFIXES = frozenset({".csv", ".tsv"})
XLSX_SUFFIXES = frozenset({".xlsx", ".xlsm"})
MAX_CELLS = 2_000_000
"""Cells one workbook or CSV file may hold (blank padding included): past it the file is
refused rather than read for minutes."""
MAX_COLUMNS = 2_000
_DELIMITERS = ",;\t|"


def parse_csv(data: bytes, path: Path, source: str) -> ParsedDocument:
    text = decode_text(data)
    dialect: Any = csv.excel_tab if path.suffix.lower() == ".tsv" else _sniff(text)
    reader = csv.reader(io.StringIO(text, newline=""), dialect)
    sections: list[Section] = []
    header: list[str] | None = None
    budget = TextBudget(len(data), path.suffix.lower())
    cells = 0
    previous_line = 0
    try:
        for number, row in enumerate(reader, 1):
            first_line, previous_line = previous_line + 1, reader.line_num
            cells = _count(cells, len(row))
            if not any(value.strip() for value in row):
                continue
            if header is None:
                header = _header(row, lambda i: f"column {i + 1}")
                continue
            record = budget.spend(_record(header, row, lambda i: f"column {i + 1}"))
            if record:
                anchor = f"row-{number}"
                sections.append(
                    Section(
                        text=record,
                        headings=[f"Row {number}"],
                        anchor=anchor,
                        url=f"{source}#{anchor}",
                        line_start=first_line,
                        line_end=previous_line,
                    )
                )
    except csv.Error as exc:
        raise ParseError(f"not readable CSV at line {reader.line_num}: {exc}") from exc
    return ParsedDocument(source=source, title=path.stem, sections=sections)


def _sniff(text: str) -> Any:
    try:
        return csv.Sniffer().sniff(text[:16_384], delimiters=_DELIMITERS)
    except csv.Error:  # one column, or too little to tell: the common dialect
        return csv.excel


def parse_xlsx(data: bytes, path: Path, source: str) -> ParsedDocument:
    try:
        import openpyxl
        from openpyxl.utils import get_column_letter
    except ImportError as exc:
        raise ParseError(f"reading this format needs openpyxl: {install_hint('office')}") from exc
    refuse_xml_declarations(open_zip(data, ".xlsx"), ".xlsx")
    try:
        book = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    except Exception as exc:  # openpyxl raises zipfile, KeyError, XML and value errors
        raise ParseError(f"not a readable .xlsx file ({type(exc).__name__}: {exc})") from exc
    sections: list[Section] = []
    budget = TextBudget(len(data), ".xlsx")
    slugs: set[str] = set()
    cells = 0
    try:
        for sheet in book.worksheets:
            if not hasattr(sheet, "iter_rows"):  # a chartsheet holds no cells
                continue
            # The stored dimension is the file's claim; a hostile one (A1:XFD1048576) would
            # pad every row to 16,384 columns. Read the rows as they are stored instead.
            sheet.reset_dimensions()
            title = sheet.title[:HEADING_MAX]
            anchor_base = _unique(_slug(title), slugs)
            header: list[str] | None = None
            for number, row in _numbered_rows(sheet.iter_rows()):
                cells = _count(cells, len(row))
                values = [_cell_text(value) for value in row]
                if not any(values):
                    continue
                if header is None:
                    header = _header(values, lambda i: get_column_letter(i + 1))
                    continue
                record = budget.spend(_record(header, values, lambda i: get_column_letter(i + 1)))
                if record:
                    anchor = f"{anchor_base}-row-{number}"
                    sections.append(
                        Section(
                            text=record,
                            headings=[title, f"Row {number}"],
                            anchor=anchor,
                            url=f"{source}#{anchor}",
                        )
                    )
    except ParseError:
        raise
    except Exception as exc:  # a sheet's XML broken past openpyxl's lazy open
        raise ParseError(f"not a readable .xlsx sheet ({type(exc).__name__}: {exc})") from exc
    finally:
        book.close()
    title = (book.properties.title or "").strip() if book.properties else ""
    return ParsedDocument(source=source, title=title or path.stem, sections=sections)


def _numbered_rows(rows: Iterable[tuple[Any, ...]]) -> Iterator[tuple[int, list[Any]]]:
    """Each stored row with its spreadsheet row number and its cells' values by column."""
    for row in rows:
        number = next((cell.row for cell in row if getattr(cell, "row", None)), None)
        if number is None:
            continue
        values: list[Any] = []
        for cell in row:
            column = getattr(cell, "column", None)
            if column is not None:
                if column > MAX_COLUMNS:
                    raise ParseError(f"row {number}: more than {MAX_COLUMNS:,} columns")
                values.extend([None] * (column - 1 - len(values)))
                values.append(cell.value)
        yield number, values


def _count(cells: int, more: int) -> int:
    if more > MAX_COLUMNS:
        raise ParseError(f"a row of {more:,} columns, over {MAX_COLUMNS:,}")
    cells += more
    if cells > MAX_CELLS:
        raise ParseError(f"more than {MAX_CELLS:,} cells")
    return cells


def _cell_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, dt.datetime) and value.time() == dt.time():
        return value.date().isoformat()
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return " ".join(str(value).replace("\x00", "").split())


def _header(values: list[str], name: Any) -> list[str]:
    """The column labels, each cut at `HEADING_MAX`: every record repeats them."""
    return [" ".join(value.split())[:HEADING_MAX] or name(i) for i, value in enumerate(values)]


def _record(header: list[str], values: list[str], name: Any) -> str:
    lines = []
    for i, value in enumerate(values):
        value = " ".join(value.replace("\x00", "").split())
        if value:
            label = header[i] if i < len(header) else name(i)
            lines.append(f"{label}: {value}")
    return "\n".join(lines)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "sheet"


def _unique(base: str, used: set[str]) -> str:
    slug, n = base, 1
    while slug in used:
        n += 1
        slug = f"{base}-{n}"
    used.add(slug)
    return slug
