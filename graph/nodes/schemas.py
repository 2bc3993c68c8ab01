"""The structured outputs the nodes ask a chat model for: a turn's plan, each
question's parts, and per-source grades.
"""

from __future__ import annotations

import functools
from typing import Literal

from pydantic import BaseModel, Field, create_model


class SourceGrades(BaseModel):
    """Relevance of each numbered source to the question."""

    scores: list[int] = Field(
        description="One score from 0 to 10 per source, in the order the sources are numbered."
    )


@functools.lru_cache(maxsize=64)
def grades_for(count: int) -> type[SourceGrades]:
    """SourceGrades with exactly `count` scores of 0-10 in its schema. A server that turns
    the schema into a grammar (llama.cpp) then cannot return the wrong number of grades,
    which a small model otherwise often does. Scores out of range are clamped, not refused."""
    return create_model(
        "SourceGrades",
        __base__=SourceGrades,
        __doc__=SourceGrades.__doc__,
        scores=(
            list[int],
            Field(
                min_length=count,
                max_length=count,
                description=f"Exactly {count} scores from 0 to 10, one per source, in the "
                "order the sources are numbered.",
            ),
        ),
    )


class PlannedQuestion(BaseModel):
    """One sub-question to search for on its own."""

    question: str = Field(description="The sub-question, standalone (no 'it', 'that').")
    needs_second_search: bool = Field(
        default=False,
        description="True when the answer depends on something the first evidence will name "
        "(e.g. first the team that owns billing, then that team's expense approver).",
    )


class TurnPlan(BaseModel):
    """How to handle the user's latest message."""

    action: Literal["search", "reply", "clarify"] = Field(
        description="'search' the documents; 'reply' without searching (greetings, thanks, "
        "questions about this conversation); 'clarify' with one question when it is ambiguous."
    )
    reply: str = Field(default="", description="The reply or clarifying question, if not 'search'.")
    whole_corpus: bool = Field(
        default=False,
        description="For 'search': true when the message asks about the documents as a whole "
        "or a large part of them (summarize everything, what topics they cover, list every X, "
        "which documents mention X), not one specific thing.",
    )
    questions: list[PlannedQuestion] = Field(
        default_factory=list,
        description="For 'search': one entry per part of the question, in the order asked; "
        "a single question is one entry.",
    )
