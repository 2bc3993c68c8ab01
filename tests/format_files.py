"""Real files of every format Footnote reads, each made by the format's own library (csv,
openpyxl, json, email and mailbox, Pillow; EPUB by zipfile as its specification lays it
out), each holding one marker word in the place its citation must point at."""

from __future__ import annotations

import csv
import datetime as dt
import json
import mailbox
import os
import shutil
import zipfile
from collections.abc import Callable
from email.message import EmailMessage
from email.utils import format_datetime, make_msgid
from pathlib import Path

import pytest

from tests.hostile_files import minimal_pdf
from tests.test_office import make_docx, make_pptx

TESSERACT_PACKAGE = "tesseract-ocr"


def require_tesseract() -> None:
    """Tesseract, or fail in CI / skip elsewhere naming the Debian package to install."""
    if shutil.which("tesseract"):
        return
    message = f"OCR tests need the Debian package {TESSERACT_PACKAGE} (apt-get install -y ...)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def tesseract_found_at(where: str | None) -> Callable[..., str | None]:
    """A `shutil.which` that answers `where` for Tesseract and the truth for anything else.

    `shutil.which` is one function for the whole process: pypdf reads it for `jbig2dec`
    when it first opens a PDF and refuses every later PDF if the answer changes, so a
    stand-in that lied about every program made the rest of a test run unable to read PDFs.
    """
    real = shutil.which

    def which(name: str, *args: object, **kwargs: object) -> str | None:
        return where if name == "tesseract" else real(name)

    return which


def make_csv(path: Path) -> None:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["Animal", "Habitat", "Note"])
        writer.writerow(["Koala", "eucalyptus forest", "sleeps all day"])
        writer.writerow(["Quokka", "Rottnest Island", "smiles in\nevery photo"])


def make_xlsx(path: Path) -> None:
    import openpyxl

    book = openpyxl.Workbook()
    fleet = book.active
    fleet.title = "Fleet"
    fleet.append(["Vehicle", "Seats", "Bought"])
    fleet.append(["Van", 9, dt.date(2024, 3, 1)])
    fleet.append(["Narwhal bus", 52, dt.date(2025, 6, 15)])
    costs = book.create_sheet("Costs")
    costs.append(["Item", "Euros"])
    costs.append(["Fuel", 1200.0])
    book.properties.title = "Fleet register"
    book.save(path)


def make_json(path: Path) -> None:
    catalog = {
        "title": "Zoo catalog",
        "items": [
            {"id": 1, "name": "Otter", "diet": {"main": "fish"}},
            {"id": 2, "name": "Pangolin", "diet": {"main": "ants"}, "tags": ["scaly", "shy"]},
        ],
    }
    path.write_text(json.dumps(catalog, indent=2), encoding="utf-8")


def make_jsonl(path: Path) -> None:
    events = [{"event": "opened", "gate": 1}, {"event": "okapi fed", "gate": 4}]
    path.write_text("".join(json.dumps(e) + "\n" for e in events), encoding="utf-8")


def message(
    sender: str, subject: str, body: str, when: dt.datetime, **headers: str
) -> EmailMessage:
    mail = EmailMessage()
    mail["From"] = sender
    mail["To"] = "keepers@zoo.example"
    mail["Subject"] = subject
    mail["Date"] = format_datetime(when)
    mail["Message-ID"] = make_msgid(domain="zoo.example")
    for name, value in headers.items():
        mail[name.replace("_", "-")] = value
    mail.set_content(body)
    return mail


def make_eml(path: Path) -> None:
    mail = message(
        "Ana Keeper <ana@zoo.example>",
        "Tapir enclosure",
        "The tapir enclosure reopens on Monday.",
        dt.datetime(2026, 3, 2, 9, 30, tzinfo=dt.UTC),
    )
    mail.add_attachment(
        b"Enclosure,Keeper\nTapir,Ana\nLemur,Bo\n",
        maintype="text",
        subtype="csv",
        filename="rota.csv",
    )
    path.write_bytes(bytes(mail))


