"""Parsers keep the structure a citation needs and fail with a reason, never a crash."""

from __future__ import annotations

import io
import pathlib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pypdf import PdfReader, PdfWriter

from footnote.ingest.documents import ParsedDocument, ParseError, Section
from footnote.ingest.parsers import SUPPORTED_SUFFIXES, is_supported, parse_file

FIXTURES = Path(__file__).parent / "fixtures" / "parsers"

# Text that only Sphinx page chrome produces in the HTML fixture.
NAV_TEXT = [
    "Navigation", "Table of Contents", "MOBILE-TOC", "SIDEBAR-TOC", "CONTENTS-BOX",
    "index", "modules", "next", "previous", "Previous topic", "Next topic",
    "Generic Operating System Services", "Core tools for working with streams",
    "This Page", "Report a Bug", "Show Source", "Quick search", "Go", "«", "»", "¶",
    "Copyright", "Last updated on", "Found a bug", "Created using", "Sphinx",
    "3.11.2 Documentation", "Python Software Foundation", "display: none", "doctools",
]  # fmt: skip


# tmp_path is shared by a property test's examples; each example overwrites its file.
PROPERTY_SETTINGS: dict[str, Any] = {
    "deadline": None,
    "suppress_health_check": [HealthCheck.function_scoped_fixture],
}


def by_heading(doc: ParsedDocument) -> dict[tuple[str, ...], Section]:
    return {tuple(section.headings): section for section in doc.sections}


# --- Markdown ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def handbook() -> ParsedDocument:
    return parse_file(FIXTURES / "handbook.md", "handbook/keys.md")


def test_markdown_front_matter_fields(handbook: ParsedDocument) -> None:
    # `title: Handbook: API keys` is not valid YAML; the simple reading still works.
    assert handbook.source == "handbook/keys.md"
    assert handbook.title == "Handbook: API keys"
    assert handbook.date == "2024-03-05"
    assert handbook.access == ["engineering", "security"]
    assert handbook.metadata == {"owner": "platform-team", "tags": ["keys", "secrets"]}


def test_markdown_heading_paths_anchors_and_lines(handbook: ParsedDocument) -> None:
    got = [(s.headings, s.anchor, s.line_start, s.line_end) for s in handbook.sections]
    assert got == [
        ([], None, 8, 8),
        (["API keys"], "api-keys", 12, 12),
        (["API keys", "Rotation"], "rotation", 16, 26),
        (["API keys", "Rotation", "Emergency rotation"], "emergency-rotation", 30, 30),
        (["API keys", "The vault CLI"], "the-vault-cli", 34, 34),
        (["Rotation"], "rotation-1", 38, 38),
    ]


def test_markdown_code_fences_are_not_split_on_hash_lines(handbook: ParsedDocument) -> None:
    rotation = by_heading(handbook)[("API keys", "Rotation")]
    assert "# this is a shell comment, not a heading" in rotation.text
    assert "## neither is this" in rotation.text
    assert "# tilde fence, still code" in rotation.text
    assert not any("comment" in h or "tilde" in h for s in handbook.sections for h in s.headings)


def test_markdown_section_text_is_exactly_its_line_range(handbook: ParsedDocument) -> None:
    lines = (FIXTURES / "handbook.md").read_text().split("\n")
    for section in handbook.sections:
        assert section.line_start is not None and section.line_end is not None
        assert section.text == "\n".join(lines[section.line_start - 1 : section.line_end])
        assert not section.text.lstrip().startswith("#"), "heading line leaked into text"


def write(tmp_path: Path, name: str, content: str | bytes) -> Path:
    path = tmp_path / name
    if isinstance(content, str):
        path.write_text(content, encoding="utf-8")
    else:
        path.write_bytes(content)
    return path


def test_markdown_yaml_front_matter(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "doc.md",
        "---\ntitle: 'Quoted: title'\ndate: 2023-01-02T10:30:00\naccess: hr, finance\n"
        "reviewed: 2023-05-06\nweight: 3\n---\n# Ignored H1\nBody.\n",
    )
    doc = parse_file(path, "doc.md")
    assert doc.title == "Quoted: title"
    assert doc.date == "2023-01-02T10:30:00"
    assert doc.access == ["hr", "finance"]
    assert doc.metadata == {"reviewed": "2023-05-06", "weight": 3}
    assert doc.sections[0].line_start == 9


