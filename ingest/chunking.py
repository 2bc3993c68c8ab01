"""Split parsed sections into chunks that fit the embedding model, with stable ids.

Structure first: a long section is split on paragraphs, then lines, then sentences (or on
code boundaries for code), sized with the embedding model's own tokenizer; adjacent small
sections of one document are joined up to the target size (`merge_small_sections`), since a
chunk of a few words costs a whole heading prefix to embed. Each chunk's embedded text is
prefixed with its document
title and heading path, so the prefix is counted in the budget too.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

from footnote.ingest.documents import ParsedDocument, Section
from footnote.models.embeddings import TokenCounter
from footnote.store.text import heading_prefix, slugify
from footnote.store.types import Chunk

if TYPE_CHECKING:
    from langchain_text_splitters import RecursiveCharacterTextSplitter

_CODE_LANGUAGES = {  # suffix -> langchain_text_splitters.Language value
    ".py": "python",
    ".js": "js",
    ".ts": "ts",
    ".go": "go",
    ".rs": "rust",
    ".java": "java",
    ".c": "c",
    ".h": "c",
    ".cpp": "cpp",
    ".rb": "ruby",
}
_PROSE_SEPARATORS = ["\n\n", "\n", ". ", "; ", ", ", " ", ""]
_LONG_WORD = 1_000
_LONG_LINE = 4_000
_LONG_RUN = re.compile(rf"\S{{{_LONG_WORD + 1},}}|[^\n]{{{_LONG_LINE + 1},}}")
_MAX_CHARS_PER_TOKEN = 8


@dataclass(frozen=True)
class ChunkSettings:
    """How documents are cut; recorded in the manifest so a changed setting forces a rebuild."""

    max_tokens: int = 256
    """The embedding model's input limit, special tokens and the heading prefix included."""
    target_tokens: int = 200
    """Body size aimed for; smaller than the limit so the heading prefix fits."""
    overlap_tokens: int = 24
    merge_sections: bool = False
    """Adjacent small sections of one document (siblings, a parent's short intro and its
    first child) share a chunk while together they fit `target_tokens`: fewer, fuller chunks,
    one heading prefix instead of several (see `merge_small_sections`)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Chunker:
    def __init__(self, counter: TokenCounter, settings: ChunkSettings | None = None) -> None:
        self.counter = counter
        self.settings = settings or ChunkSettings()
        self._splitters: dict[tuple[str, int], RecursiveCharacterTextSplitter] = {}

    def _splitter(self, suffix: str, is_code: bool, size: int) -> RecursiveCharacterTextSplitter:
        # langchain-text-splitters loads on first split, not when ingest starts.
        from langchain_text_splitters import Language, RecursiveCharacterTextSplitter

        language = _CODE_LANGUAGES.get(suffix) if is_code else None
        key = (language or ("code" if is_code else "prose"), size)
        if key not in self._splitters:
            separators = (
                RecursiveCharacterTextSplitter.get_separators_for_language(Language(language))
                if language
                else ["\n\n", "\n", " ", ""]
                if is_code
                else _PROSE_SEPARATORS
            )
            self._splitters[key] = RecursiveCharacterTextSplitter(
                separators=separators,
                chunk_size=size,
                chunk_overlap=min(self.settings.overlap_tokens, size // 4),
                length_function=self.counter.count_tokens,
                keep_separator="end" if not is_code else "start",
                strip_whitespace=True,
            )
        return self._splitters[key]

    def split_document(
        self, doc: ParsedDocument, *, date: str | None, access: list[str] | None
    ) -> list[Chunk]:
        chunks: list[Chunk] = []
        used_keys: set[str] = set()
        suffix = PurePosixPath(doc.source).suffix.lower()
        id_source = doc.source.replace("%", "%25").replace("#", "%23")
        sections = doc.sections
        if self.settings.merge_sections:
            sections = merge_small_sections(doc.title, sections, self._fits)
        for section in sections:
            section_path = " > ".join(section.headings)
            base = section.anchor or (slugify(section.headings[-1]) if section.headings else "")
            base = base or (f"page-{section.page}" if section.page else "top")
            key = unique_key(base, used_keys)
            for position, (text, lines) in enumerate(self._split_section(section, doc, suffix)):
                chunks.append(
                    Chunk(
                        id=f"{id_source}#{key}:{position}",
                        text=text,
                        source=doc.source,
                        title=doc.title,
                        section=section_path,
                        anchor=section.anchor,
                        url=section.url,
                        page=section.page,
                        lines=lines,
                        date=date,
                        access=access,
                        metadata={**doc.metadata, **section.metadata},
                    )
                )
        return chunks

    def _fits(self, prefix: str, body: str) -> bool:
        return (
            len(body) <= self._max_chars(self.settings.target_tokens)
            and self.counter.count_tokens(f"{prefix}\n{body}") <= self.settings.target_tokens
        )

    def _split_section(
        self, section: Section, doc: ParsedDocument, suffix: str
    ) -> list[tuple[str, list[int] | None]]:
        prefix = heading_prefix(doc.title, " > ".join(section.headings))
        # Tokens left for the body once the prefix, a newline and [CLS]/[SEP] are counted.
        room = self.settings.max_tokens - self.counter.count_tokens(prefix + "\n")
        size = max(32, min(self.settings.target_tokens, room))
        text = section.text.strip()
        if not text:
            return []
        if self.counter.count_tokens(text) <= size and len(text) <= self._max_chars(size):
            pieces = [text]
        else:
            pieces = self._pieces(text, suffix, section.is_code, size)
        out: list[tuple[str, list[int] | None]] = []
        start, end = -1, 0
        for piece in pieces:
            if self.counter.count_tokens(f"{prefix}\n{piece}") > self.settings.max_tokens:
                piece = self._hard_trim(prefix, piece)
            start = _locate(text, piece, start, end)
            end = start + len(piece)
            lines = None
            if section.line_start is not None:
                first = (
                    section.line_start
                    + _leading_lines(section.text, text)
                    + text.count("\n", 0, start)
                )
                lines = [first, first + piece.count("\n")]
            out.append((piece, lines))
        return out

    def _pieces(self, text: str, suffix: str, is_code: bool, size: int) -> list[str]:
        """Split on structure; a dense run (minified code, a data blob, a page of entities on
        one line) is cut straight into windows of `size` tokens instead: the recursive
        splitter would cut it into thousands of tiny pieces, very slowly."""
        pieces: list[str] = []
        for segment, dense in _segments(text):
            if dense:
                pieces.extend(self._windows(segment, size))
            elif segment.strip():
                pieces.extend(self._splitter(suffix, is_code, size).split_text(segment))
        return pieces

    def _max_chars(self, size: int) -> int:
        """No chunk is longer than this, whatever its token count: a run the tokenizer reads
        as one unknown token (a 2 MB word) must not become one 2 MB chunk."""
        return size * _MAX_CHARS_PER_TOKEN

    def _windows(self, run: str, size: int) -> list[str]:
        """Greedy windows of at most `size` tokens and `_max_chars` characters.

        With a counter that reports where its tokens end (`token_ends`), the run is
        tokenised once and each window costs one check; otherwise each window is found by
        bisection, a few tokenizer calls per window. A 400 KB single-line file is thousands
        of windows, so the difference is seconds against minutes.
        """
        token_ends = getattr(self.counter, "token_ends", None)
        if token_ends is None:
            return self._windows_by_bisection(run, size)
        limit = self._max_chars(size)
        ends: list[int] = token_ends(run)
        room = max(1, size - self.counter.count_tokens(""))  # [CLS] and [SEP] take their share
        windows: list[str] = []
        start = 0
        while start < len(run):
            first = bisect.bisect_right(ends, start)  # the first token ending after `start`
            last = min(len(ends) - 1, first + room - 1)
            end = min(ends[last] if first < len(ends) else len(run), start + limit)
            end = max(end, start + 1)
            if end < len(run):
                end = self._end_at_space(run, start, end)
            while end - start > 1 and self.counter.count_tokens(run[start:end]) > size:
                end = start + (end - start) * 9 // 10  # a word re-tokenised apart grew
            if run[start:end].strip():
                windows.append(run[start:end].strip())
            start = end
        return windows

    def _windows_by_bisection(self, run: str, size: int) -> list[str]:
        limit = self._max_chars(size)
        windows: list[str] = []
        start = 0
        while start < len(run):
            low, high = start + 1, min(len(run), start + limit)
            while low < high:  # the longest window from `start` that fits
                middle = (low + high + 1) // 2
                if self.counter.count_tokens(run[start:middle]) <= size:
                    low = middle
                else:
                    high = middle - 1
            end = low
            if end < len(run):
                end = self._end_at_space(run, start, end)
            if run[start:end].strip():
                windows.append(run[start:end].strip())
            start = end
        return windows

    @staticmethod
    def _end_at_space(run: str, start: int, end: int) -> int:
        """End at a space when there is one in the window's second half."""
        half = start + (end - start) // 2
        space = max(run.rfind(" ", half, end), run.rfind("\n", half, end))
        return space + 1 if space > start else end

    def _hard_trim(self, prefix: str, piece: str) -> str:
        """Last resort for unsplittable runs (a huge token-dense line): cut by words."""
        words = piece.split(" ")
        while len(words) > 1 and (
            self.counter.count_tokens(f"{prefix}\n{' '.join(words)}") > self.settings.max_tokens
        ):
            words = words[: max(1, int(len(words) * 0.9))]
        return " ".join(words)