def make_mbox(path: Path) -> None:
    first = message(
        "Ana Keeper <ana@zoo.example>",
        "Feeding times",
        "Feeding is at noon.",
        dt.datetime(2026, 3, 1, 8, 0, tzinfo=dt.UTC),
    )
    other = message(
        "Cy <cy@zoo.example>",
        "Parking",
        "The car park closes at six.",
        dt.datetime(2026, 3, 1, 9, 0, tzinfo=dt.UTC),
    )
    reply = message(
        "Bo <bo@zoo.example>",
        "Re: Feeding times",
        "The wombat is fed at three instead.",
        dt.datetime(2026, 3, 1, 10, 0, tzinfo=dt.UTC),
        In_Reply_To=first["Message-ID"],
        References=first["Message-ID"],
    )
    box = mailbox.mbox(path)
    try:
        for mail in (first, other, reply):
            box.add(mail)
        box.flush()
    finally:
        box.close()


def epub_bytes(
    chapters: list[tuple[str, str, str]], *, opf_extra: str = "", ncx: bool = False
) -> bytes:
    """An EPUB laid out as the specification says: `mimetype` first and stored, the
    container, the package document (OPF) with manifest and spine, and a table of contents
    (EPUB 3 nav, or EPUB 2 NCX). `chapters` are (file, title, body XHTML)."""
    import io

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as book:
        book.writestr(
            zipfile.ZipInfo("mimetype"), "application/epub+zip", compress_type=zipfile.ZIP_STORED
        )
        book.writestr(
            "META-INF/container.xml",
            '<?xml version="1.0"?><container version="1.0" '
            'xmlns="urn:oasis:names:tc:opendocument:xmlns:container"><rootfiles>'
            '<rootfile full-path="OEBPS/content.opf" '
            'media-type="application/oebps-package+xml"/></rootfiles></container>',
        )
        items = "".join(
            f'<item id="c{i}" href="text/{name}" media-type="application/xhtml+xml"/>'
            for i, (name, _, _) in enumerate(chapters)
        )
        spine = "".join(f'<itemref idref="c{i}"/>' for i in range(len(chapters)))
        if ncx:
            toc_item = '<item id="ncx" href="toc.ncx" media-type="application/x-dtbncx+xml"/>'
            points = "".join(
                f'<navPoint id="p{i}" playOrder="{i + 1}"><navLabel><text>{title}</text>'
                f'</navLabel><content src="text/{name}"/></navPoint>'
                for i, (name, title, _) in enumerate(chapters)
            )
            book.writestr(
                "OEBPS/toc.ncx",
                '<?xml version="1.0"?><!DOCTYPE ncx PUBLIC "-//NISO//DTD ncx 2005-1//EN" '
                '"http://www.daisy.org/z3986/2005/ncx-2005-1.dtd"><ncx '
                'xmlns="http://www.daisy.org/z3986/2005/ncx/" version="2005-1">'
                f"<navMap>{points}</navMap></ncx>",
            )
            spine_open = '<spine toc="ncx">'
        else:
            toc_item = (
                '<item id="nav" href="nav.xhtml" media-type="application/xhtml+xml" '
                'properties="nav"/>'
            )
            links = "".join(
                f'<li><a href="text/{name}">{title}</a></li>' for name, title, _ in chapters
            )
            book.writestr(
                "OEBPS/nav.xhtml",
                '<?xml version="1.0"?><!DOCTYPE html><html xmlns="http://www.w3.org/1999/xhtml" '
                'xmlns:epub="http://www.idpf.org/2007/ops"><body><nav epub:type="toc"><ol>'
                f"{links}</ol></nav></body></html>",
            )
            spine_open = "<spine>"
        book.writestr(
            "OEBPS/content.opf",
            f'<?xml version="1.0"?>{opf_extra}<package xmlns="http://www.idpf.org/2007/opf" '
            'version="3.0" unique-identifier="id"><metadata '
            'xmlns:dc="http://purl.org/dc/elements/1.1/">'
            '<dc:identifier id="id">urn:x</dc:identifier>'
            "<dc:title>Keeping Animals</dc:title><dc:creator>A. Keeper</dc:creator>"
            "<dc:language>en</dc:language><dc:date>2025-05-01</dc:date></metadata>"
            f"<manifest>{toc_item}{items}</manifest>{spine_open}{spine}</spine></package>",
        )
        for name, title, body in chapters:
            book.writestr(
                f"OEBPS/text/{name}",
                '<?xml version="1.0" encoding="utf-8"?><!DOCTYPE html><html '
                f'xmlns="http://www.w3.org/1999/xhtml"><head><title>{title}</title></head>'
                f"<body>{body}</body></html>",
            )
    return buffer.getvalue()


