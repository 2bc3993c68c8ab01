"""The agent decides whether, what and how often to search: the offline planner's rules, the
model's plan with scripted chat models, per-part coverage, budgets, the embedded contract."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import pytest
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph, add_messages

from footnote.graph.context import ContextError
from footnote.graph.graph import graph as exported_graph
from footnote.graph.graph import make_graph
from footnote.graph.planner import condense_question, conversational_reply, split_question
from footnote.graph.prompts import NOT_COVERED
from tests.fakes import ScriptedChatModel, prompt_text, role_of, tool_call

API_KEY_QUESTION = "How often do I have to change my API key?"
PARTIAL = "What is the parental leave policy and how do I rotate an API key?"


def ask(graph: Any, question: str, index: Path, **context: Any) -> dict[str, Any]:
    return graph.invoke(
        {"messages": [{"role": "user", "content": question}]},
        context={"index_dir": str(index), **context},
    )


def conversation(index: Path, *questions: str, graph: Any = None) -> list[dict[str, Any]]:
    graph = graph or make_graph(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t"}}
    return [
        graph.invoke(
            {"messages": [{"role": "user", "content": q}]},
            config,
            context={"index_dir": str(index)},
        )
        for q in questions
    ]


# ---------------------------------------------------------------- offline rules


@pytest.mark.parametrize(
    "turn",
    [
        "thanks!",
        "Thank you so much",
        "hi",
        "Hello there!",
        "bye",
        "ok, got it",
        "cheers",
        "great, thanks",
        "thanks, that's all I needed",
        "see you later",
        "who are you?",
    ],  # fmt: skip
)
def test_pleasantries_need_no_search(turn: str) -> None:
    assert conversational_reply(turn, "a question?", "an answer [1]", []) is not None


@pytest.mark.parametrize(
    "turn",
    [
        "thanks! how do I rotate an API key?",
        "hi, what is the VPN address?",
        "How do I create and rotate a key?",
        "ok so what about service accounts?",
        "I am still confused. What did you say I should install?",
    ],
)
def test_a_pleasantry_with_a_question_searches(turn: str) -> None:
    assert conversational_reply(turn, "a question?", "an answer [1]", []) is None


def test_questions_about_the_conversation_are_answered_from_it() -> None:
    cited = [{"n": 1, "source": "keys.md", "section": "API keys > Rotation"}]
    reply = conversational_reply("what did you just cite?", "Keys?", "Keys rotate [1].", cited)
    assert reply is not None and "keys.md" in reply and "API keys > Rotation" in reply
    again = conversational_reply("Can you repeat that?", "Keys?", "Keys rotate [1].", cited)
    assert again == "Keys rotate."
    asked = conversational_reply("What was my last question?", "Keys?", "Keys rotate [1].", [])
    assert asked == 'You asked: "Keys?"'


@pytest.mark.parametrize(
    ("question", "parts"),
    [
        (PARTIAL, ["What is the parental leave policy?", "How do I rotate an API key?"]),
        (
            "How do I connect to the VPN? Who approves expenses?",
            ["How do I connect to the VPN?", "Who approves expenses?"],
        ),
        (
            "What is the on-call rotation, and also how do I file an expense?",
            ["What is the on-call rotation?", "How do I file an expense?"],
        ),
        (
            "What is the difference between API keys and STS tokens?",
            ["What is API keys?", "What is STS tokens?"],
        ),
        ("Python 2 vs Python 3?", ["What is Python 2?", "What is Python 3?"]),
        # The first question's question word opens a later clause, or ends it.
        (
            "I have two laptops; how do I sync keys, and who approves expenses?",
            ["I have two laptops; how do I sync keys?", "Who approves expenses?"],
        ),
        (
            "My VPN drops: why, and how do I rotate a key?",
            ["My VPN drops: why?", "How do I rotate a key?"],
        ),
        # A doubled conjunction leaves none behind in the first part.
        (
            "What is the on-call rotation, and And who approves expenses?",
            ["What is the on-call rotation?", "Who approves expenses?"],
        ),
        # The second question opens with a statement, then asks.
        (
            "How do I rotate a key, and I am on call this week. Can I file expenses late?",
            ["How do I rotate a key?", "I am on call this week. Can I file expenses late?"],
        ),
        (
            "Questions:\n- how do I rotate a key\n- who approves expenses",
            ["How do I rotate a key?", "Who approves expenses?"],
        ),
        (
            "I run stable. How do I upgrade, and what about sid?",
            ["I run stable. How do I upgrade?", "What about sid?"],
        ),
    ],
)
def test_several_questions_are_split(question: str, parts: list[str]) -> None:
    assert split_question(question) == parts


@pytest.mark.parametrize(
    "question",
    [
        "How do I create and rotate a key?",
        "What are the rules for expenses and travel?",
        API_KEY_QUESTION,
        "Can I rotate keys and tokens at the same time?",
        "and for service accounts?",
        # A comparison of two common words is one question (one pyfaq FAQ entry answers it).
        "What is the difference between arguments and parameters?",
        "Lists vs tuples?",
        "Compare lists with tuples",
        # A statement, a comma and "and": one question however it ends.
        "I rotated my key, and the VPN still fails; why?",
        "How do I rotate a key, and the old one, when it expires?",
    ],
)
def test_a_single_question_is_never_split(question: str) -> None:
    assert split_question(question) == [question]


def test_a_question_that_does_not_refer_back_stands_alone() -> None:
    assert condense_question("How do I request time off?", [API_KEY_QUESTION]) == (
        "How do I request time off?",
        "as_asked",
    )
    query, strategy = condense_question("and for service accounts?", [API_KEY_QUESTION])
    assert strategy == "condensed" and API_KEY_QUESTION in query


# ---------------------------------------------------------------- offline, whole graph


def test_thanks_after_an_answer_replies_without_searching(handbook_index: Path) -> None:
    first, thanks = conversation(handbook_index, API_KEY_QUESTION, "thanks!")
    assert first["footnote_searches"] == 1
    assert thanks["footnote_searches"] == 0
    assert thanks["citations"] == [] and thanks["parts"] == []
    assert "[1]" not in thanks["messages"][-1].content
    assert not any(step.startswith("rewrite_query") for step in thanks["footnote_route"])


def test_what_did_you_cite_is_answered_from_the_last_answer(handbook_index: Path) -> None:
    _, about = conversation(handbook_index, API_KEY_QUESTION, "What did you just cite?")
    assert about["footnote_searches"] == 0
    assert "keys.md" in about["messages"][-1].content


def test_a_partial_question_names_the_uncovered_part(handbook_index: Path) -> None:
    out = ask(exported_graph, PARTIAL, handbook_index)
    answer = out["messages"][-1].content
    assert out["parts"][0] == {
        "question": "What is the parental leave policy?",
        "covered": False,
        "citations": [],
    }
    assert out["parts"][1]["covered"] and out["parts"][1]["citations"] == [1]
    assert 'do not cover "What is the parental leave policy?"' in answer
    assert "90 days" in answer and "[1]" in answer
    assert out["citations"][0]["source"] == "keys.md"
    assert out["footnote_searches"] == 3, "two rounds for the uncovered part, one for the other"


def test_two_covered_parts_cite_both(handbook_index: Path) -> None:
    out = ask(exported_graph, "How do I rotate an API key? How do I connect to the VPN?",
              handbook_index)  # fmt: skip
    assert [p["covered"] for p in out["parts"]] == [True, True]
    sources = {c["n"]: c["source"] for c in out["citations"]}
    assert {sources[n] for n in out["parts"][0]["citations"]} == {"keys.md"}
    assert {sources[n] for n in out["parts"][1]["citations"]} == {"vpn.md"}


def test_single_questions_have_one_part(handbook_index: Path) -> None:
    covered = ask(exported_graph, API_KEY_QUESTION, handbook_index)
    assert covered["parts"] == [{"question": API_KEY_QUESTION, "covered": True, "citations": [1]}]
    leave = ask(exported_graph, "What is the parental leave policy?", handbook_index)
    assert leave["messages"][-1].content == NOT_COVERED
    assert leave["parts"] == [
        {"question": "What is the parental leave policy?", "covered": False, "citations": []}
    ]


def test_the_search_budget_is_shared_and_reported(handbook_index: Path) -> None:
    out = ask(exported_graph, PARTIAL, handbook_index, max_searches_per_turn=1)
    assert out["footnote_searches"] == 1
    assert [p["covered"] for p in out["parts"]] == [False, False]
    assert any("Search budget spent" in n for n in out["footnote_notices"])
    assert "do not cover" in out["messages"][-1].content


def test_an_unrelated_short_follow_up_uses_its_own_passages(handbook_index: Path) -> None:
    _, vpn = conversation(handbook_index, API_KEY_QUESTION, "How do I connect to the VPN?")
    assert vpn["citations"] and {c["source"] for c in vpn["citations"]} == {"vpn.md"}
    assert "rewrite_query:as_asked" in vpn["footnote_route"]


# ---------------------------------------------------------------- context checks


@pytest.mark.parametrize(
    ("context", "message"),
    [
        ({"retrieve_k": "5"}, "'retrieve_k' must be an integer, not '5' (str)"),
        ({"grade_threshold": 2}, "'grade_threshold' must be between 0.0 and 1.0, not 2"),
        ({"keep_k": 0}, "'keep_k' must be at least 1, not 0"),
        ({"hyde": "yes"}, "'hyde' must be true or false"),
        ({"max_searches_per_turn": -1}, "'max_searches_per_turn' must be at least 0"),
    ],
)
def test_bad_context_values_fail_with_the_field_named(
    handbook_index: Path, context: dict[str, Any], message: str
) -> None:
    with pytest.raises(ContextError, match=re.escape(message)):
        ask(exported_graph, API_KEY_QUESTION, handbook_index, **context)


def test_bad_context_from_a_parent_fails_on_the_first_node(handbook_index: Path) -> None:
    parent = StateGraph(ParentState)  # no context schema: the context arrives as a dict
    parent.add_node("footnote", make_graph())
    parent.add_edge(START, "footnote")
    with pytest.raises(ContextError, match="'retrieve_k' must be an integer"):
        parent.compile().invoke(
            {"messages": [{"role": "user", "content": API_KEY_QUESTION}]},
            context={"index_dir": str(handbook_index), "retrieve_k": "5"},
        )


def test_settings_in_configurable_are_refused_with_a_message(handbook_index: Path) -> None:
    with pytest.raises(ContextError, match=r"pass 'index_dir' as graph.invoke\(\.\.\., context="):
        exported_graph.invoke(
            {"messages": [{"role": "user", "content": API_KEY_QUESTION}]},
            config={"configurable": {"index_dir": str(handbook_index)}},
        )


# ---------------------------------------------------------------- embedded as a subgraph


@dataclass
class ParentState:
    messages: Annotated[list[AnyMessage], add_messages] = field(default_factory=list)
    citations: list[dict[str, Any]] = field(default_factory=list)
    parts: list[dict[str, Any]] = field(default_factory=list)
    route: str = "parent-route"
    notices: str = "parent-notices"
    invalid_citations: str = "parent-invalid"
    unsupported_claims: str = "parent-unsupported"
    searches: str = "parent-searches"


def _parent(footnote: Any) -> Any:
    parent = StateGraph(ParentState)
    parent.add_node("footnote", footnote)
    parent.add_edge(START, "footnote")
    return parent.compile()


def test_a_parent_keeps_its_own_keys_and_gets_one_message(handbook_index: Path) -> None:
    own = {"route": "parent-route", "notices": "parent-notices",
           "invalid_citations": "parent-invalid", "unsupported_claims": "parent-unsupported",
           "searches": "parent-searches"}  # fmt: skip
    out = _parent(make_graph()).invoke(
        {"messages": [{"role": "user", "content": PARTIAL}], **own},
        context={"index_dir": str(handbook_index)},
    )
    assert (out["route"], out["notices"], out["invalid_citations"]) == (
        "parent-route", "parent-notices", "parent-invalid",
    )  # fmt: skip
    assert (out["unsupported_claims"], out["searches"]) == ("parent-unsupported", "parent-searches")
    assert [m.type for m in out["messages"]] == ["human", "ai"]
    assert out["citations"][0]["source"] == "keys.md"
    assert [p["covered"] for p in out["parts"]] == [False, True]


# ---------------------------------------------------------------- with a scripted model


def _asked(messages: list[BaseMessage]) -> tuple[str, str]:
    """The question and suggested query of an agent-step prompt."""
    text = prompt_text(messages)
    question = re.search(r"Question: (.*)", text)
    query = re.search(r"Suggested query: (.*)", text)
    return (question.group(1) if question else ""), (query.group(1) if query else "")


SOURCE_BLOCK = r'^<source n="\d+" origin="[^"\n]*">\n(.*?)\n</source>$'


def scripted(
    plan: dict[str, Any],
    *,
    relevant: dict[str, str] | None = None,
    hop: str = "",
    answer: str = "",
) -> ScriptedChatModel:
    """A model that plans as told, searches with the suggested query, grades a source 9 when
    it contains the word `relevant` maps its question to (anything, when unmapped), may hop
    once, and answers by quoting source 1's first sentence, cited [1]."""
    relevant = relevant or {}

    def respond(messages: list[BaseMessage]) -> AIMessage:
        role = role_of(messages)
        text = prompt_text(messages)
        if role == "plan":
            return tool_call("TurnPlan", plan)
        if role == "agent":
            return tool_call("search_documents", {"query": _asked(messages)[1]})
        if role == "grade":
            question = re.search(r"Question: (.*)", text)
            word = relevant.get(question.group(1) if question else "", "")
            blocks = re.findall(SOURCE_BLOCK, text, re.M | re.S)
            return tool_call(
                "SourceGrades", {"scores": [9 if word.lower() in b.lower() else 1 for b in blocks]}
            )
        if role == "hop":
            return tool_call("search_documents", {"query": hop}) if hop else AIMessage("DONE")
        if role in ("rewrite", "retry"):
            return AIMessage("retry query")
        first = re.search(r'^<source n="1" origin="[^"\n]*">\n(.*?[.!?])\s', text, re.M | re.S)
        return AIMessage(answer or f"{first.group(1) if first else 'Nothing'} [1]")

    return ScriptedChatModel(respond=respond)


