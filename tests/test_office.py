"""DOCX and PPTX with their structure: Word headings become sections with anchors, slides
become sections cited by slide number. The fixtures are built here with python-docx and
python-pptx, then ingested on both backends."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from footnote.ingest.parsers import parse_file
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
    doc = parse_file(path, "many.docx")
    anchors = [s.anchor for s in doc.sections]
    assert anchors[:3] == ["same", "same-1", "same-2"] and len(set(anchors)) == 31
    assert anchors[-1] == "same-1-1"  # a heading whose own slug was taken by a repeat
    assert doc.sections[0].text == "Body 0, with a\ttab." and doc.sections[0].headings == ["Same"]
