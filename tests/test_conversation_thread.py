"""A conversation keeps its thread: a turn about the conversation itself (what was cited, a
repeat, a thank-you) is answered from the conversation, and the next follow-up still resolves
against the last question that was researched, not against that turn."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from footnote.graph.graph import make_graph
from footnote.graph.planner import condense_question, researched_questions
from footnote.graph.prompts import NOT_COVERED


def converse(index: Path, *questions: str) -> list[dict[str, Any]]:
    """Each question asked in turn on one thread, offline, as a person chats."""
    graph: Any = make_graph(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "thread"}}
    return [
        graph.invoke(
            {"messages": [{"role": "user", "content": question}]},
            config,
            context={"index_dir": str(index)},
        )
        for question in questions
    ]


@pytest.mark.parametrize(
    ("first", "aside", "follow_up", "source"),
    [
        ("How many days of annual leave do I get?", "What did you just cite?",
         "and can I carry them over?", "holidays.md"),
        ("How many days of annual leave do I get?", "Which sources did you use?",
         "and can I carry them over?", "holidays.md"),
        ("How often do I have to change my API key?", "Can you repeat that?",
         "what happens to the old one after that?", "keys.md"),
        ("How do I connect to the VPN?", "thanks!",
         "and what if my profile has expired?", "vpn.md"),
        ("How do I connect to the VPN?", "What was my last question?",
         "and what if my profile has expired?", "vpn.md"),
    ],
)  # fmt: skip
def test_a_follow_up_after_a_question_about_the_conversation_keeps_the_topic(
    handbook_index: Path, first: str, aside: str, follow_up: str, source: str
) -> None:
    answered, meta, followed = converse(handbook_index, first, aside, follow_up)
    assert answered["citations"][0]["source"] == source
    assert "plan_turn:reply:0" in meta["footnote_route"]
    assert followed["messages"][-1].content != NOT_COVERED
    assert followed["citations"], followed["messages"][-1].content
    assert followed["citations"][0]["source"] == source
    assert "rewrite_query:condensed" in followed["footnote_route"]


def test_the_follow_up_is_condensed_with_the_researched_question() -> None:
    earlier = ["How many days of annual leave do I get?", "What did you just cite?", "thanks"]
    question, strategy = condense_question("and can I carry them over?", earlier)
    assert strategy == "condensed"
    assert question.startswith("How many days of annual leave do I get?")
    assert "cite" not in question


def test_only_researched_questions_are_topics() -> None:
    asked = [
        "How do I connect to the VPN?",
        "what did you cite?",
        "Could you repeat your last answer?",
        "hello",
        "What did you say I should install?",  # asks about the documents: researched
    ]
    assert researched_questions(asked) == [asked[0], asked[4]]