def _roles(model: ScriptedChatModel) -> list[str]:
    return [role_of(call) for call in model.calls]


def test_model_replies_without_searching(handbook_index: Path) -> None:
    model = scripted({"action": "reply", "reply": "You're welcome!"})
    out = ask(make_graph(chat_model=model), "thanks!", handbook_index)
    assert out["messages"][-1].content == "You're welcome!"
    assert _roles(model) == ["plan"]
    assert out["footnote_searches"] == 0 and out["citations"] == [] and out["parts"] == []


def test_model_asks_one_clarifying_question(handbook_index: Path) -> None:
    model = scripted({"action": "clarify", "reply": "Do you mean API keys or SSH keys?"})
    out = ask(make_graph(chat_model=model), "How do I rotate keys?", handbook_index)
    assert out["messages"][-1].content == "Do you mean API keys or SSH keys?"
    assert out["footnote_searches"] == 0 and "plan_turn:clarify:0" in out["footnote_route"]


def test_model_plan_runs_parallel_searches_and_answers_each_part(handbook_index: Path) -> None:
    parts = ["How do I rotate an API key?", "How do I connect to the VPN?"]
    model = scripted(
        {"action": "search", "questions": [{"question": q} for q in parts]},
        relevant={parts[0]: "90 days", parts[1]: "vpn"},
    )
    graph = make_graph(chat_model=model)
    research_starts = []
    for ns, update in graph.stream(
        {"messages": [{"role": "user", "content": " and ".join(parts)}]},
        context={"index_dir": str(handbook_index)},
        stream_mode="updates",
        subgraphs=True,
    ):
        if "rewrite_query" in update:
            research_starts.append(ns)
    assert len(set(research_starts)) == 2, "one research branch per part"
    roles = _roles(model)
    assert roles.count("agent") == 2 and roles.count("grade") == 2 and roles.count("answer") == 2
    agent_questions = {_asked(call)[0] for call in model.calls if role_of(call) == "agent"}
    assert agent_questions == set(parts)
    out = ask(make_graph(chat_model=scripted(
        {"action": "search", "questions": [{"question": q} for q in parts]},
        relevant={parts[0]: "90 days", parts[1]: "vpn"},
    )), " and ".join(parts), handbook_index)  # fmt: skip
    assert out["footnote_searches"] == 2
    assert [p["covered"] for p in out["parts"]] == [True, True]
    sources = {c["n"]: c["source"] for c in out["citations"]}
    assert sources[out["parts"][0]["citations"][0]] == "keys.md"
    assert sources[out["parts"][1]["citations"][0]] == "vpn.md"


