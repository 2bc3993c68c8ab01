"""The formats teams keep knowledge in, each from a real file made by its own library:
spreadsheets (CSV, XLSX), JSON and JSON Lines, e-mail (EML, MBOX), EPUB, and images and
scanned PDFs by OCR. Each keeps the structure a citation points at (sheet and row, path,
message, chapter, page) and refuses hostile input with a reason, quickly. Last, one folder
holding every format of docs/usage.md's table goes through `footnote ingest`, and each
format's passage is found and cited where it sits."""

from __future__ import annotations

import io
import json
import os
import re
import struct
import time
import zipfile
import zlib
from pathlib import Path

import pytest

from footnote.ingest.documents import ParseError
from footnote.ingest.limits import TimeBudgetExceeded, time_budget
from footnote.ingest.parsers import SUPPORTED_SUFFIXES, parse_bytes, parse_file
from footnote.ingest.pipeline import ingest
from footnote.store.types import Filters
from footnote.tools.search import SearchRequest, search
from tests.conftest import Locate, RunCli
from tests.format_files import (
    EPUB_CHAPTERS,
    FORMATS,
    MARKERS,
    epub_bytes,
    make_csv,
    make_eml,
    make_epub,
    make_json,
    make_jsonl,
    make_mbox,
    make_png,
    make_scanned_pdf,
    make_xlsx,
    message,
    require_tesseract,
    tesseract_found_at,
    text_image,
)
from tests.hostile_files import minimal_pdf
from tests.test_office import make_docx

REPO = Path(__file__).resolve().parent.parent
LAUGHS = (
    '<!DOCTYPE lolz [<!ENTITY lol0 "lol">'
    + "".join(f'<!ENTITY lol{i} "' + f"&lol{i - 1};" * 10 + '">' for i in range(1, 10))
    + "]>"
)
"""A billion-laughs entity declaration (10⁹ copies of "lol" once expanded)."""


def quickly(path: Path, name: str, match: str) -> None:
    """Parsing this hostile file fails with the reason `match`, within seconds."""
    started = time.monotonic()
    with pytest.raises(ParseError, match=match):
        parse_file(path, name)
    assert time.monotonic() - started < 5


def bomb_zip(path: Path, member: str, *, also: dict[str, bytes] | None = None) -> None:
    """A zip whose `member` is 60 MB of zeros compressed to a few KB."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in (also or {}).items():
            archive.writestr(name, data)
        archive.writestr(member, b"\0" * 60_000_000)


def with_member(data: bytes, name: str, replacement: bytes) -> bytes:
    """The same zip with one member's bytes replaced."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as source, zipfile.ZipFile(out, "w") as target:
        for info in source.infolist():
            target.writestr(info, replacement if info.filename == name else source.read(info))
    return out.getvalue()


# --- spreadsheets --------------------------------------------------------------------


def test_csv_rows_are_records_under_their_header_cited_by_row(tmp_path: Path) -> None:
    make_csv(tmp_path / "animals.csv")
    doc = parse_file(tmp_path / "animals.csv", "animals.csv")
    koala, quokka = doc.sections
    assert koala.text == "Animal: Koala\nHabitat: eucalyptus forest\nNote: sleeps all day"
    assert (quokka.anchor, quokka.url, quokka.headings) == (
        "row-3",
        "animals.csv#row-3",
        ["Row 3"],
    )
    assert "Note: smiles in every photo" in quokka.text
    # A quoted field over two lines: the record's lines are 3-4 of the file.
    assert (quokka.line_start, quokka.line_end) == (3, 4)


def test_csv_dialect_and_tsv(tmp_path: Path) -> None:
    semicolons = tmp_path / "prices.csv"
    semicolons.write_text("item;price\nlamp;12\n\nrug;40\n")
    sections = parse_file(semicolons, "prices.csv").sections
    assert [(s.anchor, s.text) for s in sections] == [
        ("row-2", "item: lamp\nprice: 12"),
        ("row-4", "item: rug\nprice: 40"),
    ]
    tabs = tmp_path / "stock.tsv"
    tabs.write_text("sku\tcount\textra\nA1\t3\n B2 \t\tnote\tmore\n")
    records = [s.text for s in parse_file(tabs, "stock.tsv").sections]
    assert records == ["sku: A1\ncount: 3", "sku: B2\nextra: note\ncolumn 4: more"]


