"""Deterministic citation checking: every [n] must name a source the answer was given."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
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


_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})")


def code_blocks(lines: Sequence[str]) -> list[tuple[int, int]]:
    """The fenced code blocks among `lines`, as (opening, closing) line positions. A block
    closes at a fence of its own character at least as long as its opening one (CommonMark),
    or at the end of the text."""
    blocks: list[tuple[int, int]] = []
    opening: tuple[int, str] | None = None
    for position, line in enumerate(lines):
        fence = _FENCE.match(line)
        if fence is None:
            continue
        marker = fence.group(1)
        if opening is None:
            opening = (position, marker)
        elif marker[0] == opening[1][0] and len(marker) >= len(opening[1]):
            blocks.append((opening[0], position))
            opening = None
    if opening is not None:
        blocks.append((opening[0], len(lines)))
    return blocks


def _outside_code(text: str, change: Callable[[str], str]) -> str:
    """`text` with `change` applied to its prose only: a fenced code block is a quote, whose
    brackets (`ports = [8080]`) are no citations and whose indentation is its meaning."""
    lines = text.split("\n")
    out: list[str] = []
    start = 0
    for opening, closing in code_blocks(lines):
        out += change("\n".join(lines[start:opening])).split("\n") if opening > start else []
        out += lines[opening : closing + 1]
        start = closing + 1
    if start < len(lines):
        out += change("\n".join(lines[start:])).split("\n")
    return "\n".join(out)


def renumbered(text: str, number: Callable[[int], int]) -> str:
    """`text` with each citation `[n]` outside code blocks written `[number(n)]`."""

    def swap(prose: str) -> str:
        return CITATION_RUN.sub(
            lambda run: "".join(f"[{number(n)}]" for n in citation_numbers(run.group(0))), prose
        )

    return _outside_code(text, swap)


def in_order_of_use(
    answer: str, documents: Sequence[Document]
) -> tuple[str, list[Document], list[int]]:
    """The answer's sources numbered 1, 2, 3 in the order the answer first cites them, then
    those it does not cite: a reader sees [1] [2] [3], never [1] [3] because a source it was
    given went unquoted. Returns the answer, the documents in their new order, and each old
    number's new one (`new[old - 1]`); a number that names no source is left as it is."""
    first_use: list[int] = []

    def collect(prose: str) -> str:
        for run in CITATION_RUN.finditer(prose):
            first_use.extend(n for n in citation_numbers(run.group(0))
                             if 1 <= n <= len(documents) and n not in first_use)  # fmt: skip
        return prose

    _outside_code(answer, collect)
    order = first_use + [n for n in range(1, len(documents) + 1) if n not in first_use]
    new = [0] * len(documents)
    for position, old in enumerate(order, 1):
        new[old - 1] = position
    text = renumbered(answer, lambda n: new[n - 1] if 1 <= n <= len(documents) else n)
    return text, [documents[old - 1] for old in order], new


def verify(answer: str, documents: Sequence[Document]) -> tuple[str, list[int], list[int]]:
    """Remove citations that name no given source (fenced code is quoted, not checked).

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

    def tidy(prose: str) -> str:
        cleaned = CITATION_RUN.sub(keep, prose)
        return re.sub(r"[ \t]+([.,;:!?])", r"\1", re.sub(r"[ \t]{2,}", " ", cleaned))

    return _outside_code(answer, tidy).strip(), valid, invalid


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