def test_model_path_abstains_per_part(handbook_index: Path) -> None:
    parts = ["What is the parental leave policy?", "How do I rotate an API key?"]
    model = scripted(
        {"action": "search", "questions": [{"question": q} for q in parts]},
        relevant={parts[0]: "no source says this", parts[1]: "90 days"},
    )
    out = ask(make_graph(chat_model=model), PARTIAL, handbook_index)
    assert [p["covered"] for p in out["parts"]] == [False, True]
    assert f'do not cover "{parts[0]}"' in out["messages"][-1].content
    assert out["citations"] and out["citations"][0]["source"] == "keys.md"


def test_model_searches_again_with_what_it_learned(handbook_index: Path) -> None:
    question = "Who approves expenses for the team that is on call this week?"
    model = scripted(
        {"action": "search", "questions": [{"question": question, "needs_second_search": True}]},
        hop="expense approval manager",
    )
    out = ask(make_graph(chat_model=model), question, handbook_index)
    assert _roles(model).count("hop") == 1
    assert out["footnote_searches"] == 2
    assert "plan_hop:search" in out["footnote_route"]
    hop_grades = [c for c in model.calls if role_of(c) == "grade"]
    assert len(hop_grades) == 2, "the hop's results are graded too"


def test_model_budget_spent_is_reported(handbook_index: Path) -> None:
    parts = ["How do I rotate an API key?", "How do I connect to the VPN?"]
    plan = {"action": "search", "questions": [{"question": q} for q in parts]}
    model = scripted(plan)
    out = ask(make_graph(chat_model=model), " and ".join(parts), handbook_index,
              max_searches_per_turn=1)  # fmt: skip
    assert out["footnote_searches"] == 1
    assert out["parts"][1]["covered"] is False
    assert any("Search budget spent" in n for n in out["footnote_notices"])

    model = scripted(plan)
    out = ask(make_graph(chat_model=model), " and ".join(parts), handbook_index,
              max_model_calls_per_turn=3)  # fmt: skip
    assert len(model.calls) <= 3 and out["footnote_model_calls"] == len(model.calls)
    assert any("Model-call budget spent" in n for n in out["footnote_notices"])
    assert out["footnote_searches"] == 2, "searching continues offline"