def test_csv_hostile_files_are_refused_with_a_reason(tmp_path: Path) -> None:
    huge_field = tmp_path / "field.csv"
    huge_field.write_text('a,b\n"' + "x" * 200_000 + '",1\n')
    quickly(huge_field, "field.csv", "not readable CSV")
    wide = tmp_path / "wide.csv"
    wide.write_text(",".join(f"c{i}" for i in range(5000)) + "\n")
    quickly(wide, "wide.csv", "5,000 columns")
    binary = tmp_path / "binary.csv"
    binary.write_bytes(b"a,b\n\x00\x01\x02,3\n")
    quickly(binary, "binary.csv", "binary")


def test_xlsx_rows_are_cited_by_sheet_and_row(tmp_path: Path) -> None:
    make_xlsx(tmp_path / "fleet.xlsx")
    doc = parse_file(tmp_path / "fleet.xlsx", "fleet.xlsx")
    assert doc.title == "Fleet register"
    by_anchor = {s.anchor: s for s in doc.sections}
    assert list(by_anchor) == ["fleet-row-2", "fleet-row-3", "costs-row-2"]
    bus = by_anchor["fleet-row-3"]
    assert bus.text == "Vehicle: Narwhal bus\nSeats: 52\nBought: 2025-06-15"
    assert (bus.headings, bus.url) == (["Fleet", "Row 3"], "fleet.xlsx#fleet-row-3")
    assert by_anchor["costs-row-2"].text == "Item: Fuel\nEuros: 1200"


def test_xlsx_hostile_files_are_refused_quickly(tmp_path: Path) -> None:
    bomb_zip(tmp_path / "bomb.xlsx", "xl/worksheets/sheet1.xml")
    quickly(tmp_path / "bomb.xlsx", "bomb.xlsx", "zip bomb")
    make_xlsx(tmp_path / "fleet.xlsx")
    good = (tmp_path / "fleet.xlsx").read_bytes()
    sheet = zipfile.ZipFile(io.BytesIO(good)).read("xl/worksheets/sheet1.xml").decode()
    laughing = LAUGHS + sheet.replace("Van", "&lol9;")
    (tmp_path / "laughs.xlsx").write_bytes(
        with_member(good, "xl/worksheets/sheet1.xml", laughing.encode())
    )
    quickly(tmp_path / "laughs.xlsx", "laughs.xlsx", "declares entities")
    # A stored dimension claiming every cell of the sheet is not believed.
    padded = re.sub(r'<dimension ref="[^"]*"', '<dimension ref="A1:XFD1048576"', sheet)
    (tmp_path / "padded.xlsx").write_bytes(
        with_member(good, "xl/worksheets/sheet1.xml", padded.encode())
    )
    started = time.monotonic()
    assert len(parse_file(tmp_path / "padded.xlsx", "padded.xlsx").sections) == 3
    assert time.monotonic() - started < 5
    (tmp_path / "fake.xlsx").write_bytes(b"PK\x03\x04 not a workbook")
    quickly(tmp_path / "fake.xlsx", "fake.xlsx", "not a readable .xlsx")


def test_office_documents_get_the_zip_bomb_guard_too(tmp_path: Path) -> None:
    bomb_zip(tmp_path / "bomb.docx", "word/document.xml")
    quickly(tmp_path / "bomb.docx", "bomb.docx", "zip bomb")
    make_docx(tmp_path / "travel.docx")
    good = (tmp_path / "travel.docx").read_bytes()
    document = zipfile.ZipFile(io.BytesIO(good)).read("word/document.xml").decode()
    declaration, _, rest = document.partition("?>")
    laughing = f"{declaration}?>{LAUGHS}{rest}" if rest else LAUGHS + document
    (tmp_path / "laughs.docx").write_bytes(
        with_member(good, "word/document.xml", laughing.encode())
    )
    quickly(tmp_path / "laughs.docx", "laughs.docx", "declares entities")


