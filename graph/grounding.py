"""Every sentence of an answer accounted for, in code, after generation.

`support.py` checks a claim against the sources it cites. This module applies it to each
sentence and list item of an answer, cited or not, and decides its fate:

- supported by the sources it cites: kept as written;
- supported by another given source (a sentence that forgot its `[n]`, or cites the wrong
  one): kept, cited with that source instead;
- supported by none: removed, and reported with why.

Support also needs the answer's hard facts: a link, an e-mail address, a number or a name
(a capitalised word, a product, a person, a month) that no supporting source contains is an
invented detail, whatever the wording around it. A sentence with no content words at all
("Sure.") claims nothing and may stay beside cited ones; an answer left with no cited
sentence is empty, so the caller says plainly that the sources do not cover the question.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from langchain_core.documents import Document

from footnote.graph.citations import (
    CITATION_RUN,
    citation_numbers,
    code_blocks,
    strip_citation_marks,
    verify,
)
from footnote.graph.code_quotes import is_pointer, is_verbatim
from footnote.graph.support import ClaimCheck, Embed, IdfWeights, check_claim
from footnote.store.text import SENTENCE_END, keyword_tokens

_LINK = re.compile(
    r"(?:https?://|www\.)[^\s<>\"'()\[\]]+"
    r"|[\w.+-]+@[\w-]+(?:\.[\w-]+)+"
    r"|\b(?:[a-z0-9-]+\.)+(?:com|org|net|io|dev|ai|app|co|gov|edu|info|me|uk|de|eu)\b"
    r"(?:/[^\s<>\"'()\[\]]*)?",
    re.IGNORECASE,
)
"""A link, a bare domain or an e-mail address."""
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_WORD = re.compile(r"[A-Za-z][\w'-]*")
_NUMBER_WORDS = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
    "twenty",
]
_BULLET = re.compile(r"^\s*(?:[-*•+]|\d{1,2}[.)])\s+|^\s*#{1,6}\s+")
_MARKUP = re.compile(r"[*`]+|</?[a-z][a-z0-9]*\s*/?>", re.IGNORECASE)
"""Emphasis, code marks and HTML tags: not words a source would contain."""
_TRAILING_CITATIONS = re.compile(rf"(?:\s*{CITATION_RUN.pattern})+\s*[.!?;:]?\s*$")
_FIXED_LINES = ("The sources I have do not cover",)
"""The answer's own fixed phrases (prompts.NOT_COVERED and its per-part form): not claims."""


@dataclass
class Grounded:
    """An answer after every sentence was accounted for."""

    text: str
    """The answer, numbered like the sources it was checked against; empty when nothing
    cited is left."""
    removed: list[dict[str, Any]] = field(default_factory=list)
    """Each removed sentence: claim, citations, reason and the support check's evidence."""
    recited: list[dict[str, Any]] = field(default_factory=list)
    """Each kept sentence whose citation was added or corrected: claim, was, now."""
    invalid: list[int] = field(default_factory=list)
    """Citation numbers that named no source (removed before the check)."""


@dataclass
class _Unit:
    """One sentence or list item of the answer, by its span in the line it sits in."""

    line: int
    begin: int
    end: int
    text: str
    numbers: list[int]

    @property
    def claim(self) -> str:
        """The sentence without its citations, as the support check and reports read it."""
        trailing = _TRAILING_CITATIONS.search(self.text)
        core = self.text[: trailing.start()] if trailing else self.text
        return " ".join(strip_citation_marks(core).split())


def ground(
    answer: str,
    documents: Sequence[Document],
    *,
    embed: Embed | None = None,
    idf: IdfWeights | None = None,
) -> Grounded:
    """Account for each sentence of `answer` against `documents` (cited as [1]..[n])."""
    cleaned, _valid, invalid = verify(answer, documents)
    embed = _cached(embed) if embed is not None else None
    lines = cleaned.split("\n")
    kept_text: dict[tuple[int, int], str] = {}
    result = Grounded(text="", invalid=invalid)
    units = _units(lines)
    quoted = _quoted_code(lines, units, documents)
    for unit in units:
        if (unit.line, unit.begin) in quoted:
            kept_text[(unit.line, unit.begin)] = unit.text.strip()
            continue
        claim = unit.claim
        if not re.search(r"\w", _MARKUP.sub("", claim)) or claim.startswith(_FIXED_LINES):
            continue  # markup, or the answer's own fixed wording: nothing to keep or report
        if not keyword_tokens(claim) and not _literals(claim):
            if unit.numbers:
                kept_text[(unit.line, unit.begin)] = claim  # "Yes [1]": no claim to cite
            else:
                kept_text[(unit.line, unit.begin)] = unit.text.strip()
            continue
        cited = [documents[n - 1] for n in unit.numbers]
        check, missing = _support(claim, unit.numbers, cited, embed, idf) if cited else (None, [])
        if check is not None and check.supported and not missing:
            kept_text[(unit.line, unit.begin)] = unit.text.strip()
            continue
        better = _best_source(claim, documents, unit.numbers, embed, idf)
        if better is not None:
            kept_text[(unit.line, unit.begin)] = _cite(claim, unit.text, better)
            result.recited.append({"claim": claim, "was": unit.numbers, "now": [better]})
            continue
        result.removed.append(_removal(claim, unit.numbers, check, missing, documents))
    text = _assemble(lines, units, kept_text)
    result.text = text if CITATION_RUN.search(text) else ""
    return result


