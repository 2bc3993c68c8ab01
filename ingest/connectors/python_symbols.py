"""Python files cut at their functions, classes and methods, each piece headed by the
symbol's name: a question that names `rotate_key` finds the chunk that defines it, and the
citation points at its lines. Read with `ast` (never imported or run)."""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator

from footnote.ingest.documents import Section

MAX_SYMBOL_SOURCE_BYTES = 2_000_000
"""Larger Python files stay one code section: `ast` holds a tree many times the file's size."""
_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
Link = Callable[[int, int], str]
"""link(first line, last line) -> where those lines stand in the source."""


def symbol_sections(section: Section, link: Link) -> list[Section]:
    """`section` (a whole Python file, or its trimmed body) as one section per top-level
    function, per class header and per method, with the module's other statements between
    them; the section itself when it does not parse as Python."""
    first = section.line_start or 1
    if len(section.text.encode("utf-8")) > MAX_SYMBOL_SOURCE_BYTES:
        return [section]
    try:
        tree = ast.parse(section.text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return [section]
    lines = section.text.split("\n")
    spans = list(_spans(tree.body, [], len(lines)))
    if not any(headings for _, _, headings in spans):
        return [section]
    pieces = []
    for start, end, headings in spans:
        text = "\n".join(lines[start - 1 : end]).strip("\n")
        if not text.strip():
            continue
        begin, finish = start + first - 1, end + first - 1
        pieces.append(
            Section(
                text=text,
                headings=headings,
                line_start=begin,
                line_end=finish,
                is_code=True,
                url=link(begin, finish),
            )
        )
    return pieces or [section]


def _spans(
    body: list[ast.stmt], outer: list[str], last_line: int
) -> Iterator[tuple[int, int, list[str]]]:
    """(first line, last line, heading path) for each run of statements in `body`, 1-based
    within the parsed text; definitions get their own run, headed by their name."""
    loose_start: int | None = None
    loose_end = 0
    for node in body:
        start = min([node.lineno, *(d.lineno for d in _decorators(node))])
        end = node.end_lineno or node.lineno
        if not isinstance(node, _DEFINITIONS):
            loose_start = start if loose_start is None else loose_start
            loose_end = end
            continue
        if loose_start is not None:
            yield loose_start, loose_end, list(outer)
            loose_start = None
        name = f"{'class' if isinstance(node, ast.ClassDef) else 'def'} {node.name}"
        if isinstance(node, ast.ClassDef) and any(isinstance(n, _DEFINITIONS) for n in node.body):
            first_member = min(
                min([n.lineno, *(d.lineno for d in _decorators(n))])
                for n in node.body
                if isinstance(n, _DEFINITIONS)
            )
            if first_member > start:
                yield start, first_member - 1, [*outer, name]
            yield from _spans(
                [n for n in node.body if n.lineno >= first_member], [*outer, name], end
            )
        else:
            yield start, end, [*outer, name]
    if loose_start is not None:
        yield loose_start, min(loose_end, last_line), list(outer)


def _decorators(node: ast.stmt) -> list[ast.expr]:
    return list(getattr(node, "decorator_list", []) or [])
