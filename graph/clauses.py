"""A question's clauses, and which of them a text leaves open.

"My on-call week earned me an extra day off: where do I book it, and how far ahead?" has two
clauses: what the asker already knows (the day off) and what they ask (booking it). Evidence
that matches the first says nothing about the second; the hop planner (hops.py) searches
again for an open clause, and the extractive answer (offline.py) quotes a sentence for it.
"""

from __future__ import annotations

import re

from footnote.graph.grader import without_frame
from footnote.store.text import keyword_tokens

OPEN_SHARE = 0.5
"""A clause is left open when at least this share of its keywords is absent from the
evidence."""
_CLAUSE = re.compile(
    r"(?<=[:;?])\s+"
    r"|(?:(?<=[a-z0-9)]{2}\.)|(?<=[A-Z]{2}\.))\s+(?=[A-Z])"  # a sentence's end, not "e.g." or "Mr."
    r"|,\s+(?=(?i:how|what|when|where|who|which|why)\b)"
    r"|\s[-\u2013\u2014]\s+(?=(?i:how|what|when|where|who|which|why|is|are|do|does|can)\b)"
)


def question_clauses(question: str) -> list[str]:
    """The clauses that carry words: split after ":", ";", "?" and a sentence's full stop
    ("The policy names an environment. How do I reach it?", "... on the VPN. How ...?"), and
    before ", how ..." or " - is there ..."."""
    return [c.strip() for c in _CLAUSE.split(question) if keyword_tokens(c)]


def clause_keywords(clause: str) -> set[str]:
    """The clause's keyword stems, its frame ("how long") aside: any words answer that."""
    return {s for s in keyword_tokens(without_frame(clause)) if len(s) > 1}  # not "m" of "I'm"


def open_share(clause: str, present: set[str]) -> float:
    """The share of the clause's keywords that are absent from `present` (keyword stems)."""
    stems = clause_keywords(clause)
    return len(stems - present) / len(stems) if stems else 0.0