# --- JSON ----------------------------------------------------------------------------


def test_json_records_are_cited_by_path(tmp_path: Path) -> None:
    make_json(tmp_path / "catalog.json")
    doc = parse_file(tmp_path / "catalog.json", "catalog.json")
    assert doc.title == "Zoo catalog"
    by_anchor = {s.anchor: s for s in doc.sections}
    assert list(by_anchor) == ["$", "$.items[0]", "$.items[1]"]
    pangolin = by_anchor["$.items[1]"]
    assert pangolin.text == "id: 2\nname: Pangolin\ndiet.main: ants\ntags: scaly, shy"
    assert (pangolin.headings, pangolin.url) == (["$.items[1]"], "catalog.json#$.items[1]")


def test_json_nested_records_and_odd_keys(tmp_path: Path) -> None:
    data = {"teams": [{"name": "Cats", "members": [{"who": "Lin"}, {"who": "Sam"}]}], "a b": [[1]]}
    path = tmp_path / "teams.json"
    path.write_text(json.dumps(data))
    anchors = {s.headings[0]: s.anchor for s in parse_file(path, "teams.json").sections}
    assert anchors == {
        "$.teams[0]": "$.teams[0]",
        "$.teams[0].members[0]": "$.teams[0].members[0]",
        "$.teams[0].members[1]": "$.teams[0].members[1]",
        '$["a b"][0]': "$[-a-b-][0]",
    }


def test_jsonl_records_are_cited_by_line(tmp_path: Path) -> None:
    make_jsonl(tmp_path / "events.jsonl")
    second = parse_file(tmp_path / "events.jsonl", "events.jsonl").sections[1]
    assert (second.anchor, second.url, second.line_start, second.line_end) == (
        "line-2",
        "events.jsonl#line-2",
        2,
        2,
    )
    assert second.text == "event: okapi fed\ngate: 4"
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"a": 1}\n{"a": \n')
    quickly(broken, "broken.jsonl", "JSON on line 2")


def test_json_nesting_is_bounded(tmp_path: Path) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 200_000 + "]" * 200_000)
    quickly(deep, "deep.json", "nest")
    moderate = tmp_path / "moderate.json"
    moderate.write_text('{"a":' * 100 + "1" + "}" * 100)
    quickly(moderate, "moderate.json", "deeper than 64")


# --- e-mail --------------------------------------------------------------------------


def test_eml_message_with_sender_date_and_attachment(tmp_path: Path) -> None:
    make_eml(tmp_path / "tapir.eml")
    doc = parse_file(tmp_path / "tapir.eml", "tapir.eml")
    assert doc.title == "Tapir enclosure" and doc.date == "2026-03-02"
    assert doc.metadata["from"] == "Ana Keeper <ana@zoo.example>"
    assert doc.metadata["thread"] == "Tapir enclosure"
    body, *rows = doc.sections
    assert body.url == "tapir.eml#message"
    assert body.headings == [
        "Tapir enclosure",
        "Ana Keeper <ana@zoo.example>, 2026-03-02 09:30+00:00",
    ]
    assert body.text.startswith("From: Ana Keeper <ana@zoo.example>\nTo: keepers@zoo.example\n")
    assert body.text.endswith("The tapir enclosure reopens on Monday.")
    # The CSV attachment read by the CSV parser: its rows cited under the message.
    assert [(r.url, r.headings[2:]) for r in rows] == [
        ("tapir.eml#message-rota-csv-row-2", ["Attachment: rota.csv", "Row 2"]),
        ("tapir.eml#message-rota-csv-row-3", ["Attachment: rota.csv", "Row 3"]),
    ]


