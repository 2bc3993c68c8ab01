"""Do the cited sources support the claims that cite them? A deterministic check.

`verify` (citations.py) only proves that a cited number names a source. This module checks
what each cited sentence says against the text of the sources it cites, with two kinds of
evidence:

- lexical: the idf-weighted share of the claim's keywords found in the cited sources (title
  and heading path included), and the rarest keyword the sources lack. Rare words carry a
  claim: a wrong identifier, option or name is exactly what a fabricated sentence gets wrong;
- semantic: the best embedding similarity between the claim and one sentence of the sources.

A claim that quotes a cited source passes, so an extractive answer passes trivially. Any
other claim needs enough keywords to say something, most of them (by weight) in what it
cites, no rare keyword the sources lack, and one cited sentence that says nearly the same
thing. The thresholds were chosen on pyfaq-core and checked on debfaq
(`benchmarks/support_check.py`; table and command in docs/evaluation.md).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from langchain_core.documents import Document

from footnote.graph.citations import CITATION_RUN, citation_numbers, strip_citation_marks
from footnote.store.text import SENTENCE_END, keyword_tokens, split_sentences

LEXICAL_FLOOR = 0.8
"""Idf-weighted share of the claim's keywords the cited sources must contain."""
RARE_MISSING = 0.8
"""A keyword the cited sources lack may weigh at most this share of the claim's rarest
keyword's weight: an absent rare word is an invented detail, an absent common one is wording."""
SEMANTIC_SUPPORT = 0.6
"""Similarity the claim needs to its closest cited sentence."""
MIN_TERMS = 2
"""A cited sentence with fewer keywords than this says nothing a source could support."""

Embed = Callable[[list[str]], np.ndarray]
"""Texts -> L2-normalised vectors, one row per text."""
IdfWeights = Callable[[Sequence[str]], Mapping[str, float]]
"""Keyword tokens -> their idf in the index (higher: rarer)."""

_CLOSING_STOP = re.compile(r"[ \t]*[.!?;]")


@dataclass(frozen=True)
class ClaimCheck:
    """One cited sentence of an answer and the evidence for it."""

    claim: str
    citations: list[int]
    lexical: float
    """Idf-weighted share of the claim's keywords in the cited sources."""
    rare_missing: float
    """Weight of the rarest keyword the sources lack, over the claim's rarest keyword's."""
    semantic: float
    """Best similarity between the claim and one cited sentence (0 when not measured)."""
    verbatim: bool = False
    """The claim is a quote (at least MIN_TERMS keywords) of one cited source."""
    terms: int = 0

    @property
    def supported(self) -> bool:
        if self.verbatim:
            return True
        return (
            self.terms >= MIN_TERMS
            and self.lexical >= LEXICAL_FLOOR
            and self.rare_missing <= RARE_MISSING
            and self.semantic >= SEMANTIC_SUPPORT
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "claim": self.claim,
            "citations": self.citations,
            "lexical": round(self.lexical, 3),
            "rare_missing": round(self.rare_missing, 3),
            "semantic": round(self.semantic, 3),
        }


def cited_claims(answer: str) -> list[tuple[str, list[int], tuple[int, int]]]:
    """Each sentence that carries a citation: (claim text, cited numbers, its span).

    A citation run belongs to the sentence just before it, whether the run sits before the
    full stop ("... 90 days [1].") or after it ("... 90 days. [1]", the extractive style).
    """
    claims = []
    start = 0
    for match in CITATION_RUN.finditer(answer):
        segment = answer[start : match.start()]
        boundaries = [m.end() for m in SENTENCE_END.finditer(segment.rstrip())]
        begin = start + (boundaries[-1] if boundaries else 0)
        claim = " ".join(answer[begin : match.start()].split()).lstrip(",;: ")
        end = match.end()
        stop = _CLOSING_STOP.match(answer, end)
        if stop and not claim.endswith((".", "!", "?")):
            end = stop.end()  # "... 90 days [1]." : the full stop belongs to this claim
        if re.search(r"\w", claim):
            claims.append((claim, citation_numbers(match.group(0)), (begin, end)))
        start = end
    return claims


