"""Citation parsing: what counts as a citation, and what is removed."""

from __future__ import annotations

import pytest
from langchain_core.documents import Document

from footnote.graph.citations import citation_entries, verify

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
