"""Citation parsing: what counts as a citation, and what is removed."""

from __future__ import annotations

import pytest
from langchain_core.documents import Document

from footnote.graph.citations import citation_entries, in_order_of_use, renumbered, verify

THREE = [
    Document(page_content=f"text {n}", metadata={"chunk_id": f"doc.md#s:{n}", "source": "doc.md"})
    for n in range(3)
]


@pytest.mark.parametrize(
    ("answer", "cleaned", "valid", "invalid"),
    [
        ("Keys rotate every 90 days [1].", "Keys rotate every 90 days [1].", [1], []),
        ("Both [1][3] agree.", "Both [1][3] agree.", [1, 3], []),
        ("Listed [2, 3].", "Listed [2][3].", [2, 3], []),
        ("A grace period [2][7].", "A grace period [2].", [2], [7]),
        ("Nothing backs this [9].", "Nothing backs this.", [], [9]),
        ("Index with a[1] or m[0][5] first [1].", "Index with a[1] or m[0][5] first [1].", [1], []),
    ],
)
def test_verify(answer: str, cleaned: str, valid: list[int], invalid: list[int]) -> None:
    assert verify(answer, THREE) == (cleaned, valid, invalid)


def test_entries_name_the_cited_chunks() -> None:
    entries = citation_entries([2], THREE)
    assert entries == [
        {
            "n": 2,
            "chunk_id": "doc.md#s:1",
            "source": "doc.md",
            "title": None,
            "section": None,
            "url": None,
            "kind": "document",
            "text": "text 1",
        }
    ]


def test_footnote_marks_in_quoted_text_are_not_taken_for_citations() -> None:
    from footnote.graph.citations import strip_citation_marks

    quoted = strip_citation_marks("Floats are approximations [5] of reals; use a[1].")
    assert quoted == "Floats are approximations of reals; use a[1]."
    assert verify(f"{quoted} [1]", THREE) == (f"{quoted} [1]", [1], [])


def test_sources_are_numbered_in_the_order_the_answer_cites_them() -> None:
    """A source the answer was given but does not quote leaves no gap: [1] [2], not [1] [3]."""
    docs = [Document(page_content=f"source {i}", id=f"d{i}") for i in range(1, 5)]
    answer = "Tokens last one hour. [3] Keys last 90 days. [1][3]\n\nUnknown. [7]"
    text, ordered, new = in_order_of_use(answer, docs)
    assert text == "Tokens last one hour. [1] Keys last 90 days. [2][1]\n\nUnknown. [7]"
    assert [d.id for d in ordered] == ["d3", "d1", "d2", "d4"]
    assert new == [2, 3, 1, 4]
    cleaned, valid, _ = verify(text, ordered)
    assert valid == [1, 2] and cleaned.startswith("Tokens last one hour. [1]")


def test_brackets_in_quoted_code_are_not_renumbered() -> None:
    docs = [Document(page_content="a"), Document(page_content="b")]
    answer = "deploy.py, lines 3–4 [2]:\n```python\nhost = sys.argv[1]\nports = [8080]\n```"
    text, _, _ = in_order_of_use(answer, docs)
    assert text == "deploy.py, lines 3–4 [1]:\n```python\nhost = sys.argv[1]\nports = [8080]\n```"
    assert renumbered("see [1] and `x[1]`", lambda n: n + 1) == "see [2] and `x[1]`"
