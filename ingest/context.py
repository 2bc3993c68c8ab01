"""Document-aware context for each chunk, made without a model (contextual retrieval, offline).

A chunk alone often lacks what its document is about: an FAQ answer that says "use the
`-m` switch" never names the tool it is about. Anthropic's contextual retrieval has a model
write a short note situating each chunk in its document; this is the model-free version:

- the document's lead sentence and its most central sentences (those whose words recur
  across the document's chunks), a short extractive summary shared by all its chunks;
- the key terms of the chunks before and after it, so a chunk knows its neighbourhood;
- optionally (`previous_words`), the opening words of the section before its own.

The context is embedded and keyword-indexed with the chunk (`store.text.embedding_text`),
and never quoted: a citation shows the chunk's own text. It depends only on the document,
so a changed document changes only its own chunks' contexts, and an unchanged one gives the
same texts, which the embedding cache already holds.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from footnote.store.text import STOPWORDS, split_sentences
from footnote.store.types import IndexMismatch

ContextKind = Literal["none", "offline", "model"]
KINDS: tuple[ContextKind, ...] = ("none", "offline", "model")
ContextFields = Literal["both", "keywords"]
FIELDS: tuple[ContextFields, ...] = ("both", "keywords")

_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_.+-]*[A-Za-z0-9]|[A-Za-z]")
_MIN_SENTENCE_WORDS = 5
_MAX_SENTENCE_WORDS = 40


@dataclass(frozen=True)
class ContextSettings:
    """Which context chunks are embedded with; recorded in the manifest, so a version never
    holds chunks of two kinds and a change re-embeds (through the embedding cache)."""

    kind: ContextKind = "none"
    model: str = ""
    """For `model`: the chat model that writes each context (`provider:model`), see
    `ingest.model_context`."""
    summary_sentences: int = 2
    """Sentences of the document's extractive summary: its lead, then the most central."""
    neighbour_terms: int = 4
    """Key terms taken from each neighbouring chunk (before and after)."""
    document_terms: int = 0
    """Key terms of the whole document (its most spread-out words)."""
    summary_max_chunks: int = 0
    """Only a document of at most this many chunks gets the summary (0: every one): a long
    page's summary is shared by dozens of chunks and tells none of them apart."""
    new_terms_only: bool = False
    """Neighbours' key terms the chunk itself already holds are left out, so the context
    only adds words (BM25 gains nothing from repeating the chunk's own)."""
    previous_words: int = 0
    """The opening words of the section before the chunk's (0: none). A section often follows
    on from the one before (a follow-up question, the next step) and need not name what it
    continues; the previous section's opening usually does."""
    fields: ContextFields = "both"
    """Where the context goes: `both` (embedded and keyword-indexed, Anthropic's recipe) or
    `keywords` (BM25 only; the vectors are those of no context, so the cache serves them)."""
    method: int = 1
    """Bumped when the algorithm changes, so an index built by an older one is redone."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def parse(cls, value: str) -> ContextSettings:
        """`none`, `offline` or a chat model's `provider:model` (the command line's
        `--context`)."""
        if value in ("none", "offline"):
            return cls(kind=value)  # type: ignore[arg-type]
        if ":" in value.strip(":") or "/" in value.strip("/"):
            return cls(kind="model", model=value)
        raise ValueError(
            f"unknown context {value!r}: choose none, offline or a chat model's provider:model"
        )


NO_CONTEXT = ContextSettings()
DEFAULT_CONTEXT = NO_CONTEXT
"""What an index is built with unless told: see docs/evaluation.md, "Contextual retrieval"
(the offline context measured worse on both corpora)."""


def recorded_context(manifest: dict[str, Any] | None) -> ContextSettings | None:
    """The context a version was built with (none for indexes older than the setting);
    None without a manifest. A malformed record is refused, not guessed at."""
    if manifest is None:
        return None
    raw = manifest.get("context")
    if raw is None:
        return NO_CONTEXT
    if not isinstance(raw, dict):
        raise IndexMismatch(f"the index manifest's context record is malformed: {raw!r}")
    try:
        known = {k: raw[k] for k in ContextSettings.__dataclass_fields__ if k in raw}
        settings = ContextSettings(**known)
    except (TypeError, KeyError) as exc:
        raise IndexMismatch(f"the index manifest's context record is malformed: {raw!r}") from exc
    counts = (
        "summary_sentences",
        "neighbour_terms",
        "document_terms",
        "summary_max_chunks",
        "previous_words",
    )
    well_formed = (
        settings.kind in KINDS
        and settings.fields in FIELDS
        and isinstance(settings.model, str)
        and (settings.kind == "model") == bool(settings.model)
        and all(type(getattr(settings, n)) is int for n in (*counts, "method"))
        and type(settings.new_terms_only) is bool
    )
    if not well_formed:
        raise IndexMismatch(f"the index manifest's context record is malformed: {raw!r}")
    return settings


def check_context(manifest: dict[str, Any], root: str, wanted: ContextSettings | None) -> None:
    """Refuse to search an index with a context other than the one asked for, as for
    embeddings: its vectors and keywords were made from other texts."""
    built = recorded_context(manifest)
    if wanted is not None and built != wanted:
        raise IndexMismatch(
            f"index {root} was built with context {_name(built)!r}, but "
            f"{_name(wanted)!r} was requested: ingest again with `--context {_name(wanted)}`"
        )


def _name(settings: ContextSettings | None) -> str:
    return "?" if settings is None else settings.model or settings.kind


def chunk_contexts(
    title: str,
    texts: Sequence[str],
    settings: ContextSettings,
    sections: Sequence[str] | None = None,
) -> list[str | None]:
    """One context per chunk text of one document, in order (None for no context); a
    model's contexts are written by `ingest.model_context` instead. `sections` names each
    chunk's section (chunks of one section share it; without it each chunk is one)."""
    if settings.kind != "offline" or not texts:
        return [None] * len(texts)
    previous = _previous_openings(texts, sections or range(len(texts)), settings.previous_words)
    chunk_words = [_content_words(text) for text in texts]
    spread = Counter(w for words in chunk_words for w in set(words))
    long = 0 < settings.summary_max_chunks < len(texts)
    summary = "" if long else _summary(texts, spread, settings.summary_sentences)
    key_terms = _document_terms(spread, len(texts), settings.document_terms)
    out: list[str | None] = []
    for i in range(len(texts)):
        parts = [summary] if summary else []
        if previous[i]:
            parts.append(f"After: {previous[i]}")
        if key_terms:
            parts.append(f"Topics: {', '.join(key_terms)}.")
        near = [
            _chunk_terms(chunk_words[j], spread, len(texts), settings.neighbour_terms)
            for j in (i - 1, i + 1)
            if 0 <= j < len(texts)
        ]
        own = set(chunk_words[i]) if settings.new_terms_only else set()
        terms = list(dict.fromkeys(t for group in near for t in group if t not in own))
        if terms:
            parts.append(f"Nearby: {', '.join(terms)}.")
        out.append(" ".join(parts) or None)
    return out