def test_parent_streaming_subgraphs_sees_only_the_answer(handbook_index: Path) -> None:
    model = scripted(
        {"action": "search", "questions": [{"question": API_KEY_QUESTION}]},
        relevant={API_KEY_QUESTION: "90 days"},
        answer="API keys are rotated every 90 days [1].",
    )
    streamed = []
    for _, (message, _meta) in _parent(make_graph(chat_model=model)).stream(
        {"messages": [{"role": "user", "content": API_KEY_QUESTION}]},
        context={"index_dir": str(handbook_index)},
        stream_mode="messages",
        subgraphs=True,
    ):
        streamed.append(message)
    assert streamed, "the answer streams"
    assert not [m for m in streamed if isinstance(m, ToolMessage) or getattr(m, "tool_calls", [])]
    assert {m.content for m in streamed if m.content} <= {"API keys are rotated every 90 days [1]."}


def test_ask_json_reports_parts_and_searches(handbook_index: Path, run_cli: Any) -> None:
    import json

    result = run_cli("ask", PARTIAL, "--index", str(handbook_index), "--json")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert [p["covered"] for p in out["parts"]] == [False, True]
    assert out["parts"][1]["citations"] == [1]
    assert out["searches"] == 3 and out["model_calls"] == 0
    assert out["citations"][0]["source"] == "keys.md"

    thanks = run_cli("ask", "thanks!", "--index", str(handbook_index), "--json")
    assert json.loads(thanks.stdout)["searches"] == 0

    quiet = run_cli("ask", PARTIAL, "--index", str(handbook_index))
    assert "… planned 2 parts" in quiet.stderr