@pytest.mark.parametrize(
    ("access_line", "expected"),
    [
        ("access: [eng]", ["eng"]),
        ("access: eng", ["eng"]),
        ("access: []", []),
        ("access:", []),
        ("access: {team: eng}", []),
        ("access: [[eng]]", []),
        # YAML fails on the tag and the line fallback must not read it as a group name
        ("access: !!python/object---\n/apply:os.system [hr]", []),
        ("access: *everyone\nx: [", []),
    ],
)
def test_markdown_malformed_access_fails_closed(
    tmp_path: Path, access_line: str, expected: list[str]
) -> None:
    path = write(tmp_path, "doc.md", f"---\n{access_line}\n---\nBody.\n")
    assert parse_file(path, "doc.md").access == expected


def test_markdown_unreadable_front_matter_with_access_fails_closed(tmp_path: Path) -> None:
    path = write(tmp_path, "doc.md", "---\naccess: [hr\n  nested: {broken\n---\nBody.\n")
    doc = parse_file(path, "doc.md")
    assert doc.access == []
    assert [(s.text, s.line_start) for s in doc.sections] == [("Body.", 5)]


def test_markdown_leading_rule_without_front_matter_is_body(tmp_path: Path) -> None:
    path = write(tmp_path, "doc.md", "---\nJust a rule, then prose.\n---\nMore.\n")
    doc = parse_file(path, "doc.md")
    assert doc.access is None and doc.metadata == {}
    assert doc.sections[0].line_start == 1


def test_markdown_without_front_matter_title_falls_back(tmp_path: Path) -> None:
    with_h1 = write(tmp_path, "a.md", "Preface.\n\n## Minor\n\ntext\n\n# Main title #\n\nmore\n")
    without = write(tmp_path, "setup-guide.md", "## Only minor\n\ntext\n")
    assert parse_file(with_h1, "a.md").title == "Main title"
    assert parse_file(without, "setup-guide.md").title == "setup-guide"
    assert parse_file(without, "setup-guide.md").access is None
    assert parse_file(without, "setup-guide.md").date is None


def test_markdown_unparseable_date_stays_in_metadata(tmp_path: Path) -> None:
    path = write(tmp_path, "doc.md", "---\ndate: last Tuesday\n---\nBody.\n")
    doc = parse_file(path, "doc.md")
    assert doc.date is None
    assert doc.metadata == {"date": "last Tuesday"}


def test_markdown_crlf_and_bom(tmp_path: Path) -> None:
    path = write(tmp_path, "doc.md", b"\xef\xbb\xbf# Title\r\n\r\nBody line.\r\n")
    doc = parse_file(path, "doc.md")
    assert doc.title == "Title"
    assert [(s.text, s.line_start, s.line_end) for s in doc.sections] == [("Body line.", 3, 3)]


def test_markdown_unclosed_fence_swallows_rest(tmp_path: Path) -> None:
    path = write(tmp_path, "doc.md", "# A\n\n```\n# not a heading\n")
    doc = parse_file(path, "doc.md")
    assert [s.headings for s in doc.sections] == [["A"]]


def test_markdown_headings_only_has_no_text(tmp_path: Path) -> None:
    path = write(tmp_path, "doc.md", "---\ntitle: x\n---\n# A\n\n## B\n")
    with pytest.raises(ParseError, match="no text found"):
        parse_file(path, "doc.md")


markdown_lines = st.lists(
    st.one_of(
        st.sampled_from(["", "# H1", "## H2", "### H3 ###", "```", "~~~", "#notheading", "---"]),
        st.text(alphabet="ab #`~\t-", max_size=12),
    ),
    max_size=30,
)


@settings(max_examples=200, **PROPERTY_SETTINGS)
@given(lines=markdown_lines)
def test_markdown_sections_always_match_their_lines(tmp_path: Path, lines: list[str]) -> None:
    content = "\n".join(lines) + "\n"
    path = write(tmp_path, "prop.md", content)
    try:
        doc = parse_file(path, "prop.md")
    except ParseError as exc:
        assert str(exc).startswith("no text found")
        return
    source_lines = content.split("\n")
    previous_end = 0
    for section in doc.sections:
        assert section.line_start is not None and section.line_end is not None
        assert previous_end < section.line_start <= section.line_end
        assert section.text == "\n".join(source_lines[section.line_start - 1 : section.line_end])
        assert section.text.strip()
        previous_end = section.line_end


# --- HTML ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sphinx_page() -> ParsedDocument:
    return parse_file(FIXTURES / "sphinx_os.html", "library/os.html")