def merge_small_sections(
    title: str, sections: list[Section], fits: Callable[[str, str], bool]
) -> list[Section]:
    """Runs of adjacent sections joined while the run, with its heading prefix, `fits`.

    A section joins the run before it when its parent path lies on the run's path (a
    sibling, a child, or a sibling of an ancestor) and the page is the same. The joined
    section's headings are what the run shares; each member's own further headings become a
    line of the body, so no heading is lost. Anchor and URL are the first member's: a
    citation links to where the run starts. A section that does not fit alone is left as it
    is (it is split later)."""
    out: list[Section] = []
    run: list[Section] = []

    def joined(members: list[Section]) -> Section:
        if len(members) == 1:
            return members[0]
        common = members[0].headings
        for member in members[1:]:
            depth = 0
            while (
                depth < min(len(common), len(member.headings))
                and common[depth] == member.headings[depth]
            ):
                depth += 1
            common = common[:depth]
        parts = []
        for member in members:
            own = " > ".join(member.headings[len(common) :])
            parts.append(f"{own}\n{member.text.strip()}" if own else member.text.strip())
        first, last = members[0], members[-1]
        lined = all(m.line_start is not None for m in members)
        return Section(
            text="\n\n".join(parts),
            headings=list(common),
            anchor=first.anchor,
            url=first.url,
            page=first.page,
            line_start=first.line_start if lined else None,
            line_end=last.line_end if lined else None,
            is_code=all(m.is_code for m in members),
            metadata={
                k: v
                for k, v in first.metadata.items()
                if all(m.metadata.get(k) == v for m in members)
            },
        )

    for section in sections:
        if not section.text.strip():
            continue
        if run and _joins(run, section):
            candidate = joined([*run, section])
            prefix = heading_prefix(title, " > ".join(candidate.headings))
            if fits(prefix, candidate.text):
                run.append(section)
                continue
        if run:
            out.append(joined(run))
        run = [section]
    if run:
        out.append(joined(run))
    return out


