"""The XML prolog check of Word, Excel, PowerPoint and EPUB files cannot be walked around: an
entity declaration hidden past the 64 KB scan (behind whitespace, a comment or a processing
instruction), or behind a `<a` inside a processing instruction or a quoted DTD name, is
refused like one in plain sight; ordinary prologs still pass."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest

from footnote.ingest.documents import ParseError
from footnote.ingest.parsers import parse_file
from footnote.ingest.parsers.archive import PROLOG_SCAN, prolog_refusal
from tests.test_formats import LAUGHS, with_member
from tests.test_office import make_docx

PAD = PROLOG_SCAN + 4096
DECLARATION = '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
HIDDEN = {
    "whitespace": DECLARATION + " " * PAD + LAUGHS,
    "comment": DECLARATION + "<!--" + "x" * PAD + "-->" + LAUGHS,
    "instruction": DECLARATION + "<?pad " + "x" * PAD + "?>" + LAUGHS,
    "tag_in_instruction": DECLARATION + "<?pad <a ?>" + LAUGHS,
    "tag_in_quoted_name": LAUGHS.replace("<!DOCTYPE lolz [", '<!DOCTYPE lolz SYSTEM "<a" ['),
}


def hostile_docx(tmp_path: Path, prolog: str) -> Path:
    make_docx(tmp_path / "travel.docx")
    good = (tmp_path / "travel.docx").read_bytes()
    document = zipfile.ZipFile(io.BytesIO(good)).read("word/document.xml").decode()
    body = document.partition("?>")[2] if document.startswith("<?xml") else document
    path = tmp_path / "hidden.docx"
    path.write_bytes(with_member(good, "word/document.xml", (prolog + body).encode()))
    return path


@pytest.mark.parametrize("hidden", list(HIDDEN))
def test_a_hidden_entity_declaration_in_a_word_file_is_refused(tmp_path: Path, hidden: str) -> None:
    path = hostile_docx(tmp_path, HIDDEN[hidden])
    with pytest.raises(ParseError, match="refused"):
        parse_file(path, "hidden.docx")


@pytest.mark.parametrize("hidden", list(HIDDEN))
def test_a_hidden_entity_declaration_is_refused_in_any_xml(hidden: str) -> None:
    assert prolog_refusal((HIDDEN[hidden] + "<root/>").encode()[: PROLOG_SCAN + 1])


def test_a_declaration_in_utf16_is_refused() -> None:
    document = '<?xml version="1.0" encoding="UTF-16"?>' + LAUGHS + "<root>&lol9;</root>"
    assert prolog_refusal(document.encode("utf-16")) == "declares entities"
    assert prolog_refusal(document.encode("utf-16-le")) == "declares entities"


@pytest.mark.parametrize(
    "prolog",
    [
        "",
        DECLARATION,
        "\ufeff" + DECLARATION + "\n<!-- made by hand: <a> -->\n",
        "<!DOCTYPE html>",
        "<!doctype html>",
        '<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.1//EN" '
        '"http://www.w3.org/TR/xhtml11/DTD/xhtml11.dtd">',
        "<!DOCTYPE ncx SYSTEM 'odd[name].dtd'>",
        DECLARATION + '<?xml-stylesheet href="a.css"?>',
    ],
)
def test_ordinary_prologs_pass(prolog: str) -> None:
    assert prolog_refusal((prolog + '<root xmlns="urn:x">text</root>').encode()) is None


def test_a_document_whose_prolog_is_all_of_it_passes_to_the_parser() -> None:
    """No root element at all is the parser's to report ("empty"), not a declaration."""
    assert prolog_refusal(DECLARATION.encode() + b"\n") is None