def test_html_title_and_date(sphinx_page: ParsedDocument) -> None:
    assert sphinx_page.title == "os — Miscellaneous operating system interfaces"
    assert sphinx_page.date == "2023-02-08"


@pytest.mark.parametrize("marker", NAV_TEXT)
def test_html_boilerplate_never_reaches_a_section(sphinx_page: ParsedDocument, marker: str) -> None:
    for section in sphinx_page.sections:
        assert marker not in section.text, f"{marker!r} leaked into {section.url}"
        assert all(marker not in heading for heading in section.headings)


def test_html_sections_follow_headings_and_api_entries(sphinx_page: ParsedDocument) -> None:
    top = "os — Miscellaneous operating system interfaces"
    got = [(s.headings, s.anchor, s.url) for s in sphinx_page.sections]
    assert got == [
        ([top], "module-os", "library/os.html#module-os"),
        ([top, "Process Parameters"], "process-parameters", "library/os.html#process-parameters"),
        ([top, "Process Parameters", "os.getcwd()"], "os.getcwd", "library/os.html#os.getcwd"),
        ([top, "Process Parameters", "os.PathLike"], "os.PathLike", "library/os.html#os.PathLike"),
        (
            [top, "Process Parameters", "os.PathLike", "__fspath__()"],
            "os.PathLike.__fspath__",
            "library/os.html#os.PathLike.__fspath__",
        ),
        ([top, "Files and Directories"], "files-and-directories",
         "library/os.html#files-and-directories"),
    ]  # fmt: skip
    for section in sphinx_page.sections:
        assert section.line_start is None and section.page is None and not section.is_code


def test_html_api_entry_text(sphinx_page: ParsedDocument) -> None:
    getcwd = next(s for s in sphinx_page.sections if s.anchor == "os.getcwd")
    assert getcwd.text == (
        "os.getcwd()\n\nReturn a string representing the current working directory."
    )
    params = next(s for s in sphinx_page.sections if s.anchor == "process-parameters")
    assert "Text after the API entries still belongs to Process Parameters." in params.text
    assert "current working directory" not in params.text


def test_html_keeps_content_boxes_and_normalises_prose(sphinx_page: ParsedDocument) -> None:
    intro = sphinx_page.sections[0].text
    assert "Abstract\n\nThis module provides a portable way" in intro
    assert "Notes on the availability of these functions:" in intro
    assert "- All functions accepting path names accept bytes and strings.\n- On VxWorks" in intro
    files = sphinx_page.sections[-1].text
    assert "Footnote text is content and must survive." in files
    assert "Flag | Meaning\nO_RDONLY | open for reading only" in files


def test_html_pre_keeps_line_breaks(sphinx_page: ParsedDocument) -> None:
    files = sphinx_page.sections[-1].text
    assert 'import os\nfor name in os.listdir("."):\n    print(name)' in files


def test_html_generic_page(tmp_path: Path) -> None:
    page = """<html><head><title>Deploy guide</title></head><body>
    <header><a href="/">Site home</a></header>
    <nav>Docs | Blog</nav>
    <main>
      <h1 id="deploy">Deploy</h1><p>Ship it.</p>
      <aside>Related posts</aside>
      <h2><a name="rollback"></a>Rollback</h2><p>Revert the tag.</p>
      <h2>No anchor</h2><p>Plain.</p>
    </main>
    <footer>All rights reserved</footer></body></html>"""
    doc = parse_file(write(tmp_path, "deploy.html", page), "ops/deploy.html")
    assert doc.title == "Deploy guide"
    got = [(s.headings, s.anchor, s.url, s.text) for s in doc.sections]
    assert got == [
        (["Deploy"], "deploy", "ops/deploy.html#deploy", "Ship it."),
        (["Deploy", "Rollback"], "rollback", "ops/deploy.html#rollback", "Revert the tag."),
        (["Deploy", "No anchor"], None, "ops/deploy.html", "Plain."),
    ]


def test_html_list_item_prefix_does_not_leak(tmp_path: Path) -> None:
    page = "<main><ul><li><pre>make deploy</pre></li></ul><p>After the list.</p></main>"
    doc = parse_file(write(tmp_path, "x.html", page), "x.html")
    assert doc.sections[0].text == "make deploy\n\nAfter the list."


