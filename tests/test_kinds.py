"""The "another kind" veto (graph/kinds.py): a chunk headed with another kind of what the
question names, and without the question's own kind anywhere in it, cannot answer it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.documents import Document

from footnote.graph.grader import offline_grades
from footnote.graph.grader_choice import OFFLINE_GRADERS
from footnote.graph.graph import make_graph
from footnote.graph.kinds import compounds, names_another_kind, numbered
from footnote.graph.prompts import NOT_COVERED
from footnote.tools.documents import Candidate, Evidence

ANNUAL_LEAVE = (
    "Holidays and time off",
    "Holidays and time off > Annual leave",
    "Full-time employees have 27 days of annual leave a year, plus public holidays. Up to five "
    "unused days carry over to the next year and must be taken by the end of March.",
)
STORING_KEYS = (
    "API keys",
    "API keys > Storing keys",
    "Never commit an API key to a repository. If a key leaks, revoke it at once and tell the "
    "security team in #sec-incidents.",
)


def chunk(title: str, section: str, text: str, dense: float = 0.6) -> Candidate:
    return Candidate(
        document=Document(page_content=text, metadata={"title": title, "section": section}),
        evidence=Evidence(dense=dense, coverage=0.6),
    )


@pytest.mark.parametrize(
    ("question", "section", "another_kind"),
    [
        # the question's kind is not the heading's, and not in the chunk: a near miss
        ("How many weeks of parental leave do I get?", ANNUAL_LEAVE, True),
        ("Do we have parental leave?", ANNUAL_LEAVE, True),
        ("maternity leave", ANNUAL_LEAVE, True),
        ("How do I rotate an SSH key?", STORING_KEYS, True),
        # a paraphrase: another word for the thing, not another kind of it
        ("How many vacation days do I get?", ANNUAL_LEAVE, False),
        ("How many days of annual leave do I have?", ANNUAL_LEAVE, False),
        # the question's modifier is in the chunk's text ("leaks"): the chunk speaks of it
        ("Which channel takes reports of leaked keys?", STORING_KEYS, False),
        ("How often do I have to change my API key?", STORING_KEYS, False),
        # a compound only in the body ("unused days") says nothing of the whole section
        ("How many sick days can I take?", ANNUAL_LEAVE, False),
    ],
)
def test_another_kind(question: str, section: tuple[str, str, str], another_kind: bool) -> None:
    assert names_another_kind(question, chunk(*section)) is another_kind


SEVERITY_ONE = (
    "On-call",
    "On-call > Incidents",
    "Acknowledge a page within 5 minutes. For a severity 1 incident, open an incident channel, "
    "name an incident commander and post updates every 30 minutes.",
)


@pytest.mark.parametrize(
    ("question", "another_kind"),
    [
        # another member of the series, and the question's own nowhere in the chunk
        ("What am I supposed to do for a severity 2 incident?", True),
        ("How often should we post updates during a severity 2 incident?", True),
        # the chunk's own member, asked in other words
        ("What do I do in a severity 1 outage?", False),
        ("What should I do when a sev incident starts?", False),
        # a measure is not a member: "10 minutes" against "5 minutes" is a fact to answer
        ("Do I have to acknowledge a page within 10 minutes?", False),
        ("Should updates go out every 15 minutes?", False),
    ],
)
def test_another_numbered_member(question: str, another_kind: bool) -> None:
    assert names_another_kind(question, chunk(*SEVERITY_ONE)) is another_kind


def test_numbered_reads_members_not_measures_or_times() -> None:
    assert numbered("a severity 1 incident and Python 3.11") == {("sever", "1"), ("python", "3.11")}
    assert numbered("every 90 days, over 500 EUR, 50% done") == set()
    assert numbered("Monday 10:00, lines 1-9, the 2nd key") == set()
    # a stopword or the question's frame before a number names nothing
    assert numbered("after 3 or how many 4") == set()


def test_compounds_are_adjacent_content_words_within_a_clause() -> None:
    assert compounds("What is the parental leave policy?") == {
        ("parent", "leav"),
        ("leav", "polici"),
    }
    # a stopword, a number, punctuation or the question's frame breaks a pair
    assert compounds("How many weeks of leave, in 27 days?") == set()
    assert compounds("Holidays and time off > Annual leave") == {("annual", "leav")}
    # a title and its section path are two headings: no compound across the line break
    assert compounds("Payroll\nPayroll > Corrections") == set()


def test_a_title_and_its_section_never_make_a_compound() -> None:
    """The title "Payroll" and the section "Payroll > Corrections", read as one phrase, made
    the compound "payroll payroll", another kind of payroll than "sign payroll", and vetoed
    the one section that answers."""
    corrections = chunk(
        "Payroll",
        "Payroll > Corrections",
        "Payroll corrections above 500 EUR need a second signature from the head of people.",
    )
    assert not names_another_kind("Who has to sign payroll corrections?", corrections)


@pytest.mark.parametrize("offline_grader", OFFLINE_GRADERS)
def test_a_chunk_of_another_kind_cannot_pass_any_offline_grader(offline_grader: Any) -> None:
    annual = chunk(*ANNUAL_LEAVE, dense=0.95)
    annual["evidence"]["coverage"] = 0.95
    near_miss = offline_grades([annual], offline_grader, "Do we have parental leave?")
    paraphrase = offline_grades([annual], offline_grader, "How many vacation days do I get?")
    assert near_miss == [0.0]
    assert offline_grader == "judge" or paraphrase[0] > 0.5


def test_the_held_out_parental_leave_questions_are_not_covered(handbook_index: Path) -> None:
    """The phrasings the calibrated fit never saw, which it answered from annual leave before
    the veto (docs/evaluation.md, "Fourth pass"), with the default grader and the others."""
    graph: Any = make_graph()
    for offline_grader in ("calibrated", "linear"):
        for question in (
            "How many weeks of parental leave do I get?",
            "Do we have parental leave?",
            "Tell me about parental leave",
            "What about parental leave?",
        ):
            out = graph.invoke(
                {"messages": [{"role": "user", "content": question}]},
                context={"index_dir": str(handbook_index), "offline_grader": offline_grader},
            )
            assert out["messages"][-1].content == NOT_COVERED, (offline_grader, question)


def test_a_severity_2_incident_is_not_covered_by_the_severity_1_section(
    handbook_index: Path,
) -> None:
    """oncall.md speaks only of severity 1 incidents; before the numbered member, the default
    answered from it (the eighth set written apart, docs/evaluation.md). The caller is an
    engineer, who may read oncall.md."""
    graph: Any = make_graph()
    context = {"index_dir": str(handbook_index), "user_groups": ["engineering"]}

    def ask(question: str) -> str:
        out = graph.invoke({"messages": [{"role": "user", "content": question}]}, context=context)
        return str(out["messages"][-1].content)

    assert ask("What am I supposed to do for a severity 2 incident?") == NOT_COVERED
    assert ask("How often should we post updates during a severity 2 incident?") == NOT_COVERED
    assert "every 30 minutes" in ask("How often do we post updates in a severity 1 incident?")


@settings(max_examples=200, deadline=None)
@given(question=st.text(max_size=200), title=st.text(max_size=80), text=st.text(max_size=300))
def test_any_text_is_read_without_error(question: str, title: str, text: str) -> None:
    """Questions and documents are untrusted: any text gives an answer, never an error."""
    assert names_another_kind(question, chunk(title, f"{title} > {title}", text)) in (True, False)
    assert isinstance(numbered(f"{question} {text}"), set)