def test_mbox_messages_grouped_into_threads(tmp_path: Path) -> None:
    make_mbox(tmp_path / "keepers.mbox")
    doc = parse_file(tmp_path / "keepers.mbox", "keepers.mbox")
    assert doc.metadata == {"messages": 3, "threads": 2} and doc.date == "2026-03-01"
    # The reply (third in the file) follows its thread's first message.
    assert [(s.anchor, s.headings[0], s.headings[1].split(",")[0]) for s in doc.sections] == [
        ("message-1", "Feeding times", "Ana Keeper <ana@zoo.example>"),
        ("message-3", "Feeding times", "Bo <bo@zoo.example>"),
        ("message-2", "Parking", "Cy <cy@zoo.example>"),
    ]
    assert "The wombat is fed at three instead." in doc.sections[1].text


def test_mail_hostile_input(tmp_path: Path) -> None:
    import datetime as dt

    when = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    inner = message("a@x.example", "level 0", "deepest", when)
    for level in range(1, 6):  # messages attached inside messages, five deep
        outer = message("a@x.example", f"level {level}", f"body {level}", when)
        outer.add_attachment(inner)
        inner = outer
    inner.add_attachment(b"PK\x03\x04 broken", maintype="application", subtype="octet-stream",
                         filename="report.docx")  # fmt: skip
    (tmp_path / "nested.eml").write_bytes(bytes(inner))
    doc = parse_file(tmp_path / "nested.eml", "nested.eml")
    assert doc.sections[0].text.endswith("body 5")
    assert len(doc.sections) == 3  # itself and two nested levels, no deeper
    unread = doc.metadata["attachments_unread"]
    assert "nested more than 3 deep" in unread and "report.docx (not a readable .docx" in unread
    (tmp_path / "notmbox.mbox").write_bytes(b"Subject: hi\n\nno From line\n")
    quickly(tmp_path / "notmbox.mbox", "notmbox.mbox", "not an mbox")


# --- EPUB ----------------------------------------------------------------------------


def test_epub_chapters_in_spine_order_cited_by_chapter(tmp_path: Path) -> None:
    make_epub(tmp_path / "book.epub")
    doc = parse_file(tmp_path / "book.epub", "book.epub")
    assert (doc.title, doc.date, doc.metadata) == (
        "Keeping Animals",
        "2025-05-01",
        {"creator": "A. Keeper", "language": "en"},
    )
    assert [(s.url, s.headings, s.text) for s in doc.sections] == [
        ("book.epub#chapter-1", ["Welcome"], "This book is about zoo animals."),
        ("book.epub#chapter-2", ["Reptiles"], "The iguana basks in the morning sun."),
        ("book.epub#chapter-2-night", ["Reptiles", "At night"], "Geckos hunt after dark."),
    ]


def test_epub2_titles_from_the_ncx(tmp_path: Path) -> None:
    chapters = [("a.xhtml", "The Aviary", "<p>Parrots talk.</p>"), *EPUB_CHAPTERS[1:]]
    (tmp_path / "old.epub").write_bytes(epub_bytes(chapters, ncx=True))
    doc = parse_file(tmp_path / "old.epub", "old.epub")
    assert [s.headings[0] for s in doc.sections[:2]] == ["The Aviary", "Reptiles"]


def test_epub_hostile_files_are_refused_quickly(tmp_path: Path) -> None:
    bomb_zip(tmp_path / "bomb.epub", "OEBPS/text/intro.xhtml", also={"mimetype": b"x"})
    quickly(tmp_path / "bomb.epub", "bomb.epub", "zip bomb")
    (tmp_path / "laughs.epub").write_bytes(epub_bytes(EPUB_CHAPTERS, opf_extra=LAUGHS))
    quickly(tmp_path / "laughs.epub", "laughs.epub", "declares entities")
    escaping = [("../../../../etc/passwd", "Escape", "<p>x</p>")]
    (tmp_path / "escape.epub").write_bytes(epub_bytes(escaping))
    quickly(tmp_path / "escape.epub", "escape.epub", "outside the book")
    good = epub_bytes(EPUB_CHAPTERS)
    chapter = "OEBPS/text/reptiles.xhtml"
    laughing = (
        zipfile.ZipFile(io.BytesIO(good))
        .read(chapter)
        .replace(b"<!DOCTYPE html>", LAUGHS.replace("lolz", "html").encode())
    )
    (tmp_path / "chapter.epub").write_bytes(with_member(good, chapter, laughing))
    quickly(tmp_path / "chapter.epub", "chapter.epub", "declares entities")


