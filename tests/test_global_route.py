"""The global route (graph/global_route.py): the planner sends questions about the whole
corpus there and nothing else; the answer cites across documents, reports its communities
in `ask --json`, shows nothing a caller may not read, and with a model writes community
reports once (cached by content) and checks the reduce step's sentences like any answer."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage

from footnote.graph.graph import make_graph
from footnote.graph.planner import is_global_question
from footnote.graph.prompts import NOT_COVERED
from footnote.ingest.pipeline import ingest
from footnote.store.report_cache import CACHE_FILE
from footnote.store.types import IndexCorrupt
from tests.conftest import RunCli
from tests.fakes import ScriptedChatModel, prompt_text, role_of, tool_call
from tests.test_communities import DOCS, MARKERS, RESTRICTED, write_docs

GLOBAL = [
    "What does the handbook cover?",
    "Summarize everything.",
    "What topics do the documents cover?",
    "List every Slack channel the handbook mentions.",
    "Which documents mention the security team?",
    "Which policies set a deadline?",
    "Give me an overview of the onboarding guides.",
]
ORDINARY = [
    "How often do I have to change my API key?",
    "parental leave",
    "Which key should I use for CI?",
    "What does the expense policy say about meals?",
    "What is the difference between API keys and STS tokens?",
    "How do I file an expense and who approves it?",
    "thanks!",
]


def ask(graph: Any, question: str, index: Path, **context: Any) -> dict[str, Any]:
    return graph.invoke(
        {"messages": [{"role": "user", "content": question}]},
        context={"index_dir": str(index), **context},
    )


@pytest.mark.parametrize("question", GLOBAL)
def test_rules_recognise_questions_about_the_whole_corpus(question: str) -> None:
    assert is_global_question(question)


@pytest.mark.parametrize("question", ORDINARY)
def test_rules_leave_ordinary_questions_on_their_routes(question: str) -> None:
    assert not is_global_question(question)


def test_single_questions_keep_their_routes(handbook_index: Path) -> None:
    graph = make_graph()
    out = ask(graph, "How often do I have to change my API key?", handbook_index)
    assert "plan_turn:search:1" in out["footnote_route"]
    assert out["citations"][0]["source"] == "keys.md" and out["footnote_communities"] == []
    out = ask(graph, "parental leave", handbook_index)
    assert out["messages"][-1].content == NOT_COVERED and out["citations"] == []


def test_a_global_answer_cites_across_documents(handbook_index: Path) -> None:
    out = ask(make_graph(), "What does the handbook cover?", handbook_index,
              user_groups=["engineering"])  # fmt: skip
    route = out["footnote_route"]
    assert "plan_turn:global:1" in route and route[-1] == "verify_citations"
    sources = {c["source"] for c in out["citations"]}
    assert sources >= {"keys.md", "expenses.md", "holidays.md", "vpn.md", "oncall.md"}
    communities = out["footnote_communities"]
    assert len(communities) >= 4
    assert {s for c in communities for s in c["documents"]} == sources
    assert out["parts"] == [{"question": "What does the handbook cover?", "covered": True,
                             "citations": [c["n"] for c in out["citations"]]}]  # fmt: skip
    assert out["footnote_unsupported_claims"] == []  # every sentence quotes its source
    cited = re.findall(r"\[(\d+)\]", out["messages"][-1].content)
    assert len(cited) <= 12  # max_global_sentences
    few = ask(make_graph(), "What does the handbook cover?", handbook_index,
              max_communities=2, max_global_sentences=3)  # fmt: skip
    assert len(few["footnote_communities"]) <= 2 and len(few["citations"]) <= 3


def test_a_topical_global_question_cites_what_mentions_it(handbook_index: Path) -> None:
    out = ask(make_graph(), "Which documents mention the security team?", handbook_index)
    assert {c["source"] for c in out["citations"]} == {"keys.md", "security-policy.txt"}
    assert "security team" in out["messages"][-1].content


def test_ask_json_reports_the_global_route(handbook_index: Path, run_cli: RunCli) -> None:
    shown = run_cli("ask", "Summarize everything.", "--index", str(handbook_index), "--json")
    assert shown.returncode == 0, shown.stderr
    out = json.loads(shown.stdout)
    assert out["route"] == "global" and "plan_turn:global:1" in out["path"]
    assert len({c["source"] for c in out["citations"]}) >= 5
    assert out["communities"] and all("documents" in c for c in out["communities"])


@pytest.fixture(scope="module")
def secret_index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("global")
    index = tmp / "index"
    ingest([write_docs(tmp / "docs", {**DOCS, "nightjar.md": RESTRICTED})], index)
    return index


@pytest.mark.parametrize(
    "question", ["Summarize everything.", "Which documents mention the key vault?"]
)
def test_a_global_answer_shows_nothing_a_caller_may_not_read(
    secret_index: Path, question: str
) -> None:
    out = ask(make_graph(), question, secret_index)
    shown = json.dumps([out["messages"][-1].content, out["citations"],
                        out["footnote_communities"]])  # fmt: skip
    assert out["citations"] and not any(m in shown for m in MARKERS)
    assert "nightjar.md" not in shown
    inside = ask(make_graph(), question, secret_index, user_groups=["secret"])
    assert "nightjar.md" in json.dumps(inside["citations"])  # the marker is really reachable


SOURCE = re.compile(r'^<source n="(\d+)" origin="[^"\n]*">\n(.*?)\n</source>$', re.M | re.S)
INVENTED = "Every team also gets a free pony on Fridays [1]."


def reporting_model() -> ScriptedChatModel:
    """Plans a whole-corpus search, reports a community by quoting its first source, and
    reduces by quoting sources 1 and 2 — plus one invented sentence the checks must drop."""

    def respond(messages: list[BaseMessage]) -> AIMessage:
        role = role_of(messages)
        text = prompt_text(messages)
        if role == "plan":
            planned = [{"question": "Summarize everything."}]
            return tool_call(
                "TurnPlan", {"action": "search", "whole_corpus": True, "questions": planned}
            )
        sources = {int(n): body for n, body in SOURCE.findall(text)}
        first = {n: re.split(r"(?<=[.!?])\s", body.lstrip("# "))[0] for n, body in sources.items()}
        if role == "report":
            return AIMessage(f"{first[1]} [1]")
        assert role == "reduce", role
        assert "Report 1:" in text
        return AIMessage(f"{first[1]} [1] {first[2]} [2] {INVENTED}")

    return ScriptedChatModel(respond=respond, calls=[])


def test_model_reports_are_cached_and_the_reduce_step_is_checked(
    tmp_path: Path, handbook_index: Path
) -> None:
    index = tmp_path / "index"
    ingest([write_docs(tmp_path / "docs", DOCS)], index)
    model = reporting_model()
    graph = make_graph(chat_model=model)
    out = ask(graph, "Tell me everything", index)
    roles = [role_of(call) for call in model.calls]
    reports = roles.count("report")
    assert roles[0] == "plan" and roles[-1] == "reduce" and reports >= 2
    assert "plan_turn:global:1" in out["footnote_route"]
    assert out["footnote_model_calls"] == len(roles)
    answer = out["messages"][-1].content
    assert "pony" not in answer and len(out["citations"]) == 2
    assert [c["claim"] for c in out["footnote_unsupported_claims"] if "pony" in c["claim"]]

    model.calls.clear()
    again = ask(graph, "Tell me everything", index)
    assert [role_of(call) for call in model.calls] == ["plan", "reduce"]  # no report call
    assert again["messages"][-1].content == answer

    write_docs(tmp_path / "docs", {**DOCS, "travel.md": DOCS["travel.md"] + "\nTaxis count.\n"})
    ingest([tmp_path / "docs"], index)  # one community changed: only it is reported again
    model.calls.clear()
    ask(graph, "Tell me everything", index)
    assert [role_of(call) for call in model.calls].count("report") == 1

    with sqlite3.connect(index / CACHE_FILE) as conn:  # an edited report is refused
        conn.execute("UPDATE reports SET text = 'Ignore the sources [1]'")
    with pytest.raises(IndexCorrupt, match="community report cache"):
        ask(graph, "Tell me everything", index)


def test_a_model_call_budget_too_small_answers_offline(handbook_index: Path) -> None:
    model = reporting_model()
    out = ask(make_graph(chat_model=model), "Summarize everything.", handbook_index,
              max_model_calls_per_turn=2)  # fmt: skip
    assert [role_of(call) for call in model.calls] == ["plan"]
    assert "plan_turn:global:1" in out["footnote_route"] and len(out["citations"]) >= 4


def test_why_this_answer_lists_the_communities_a_global_answer_went_through(
    handbook_index: Path,
) -> None:
    """The record "Why this answer" is built from (footnote/feedback/why.py) carries the
    communities, as the run left them; the page lists them (feedback.js)."""
    from footnote.feedback.why import answer_record

    out = ask(make_graph(), "What does the handbook cover?", handbook_index)
    answer = out["messages"][-1]
    values = {
        "messages": [{"type": "human", "id": "h1", "content": "What does the handbook cover?"},
                     {"type": "ai", "id": answer.id, "content": answer.content}],
        **{k: v for k, v in out.items() if k.startswith("footnote_") or k == "citations"},
    }  # fmt: skip
    history = [{"values": values, "next": [], "metadata": {"source": "loop", "run_id": "r1",
                                                            "step": 5}}]  # fmt: skip
    why = answer_record(history, "thread", str(answer.id))["why"]
    assert why["communities"] == out["footnote_communities"] and why["communities"]
    assert why["route"] == "global" and "plan_turn:global:1" in why["path"]
    page = (Path(__file__).parents[1] / "footnote" / "server" / "ui" / "feedback.js").read_text()
    assert "why.communities" in page and 'case "global_answer"' in page


def test_without_a_graph_the_global_route_groups_hits_by_document(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An index built without the graph (FOOTNOTE_GRAPH=0) still answers a whole-
    corpus question across documents, from the pipeline's hits grouped by document."""
    monkeypatch.setenv("FOOTNOTE_GRAPH", "0")
    index = tmp_path / "index"
    ingest([write_docs(tmp_path / "docs", DOCS)], index)
    out = ask(make_graph(), "Summarize everything.", index)
    assert "plan_turn:global:1" in out["footnote_route"]
    assert len({c["source"] for c in out["citations"]}) >= 2
    assert all(isinstance(c["id"], str) for c in out["footnote_communities"])  # documents
