"""Text analysis shared by every backend, ingest and retrieval, so all sides tokenize,
slugify and prefix chunks alike."""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

from footnote.store.types import Chunk

_WORD = re.compile(r"[a-z0-9]+(?:[_.][a-z0-9]+)*")

# English function words plus question words: a question's "how", "what", "often" say what
# kind of answer is wanted, not what it is about, and only add noise to keyword matching.
STOPWORDS = frozenset(
    [
        "a",
        "about",
        "above",
        "after",
        "again",
        "against",
        "all",
        "am",
        "an",
        "and",
        "any",
        "are",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "doing",
        "down",
        "during",
        "each",
        "few",
        "for",
        "from",
        "further",
        "had",
        "has",
        "have",
        "having",
        "he",
        "her",
        "here",
        "hers",
        "herself",
        "him",
        "himself",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "itself",
        "just",
        "me",
        "more",
        "most",
        "my",
        "myself",
        "no",
        "nor",
        "not",
        "now",
        "of",
        "off",
        "on",
        "once",
        "only",
        "or",
        "other",
        "our",
        "ours",
        "ourselves",
        "out",
        "over",
        "own",
        "same",
        "she",
        "should",
        "so",
        "some",
        "such",
        "than",
        "that",
        "the",
        "their",
        "theirs",
        "them",
        "themselves",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "very",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "yours",
        "yourself",
        "yourselves",
        "shall",
        "may",
        "might",
        "must",
        "also",
        "get",
        "got",
        "use",
        "using",
        "used",
        "way",
        "ways",
        "often",
        "need",
        "needs",
        "want",
        "wants",
        "able",
        "let",
        "lets",
        "like",
        "tell",
        "explain",
        "does",
        "anyone",
        "something",
        "thing",
        "things",
        "one",
    ]
)


@lru_cache(maxsize=1)
def _stemmer() -> Any:
    import Stemmer

    return Stemmer.Stemmer("english")


def stem_words(words: Iterable[str]) -> list[str]:
    """The English (Snowball) stems of lowercased words, as BM25 indexes them."""
    return list(_stemmer().stemWords(list(words)))


def keyword_tokens(text: str) -> list[str]:
    """Lowercased, stopword-free, stemmed word tokens for BM25 (index and query alike).

    Dotted and underscored names (`os.getcwd`, `max_tokens`) are kept whole and also split,
    so both the exact name and its parts match.
    """
    words: list[str] = []
    for match in _WORD.findall(text.lower()):
        if re.search(r"[_.]", match):
            words.append(match)
            words.extend(re.split(r"[_.]", match))
        else:
            words.append(match)
    kept = [w for w in words if w and w not in STOPWORDS]
    return stem_words(kept)


def slugify(text: str) -> str:
    """GitHub-style heading slug: lowercase, spaces to dashes, punctuation dropped."""
    slug = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return re.sub(r"\s+", "-", slug).strip("-") or "section"


SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(\[])|\n\s*\n")


def split_sentences(text: str) -> list[str]:
    """Split prose into sentences; good enough for extractive answers and sentence scoring."""
    parts = (p.strip() for p in SENTENCE_END.split(text))
    return [" ".join(p.split()) for p in parts if p]


def heading_prefix(title: str, section: str) -> str:
    """The context line embedded and keyword-indexed with each chunk."""
    if section and section != title:
        return f"{title} > {section}" if not section.startswith(title) else section
    return title


def embedding_text(chunk: Chunk, with_context: bool = True) -> str:
    """What the models see for a chunk: where it sits, what it says, then its context in
    the document if it has one. The context comes last so that, when the whole does not fit
    the embedding model, truncation drops context and never the chunk's own words.
    `with_context=False` is the dense text of a context kept for keywords only."""
    text = f"{heading_prefix(chunk.title, chunk.section)}\n{chunk.text}"
    return f"{text}\n{chunk.context}" if chunk.context and with_context else text
