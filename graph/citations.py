"""Deterministic citation checking: every [n] must name a source the answer was given."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from langchain_core.documents import Document

from footnote.tools.sources import source_blocks

CITATION_RUN = re.compile(r"(?<![\w\]\[])(?:\[\d+(?:\s*,\s*\d+)*\])+")
"""A run of citations, `[1]`, `[1, 3]` or `[1][3]`, after a space or punctuation. Indexing in
quoted code (`a[1]`, `m[0][2]`) follows a name or a bracket, so it is not a citation."""
_NUMBERS = re.compile(r"\[([^\]]*)\]")


def citation_numbers(run: str) -> list[int]:
    """The numbers of one citation run: `[1][3]` or `[1, 3]` -> [1, 3]."""
    return [int(n) for group in _NUMBERS.findall(run) for n in re.split(r"\s*,\s*", group)]


def strip_citation_marks(text: str) -> str:
    """Remove `[n]`-style marks from quoted source text (footnote references there point at
    footnotes the reader does not have, and would be mistaken for our citations)."""
    return re.sub(r"[ \t]{2,}", " ", CITATION_RUN.sub("", text)).strip()


def source_origin(document: Document) -> str:
    """Where a source comes from, for its block's `origin` attribute."""
    meta = document.metadata
    if meta.get("kind") == "web":
        return f"web page {meta.get('url', '')}: {meta.get('title', '')}"
    origin = str(meta.get("source", ""))
    if meta.get("section"):
        origin += f" § {meta['section']}"
    return origin


def format_sources(documents: Sequence[Document]) -> str:
    """Numbered sources for a prompt, each delimited and escaped as data with its origin.

    Every prompt that carries retrieved or web text goes through here (or through
    `tools.sources` directly), so a document cannot close its block, forge another source's
    header or speak as a chat role.
    """
    return source_blocks([(source_origin(doc), doc.page_content) for doc in documents])


def verify(answer: str, documents: Sequence[Document]) -> tuple[str, list[int], list[int]]:
    """Remove citations that name no given source.

    Returns the cleaned answer, the valid numbers in order of first use, and the invalid ones.
    """
    valid: list[int] = []
    invalid: list[int] = []

    def keep(match: re.Match[str]) -> str:
        numbers = citation_numbers(match.group(0))
        good = [n for n in numbers if 1 <= n <= len(documents)]
        for n in numbers:
            target = valid if n in good else invalid
            if n not in target:
                target.append(n)
        return "".join(f"[{n}]" for n in good)

    cleaned = CITATION_RUN.sub(keep, answer)
    cleaned = re.sub(r"[ \t]+([.,;:!?])", r"\1", re.sub(r"[ \t]{2,}", " ", cleaned)).strip()
    return cleaned, valid, invalid


def citation_entries(numbers: Sequence[int], documents: Sequence[Document]) -> list[dict[str, Any]]:
    """What a caller needs to show and check each cited source, including the passage itself:
    a reader checks a claim against the text it cites without a second request."""
    entries = []
    for n in numbers:
        doc = documents[n - 1]
        meta = doc.metadata
        entry: dict[str, Any] = {
            "n": n,
            "chunk_id": meta.get("chunk_id"),
            "source": meta.get("source"),
            "title": meta.get("title"),
            "section": meta.get("section"),
            "url": meta.get("url"),
            "kind": meta.get("kind", "document"),
            "text": doc.page_content,
        }
        if meta.get("page") is not None:
            entry["page"] = meta["page"]
        if meta.get("lines"):
            entry["lines"] = meta["lines"]
        entries.append(entry)
    return entries