def _previous_openings(texts: Sequence[str], sections: Sequence[object], size: int) -> list[str]:
    """For each chunk, the first `size` words of the section before its own ('' for the
    first section): every chunk of a section gets the same opening."""
    if size <= 0:
        return [""] * len(texts)
    openings: list[str] = []
    before = current = ""
    for i, text in enumerate(texts):
        if i == 0 or sections[i] != sections[i - 1]:
            before, current = current, " ".join(text.split()[:size])
        openings.append(before)
    return openings


def _content_words(text: str) -> list[str]:
    """Lowercased words that carry meaning: no stopwords, no one- or two-letter words."""
    words = (w.lower().strip(".-+") for w in _WORD.findall(text))
    return [w for w in words if len(w) > 2 and w not in STOPWORDS]


def _summary(texts: Sequence[str], spread: Counter[str], size: int) -> str:
    """The lead sentence, then the sentences whose words most recur across the document's
    chunks (centrality), in document order; only prose-sized sentences qualify."""
    if size <= 0:
        return ""
    sentences = [
        s
        for text in texts
        for s in split_sentences(text)
        if _MIN_SENTENCE_WORDS <= len(s.split()) <= _MAX_SENTENCE_WORDS
    ]
    if not sentences:
        return ""
    if len(texts) == 1:
        return ""  # the chunk is the whole document: its summary would repeat it

    def centrality(sentence: str) -> float:
        words = set(_content_words(sentence))
        return sum(spread[w] - 1 for w in words) / math.sqrt(len(words) or 1)

    chosen = {0}
    for index, _ in sorted(enumerate(sentences), key=lambda pair: (-centrality(pair[1]), pair[0])):
        if len(chosen) >= size:
            break
        chosen.add(index)
    return " ".join(sentences[i] for i in sorted(chosen))


def _document_terms(spread: Counter[str], chunks: int, size: int) -> list[str]:
    """The words found in the most chunks: what the whole document keeps returning to."""
    if size <= 0 or chunks < 2:
        return []
    return [w for w, n in spread.most_common(size) if n > 1]


def _chunk_terms(words: list[str], spread: Counter[str], chunks: int, size: int) -> list[str]:
    """A chunk's own key terms: frequent in it, rare in the rest of its document."""
    counts = Counter(words)
    scored = sorted(counts, key=lambda w: (-counts[w] * math.log(1 + chunks / spread[w]), w))
    return scored[:size]
