"""DOCX and PPTX with their structure: Word headings become sections with anchors, slides
become sections cited by slide number. The fixtures are built here with python-docx and
python-pptx, then ingested on both backends."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from footnote.ingest.documents import ParseError
from footnote.ingest.parsers import parse_file
from footnote.ingest.parsers.office import parse_docx
from footnote.ingest.pipeline import ingest
from footnote.tools.search import SearchRequest, search
from tests.conftest import Locate


def make_docx(path: Path) -> None:
    import docx

    document = docx.Document()
    document.core_properties.title = "Travel policy"
    document.add_heading("Travel policy", level=1)
    document.add_paragraph("Book travel through the portal.")
    document.add_heading("Hotels", level=2)
    document.add_paragraph("Hotels up to 180 euros a night need no approval for the axolotl team.")
    document.add_heading("Meals", level=2)
    document.add_paragraph("Meals are refunded with receipts.")
    table = document.add_table(rows=2, cols=2)
    table.cell(0, 0).text, table.cell(0, 1).text = "City", "Limit"
    table.cell(1, 0).text, table.cell(1, 1).text = "Paris", "220"
    document.save(path)


def make_pptx(path: Path) -> None:
    import pptx
    from pptx.util import Inches

    deck = pptx.Presentation()
    for title, body in (("Roadmap", "Q1 ships search."), ("Axolotl launch", "Launch in May.")):
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = title
        slide.placeholders[1].text = body
    blank = deck.slides.add_slide(deck.slide_layouts[5])
    blank.shapes.title.text = "Numbers"
    box = blank.shapes.add_textbox(Inches(1), Inches(2), Inches(4), Inches(1))
    box.text_frame.text = "Axolotl revenue grew."
    deck.save(path)


def test_docx_sections_follow_headings(tmp_path: Path) -> None:
    path = tmp_path / "travel.docx"
    make_docx(path)
    doc = parse_file(path, "travel.docx")
    assert doc.title == "Travel policy"
    by_heading = {" > ".join(s.headings): s for s in doc.sections}
    assert "axolotl" in by_heading["Travel policy > Hotels"].text
    assert by_heading["Travel policy > Hotels"].url == "travel.docx#hotels"
    assert "Paris | 220" in by_heading["Travel policy > Meals"].text


def test_pptx_slides_are_cited_by_number(tmp_path: Path) -> None:
    path = tmp_path / "deck.pptx"
    make_pptx(path)
    doc = parse_file(path, "deck.pptx")
    assert [s.anchor for s in doc.sections] == ["slide-1", "slide-2", "slide-3"]
    assert doc.sections[1].headings == ["Slide 2: Axolotl launch"]
    assert doc.sections[2].text == "Axolotl revenue grew." and doc.sections[2].page == 3


def test_office_files_ingest_and_cite(locate: Locate, tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    make_docx(docs / "travel.docx")
    make_pptx(docs / "deck.pptx")
    (docs / "broken.docx").write_bytes(b"PK\x03\x04 not really a zip")
    index = locate()
    summary = ingest([docs], index)
    assert sorted(summary.added) == ["deck.pptx", "travel.docx"]
    assert "not a readable .docx" in summary.failed["broken.docx"]
    hits = search(SearchRequest(query="axolotl launch May", index_dir=index, k=1, stage="bm25"))
    assert (
        hits[0].chunk.id.startswith("deck.pptx#slide-2")
        and hits[0].chunk.url == "deck.pptx#slide-2"
    )
    hotel = search(SearchRequest(query="hotels 180 euros", index_dir=index, k=1, stage="bm25"))
    assert hotel[0].chunk.url == "travel.docx#hotels"


def test_docx_paragraphs_are_read_without_a_style_scan_each(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """python-docx's `paragraph.style` and `paragraph.text` cost milliseconds per paragraph
    (a scan of every style, XPath per run): the parser reads neither, so a small file of many
    paragraphs parses in time linear in its size (benchmarks/office_parse.py measures it).
    Repeated headings get distinct anchors in one step each."""
    import docx
    from docx.text.paragraph import Paragraph

    document = docx.Document()
    for n in range(30):
        document.add_heading("Same", level=2)
        document.add_paragraph(f"Body {n}, with a\ttab.")
    document.add_heading("Same-1", level=2)
    document.add_paragraph("The last one.")
    path = tmp_path / "many.docx"
    document.save(path)

    def refused(self: Any) -> Any:
        raise AssertionError("a per-paragraph python-docx lookup was used")

    monkeypatch.setattr(Paragraph, "style", property(refused))
    monkeypatch.setattr(Paragraph, "text", property(refused))
    doc = parse_docx(path.read_bytes(), path, "many.docx")  # here, not in the worker
    anchors = [s.anchor for s in doc.sections]
    assert anchors[:3] == ["same", "same-1", "same-2"] and len(set(anchors)) == 31
    assert anchors[-1] == "same-1-1"  # a heading whose own slug was taken by a repeat
    assert doc.sections[0].text == "Body 0, with a\ttab." and doc.sections[0].headings == ["Same"]


def _many_paragraphs(count: int, *, varied: bool = False) -> bytes:
    """A small DOCX of `count` one-word paragraphs (issue 29's bomb: 82 KB, 250k of them).
    `varied` gives each paragraph its own word, so the file compresses like real text and
    passes the archive's inflation guard: what reaches the parser is then many paragraphs."""
    import io
    import zipfile

    import docx

    blank = io.BytesIO()
    docx.Document().save(blank)
    source = zipfile.ZipFile(io.BytesIO(blank.getvalue()))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target:
        for item in source.infolist():
            data = source.read(item.filename)
            if item.filename == "word/document.xml":
                if varied:
                    words = (f"{(n * 2654435761) % 4294967296:x}".encode() for n in range(count))
                    body = b"".join(b"<w:p><w:r><w:t>" + w + b"</w:t></w:r></w:p>" for w in words)
                else:
                    body = b"<w:p><w:r><w:t>word</w:t></w:r></w:p>" * count
                data = data.replace(b"<w:body>", b"<w:body>" + body, 1)
            target.writestr(item, data)
    return out.getvalue()


def test_an_office_bomb_is_stopped_by_its_budget_off_the_main_thread(
    monkeypatch: Any,
) -> None:
    """Office files are parsed in a worker process: the file's time budget stops it from
    any thread (a server's), where the SIGALRM timer cannot, and its memory is capped."""
    import threading
    import time

    from footnote.ingest.isolation import MEMORY_ENV
    from footnote.ingest.limits import FileBudget, TimeBudgetExceeded
    from footnote.ingest.parsers import parse_bytes

    bomb = _many_paragraphs(200_000)
    assert len(bomb) < 100_000
    with pytest.raises(ParseError, match="zip bomb"):  # issue 29's file: refused unread
        parse_bytes(bomb, Path("bomb.docx"), "bomb.docx")
    bomb = _many_paragraphs(200_000, varied=True)  # as many paragraphs, past the guard
    outcome: dict[str, Any] = {}

    def served_ingest() -> None:
        budget = FileBudget(0.5)
        started = time.monotonic()
        try:
            with budget.running():
                parse_bytes(bomb, Path("bomb.docx"), "bomb.docx")
        except TimeBudgetExceeded as exc:
            outcome["stopped"] = str(exc)
        outcome["seconds"] = time.monotonic() - started

    thread = threading.Thread(target=served_ingest)
    thread.start()
    thread.join(timeout=60)
    assert "worker was stopped" in outcome.get("stopped", ""), outcome
    assert outcome["seconds"] < 10, outcome  # a bound, not a speed target: it was 258 s
    small = _many_paragraphs(10)
    assert parse_bytes(small, Path("a.docx"), "a.docx").sections  # a fresh worker

    monkeypatch.setenv(MEMORY_ENV, "150")
    # libxml2's own out-of-memory comes back as XMLSyntaxError: the reason says memory
    with pytest.raises(ParseError, match="needed more than 150 MB"):
        parse_bytes(_many_paragraphs(400_000, varied=True), Path("big.docx"), "big.docx")
    assert parse_bytes(small, Path("a.docx"), "a.docx").sections  # the cap lets small through
