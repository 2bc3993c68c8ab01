"""Sentence-level bridging without a model (graph/clauses.py, offline.extractive_answer): a
clause of the question that the best sentences leave open gets a sentence of its own, from any
kept document; and an elliptical "and how far ahead?" is not a part of its own."""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from langchain_core.documents import Document

from footnote.graph.clauses import open_share, question_clauses
from footnote.graph.graph import graph as exported_graph
from footnote.graph.offline import extractive_answer
from footnote.graph.planner import is_ellipsis, split_question
from footnote.store.text import keyword_tokens

DAY_OFF = "My on-call week earned me an extra day off: where do I book it, and how far ahead?"
COMPENSATION = Document(
    page_content="Each week on call earns one extra day off, taken within the following two "
    "months.",
    metadata={"source": "oncall.md", "title": "On-call", "section": "On-call > Compensation"},
)
BOOKING = Document(
    page_content="Book time off in the HR portal at least two weeks ahead for absences longer "
    "than three days. Your manager approves requests within three working days.",
    metadata={"source": "holidays.md", "title": "Holidays and time off",
              "section": "Holidays and time off > Booking time off"},
)  # fmt: skip


class WordVectors:
    """A scripted embedder: a unit bag of keyword stems, so similarity is shared words."""

    def embed_array(self, texts: list[str]) -> np.ndarray:
        rows = np.zeros((len(texts), 256))
        for row, text in zip(rows, texts, strict=True):
            for stem in keyword_tokens(text):
                row[zlib.crc32(stem.encode()) % 256] += 1.0
        return rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-9)


def test_a_question_s_clauses_and_what_a_text_leaves_open() -> None:
    assert question_clauses(DAY_OFF) == [
        "My on-call week earned me an extra day off:",
        "where do I book it, and how far ahead?",
    ]
    assert question_clauses("How do I rotate a key?") == ["How do I rotate a key?"]
    day_off = set(keyword_tokens(COMPENSATION.page_content))
    assert open_share("My on-call week earned me an extra day off:", day_off) < 0.5
    # "how far" is the answer's frame: "book" and "ahead" are what the clause is about
    assert open_share("where do I book it, and how far ahead?", day_off) == 1.0
    assert open_share("how far ahead?", set(keyword_tokens("two weeks ahead"))) == 0.0


POLICY_DATA = (
    "The security policy tells developers which environment's datasets to use for debugging. "
    "What do I need to have connected to reach that environment?"
)
ANONYMISED = Document(
    page_content="Production data must not be copied to laptops. Use the anonymised staging "
    "datasets for development and debugging.",
    metadata={"source": "security-policy.txt", "title": "Security policy"},
)
VPN = Document(
    page_content="The VPN is required for the staging environment and the internal wiki. "
    "Connect with the WireGuard client before you reach staging.",
    metadata={"source": "vpn.md", "title": "VPN access", "section": "VPN access > Connecting"},
)


@pytest.mark.parametrize(
    ("question", "clauses"),
    [
        (POLICY_DATA, [POLICY_DATA.split(". ")[0] + ".", POLICY_DATA.split(". ")[1]]),
        ("My API key leaked - is there any way to reach them other than the chat channel?",
         ["My API key leaked", "is there any way to reach them other than the chat channel?"]),
        ("Python 3.11. How do I run it?", ["Python 3.11.", "How do I run it?"]),
        # after an upper-case word too ("VPN."), but not after a title ("Mr.") or "U.S."
        ("I'm not on the VPN. How do I reach staging?",
         ["I'm not on the VPN.", "How do I reach staging?"]),
        ("Did Mr. Smith approve it?", ["Did Mr. Smith approve it?"]),
        ("Is the U.S. Office open?", ["Is the U.S. Office open?"]),
        # not a sentence's end: an abbreviation, a version, a lower-case word after the stop
        ("What is e.g. the limit?", ["What is e.g. the limit?"]),
        ("I use v2.0. What now?", ["I use v2.0. What now?"]),
        ("Is the wiki on the VPN. or not?", ["Is the wiki on the VPN. or not?"]),
        # a dash inside a word, and one before a statement, split nothing
        ("How do I re-run a job - quickly?", ["How do I re-run a job - quickly?"]),
    ],
)  # fmt: skip
def test_a_question_splits_after_a_sentence_and_before_a_dashed_question(
    question: str, clauses: list[str]
) -> None:
    assert question_clauses(question) == clauses


def test_a_clause_s_keywords_leave_out_contractions_letters() -> None:
    """ "I'm" and "it's" give the stems "m" and "s": no evidence has them, so they would
    count as open words of every clause that says them."""
    clause = "What has to succeed before it's allowed to go to production?"
    assert open_share(clause, set(keyword_tokens("production succeed allowed go"))) == 0.0


def test_a_premise_sentence_and_its_question_are_answered_from_two_documents() -> None:
    """The question's second sentence asks what the first names ("that environment"): the
    policy's sentence answers the first, and the second gets one of its own from the other
    kept document."""
    answer = extractive_answer(POLICY_DATA, [ANONYMISED, VPN], WordVectors())  # type: ignore[arg-type]
    assert "[1]" in answer and "[2]" in answer
    assert "WireGuard" in answer or "VPN is required" in answer


def test_an_open_clause_is_answered_from_another_kept_document() -> None:
    answer = extractive_answer(DAY_OFF, [COMPENSATION, BOOKING], WordVectors())  # type: ignore[arg-type]
    assert "one extra day off" in answer and "[1]" in answer
    assert "Book time off in the HR portal at least two weeks ahead" in answer
    assert "[2]" in answer
    # only the sentence for the open clause: the approval sentence answers nothing asked
    assert "approves" not in answer


def test_a_clause_no_kept_sentence_speaks_to_stays_unanswered() -> None:
    lone = extractive_answer(DAY_OFF, [COMPENSATION], WordVectors())  # type: ignore[arg-type]
    assert lone == f"{COMPENSATION.page_content} [1]"


def test_a_one_clause_question_quotes_only_what_answers_it() -> None:
    answer = extractive_answer(
        "How far ahead do I book time off?",
        [BOOKING, COMPENSATION],
        WordVectors(),  # type: ignore[arg-type]
    )
    assert "two weeks ahead" in answer and "[2]" not in answer


@pytest.mark.parametrize(
    ("part", "elliptical"),
    [
        ("how far ahead?", True),
        ("And when?", True),
        ("How long?", True),
        ("How many days?", True),
        ("What about sid?", False),
        ("How do I rotate a key?", False),
        ("My VPN drops: why?", False),
    ],
)
def test_an_ellipsis_is_a_question_word_and_at_most_one_more(part: str, elliptical: bool) -> None:
    assert is_ellipsis(part) is elliptical


@pytest.mark.parametrize(
    "question", [DAY_OFF, "How do I rotate a key, and when?", "What is the VPN? How long?"]
)
def test_an_elliptical_part_keeps_its_question_whole(question: str) -> None:
    assert split_question(question) == [question]


def test_the_day_off_question_cites_both_documents(handbook_index: Path) -> None:
    context: dict[str, Any] = {"index_dir": str(handbook_index), "user_groups": ["engineering"]}
    out = exported_graph.invoke(
        {"messages": [{"role": "user", "content": DAY_OFF}]}, context=context
    )
    answer = out["messages"][-1].content
    assert {"oncall.md", "holidays.md"} <= {c["source"] for c in out["citations"]}, answer
    assert "two weeks ahead" in answer
    assert len(out["parts"]) == 1 and out["parts"][0]["covered"] is True