def _joins(run: list[Section], section: Section) -> bool:
    last = run[-1]
    parent = section.headings[:-1]
    return (
        section.page == last.page
        and last.headings[: len(parent)] == parent
        and all(member.headings[: len(parent)] == parent for member in run)
    )


def unique_key(base: str, used: set[str]) -> str:
    """`base`, else `base-1`, `base-2`...: the first not used yet in this document, so chunk
    ids are unique by construction even when anchors repeat (`s`, `s`, `s-1`)."""
    key, count = base, 0
    while key in used:
        count += 1
        key = f"{base}-{count}"
    used.add(key)
    return key


def _segments(text: str) -> list[tuple[str, bool]]:
    """`text` cut into (segment, dense) in order: a word longer than `_LONG_WORD` or a line
    longer than `_LONG_LINE` characters is dense; what lies between is ordinary text."""
    segments: list[tuple[str, bool]] = []
    position = 0
    for match in _LONG_RUN.finditer(text):
        if match.start() > position:
            segments.append((text[position : match.start()], False))
        segments.append((match.group(), True))
        position = match.end()
    if position < len(text):
        segments.append((text[position:], False))
    return segments


def _locate(text: str, piece: str, previous_start: int, previous_end: int) -> int:
    """Where `piece` starts in `text`, given where the piece before it lay.

    Pieces come in order and either follow the previous one (after whitespace) or overlap
    its tail, so repeated passages are placed at their own occurrence, not the first one.
    """
    following = previous_end
    while following < len(text) and text[following].isspace():
        following += 1
    if text.startswith(piece, following):
        return following
    found = text.find(piece, previous_start + 1)
    return found if found >= 0 else max(previous_end, 0)


def _leading_lines(original: str, stripped: str) -> int:
    """Lines dropped from the top by strip(), so line numbers stay true to the file."""
    offset = original.find(stripped[:40]) if stripped else 0
    return original.count("\n", 0, max(offset, 0))
