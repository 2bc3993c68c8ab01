"""The chunker on its own: sizes, ids, and line ranges a citation can be checked against.

Most tests use a word-counting token counter so sizes are easy to reason about and nothing
loads the model; the real tokenizer's limits are tested in test_index_store.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from footnote.ingest.chunking import Chunker, ChunkSettings
from footnote.ingest.documents import ParsedDocument, Section
from footnote.ingest.parsers import parse_file
from footnote.store.text import embedding_text, heading_prefix
from footnote.store.types import Chunk

SMALL = ChunkSettings(max_tokens=48, target_tokens=36, overlap_tokens=6)


class WordCounter:
    """One token per whitespace-separated word, plus [CLS] and [SEP] like the real model."""

    def count_tokens(self, text: str) -> int:
        return len(text.split()) + 2


def chunks_of(doc: ParsedDocument, settings: ChunkSettings = SMALL) -> list[Chunk]:
    return Chunker(WordCounter(), settings).split_document(doc, date=None, access=["everyone"])


def prose(sentences: int, tag: str = "s") -> str:
    return " ".join(
        f"Sentence {tag}{i} talks about keys, rotation and grace periods." for i in range(sentences)
    )


def markdown_chunks(tmp_path: Path, text: str, name: str = "doc.md") -> tuple[list[Chunk], str]:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return chunks_of(parse_file(path, name)), text


def assert_lines_true(chunks: list[Chunk], text: str) -> None:
    """Each chunk sits exactly on the lines it claims: starts on the first, ends on the last."""
    lines = text.split("\n")
    for chunk in chunks:
        assert chunk.lines is not None, chunk.id
        first, last = chunk.lines
        assert 1 <= first <= last <= len(lines), (chunk.id, chunk.lines)
        assert chunk.text.count("\n") == last - first, (chunk.id, chunk.lines)
        span = "\n".join(lines[first - 1 : last])
        # Same number of line breaks as the span and inside it: starts on `first`, ends on `last`.
        assert chunk.text in span, (chunk.id, chunk.lines, chunk.text[:60])


def test_short_section_is_one_chunk_with_a_readable_id() -> None:
    doc = ParsedDocument(
        source="guide/keys.md",
        title="API keys",
        sections=[Section(text="  Rotate every 90 days.  ", headings=["API keys", "Rotation"],
                          anchor="rotation", line_start=3, line_end=3)],
    )  # fmt: skip

    [chunk] = chunks_of(doc)

    assert chunk.id == "guide/keys.md#rotation:0"
    assert chunk.text == "Rotate every 90 days."
    assert chunk.section == "API keys > Rotation"
    assert chunk.lines == [3, 3]
    assert chunk.access == ["everyone"]
    assert embedding_text(chunk) == "API keys > Rotation\nRotate every 90 days."


@pytest.mark.parametrize(
    ("title", "section", "expected"),
    [
        ("Guide", "", "Guide"),
        ("Guide", "Guide", "Guide"),
        ("Guide", "Guide > Setup", "Guide > Setup"),
        ("Guide", "Setup > Linux", "Guide > Setup > Linux"),
    ],
)
def test_heading_prefix(title: str, section: str, expected: str) -> None:
    assert heading_prefix(title, section) == expected


def test_long_section_splits_within_budget_without_losing_words() -> None:
    text = prose(40)
    doc = ParsedDocument(
        source="doc.txt", title="Doc", sections=[Section(text=text, line_start=1, line_end=1)]
    )

    chunks = chunks_of(doc)

    assert len(chunks) > 3
    assert [c.id for c in chunks] == [f"doc.txt#top:{i}" for i in range(len(chunks))]
    counter = WordCounter()
    assert all(counter.count_tokens(embedding_text(c)) <= SMALL.max_tokens for c in chunks)
    assert set(text.split()) == {w for c in chunks for w in c.text.split()}


def test_heading_prefix_counts_against_the_budget() -> None:
    settings = ChunkSettings(max_tokens=80, target_tokens=60, overlap_tokens=6)
    text = prose(30)
    short = ParsedDocument(source="a.md", title="A", sections=[Section(text=text)])
    long_title = " ".join(["Considerably"] * 30)
    long = ParsedDocument(source="a.md", title=long_title, sections=[Section(text=text)])

    short_chunks, long_chunks = chunks_of(short, settings), chunks_of(long, settings)

    assert len(long_chunks) > len(short_chunks)
    counter = WordCounter()
    for chunk in long_chunks:
        assert counter.count_tokens(embedding_text(chunk)) <= settings.max_tokens
    assert [c.text for c in long_chunks if not c.text.endswith(".")] == [], "a chunk was cut"


def test_empty_sections_make_no_chunks() -> None:
    doc = ParsedDocument(
        source="a.md",
        title="A",
        sections=[Section(text=" \n\n ", headings=["A"]), Section(text="Body.", headings=["B"])],
    )
    assert [c.id for c in chunks_of(doc)] == ["a.md#b:0"]


def test_ids_for_sections_without_headings() -> None:
    pdf = ParsedDocument(
        source="manual.pdf",
        title="Manual",
        sections=[Section(text="Page three.", page=3), Section(text="Page four.", page=4)],
    )
    text = ParsedDocument(source="notes.txt", title="Notes", sections=[Section(text="Hello.")])

    assert [c.id for c in chunks_of(pdf)] == ["manual.pdf#page-3:0", "manual.pdf#page-4:0"]
    assert [c.page for c in chunks_of(pdf)] == [3, 4]
    assert [c.id for c in chunks_of(text)] == ["notes.txt#top:0"]


def test_duplicate_headings_get_distinct_ids(tmp_path: Path) -> None:
    text = "\n".join(
        [
            "# Recipes", "",
            "## Example", "", "First example.", "",
            "## Example", "", "Second example.", "",
            "## Example 1", "", "A heading that slugs like a repeat.", "",
            "## Example", "", "Third example.", "",
        ]
    )  # fmt: skip
    chunks, _ = markdown_chunks(tmp_path, text)

    ids = [c.id for c in chunks]
    assert len(ids) == len(set(ids)) == 4
    assert ids[0] == "doc.md#example:0"
    assert all(re.fullmatch(r"doc\.md#example[\w-]*:0", i) for i in ids)
    assert [c.text for c in chunks] == [
        "First example.", "Second example.", "A heading that slugs like a repeat.",
        "Third example.",
    ]  # fmt: skip


def test_duplicate_anchorless_headings_get_distinct_ids() -> None:
    doc = ParsedDocument(
        source="a.txt",
        title="A",
        sections=[
            Section(text="One.", headings=["Intro"]),
            Section(text="Two.", headings=["Intro"]),
        ],
    )
    assert [c.id for c in chunks_of(doc)] == ["a.txt#intro:0", "a.txt#intro-1:0"]


def test_markdown_line_ranges_match_the_file(tmp_path: Path) -> None:
    paragraphs = "\n\n".join(prose(4, f"p{i}-") for i in range(6))
    wrapped = "\n".join(f"Line {i} of a hard-wrapped paragraph on key rotation." for i in range(30))
    text = "\n".join(
        [
            "---", "title: Line ranges", "date: 2026-01-05", "---",
            "# Line ranges", "", "Intro line.", "",
            "## Paragraphs", "", "", paragraphs, "", "",
            "## Wrapped", wrapped, "",
            "## Code", "", "```python", *[f"x_{i} = compute({i})" for i in range(40)], "```",
            "", "## Tail", "", "   Indented last line.   ", "",
        ]
    )  # fmt: skip
    chunks, text = markdown_chunks(tmp_path, text)

    assert len(chunks) > 8
    assert_lines_true(chunks, text)
    intro = next(c for c in chunks if c.text == "Intro line.")
    assert intro.lines == [7, 7]


def test_repeated_paragraphs_get_their_own_line_ranges(tmp_path: Path) -> None:
    paragraph = "The same paragraph appears again and again in this file, word for word."
    text = "# Doc\n\n## Repeats\n\n" + "\n\n".join([paragraph] * 8) + "\n"
    chunks, text = markdown_chunks(tmp_path, text)

    assert len(chunks) > 2
    assert_lines_true(chunks, text)
    starts = [c.lines[0] for c in chunks if c.lines]
    assert starts == sorted(set(starts)), "a repeat was placed on an earlier copy's lines"


def test_code_splits_on_definitions(tmp_path: Path) -> None:
    functions = [
        f"def step_{i}(value):\n    total = value + {i}\n    return total * 2\n" for i in range(30)
    ]
    text = "\n\n".join(functions)
    path = tmp_path / "steps.py"
    path.write_text(text, encoding="utf-8")

    chunks = chunks_of(parse_file(path, "steps.py"))

    assert len(chunks) > 2
    assert all(c.text.startswith("def ") for c in chunks)
    assert_lines_true(chunks, text)


def test_split_is_deterministic(tmp_path: Path) -> None:
    text = "# Doc\n\n## Body\n\n" + "\n\n".join(prose(5, f"p{i}-") for i in range(5)) + "\n"
    first, _ = markdown_chunks(tmp_path, text, "a.md")
    second, _ = markdown_chunks(tmp_path, text, "a.md")
    assert [c.to_dict() for c in first] == [c.to_dict() for c in second]


MERGING = ChunkSettings(max_tokens=48, target_tokens=36, overlap_tokens=6, merge_sections=True)


def test_small_sections_are_merged_up_to_the_target_keeping_their_headings() -> None:
    doc = ParsedDocument(
        source="api.md",
        title="API",
        sections=[
            Section(text="Intro words here.", headings=["Keys"], anchor="keys"),
            Section(text="Rotate monthly.", headings=["Keys", "Rotation"], anchor="rotation"),
            Section(text="Use the vault.", headings=["Keys", "Storage"], anchor="storage"),
            Section(text=prose(4), headings=["Keys", "Long"], anchor="long"),
            Section(text="Other topic.", headings=["Billing"], anchor="billing"),
            Section(text="Tiny.", headings=["Billing"], anchor="billing", page=2),
        ],
    )
    merged = chunks_of(doc, MERGING)
    first = merged[0]
    assert (first.id, first.section, first.anchor) == ("api.md#keys:0", "Keys", "keys")
    assert first.text == "Intro words here.\n\nRotation\nRotate monthly.\n\nStorage\nUse the vault."
    assert WordCounter().count_tokens(embedding_text(first)) <= MERGING.target_tokens
    # The long section is split as before; another top-level section joins only on its page.
    unmerged = chunks_of(doc)
    long_ids = [c.id for c in unmerged if c.anchor == "long"]
    assert [c.id for c in merged if c.anchor == "long"] == long_ids and len(long_ids) > 1
    assert [(c.section, c.page) for c in merged if c.section == "Billing"] == [
        ("Billing", None),
        ("Billing", 2),
    ]
    assert len(merged) == len(unmerged) - 2
    # Every word of every section is still in some chunk.
    words = {w for s in doc.sections for w in s.text.split()}
    assert words <= {w for c in merged for w in c.text.split()}
