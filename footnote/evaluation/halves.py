"""Which half of a question set a question belongs to: fitting or reporting.

Every parameter Footnote chooses on questions (a grader's threshold, a weight) is chosen on the
fitting half, and every figure it publishes is measured on the reporting half. The split is
fixed before any fitting and needs no list to keep: a question's half is the lowest bit of the
SHA-256 of its corpus name and id, so it never moves when a question set grows, and a question
asked again (same id) always lands where it landed before.
"""

from __future__ import annotations

import hashlib
from typing import Literal

Half = Literal["fit", "report"]
HALVES: tuple[Half, ...] = ("fit", "report")


def half_of(corpus: str, question_id: str) -> Half:
    """The half `question_id` of `corpus` belongs to (about one question in two each)."""
    digest = hashlib.sha256(f"{corpus}\n{question_id}".encode()).digest()
    return "report" if digest[-1] & 1 else "fit"
