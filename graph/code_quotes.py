"""Quoting source code in an answer: its own lines, in a fenced block, cited by line.

A chunk of a file parsed as code (ingest's code parser: the suffix says so, and the chunk
knows its line range) is quoted as it is written, never split into "sentences" and joined
into a paragraph: indentation and line breaks are what code means. The quote goes under a
caption that points at it, `deploy.py, lines 5–9 [1]:`, so the reader knows where each line
comes from.

The grounding check (grounding.py) keeps such a block whole when it is the cited source's
own lines, in order; a caption that only points at the quote claims nothing to check. A block
that is not the source's lines, or a caption that says something, is checked like any other
sentence.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import PurePosixPath

from langchain_core.documents import Document

from footnote.store.text import keyword_tokens

MAX_QUOTED_LINES = 20
"""The most lines one quote shows: a long chunk is quoted where the question points."""

FENCE_LANGUAGE = {
    ".py": "python", ".pyi": "python", ".js": "javascript", ".mjs": "javascript",
    ".jsx": "jsx", ".ts": "typescript", ".tsx": "tsx", ".go": "go", ".rs": "rust",
    ".java": "java", ".c": "c", ".h": "c", ".cc": "cpp", ".cpp": "cpp", ".hpp": "cpp",
    ".sh": "bash", ".bash": "bash", ".rb": "ruby", ".toml": "toml", ".yaml": "yaml",
    ".yml": "yaml",
}  # fmt: skip
"""A fence's language for each suffix ingest parses as code (its CODE_SUFFIXES; a test keeps
the two equal). Not imported from there: that would load every parser into the answer path."""

_POINTER = re.compile(r"^\s*(?:from\s+)?[\s,:;(]*(?:lines?\s+(\d+)(?:\s*[–-]\s*(\d+))?)?[\s,:;)]*$",
                      re.I)  # fmt: skip
"""What remains of a caption once the file's name is taken out: at most the lines quoted."""


def code_language(document: Document) -> str | None:
    """The fence language of a chunk of source code, or None for prose, a web page or a chunk
    without its line range (its lines could not be cited)."""
    meta = document.metadata
    if meta.get("kind", "document") != "document" or not _line_range(document):
        return None
    suffix = PurePosixPath(str(meta.get("source", ""))).suffix.lower()
    return FENCE_LANGUAGE.get(suffix)


def quoted_window(question: str, document: Document) -> list[int]:
    """The chunk's line positions to quote: all of them when they fit, else the window of
    `MAX_QUOTED_LINES` with the most lines that name the question's words (the first such
    window on a tie)."""
    lines = document.page_content.split("\n")
    if len(lines) <= MAX_QUOTED_LINES:
        return list(range(len(lines)))
    asked = set(keyword_tokens(question))
    hits = [len(asked & set(keyword_tokens(line))) for line in lines]
    starts = range(len(lines) - MAX_QUOTED_LINES + 1)
    best = max(starts, key=lambda s: (sum(hits[s : s + MAX_QUOTED_LINES]), -s))
    return list(range(best, best + MAX_QUOTED_LINES))


def quote_code(document: Document, number: int, positions: Sequence[int]) -> str:
    """The chunk's lines at `positions` as a caption naming the file's lines, citing source
    `number`, and a fenced block in the code's language. The chunk's text is its lines as
    ingest kept them (indentation and order; a run of blank lines may be shortened)."""
    lines = document.page_content.split("\n")
    chosen = [lines[i] for i in positions]
    while chosen and not chosen[-1].strip():
        chosen.pop()
    first_line, last_line = _line_range(document) or (1, len(lines))
    if last_line - first_line + 1 == len(lines):  # the chunk is the file's lines one for one
        first_line += positions[0]
        last_line = first_line + len(chosen) - 1
    # Otherwise ingest joined or dropped lines (a run of blank ones): the lines quoted are
    # somewhere in the chunk's range, and only the range can be named truthfully.
    where = f"line {first_line}" if first_line == last_line else f"lines {first_line}–{last_line}"
    language = code_language(document) or ""
    fence = "````" if any("```" in line for line in chosen) else "```"
    source = document.metadata.get("source", "")
    return "\n".join([f"{source}, {where} [{number}]:", f"{fence}{language}", *chosen, fence])


def is_pointer(caption: str, document: Document) -> bool:
    """Whether a caption (its citations removed) only points at lines of `document`: its
    file's name and at most a line range within the chunk's lines. Anything more is a claim."""
    meta = document.metadata
    rest = caption
    for name in (meta.get("source"), PurePosixPath(str(meta.get("source", ""))).name):
        if name:
            rest = rest.replace(str(name), " ")
    match = _POINTER.match(rest)
    if match is None or rest == caption:
        return False
    low, high = _line_range(document) or (0, 0)
    return all(low <= int(n) <= high for n in match.groups() if n)


def is_verbatim(code: Sequence[str], document: Document) -> bool:
    """Whether the block's lines are the source's own, in order and together (blank lines
    and trailing spaces aside)."""
    quoted = [line.rstrip() for line in code if line.strip()]
    own = [line.rstrip() for line in document.page_content.split("\n") if line.strip()]
    if not quoted:
        return False
    return any(own[i : i + len(quoted)] == quoted for i in range(len(own) - len(quoted) + 1))


def _line_range(document: Document) -> tuple[int, int] | None:
    lines = document.metadata.get("lines")
    if (
        isinstance(lines, (list, tuple))
        and len(lines) == 2
        and all(isinstance(n, int) for n in lines)
    ):
        return int(lines[0]), int(lines[1])
    return None
