"""The embedded default's LLM-free stand-ins for each LLM role, deterministic and measured.

- rewriting: a retry adds pseudo-relevance-feedback terms from the last candidates (making a
  follow-up standalone and splitting a question into parts are the planner's: planner.py).
- grading: a grade per chunk from its embedding similarity to the question, the share of
  the question's (idf-weighted) keywords it contains and its place among the other
  candidates (`grader.py`: by default the calibrated model with the judge as a rescue, or the
  calibrated model alone, the linear blend, the judge, or the judge as a veto).
- answering: extractive; the sentences of the kept chunks closest to the question, each
  followed by its citation; a chunk of source code is quoted as its lines, in a fenced
  block cited by line (code_quotes.py).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence

import numpy as np
from langchain_core.documents import Document

from footnote.graph.citations import strip_citation_marks
from footnote.graph.clauses import OPEN_SHARE, clause_keywords, open_share, question_clauses
from footnote.graph.code_quotes import code_language, quote_code, quoted_window
from footnote.graph.grader import answer_type, has_answer_type
from footnote.models.embeddings import IndexEmbeddings
from footnote.store.text import keyword_tokens, split_sentences
from footnote.tools.documents import Candidate
from footnote.tools.retrieval import expand_query

_REFERRING_START = re.compile(
    r"^(they|it|this|these|those|that|such|because|however|instead|so|then)\b", re.IGNORECASE
)
"""A sentence opening like this leans on the one before; quoting it alone misleads."""


ANSWER_CUE_WEIGHT = 0.15
"""How much a sentence of the kind the question asks for (a number for "how many", a step
for "how do I") gains over one that only shares its words: the sentence that answers, not
the one that repeats the topic ("The VPN is required for staging" for "How do I get on the
VPN?")."""
_PROCEDURE = re.compile(
    r"^\s*(how (do|can|should|would) (i|we|you)|how to|what should i do)\b", re.I
)
_NOT_IMPERATIVE = {
    "the", "a", "an", "this", "that", "these", "those", "it", "they", "we", "you", "he", "she",
    "there", "each", "every", "all", "some", "any", "no", "our", "your", "its", "their", "if",
    "when", "after", "before", "because", "while", "on", "in", "at", "for", "with", "from",
    "to", "of", "by", "as",
}  # fmt: skip
"""Openings of a statement, not of an instruction."""
_COPULA = {
    "is", "are", "was", "were", "has", "have", "had", "can", "could", "must", "should", "will",
    "would", "may", "might", "do", "does", "did", "lets", "belongs", "carries", "keeps", "gets",
    "use", "uses",
}  # fmt: skip
"""Second words that make the first a subject ("Meals are covered"), not a verb."""


def answers_the_kind(question: str, sentence: str) -> float:
    """1 when the sentence is the kind of statement the question asks for: a number, a
    duration or a date (grader.answer_type), or an instruction for a "how do I" question."""
    kind = answer_type(question)
    if kind:
        return float(has_answer_type(kind, sentence))
    if _PROCEDURE.search(question):
        words = sentence.split()
        if len(words) < 2:
            return 0.0
        first, second = words[0].lower().strip(",:"), words[1].lower().strip(",:")
        return float(first not in _NOT_IMPERATIVE and second not in _COPULA)
    return 0.0


def retry_query(query: str, candidates: Sequence[Candidate]) -> str:
    """A different query for the next round: pseudo-relevance feedback from the candidates."""
    return expand_query(query, [c["document"].page_content for c in candidates])


def extractive_answer(
    question: str,
    documents: Sequence[Document],
    embeddings: IndexEmbeddings,
    *,
    max_sentences: int = 3,
    same_source_floor: float = 0.6,
    other_source_floor: float = 0.75,
    said: Collection[str] = (),
) -> str:
    """Pick the sentences that best answer the question, each cited with its source number.

    Sentences are scored by embedding similarity to the question (each sentence embedded
    under its section heading: "Troubleshooting: If the profile has expired, ..." says what
    the sentence is about, as the chunk's own embedding does) plus keyword overlap. The best
    sentence is kept, with those of its own source that come close (the sentences around an
    answer usually qualify it: a grace period, an exception); another source must come close
    (`other_source_floor` of the best score) to be added. They are printed in source order,
    as the documents say them. A sentence in `said` (quoted under an earlier part of the
    same answer) is not quoted again: the answer reads as a whole, each part adding its own.
    A clause of the question the chosen sentences leave open gets a sentence of its own
    (`_for_open_clauses`).
    """
    candidates: list[tuple[int, int, str]] = []
    windows: dict[int, list[int]] = {}
    for number, doc in enumerate(documents, 1):
        if code_language(doc):  # code is quoted as its lines, one candidate per chunk
            windows[number] = quoted_window(question, doc)
            lines = doc.page_content.split("\n")
            candidates.append((number, 0, "\n".join(lines[i] for i in windows[number])))
            continue
        for position, sentence in enumerate(
            split_sentences(strip_citation_marks(doc.page_content))
        ):
            # A question does not answer a question (FAQ titles, "See also ..." pointers).
            if (
                len(sentence.split()) >= 3
                and not sentence.rstrip(" .").endswith("?")
                and sentence.strip() not in said
            ):
                candidates.append((number, position, sentence))
    if not candidates:
        return ""
    vectors = embeddings.embed_array(
        [_under_heading(documents[number - 1], sentence) for number, _, sentence in candidates]
    )
    similarity = vectors @ embeddings.embed_array([question])[0]
    asked = set(keyword_tokens(question))
    overlap = np.array(
        [
            len(asked & set(keyword_tokens(sentence))) / max(len(asked), 1)
            for _, _, sentence in candidates
        ]
    )
    # Sources come ranked by retrieval; a small prior keeps the answer with the best ones.
    rank_prior = np.array([0.1 / number for number, _, _ in candidates])
    cue = np.array([answers_the_kind(question, sentence) for _, _, sentence in candidates])
    scores = 0.8 * similarity + 0.2 * overlap + rank_prior + ANSWER_CUE_WEIGHT * cue
    order = [int(i) for i in np.argsort(-scores)]
    best = order[0]
    best_score = float(scores[best])
    chosen = [
        i
        for i in order
        if scores[i]
        >= best_score
        * (same_source_floor if candidates[i][0] == candidates[best][0] else other_source_floor)
    ][:max_sentences]
    chosen += _for_open_clauses(question, chosen, candidates, documents, vectors, embeddings)
    chosen += _continuations(chosen, candidates)
    chosen.sort(key=lambda i: (candidates[i][0], candidates[i][1]))
    paragraphs: list[str] = []
    prose: list[str] = []
    for number, _, text in (candidates[i] for i in chosen):
        if number in windows:  # a quote of code stands on its own lines (code_quotes.py)
            paragraphs += [" ".join(prose)] if prose else []
            paragraphs.append(quote_code(documents[number - 1], number, windows[number]))
            prose = []
        else:
            prose.append(f"{text} [{number}]")
    paragraphs += [" ".join(prose)] if prose else []
    return "\n\n".join(paragraphs)


def quoted_sentences(answer: str) -> set[str]:
    """The sentences an extractive answer quoted, without their citations (`said` above)."""
    return {sentence.strip() for sentence in split_sentences(strip_citation_marks(answer))}


def _under_heading(document: Document, sentence: str) -> str:
    section = str(document.metadata.get("section") or "").strip()
    return f"{section}: {sentence}" if section else sentence


def _for_open_clauses(
    question: str,
    chosen: list[int],
    candidates: list[tuple[int, int, str]],
    documents: Sequence[Document],
    vectors: np.ndarray,
    embeddings: IndexEmbeddings,
) -> list[int]:
    """Sentence-level bridging, without a model: for each clause of the question that the
    chosen sentences leave open (clauses.py), the sentence that best answers that clause
    alone, among those carrying one of its missing words. "My on-call week earned me an extra
    day off: where do I book it, and how far ahead?" matches the day-off sentence as a whole;
    its second clause is answered by "Book time off in the HR portal at least two weeks
    ahead", in the other kept document. Only kept (graded) chunks are read, so a clause
    nothing kept answers stays unanswered."""
    clauses = question_clauses(question)
    if len(clauses) < 2:
        return []
    words = [
        set(keyword_tokens(_under_heading(documents[n - 1], text))) for n, _, text in candidates
    ]
    quoted = set().union(*(words[i] for i in chosen))
    extra: list[int] = []
    for clause in clauses:
        if open_share(clause, quoted) < OPEN_SHARE:
            continue
        stems = clause_keywords(clause)
        missing = stems - quoted
        usable = [i for i in range(len(candidates))
                  if i not in chosen and i not in extra and words[i] & missing]  # fmt: skip
        if not usable:
            continue
        similarity = vectors[usable] @ embeddings.embed_array([clause])[0]
        scores = [
            0.8 * float(sim) + 0.2 * len(words[i] & stems) / len(stems)
            + ANSWER_CUE_WEIGHT * answers_the_kind(clause, candidates[i][2])
            for i, sim in zip(usable, similarity, strict=True)
        ]  # fmt: skip
        best = usable[int(np.argmax(scores))]
        extra.append(best)
        quoted |= words[best]
    return extra


def _continuations(chosen: list[int], candidates: list[tuple[int, int, str]]) -> list[int]:
    """The next sentence of a chosen one when it refers back to it ("They use STS tokens")."""
    extra = []
    for i in chosen:
        nxt = i + 1
        if (
            nxt < len(candidates)
            and nxt not in chosen
            and nxt not in extra
            and candidates[nxt][0] == candidates[i][0]
            and _REFERRING_START.match(candidates[nxt][2])
        ):
            extra.append(nxt)
    return extra[:1]