# --- OCR -----------------------------------------------------------------------------


def test_image_text_is_read_by_ocr(tmp_path: Path) -> None:
    require_tesseract()
    make_png(tmp_path / "sign.png")
    doc = parse_file(tmp_path / "sign.png", "sign.png")
    assert doc.metadata == {"ocr": "tesseract"}
    assert "capybara pool is heated" in doc.sections[0].text.lower()
    assert doc.sections[0].url == "sign.png"


def test_scanned_pdf_pages_are_read_by_ocr_with_their_numbers(tmp_path: Path) -> None:
    require_tesseract()
    make_scanned_pdf(tmp_path / "scan.pdf")
    doc = parse_file(tmp_path / "scan.pdf", "scan.pdf")
    assert doc.metadata == {"ocr_pages": "1, 2"}
    assert [s.page for s in doc.sections] == [1, 2]
    assert "platypus house is closed" in doc.sections[1].text.lower()


def test_multipage_tiff_pages_are_cited(tmp_path: Path) -> None:
    require_tesseract()
    first, second = text_image(["Front gate"]), text_image(["The penguin parade starts at two."])
    first.save(tmp_path / "pages.tiff", save_all=True, append_images=[second])  # type: ignore[attr-defined]
    doc = parse_file(tmp_path / "pages.tiff", "pages.tiff")
    assert [(s.page, s.url) for s in doc.sections] == [
        (1, "pages.tiff#page-1"),
        (2, "pages.tiff#page-2"),
    ]
    assert "penguin parade" in doc.sections[1].text.lower()