def _support(
    claim: str,
    numbers: list[int],
    cited: Sequence[Document],
    embed: Embed | None,
    idf: IdfWeights | None,
) -> tuple[ClaimCheck, list[str]]:
    """The support check's verdict, and the claim's hard facts the sources lack."""
    plain = _MARKUP.sub("", claim)
    return check_claim(plain, numbers, cited, embed=embed, idf=idf), missing_literals(plain, cited)


def _best_source(
    claim: str,
    documents: Sequence[Document],
    tried: Sequence[int],
    embed: Embed | None,
    idf: IdfWeights | None,
) -> int | None:
    """The number of the one source that supports the claim best, if any does."""
    best: tuple[float, int] | None = None
    for n, doc in enumerate(documents, 1):
        if n in tried and len(tried) == 1:
            continue  # already found wanting
        check, missing = _support(claim, [n], [doc], embed, idf)
        if check.supported and not missing:
            score = 2.0 if check.verbatim else check.semantic
            if best is None or score > best[0]:
                best = (score, n)
    return best[1] if best else None


def _removal(
    claim: str,
    numbers: list[int],
    check: ClaimCheck | None,
    missing: list[str],
    documents: Sequence[Document],
) -> dict[str, Any]:
    if check is None:
        check = check_claim(_MARKUP.sub("", claim), [], list(documents))
        missing = missing_literals(_MARKUP.sub("", claim), documents)
        reason = "cites no source, and no source supports it"
    else:
        reason = "the sources it cites do not support it"
    if missing:
        reason += f"; {', '.join(missing)} appear(s) in no source it could cite"
    return {**check.to_dict(), "claim": claim, "citations": numbers, "reason": reason}


def missing_literals(claim: str, sources: Sequence[Document]) -> list[str]:
    """The links, addresses, numbers and names in `claim` that none of `sources` contains."""
    wanted = _literals(claim)
    if not wanted:
        return []
    haystack = " ".join(
        f"{d.metadata.get('title') or ''} {d.metadata.get('section') or ''} "
        f"{d.metadata.get('source') or ''} {d.metadata.get('url') or ''} {d.page_content}"
        for d in sources
    ).lower()
    missing = []
    for kind, literal in wanted:
        needle = literal.lower()
        if kind == "link":
            found = needle.rstrip("/") in haystack
        elif kind == "number":
            found = bool(re.search(rf"(?<![\d.]){re.escape(needle)}(?![\d]|\.\d)", haystack))
            if not found and needle.isdigit() and int(needle) < len(_NUMBER_WORDS):
                found = bool(re.search(rf"\b{_NUMBER_WORDS[int(needle)]}\b", haystack))
        else:
            found = bool(re.search(rf"(?<![\w-]){re.escape(needle)}(?![\w-])", haystack))
        if not found:
            missing.append(literal)
    return list(dict.fromkeys(missing))


def _literals(claim: str) -> list[tuple[str, str]]:
    """(kind, text) for each hard fact of a claim: links first, then numbers and names
    outside them. A name is a capitalised word that does not open the sentence (or any word
    with a capital inside it: "GitHub", "HR")."""
    found: list[tuple[str, str]] = []
    rest = claim
    for match in _LINK.finditer(claim):
        found.append(("link", match.group(0).rstrip(".,;:!?")))
        rest = rest.replace(match.group(0), " ")
    found += [("number", n) for n in _NUMBER.findall(rest)]
    opening = True
    for match in _WORD.finditer(rest):
        word = re.sub(r"'s$", "", match.group(0)).strip("'-")  # "Australia's": Australia
        before = rest[: match.start()].rstrip()
        opening = not before or before[-1] in ".!?:;\"'(-•*>"
        inner_capital = any(ch.isupper() for ch in word[1:])
        if len(word) > 1 and ((word[0].isupper() and not opening) or inner_capital):
            found.append(("name", word))
    return found