def check_claims(
    answer: str,
    documents: Sequence[Document],
    *,
    embed: Embed | None = None,
    idf: IdfWeights | None = None,
) -> list[ClaimCheck]:
    """Check every cited sentence against the sources it cites (valid numbers only).

    Without `embed` no claim but a quote can be confirmed; without `idf` every keyword
    weighs the same.
    """
    checks = []
    for claim, numbers, _span in cited_claims(answer):
        cited = [documents[n - 1] for n in numbers if 1 <= n <= len(documents)]
        if cited:
            checks.append(check_claim(claim, numbers, cited, embed=embed, idf=idf))
    return checks


def check_claim(
    claim: str,
    numbers: list[int],
    cited: Sequence[Document],
    *,
    embed: Embed | None = None,
    idf: IdfWeights | None = None,
) -> ClaimCheck:
    """Check one claim against the sources `cited` (those its `numbers` name)."""
    terms = len(set(keyword_tokens(strip_citation_marks(claim))))
    if terms >= MIN_TERMS and is_quote(claim, cited):
        return ClaimCheck(claim, numbers, 1.0, 0.0, 1.0, True, terms)
    lexical, rare_missing = lexical_support(claim, cited, idf)
    semantic = 0.0
    if embed is not None and terms >= MIN_TERMS and lexical >= LEXICAL_FLOOR:
        semantic = semantic_support(claim, cited, embed)
    return ClaimCheck(claim, numbers, lexical, rare_missing, semantic, False, terms)


def is_quote(claim: str, cited: Sequence[Document]) -> bool:
    """The claim appears word for word in one cited source (case and spacing aside)."""
    wanted = _normalise(strip_citation_marks(claim)).rstrip(".!?;:, ")
    return bool(wanted) and any(
        wanted in _normalise(strip_citation_marks(doc.page_content)) for doc in cited
    )


def _normalise(text: str) -> str:
    return " ".join(text.lower().split())


def lexical_support(
    claim: str, cited: Sequence[Document], idf: IdfWeights | None = None
) -> tuple[float, float]:
    """The idf-weighted share of the claim's keywords in the cited sources, and the weight of
    the rarest keyword they lack relative to the claim's rarest keyword (0 when none lacks)."""
    terms = sorted(set(keyword_tokens(strip_citation_marks(claim))))
    if not terms:
        return 1.0, 0.0  # no content words: nothing is claimed
    present: set[str] = set()
    for doc in cited:
        meta = doc.metadata
        heading = f"{meta.get('title') or ''} {meta.get('section') or ''}"
        present.update(keyword_tokens(f"{heading}\n{doc.page_content}"))
    found = idf(terms) if idf is not None else {}
    weights = {t: max(float(found.get(t, 1.0)), 1e-6) for t in terms}
    missing = [w for t, w in weights.items() if t not in present]
    share = 1 - sum(missing) / sum(weights.values())
    return share, (max(missing) / max(weights.values()) if missing else 0.0)


def semantic_support(claim: str, cited: Sequence[Document], embed: Embed) -> float:
    """Best similarity between the claim and any one sentence of the cited sources."""
    sentences = [
        s
        for doc in cited
        for s in split_sentences(strip_citation_marks(doc.page_content))
        if len(s.split()) >= 3
    ]
    if not sentences:
        return 0.0
    vectors = embed([strip_citation_marks(claim), *sentences])
    return float(np.max(vectors[1:] @ vectors[0]))


def remove_claims(answer: str, checks: Sequence[ClaimCheck]) -> str:
    """The answer without the sentences (and their citations) that failed the check; empty
    when nothing is left."""
    failed = {c.claim for c in checks if not c.supported}
    if not failed:
        return answer
    kept, start = [], 0
    for claim, _numbers, (begin, end) in cited_claims(answer):
        if claim in failed:
            before = answer[start:begin].rstrip(" \t,;:")
            kept.append(before)
            stop = answer[begin:end].rstrip()[-1:]
            if before and stop in ".!?" and not before.endswith((".", "!", "?")):
                kept.append(stop)  # a removed final clause took the sentence's full stop
            kept.append(" ")
            start = end
    kept.append(answer[start:])
    text = re.sub(r"[ \t]{2,}", " ", "".join(kept)).strip()
    return text if re.search(r"\w", text) else ""