def test_html_declared_charset_is_honoured(tmp_path: Path) -> None:
    page = '<html><head><meta charset="iso-8859-1"></head><body><p>caf\xe9</p></body></html>'
    doc = parse_file(write(tmp_path, "latin.html", page.encode("latin-1")), "latin.html")
    assert doc.sections[0].text == "café"


def test_html_without_text(tmp_path: Path) -> None:
    page = "<html><body><nav>Home</nav><script>var x = 1;</script></body></html>"
    with pytest.raises(ParseError, match="no text found"):
        parse_file(write(tmp_path, "empty.html", page), "empty.html")


# --- PDF -----------------------------------------------------------------------------


def _pdf_string(text: str) -> bytes:
    escaped = text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
    return b"(" + escaped.encode("latin-1") + b")"


def make_pdf(
    pages: list[list[str]],
    *,
    title: str | None = None,
    outline: list[tuple[str, int]] | None = None,
) -> bytes:
    """A minimal but valid PDF: Helvetica text, optional /Title and flat outline."""
    outline = outline or []
    page_ids = [4 + 2 * i for i in range(len(pages))]
    next_id = 4 + 2 * len(pages)
    outline_root = next_id if outline else None
    item_ids = [next_id + 1 + i for i in range(len(outline))]
    info_id = next_id + 1 + len(outline) if outline else next_id

    objects: dict[int, bytes] = {}
    catalog = b"<< /Type /Catalog /Pages 2 0 R"
    if outline_root:
        catalog += b" /Outlines %d 0 R /PageMode /UseOutlines" % outline_root
    objects[1] = catalog + b" >>"
    kids = b" ".join(b"%d 0 R" % pid for pid in page_ids)
    objects[2] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, len(pages))
    objects[3] = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"
    for pid, lines in zip(page_ids, pages, strict=True):
        ops = (
            b"BT /F1 12 Tf 14 TL 72 720 Td "
            + b" ".join(_pdf_string(line) + b" Tj T*" for line in lines)
            + b" ET"
        )
        objects[pid] = (
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            b"/Resources << /Font << /F1 3 0 R >> >> /Contents %d 0 R >>" % (pid + 1)
        )
        objects[pid + 1] = b"<< /Length %d >>\nstream\n%s\nendstream" % (len(ops), ops)
    if outline_root:
        objects[outline_root] = b"<< /Type /Outlines /First %d 0 R /Last %d 0 R /Count %d >>" % (
            item_ids[0],
            item_ids[-1],
            len(item_ids),
        )
        for index, ((label, page), oid) in enumerate(zip(outline, item_ids, strict=True)):
            item = b"<< /Title %s /Parent %d 0 R /Dest [%d 0 R /Fit]" % (
                _pdf_string(label),
                outline_root,
                page_ids[page - 1],
            )
            if index > 0:
                item += b" /Prev %d 0 R" % item_ids[index - 1]
            if index < len(item_ids) - 1:
                item += b" /Next %d 0 R" % item_ids[index + 1]
            objects[oid] = item + b" >>"
    objects[info_id] = b"<< /Title %s >>" % _pdf_string(title) if title else b"<< >>"

    out = io.BytesIO()
    out.write(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = {}
    for number in sorted(objects):
        offsets[number] = out.tell()
        out.write(b"%d 0 obj\n%s\nendobj\n" % (number, objects[number]))
    xref = out.tell()
    size = max(objects) + 1
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % size)
    for number in range(1, size):
        out.write(b"%010d 00000 n \n" % offsets[number])
    out.write(b"trailer\n<< /Size %d /Root 1 0 R /Info %d 0 R >>\n" % (size, info_id))
    out.write(b"startxref\n%d\n%%%%EOF\n" % xref)
    return out.getvalue()


THREE_PAGES = [
    ["Incident response handbook", "Who to call first."],
    ["Escalation", "Page the security lead within 15 minutes."],
    ["Postmortems (blameless)", "Write one within five days."],
]


def test_generated_pdf_is_valid() -> None:
    reader = PdfReader(io.BytesIO(make_pdf(THREE_PAGES)), strict=True)
    assert len(reader.pages) == 3
    assert "Escalation" in reader.pages[1].extract_text()