EPUB_CHAPTERS = [
    ("intro.xhtml", "Welcome", "<h1>Welcome</h1><p>This book is about zoo animals.</p>"),
    (
        "reptiles.xhtml",
        "Reptiles",
        "<h1>Reptiles</h1><p>The iguana basks in the morning sun.</p>"
        '<h2 id="night">At night</h2><p>Geckos hunt after dark.</p>',
    ),
]


def make_epub(path: Path) -> None:
    path.write_bytes(epub_bytes(EPUB_CHAPTERS))


def text_image(lines: list[str]) -> object:
    """A white page with black text drawn by Pillow, large enough for OCR to read."""
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.load_default(size=44)
    image = Image.new("RGB", (1500, 120 + 80 * len(lines)), "white")
    draw = ImageDraw.Draw(image)
    for i, line in enumerate(lines):
        draw.text((50, 50 + 80 * i), line, fill="black", font=font)
    return image


def make_png(path: Path) -> None:
    text_image(["The capybara pool is heated.", "Visitors may not swim."]).save(path)  # type: ignore[attr-defined]


def make_scanned_pdf(path: Path) -> None:
    """Two scanned pages: images only, no text layer."""
    first = text_image(["Opening hours are nine to five."])
    second = text_image(["The platypus house is closed."])
    first.save(path, save_all=True, append_images=[second], resolution=150)  # type: ignore[attr-defined]


def make_pdf(path: Path) -> None:
    path.write_bytes(minimal_pdf(["Zoo map overview", "The flamingo lagoon is by the gate."]))


FORMATS: dict[str, tuple[str, Callable[[Path], None], str]] = {
    "Markdown": (
        ".md",
        lambda p: p.write_text("# Rules\n\n## Gibbons\n\nGibbons sing at dawn.\n"),
        "gibbons",
    ),
    "HTML": (
        ".html",
        lambda p: p.write_text(
            "<html><body><h1>Shop</h1><h2 id='gifts'>Gifts</h2>"
            "<p>The shop sells toucan mugs.</p></body></html>"
        ),
        "gifts",
    ),
    "PDF": (".pdf", make_pdf, "page-2"),
    "text": (
        ".txt",
        lambda p: p.write_text("Lost property\n\nA lost meerkat plush was found.\n"),
        "top",
    ),
    "code and config": (
        ".py",
        lambda p: p.write_text('def feed_lynx():\n    return "lynx"\n'),
        "top",
    ),
    "Word": (".docx", make_docx, "hotels"),
    "PowerPoint": (".pptx", make_pptx, "slide-2"),
    "CSV": (".csv", make_csv, "row-3"),
    "Excel": (".xlsx", make_xlsx, "fleet-row-3"),
    "JSON": (".json", make_json, "$.items[1]"),
    "JSON Lines": (".jsonl", make_jsonl, "line-2"),
    "e-mail": (".mbox", make_mbox, "message-3"),
    "EPUB": (".epub", make_epub, "chapter-2"),
    "images": (".png", make_png, "top"),
}
"""Each format of docs/usage.md's table: a suffix, a maker for a real file, and the key its marker
passage's chunk id must carry (`NAME#KEY:0`): the anchor, `page-N` for a PDF page, `top`
for a file cited whole or by its lines."""

MARKERS = {
    "Markdown": "gibbons sing",
    "HTML": "toucan mugs",
    "PDF": "flamingo lagoon",
    "text": "meerkat plush",
    "code and config": "feed_lynx",
    "Word": "hotels 180 euros axolotl",
    "PowerPoint": "axolotl launch May",
    "CSV": "quokka Rottnest",
    "Excel": "narwhal bus seats",
    "JSON": "pangolin ants",
    "JSON Lines": "okapi fed",
    "e-mail": "wombat fed at three",
    "EPUB": "iguana basks",
    "images": "capybara pool heated",
}
"""A query that finds each format's marker passage."""