def _units(lines: Sequence[str]) -> list[_Unit]:
    """The sentences of each line (list markers aside), and each line of a code block.

    A citation run that opens a sentence ("... 90 days. [1] When ...") belongs to the one
    before it."""
    units: list[_Unit] = []
    fences, code = _code_lines(lines)
    for number, line in enumerate(lines):
        if number in fences:
            continue
        if number in code:
            if line.strip():
                units.append(_Unit(number, 0, len(line), line, []))
            continue
        marker = _BULLET.match(line)
        start = marker.end() if marker else 0
        bounds = [start, *(m.end() for m in SENTENCE_END.finditer(line, start)), len(line)]
        spans = [[a, b] for a, b in zip(bounds, bounds[1:], strict=False) if b > a]
        for i in range(1, len(spans)):
            lead = re.match(rf"\s*(?:{CITATION_RUN.pattern})+[.!?;]?", line[spans[i][0] :])
            if lead:
                spans[i - 1][1] = spans[i][0] + lead.end()
                spans[i][0] = spans[i - 1][1]
        for a, b in spans:
            text = line[a:b]
            if text.strip():
                numbers = [n for run in CITATION_RUN.findall(text) for n in citation_numbers(run)]
                units.append(_Unit(number, a, b, text, list(dict.fromkeys(numbers))))
    return units


def _code_lines(lines: Sequence[str]) -> tuple[set[int], set[int]]:
    """The positions of the fence lines, and of the lines inside fenced code blocks."""
    fences: set[int] = set()
    code: set[int] = set()
    for opening, closing in code_blocks(lines):
        fences |= {opening, closing}
        code |= set(range(opening + 1, closing))
    return fences, code


def _quoted_code(
    lines: Sequence[str], units: Sequence[_Unit], documents: Sequence[Document]
) -> set[tuple[int, int]]:
    """The units kept as written because they quote code (code_quotes.py): every line of a
    block that is a source's own lines, in order (the source its caption cites, else any),
    and the caption above it when it only points at those lines ("deploy.py, lines 5–9 [1]:").
    Anything else in a block is checked line by line, a caption that says more as a claim."""
    kept: set[tuple[int, int]] = set()
    for opening, closing in code_blocks(lines):
        caption = next((u for u in reversed(units) if u.line == opening - 1), None)
        cited = [n for n in (caption.numbers if caption else []) if 1 <= n <= len(documents)]
        sources = [documents[n - 1] for n in cited] if cited else list(documents)
        source = next((d for d in sources if is_verbatim(lines[opening + 1 : closing], d)), None)
        if source is None:
            continue
        kept |= {(u.line, u.begin) for u in units if opening < u.line < closing}
        if caption is not None and cited and is_pointer(caption.claim, source):
            kept.add((caption.line, caption.begin))
    return kept


def _cite(claim: str, original: str, number: int) -> str:
    """The sentence cited with `number` instead of whatever it cited."""
    body = original.strip()
    trailing = _TRAILING_CITATIONS.search(body)
    stop = ""
    if trailing:
        tail = trailing.group(0).strip()
        stop = tail[-1] if tail[-1:] in ".!?;:" else ""
        body = body[: trailing.start()]
    body = strip_citation_marks(body)
    if not stop and body[-1:] in ".!?":
        body, stop = body[:-1], body[-1]
    return f"{body} [{number}]{stop}"


def _assemble(
    lines: Sequence[str], units: Sequence[_Unit], kept: dict[tuple[int, int], str]
) -> str:
    """The lines again with only the kept units; a line (or code block) that kept nothing
    goes, blank lines collapse."""
    by_line: dict[int, list[_Unit]] = {}
    for unit in units:
        by_line.setdefault(unit.line, []).append(unit)
    out: list[str] = []
    fences, in_code = _code_lines(lines)
    code: list[str] = []
    fence = ""
    for number, line in enumerate(lines):
        if number in fences:
            if fence:
                while code and not code[-1].strip():
                    code.pop()
                if code:
                    out += [fence, *code, line]
                fence, code = "", []
            else:
                fence = line
            continue
        mine = by_line.get(number)
        if number in in_code:
            # Kept lines, and the blank lines between them: code's spacing is its layout.
            if (mine and (number, 0) in kept) or (code and not line.strip()):
                code.append(line)
            continue
        if mine is None:
            out.append(line if not line.strip() else "")
            continue
        texts = [kept[(number, u.begin)] for u in mine if (number, u.begin) in kept]
        if texts:
            marker = _BULLET.match(line)
            out.append((marker.group(0) if marker else "") + " ".join(texts))
    text = "\n".join(out)
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def _cached(embed: Embed) -> Embed:
    """`embed` remembering each text's vector: every source sentence is compared with
    every sentence of the answer."""
    memory: dict[str, np.ndarray] = {}

    def cached(texts: list[str]) -> np.ndarray:
        fresh = [t for t in dict.fromkeys(texts) if t not in memory]
        if fresh:
            memory.update(zip(fresh, embed(fresh), strict=True))
        return np.stack([memory[t] for t in texts])

    return cached