def test_pdf_pages_outline_and_title(tmp_path: Path) -> None:
    data = make_pdf(
        THREE_PAGES,
        title="Incident Handbook",
        outline=[("Overview", 1), ("Escalation", 2)],
    )
    doc = parse_file(write(tmp_path, "incidents.pdf", data), "security/incidents.pdf")
    assert doc.title == "Incident Handbook"
    assert doc.source == "security/incidents.pdf"
    assert [s.page for s in doc.sections] == [1, 2, 3]
    assert [s.headings for s in doc.sections] == [["Overview"], ["Escalation"], ["Escalation"]]
    assert "Page the security lead within 15 minutes." in doc.sections[1].text
    assert "Postmortems (blameless)" in doc.sections[2].text
    assert all(s.line_start is None and s.anchor is None for s in doc.sections)


def test_pdf_without_metadata_uses_first_line(tmp_path: Path) -> None:
    doc = parse_file(write(tmp_path, "x.pdf", make_pdf(THREE_PAGES)), "x.pdf")
    assert doc.title == "Incident response handbook"
    assert all(s.headings == [] for s in doc.sections)


def test_pdf_blank_pages_keep_numbering(tmp_path: Path) -> None:
    doc = parse_file(write(tmp_path, "x.pdf", make_pdf([[], ["Only page two"], []])), "x.pdf")
    assert [(s.page, s.text) for s in doc.sections] == [(2, "Only page two")]


def test_pdf_without_text_layer(tmp_path: Path) -> None:
    writer = PdfWriter()
    writer.add_blank_page(width=612, height=792)
    buffer = io.BytesIO()
    writer.write(buffer)
    with pytest.raises(ParseError, match="no text found"):
        parse_file(write(tmp_path, "scan.pdf", buffer.getvalue()), "scan.pdf")


def _encrypted(user_password: str) -> bytes:
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(make_pdf(THREE_PAGES))))
    writer.encrypt(user_password=user_password, owner_password="owner", algorithm="RC4-128")
    buffer = io.BytesIO()
    writer.write(buffer)
    return buffer.getvalue()


def test_pdf_with_password_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ParseError, match="encrypted PDF"):
        parse_file(write(tmp_path, "secret.pdf", _encrypted("secret")), "secret.pdf")


def test_pdf_encrypted_with_empty_password_is_read(tmp_path: Path) -> None:
    doc = parse_file(write(tmp_path, "locked.pdf", _encrypted("")), "locked.pdf")
    assert [s.page for s in doc.sections] == [1, 2, 3]


@pytest.mark.parametrize(
    "data",
    [
        b"%PDF-1.4\ngarbage",
        b"not a pdf at all",
        make_pdf(THREE_PAGES)[:200],
        make_pdf(THREE_PAGES)[:-60],
        b"%PDF-1.4\n1 0 obj\n<< /Type /Catalog >>\nendobj\n%%EOF\n",
    ],
)
def test_corrupt_pdf(tmp_path: Path, data: bytes) -> None:
    with pytest.raises(ParseError, match="^corrupt PDF: ."):
        parse_file(write(tmp_path, "bad.pdf", data), "bad.pdf")


# --- code and plain text -------------------------------------------------------------


def test_code_file_is_one_code_section() -> None:
    doc = parse_file(FIXTURES / "rotate_keys.py", "tools/rotate_keys.py")
    assert doc.title == "rotate_keys.py"
    [section] = doc.sections
    assert section.is_code
    assert section.headings == []
    assert (section.line_start, section.line_end) == (1, 8)
    assert section.text == (FIXTURES / "rotate_keys.py").read_text().rstrip("\n")


def test_text_file_is_one_section_titled_by_first_line() -> None:
    doc = parse_file(FIXTURES / "release-notes.txt", "release-notes.txt")
    assert doc.title == "Release notes"
    [section] = doc.sections
    assert not section.is_code
    assert (section.line_start, section.line_end) == (1, 4)
    assert section.text.endswith("Upgrade before March.")


def test_text_line_range_skips_blank_edges(tmp_path: Path) -> None:
    doc = parse_file(write(tmp_path, "README", "\n\n  \nHello\nworld\n\n\n"), "README")
    [section] = doc.sections
    assert (section.text, section.line_start, section.line_end) == ("Hello\nworld", 4, 5)
    assert doc.title == "Hello"


def test_long_first_line_title_is_trimmed(tmp_path: Path) -> None:
    doc = parse_file(write(tmp_path, "notes.txt", "x" * 300 + "\n"), "notes.txt")
    assert doc.title == "x" * 100


