"""Every sentence of an answer accounted for: scripted chat models write each kind of
ungrounded answer, and the graph catches and reports it; a question is always searched."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.messages import AIMessage, BaseMessage

from footnote.graph.graph import make_graph
from footnote.graph.grounding import ground, missing_literals
from footnote.graph.prompts import NOT_COVERED
from tests.fakes import ScriptedChatModel, prompt_text, role_of, tool_call

KEY_QUESTION = "How often do I have to change my API key?"
PARTIAL = "What is the parental leave policy and how do I rotate an API key?"
LEAVE = "What is the parental leave policy?"
ROTATE = "How do I rotate an API key?"
ROTATION = "API keys are rotated every 90 days from Settings > Security > Keys."
SOURCE = re.compile(r'^<source n="(\d+)" origin="([^"\n]*)">\n(.*?)\n</source>$', re.M | re.S)

Writer = Callable[[str, dict[str, int]], str]
"""(the part's question, source number by file name) -> the model's answer."""


def model(plan: dict[str, Any], write: Writer, grade: int = 9) -> ScriptedChatModel:
    """Plans as told, searches with the suggested query, grades every source `grade`, and
    answers with `write` given the numbers the answer prompt gave each file."""

    def respond(messages: list[BaseMessage]) -> AIMessage:
        role = role_of(messages)
        text = prompt_text(messages)
        if role == "plan":
            return tool_call("TurnPlan", plan)
        if role == "agent":
            query = re.search(r"Suggested query: (.*)", text)
            return tool_call("search_documents", {"query": query.group(1) if query else "x"})
        if role == "grade":
            return tool_call("SourceGrades", {"scores": [grade] * len(SOURCE.findall(text))})
        if role in ("rewrite", "retry", "hyde"):
            return AIMessage("API key rotation")
        sources: dict[str, int] = {}
        for n, origin, _body in SOURCE.findall(text):
            sources.setdefault(origin.split(" ")[0], int(n))
        question = re.findall(r"Question: (.*)", text)[-1]
        return AIMessage(write(question, sources))

    return ScriptedChatModel(respond=respond, calls=[])


def ask(chat: ScriptedChatModel, question: str, index: Path, **context: Any) -> dict[str, Any]:
    return make_graph(chat_model=chat).invoke(
        {"messages": [{"role": "user", "content": question}]},
        context={"index_dir": str(index), **context},
    )


def search_plan(*questions: str) -> dict[str, Any]:
    return {"action": "search", "questions": [{"question": q} for q in questions]}


def cited_sources(out: dict[str, Any]) -> set[str]:
    return {c["source"] for c in out["citations"]}


# ---------------------------------------------------------------- each kind of ungrounded answer


def test_an_uncited_claim_is_removed_and_reported(handbook_index: Path) -> None:
    invented = "You can also ask the help desk to extend a key for another year."
    chat = model(
        search_plan(KEY_QUESTION),
        lambda q, s: f"{ROTATION[:-1]} [{s['keys.md']}]. {invented}",
    )
    out = ask(chat, KEY_QUESTION, handbook_index)
    answer = out["messages"][-1].content
    assert "help desk" not in answer and "90 days" in answer
    assert cited_sources(out) == {"keys.md"}
    removed = out["footnote_unsupported_claims"]
    assert [(c["claim"], c["citations"]) for c in removed] == [(invented, [])]
    assert "cites no source" in removed[0]["reason"]
    assert any("help desk" in n for n in out["footnote_notices"])


def test_a_supported_sentence_without_its_citation_gets_it(handbook_index: Path) -> None:
    chat = model(search_plan(KEY_QUESTION), lambda q, s: ROTATION)
    out = ask(chat, KEY_QUESTION, handbook_index)
    assert cited_sources(out) == {"keys.md"}
    n = out["citations"][0]["n"]
    assert out["messages"][-1].content == f"{ROTATION[:-1]} [{n}]."
    assert out["footnote_unsupported_claims"] == []
    assert out["parts"][0]["covered"] is True
    assert any("Cited 1 sentence(s)" in n for n in out["footnote_notices"])


def test_a_wrong_citation_number_is_corrected(handbook_index: Path) -> None:
    def write(question: str, sources: dict[str, int]) -> str:
        wrong = next(n for name, n in sources.items() if name != "keys.md")
        return f"{ROTATION[:-1]} [{wrong}]."

    out = ask(model(search_plan(KEY_QUESTION), write), KEY_QUESTION, handbook_index)
    assert cited_sources(out) == {"keys.md"}
    assert out["footnote_unsupported_claims"] == []
    assert "90 days" in out["messages"][-1].content


def test_a_citation_naming_no_source_is_removed_and_the_claim_re_cited(
    handbook_index: Path,
) -> None:
    out = ask(model(search_plan(KEY_QUESTION), lambda q, s: f"{ROTATION[:-1]} [42]."),
              KEY_QUESTION, handbook_index)  # fmt: skip
    assert out["footnote_invalid_citations"] == [42]
    assert cited_sources(out) == {"keys.md"}


@pytest.mark.parametrize(
    "invented",
    [
        "The full steps are at https://docs.example.com/rotate-keys",
        "Write to keys-team@example.org if the rotation fails",
        "See docs.acme-support.io for the rotation steps",
    ],
)
def test_an_invented_link_or_address_is_not_passed_through(
    handbook_index: Path, invented: str
) -> None:
    chat = model(
        search_plan(KEY_QUESTION),
        lambda q, s: f"{ROTATION[:-1]} [{s['keys.md']}]. {invented} [{s['keys.md']}].",
    )
    out = ask(chat, KEY_QUESTION, handbook_index)
    answer = out["messages"][-1].content
    assert "example" not in answer and "acme-support" not in answer and "@" not in answer
    assert "90 days" in answer
    assert [c["claim"] for c in out["footnote_unsupported_claims"]] == [invented]


@pytest.mark.parametrize(
    "invented",
    [
        "API keys are rotated every 45 days from Settings > Security > Keys",
        "API keys are rotated every 90 days from Settings > Security > Keys by Maria Lopez",
        "API keys are rotated every 90 days from Settings > Security > Keys since March 2019",
    ],
)
def test_an_invented_number_name_or_date_is_removed(handbook_index: Path, invented: str) -> None:
    chat = model(search_plan(KEY_QUESTION), lambda q, s: f"{invented} [{s['keys.md']}].")
    out = ask(chat, KEY_QUESTION, handbook_index)
    assert out["messages"][-1].content == NOT_COVERED
    assert out["citations"] == [] and out["parts"][0]["covered"] is False
    (removed,) = out["footnote_unsupported_claims"]
    assert removed["claim"] == invented and "appear(s) in no source" in removed["reason"]


def test_prose_under_a_not_covered_part_is_removed(handbook_index: Path) -> None:
    """Both parts get sources (every source graded 9); the model invents a parental-leave
    policy with outside links. That part says plainly it is not covered, nothing more."""

    def write(question: str, sources: dict[str, int]) -> str:
        if "parental" in question:
            return (
                "The sources I have do not cover this. Typically, parental leave is 16 weeks "
                "of paid leave.\n\n1. Tell your manager.\n2. Fill in the form at "
                "https://www.gov.uk/parental-leave\n\nSee also www.shrm.org for details."
            )
        return f"{ROTATION[:-1]} [{sources['keys.md']}]."

    out = ask(model(search_plan(LEAVE, ROTATE), write), PARTIAL, handbook_index)
    answer = out["messages"][-1].content
    leave, rotate = answer.split("\n\n")
    assert leave == f'The sources I have do not cover "{LEAVE}"'
    assert rotate.startswith(f"## {ROTATE}\n") and "90 days" in rotate  # its heading, a line
    assert "16 weeks" not in answer and "gov.uk" not in answer and "shrm" not in answer
    assert [p["covered"] for p in out["parts"]] == [False, True]
    claims = [c["claim"] for c in out["footnote_unsupported_claims"]]
    assert any("16 weeks" in c for c in claims) and any("gov.uk" in c for c in claims)


def test_an_answer_with_no_supported_sentence_is_not_covered(handbook_index: Path) -> None:
    chat = model(search_plan(KEY_QUESTION), lambda q, s: "<pre><code>")
    out = ask(chat, KEY_QUESTION, handbook_index)
    assert out["messages"][-1].content == NOT_COVERED and out["citations"] == []


def test_the_draft_is_not_streamed_before_it_is_checked(handbook_index: Path) -> None:
    invented = "Keys can also be renewed by phoning the platform hotline."
    chat = model(
        search_plan(KEY_QUESTION), lambda q, s: f"{ROTATION[:-1]} [{s['keys.md']}]. {invented}"
    )
    streamed = [
        message.content
        for message, _meta in make_graph(chat_model=chat).stream(
            {"messages": [{"role": "user", "content": KEY_QUESTION}]},
            context={"index_dir": str(handbook_index)},
            stream_mode="messages",
        )
    ]
    assert streamed and not any("hotline" in str(text) for text in streamed)


# ---------------------------------------------------------------- a question is always searched


@pytest.mark.parametrize(
    "plan",
    [
        {"action": "reply", "reply": "<pre><code>"},
        {"action": "reply", "reply": "Parental leave is 16 weeks; rotate keys at example.com."},
        {"action": "clarify", "reply": "Sure. Parental leave is generous. Keys rotate yearly."},
        {"action": "clarify", "reply": "Do you mean API keys or SSH keys?"},
    ],
)
def test_a_model_that_skips_the_search_for_a_question_is_overruled(
    handbook_index: Path, plan: dict[str, Any]
) -> None:
    chat = model(plan, lambda q, s: f"{ROTATION[:-1]} [{s['keys.md']}]." if "keys.md" in s else "")
    out = ask(chat, PARTIAL, handbook_index)
    assert out["footnote_searches"] >= 2, "each part of the question was searched"
    assert any("without searching" in n for n in out["footnote_notices"])
    answer = out["messages"][-1].content
    assert "16 weeks" not in answer and "<pre>" not in answer
    assert [p["covered"] for p in out["parts"]] == [False, True]
    assert cited_sources(out) == {"keys.md"}


def test_a_model_may_still_reply_to_a_pleasantry(handbook_index: Path) -> None:
    chat = model({"action": "reply", "reply": "You're welcome!"}, lambda q, s: "")
    out = ask(chat, "thanks, that's all I needed", handbook_index)
    assert out["messages"][-1].content == "You're welcome!"
    assert out["footnote_searches"] == 0


# ---------------------------------------------------------------- the check itself, no index

KEYS = Document(
    id="k",
    page_content="API keys are rotated every 90 days. The old key works for a 24-hour grace "
    "period. The platform emails you 14 days before a key expires.",
    metadata={"source": "keys.md", "title": "API keys", "section": "Rotation"},
)
VPN = Document(
    id="v",
    page_content="Connect to the VPN with the WireGuard client. The VPN is required for staging.",
    metadata={"source": "vpn.md", "title": "VPN", "section": "Connecting"},
)


def test_quotes_keep_their_citations_in_both_styles() -> None:
    answer = (
        "API keys are rotated every 90 days. [1] Connect to the VPN with the WireGuard client [2]."
    )
    assert ground(answer, [KEYS, VPN]).text == answer


def test_a_quote_that_cites_the_wrong_source_is_re_cited_without_embeddings() -> None:
    done = ground("The VPN is required for staging [1].", [KEYS, VPN])
    assert done.text == "The VPN is required for staging [2]."
    assert done.recited == [{"claim": "The VPN is required for staging", "was": [1], "now": [2]}]


def test_list_items_and_code_are_checked_one_by_one() -> None:
    answer = (
        "Steps:\n- API keys are rotated every 90 days [1].\n- Run `curl https://evil.example` "
        "to reset [1].\n```\nrm -rf /\n```"
    )
    done = ground(answer, [KEYS, VPN])
    assert done.text == "- API keys are rotated every 90 days [1]."
    assert {c["claim"] for c in done.removed} == {
        "Steps:",
        "Run `curl https://evil.example` to reset",
        "rm -rf /",
    }


def test_nothing_cited_left_is_empty() -> None:
    assert ground("Sure! Here is some advice: be careful.", [KEYS]).text == ""
    assert ground("", [KEYS]).text == ""


@pytest.mark.parametrize(
    ("claim", "missing"),
    [
        ("Keys rotate every 90 days", []),
        ("Keys rotate every ninety days, or 30 days", ["30"]),
        ("You get an email fourteen days ahead", []),
        ("The platform emails you 14 days before", []),
        ("Keys rotate at https://acme.example/keys", ["https://acme.example/keys"]),
        ("Ask Bob in Okta", ["Bob", "Okta"]),
        ("Use the WireGuard client", []),
    ],
)
def test_hard_facts_must_appear_in_a_source(claim: str, missing: list[str]) -> None:
    assert missing_literals(claim, [KEYS, VPN]) == missing