def png_header_only(width: int, height: int) -> bytes:
    """A PNG declaring `width`×`height` pixels with one tiny compressed row: decoding it
    would need gigabytes, reading its header does not."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        )

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\0" * 100))
        + chunk(b"IEND", b"")
    )


def test_ocr_hostile_images_are_refused_before_decoding(tmp_path: Path) -> None:
    require_tesseract()
    (tmp_path / "bomb.png").write_bytes(png_header_only(8_000, 8_000))
    quickly(tmp_path / "bomb.png", "bomb.png", "over 50,000,000")
    (tmp_path / "huge.png").write_bytes(png_header_only(100_000, 100_000))
    quickly(tmp_path / "huge.png", "huge.png", "not a readable image")
    (tmp_path / "fake.jpg").write_bytes(b"\xff\xd8\xff not really a jpeg")
    quickly(tmp_path / "fake.jpg", "fake.jpg", "not a readable image")


def test_without_tesseract_the_reason_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import footnote.ingest.parsers.ocr as ocr

    monkeypatch.setattr(ocr.shutil, "which", tesseract_found_at(None))
    make_png(tmp_path / "sign.png")
    quickly(tmp_path / "sign.png", "sign.png", "apt-get install tesseract-ocr")
    make_scanned_pdf(tmp_path / "scan.pdf")
    quickly(tmp_path / "scan.pdf", "scan.pdf", "scanned PDF.*install tesseract-ocr")


# --- one folder of every format, through the command line ------------------------------


def readme_formats() -> dict[str, list[str]]:
    """The usage page's format table: each format's name and the suffixes it lists."""
    text = (REPO / "docs" / "usage.md").read_text(encoding="utf-8")
    table = text.split("| format | suffixes |", 1)[1].split("\n\n", 1)[0]
    formats = {}
    for line in table.splitlines()[2:]:
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        formats[cells[0]] = re.findall(r"`(\.[a-z0-9]+)`", cells[1])
    return formats


def test_readme_format_table_is_the_parser_registry() -> None:
    formats = readme_formats()
    assert list(formats) == list(FORMATS)
    assert all(FORMATS[name][0] in suffixes for name, suffixes in formats.items())
    listed = [suffix for suffixes in formats.values() for suffix in suffixes]
    assert sorted(listed) == sorted(SUPPORTED_SUFFIXES)


@pytest.mark.integration
def test_footnote_ingest_of_every_format_cites_each_where_it_sits(
    tmp_path: Path, run_cli: RunCli
) -> None:
    require_tesseract()
    folder = tmp_path / "knowledge"
    folder.mkdir()
    names = {}
    for name in readme_formats():
        suffix, make, _ = FORMATS[name]
        make(folder / f"sample{suffix}")
        names[name] = f"sample{suffix}"
    make_scanned_pdf(folder / "scan.pdf")
    index = tmp_path / "index"
    done = run_cli("ingest", str(folder), "--index", str(index), "--json", "--quiet")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["failed"] == 0 and summary["errors"] == []
    assert sorted(summary["files"]["added"]) == sorted([*names.values(), "scan.pdf"])
    for name, file in names.items():
        hit = search(SearchRequest(query=MARKERS[name], index_dir=index, k=1, stage="bm25"))[0]
        key = FORMATS[name][2]
        assert hit.chunk.id == f"{file}#{key}:0", name
        if key != "top" and not key.startswith("page-"):
            assert hit.chunk.anchor == key, name
            assert hit.chunk.url in (None, f"{file}#{key}"), name  # Markdown keeps no URL
    scanned = search(SearchRequest(query="platypus house", index_dir=index, k=1, stage="bm25"))
    assert (scanned[0].chunk.source, scanned[0].chunk.page) == ("scan.pdf", 2)
    # What a reader sees: `footnote search` prints sheet and row; `footnote ask` cites them.
    found = run_cli("search", "narwhal bus seats", "--index", str(index), "-k", "1")
    assert found.returncode == 0, found.stderr
    assert "sample.xlsx, § Fleet > Row 3, sample.xlsx#fleet-row-3" in found.stdout
    asked = run_cli("ask", "When is the wombat fed?", "--index", str(index), "--json")
    assert asked.returncode == 0, asked.stderr
    citations = json.loads(asked.stdout)["citations"]
    assert citations and citations[0]["url"] == "sample.mbox#message-3"
    assert citations[0]["section"].startswith("Feeding times > Bo <bo@zoo.example>")


def test_garbage_in_every_new_format_fails_with_the_formats_own_reason() -> None:
    """Not the catch-all "parse failed: SomeError" that a parser crash becomes."""
    garbage = (b"\xff\xfe\x00garbage", b"PK\x03\x04" + bytes(200), b"{" * 50, bytes(range(256)))
    reasons = []
    for suffix in (".csv", ".xlsx", ".json", ".jsonl", ".eml", ".mbox", ".epub", ".png"):
        for data in garbage:
            try:
                parse_bytes(data, Path(f"x{suffix}"), f"x{suffix}")
            except ParseError as exc:
                reasons.append(f"{suffix}: {exc}")
    assert len(reasons) >= 28
    assert not [r for r in reasons if "parse failed" in r], reasons


def tesseract_children() -> list[int]:
    """Tesseract processes this test process started that are still alive."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)
            name = fields[0].split("(", 1)[1]
            parent = int(fields[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if name == "tesseract" and parent == os.getpid():
            found.append(int(stat.parent.name))
    return found


def test_ocr_stops_at_the_files_time_budget_and_leaves_no_process(tmp_path: Path) -> None:
    require_tesseract()
    page = text_image([f"Line {i} of a long scanned page about the zoo." for i in range(60)])
    page.save(tmp_path / "long.png")  # type: ignore[attr-defined]
    started = time.monotonic()
    with pytest.raises(TimeBudgetExceeded), time_budget(0.5):
        parse_file(tmp_path / "long.png", "long.png")
    assert time.monotonic() - started < 3
    assert tesseract_children() == []


def test_new_formats_ingest_and_cite_on_both_backends(locate: Locate, tmp_path: Path) -> None:
    """Sheet and row, record path, message and chapter survive the index on either backend,
    and an e-mail's sender is a metadata filter."""
    folder = tmp_path / "docs"
    folder.mkdir()
    make_xlsx(folder / "fleet.xlsx")
    make_json(folder / "catalog.json")
    make_eml(folder / "tapir.eml")
    make_epub(folder / "book.epub")
    index = locate()
    summary = ingest([folder], index)
    assert sorted(summary.added) == ["book.epub", "catalog.json", "fleet.xlsx", "tapir.eml"]
    expected = {
        "narwhal bus seats": "fleet.xlsx#fleet-row-3",
        "pangolin ants": "catalog.json#$.items[1]",
        "rota lemur Bo": "tapir.eml#message-rota-csv-row-3",
        "geckos hunt after dark": "book.epub#chapter-2-night",
    }
    for query, url in expected.items():
        hit = search(SearchRequest(query=query, index_dir=index, k=1, stage="bm25"))[0]
        assert (hit.chunk.url, hit.chunk.id) == (url, f"{url}:0"), query
    sender = Filters(metadata={"from": "Ana Keeper <ana@zoo.example>"})
    mail = search(SearchRequest(query="enclosure", index_dir=index, k=5, filters=sender))
    assert mail and {h.chunk.source for h in mail} == {"tapir.eml"}


def test_a_pdf_page_without_text_or_images_is_not_walked_for_ocr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Finding inline images walks every operator of a page; a hostile page holds millions.
    OCR reads only the images a page names, so such a page costs no more with Tesseract."""
    from pypdf._page import PageObject

    require_tesseract()
    monkeypatch.setattr(PageObject, "images", property(lambda page: pytest.fail("walked")))
    (tmp_path / "ops.pdf").write_bytes(minimal_pdf([], stream=zlib.compress(b"BT ET " * 50_000)))
    quickly(tmp_path / "ops.pdf", "ops.pdf", "no text found")


def test_each_message_of_a_mailbox_is_filtered_by_its_own_sender(tmp_path: Path) -> None:
    folder = tmp_path / "mail"
    folder.mkdir()
    make_mbox(folder / "keepers.mbox")
    make_eml(folder / "tapir.eml")
    index = tmp_path / "index"
    ingest([folder], index)
    bo = Filters(metadata={"from": "Bo <bo@zoo.example>"})
    hits = search(SearchRequest(query="fed", index_dir=index, k=5, filters=bo, stage="bm25"))
    assert [h.chunk.url for h in hits] == ["keepers.mbox#message-3"]
    assert hits[0].chunk.metadata["thread"] == "Feeding times"
    assert hits[0].chunk.metadata["messages"] == 3  # the mailbox's own fields stay
    ana = Filters(metadata={"from": "Ana Keeper <ana@zoo.example>"})
    rota = search(SearchRequest(query="lemur", index_dir=index, k=5, filters=ana, stage="bm25"))
    assert [h.chunk.url for h in rota] == ["tapir.eml#message-rota-csv-row-3"]


def test_without_tesseract_ingest_skips_images_with_the_hint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Screenshots beside the docs are no failure of the run where OCR is not installed."""
    import footnote.ingest.parsers.ocr as ocr

    monkeypatch.setattr(ocr.shutil, "which", tesseract_found_at(None))
    folder = tmp_path / "docs"
    folder.mkdir()
    make_png(folder / "screenshot.png")
    (folder / "guide.md").write_text("# Guide\n\nRead me.\n")
    summary = ingest([folder], tmp_path / "index")
    assert summary.added == ["guide.md"] and not summary.failed
    assert "without OCR: install Debian's tesseract-ocr" in summary.skipped["screenshot.png"]