# --- errors --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "content", "reason"),
    [
        ("empty.md", b"", "empty file"),
        ("blank.md", b"  \n\n\t\n", "no text found"),
        ("blank.txt", b"\n\n", "no text found"),
        ("binary.txt", b"abc\x00def", "binary file"),
        ("binary.py", b"\x7fELF\x00\x00\x00", "binary file"),
        ("binary.html", b"<html>\x00</html>", "binary file"),
        ("latin1.md", "café".encode("latin-1"), "not valid UTF-8 text"),
        ("latin1.html", "<p>café</p>".encode("latin-1"), "not valid UTF-8 text"),
        ("data.json", b"{}", "no text found"),
        ("backup.ZIP", b"PK\x03\x04", "unsupported file type .zip"),
        ("song.mp3", b"ID3", "unsupported file type .mp3"),
        ("bad.pdf", b"%PDF-1.7\n%%EOF", "corrupt PDF"),
    ],
)
def test_bad_input_raises_parse_error(
    tmp_path: Path, name: str, content: bytes, reason: str
) -> None:
    with pytest.raises(ParseError) as caught:
        parse_file(write(tmp_path, name, content), name)
    assert str(caught.value).startswith(reason)


def test_file_too_large(tmp_path: Path) -> None:
    path = write(tmp_path, "big.txt", "a" * 101)
    with pytest.raises(ParseError, match=r"^file too large: 101 bytes > limit 100$"):
        parse_file(path, "big.txt", max_bytes=100)
    assert parse_file(path, "big.txt", max_bytes=101).sections[0].text == "a" * 101


def test_permission_denied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # chmod 000 does not stop root, so simulate the OS refusing the read.
    path = write(tmp_path, "secret.md", "# Secret\n\nbody\n")

    def refuse(self: pathlib.Path, *args: object, **kwargs: object) -> object:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(pathlib.Path, "open", refuse)
    monkeypatch.setattr(pathlib.Path, "read_bytes", refuse)
    with pytest.raises(ParseError, match="^permission denied$"):
        parse_file(path, "secret.md")


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(ParseError, match="file not found"):
        parse_file(tmp_path / "gone.md", "gone.md")
    (tmp_path / "folder.md").mkdir()
    with pytest.raises(ParseError, match="not a regular file"):
        parse_file(tmp_path / "folder.md", "folder.md")


def test_hostile_yaml_front_matter(tmp_path: Path) -> None:
    levels = ['a: &a ["x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    for depth in range(1, 9):
        prev = chr(ord("a") + depth - 1)
        cur = chr(ord("a") + depth)
        levels.append(f"{cur}: &{cur} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]")
    path = write(tmp_path, "bomb.md", "---\n" + "\n".join(levels) + "\n---\nBody.\n")
    with pytest.raises(ParseError, match="front matter too complex"):
        parse_file(path, "bomb.md")


@settings(max_examples=150, **PROPERTY_SETTINGS)
@given(
    suffix=st.sampled_from([".md", ".txt", ".py", ".html", ".pdf", ""]),
    data=st.one_of(
        st.binary(max_size=300),
        st.text(max_size=300).map(lambda t: t.encode("utf-8")),
        st.sampled_from([b"%PDF-1.4\n", b"<html><body>", b"---\naccess: [\n---\n"]).flatmap(
            lambda head: st.binary(max_size=200).map(lambda tail: head + tail)
        ),
    ),
)
def test_any_bytes_give_a_document_or_a_parse_error(
    tmp_path: Path, suffix: str, data: bytes
) -> None:
    path = write(tmp_path, f"fuzz{suffix}", data)
    try:
        doc = parse_file(path, f"fuzz{suffix}")
    except ParseError as exc:
        assert str(exc)
        return
    assert doc.sections and all(section.text.strip() for section in doc.sections)


# --- suffixes ------------------------------------------------------------------------


def test_supported_suffixes() -> None:
    for suffix in (".md", ".markdown", ".txt", ".rst", ".py", ".ts", ".yaml", ".html", ".pdf"):
        assert suffix in SUPPORTED_SUFFIXES
        assert is_supported(Path(f"dir/file{suffix.upper()}"))
    for suffix in (".csv", ".xlsx", ".json", ".jsonl", ".eml", ".mbox", ".epub", ".png"):
        assert is_supported(Path(f"dir/file{suffix.upper()}"))
    assert ".zip" not in SUPPORTED_SUFFIXES
    assert not is_supported(Path("backup.zip"))
    assert not is_supported(Path("song.mp3"))
    assert is_supported(Path("docs/README"))
    assert not is_supported(Path(".gitignore"))
