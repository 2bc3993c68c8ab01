"""Offline multi-hop (graph/hops.py): a part whose first evidence leaves a clause open and names,
or is asked about, a document it lacks follows that entity through the entity graph."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver

from footnote.feedback.why import answer_record
from footnote.graph.graph import graph as exported_graph
from footnote.graph.graph import make_graph
from footnote.graph.hops import residual_question
from footnote.graph.nodes.grading import hop_evidence
from footnote.graph.prompts import NOT_COVERED

TWO_HOP = (
    "The team that owns a misused service account gets paged: how quickly must the on-call "
    "engineer acknowledge?"
)
API_KEY_QUESTION = "How often do I have to change my API key?"


def ask(question: str, index: Path, **context: Any) -> dict[str, Any]:
    return exported_graph.invoke(
        {"messages": [{"role": "user", "content": question}]},
        context={"index_dir": str(index), **context},
    )


def cited(out: dict[str, Any]) -> list[str]:
    return [c["source"] for c in out["citations"]]


def test_the_two_hop_handbook_question_cites_both_documents(handbook_index: Path) -> None:
    out = ask(TWO_HOP, handbook_index, user_groups=["engineering"])
    assert {"sts.md", "oncall.md"} <= set(cited(out)), out["messages"][-1].content
    assert cited(out)[0] == "sts.md", "the first evidence is numbered first"
    assert "5 minutes" in out["messages"][-1].content
    assert out["footnote_hops"] == [
        {"part": 0, "entities": ["On-call"], "query": out["footnote_hops"][0]["query"],
         "sources": ["oncall.md"]}
    ]  # fmt: skip
    assert "plan_hop:graph" in out["footnote_route"]
    assert out["footnote_searches"] == 2 and out["footnote_model_calls"] == 0
    assert out["parts"][0]["covered"] is True


def test_the_hop_s_chunks_are_graded_against_what_it_searched(handbook_index: Path) -> None:
    """The first evidence (oncall.md) answers the day off; the hop searches the clause it left
    open, and the booking rule answers that clause, though it says nothing of on-call: graded
    against the whole question it fell below the cut, and only oncall.md was cited."""
    question = (
        "My on-call shift earned me an extra day off - where do I actually book it, "
        "and how far ahead?"
    )
    out = ask(question, handbook_index, user_groups=["engineering"])
    answer = out["messages"][-1].content
    assert {"oncall.md", "holidays.md"} <= set(cited(out)), answer
    assert "two weeks ahead" in answer
    hop = out["footnote_hops"][0]
    assert hop["sources"][0] == "holidays.md" and "book" in hop["query"]


def test_single_hop_answers_are_unchanged(handbook_index: Path) -> None:
    out = ask(API_KEY_QUESTION, handbook_index)
    assert cited(out)[0] == "keys.md" and set(cited(out)) == {"keys.md"}
    assert "90 days" in out["messages"][-1].content
    assert out["footnote_searches"] == 1 and out["footnote_hops"] == []
    assert "plan_hop:done" in out["footnote_route"]
    leave = ask("What is the parental leave policy?", handbook_index)
    assert leave["messages"][-1].content == NOT_COVERED and leave["citations"] == []
    assert leave["footnote_hops"] == []
    assert not any(step.startswith("plan_hop") for step in leave["footnote_route"])


def test_the_question_s_frame_is_never_left_open(handbook_index: Path) -> None:
    """A question's frame ("how long") asks for a duration, which the evidence gives in its
    own words ("valid for one hour"): it is not a word the evidence lacks. Counted as one, it
    sent this question on a hop through "API keys" that quoted the keys' rotation as the
    token's lifetime."""
    credentials = [
        Document(
            page_content="Service accounts do not use API keys. They use short-lived STS "
            "tokens instead: a workload exchanges its signed identity for a token that is "
            "valid for one hour.",
            metadata={"title": "Service accounts", "section": "Credentials"},
        )
    ]
    question = "How long is a service account token valid?"
    assert residual_question(question, credentials) == ""
    out = ask(question, handbook_index)
    assert set(cited(out)) == {"sts.md"} and out["footnote_hops"] == []
    assert "one hour" in out["messages"][-1].content
    assert "rotate a key" not in out["messages"][-1].content


def test_hops_are_deterministic(handbook_index: Path) -> None:
    runs = [ask(TWO_HOP, handbook_index, user_groups=["engineering"]) for _ in range(2)]
    first, second = ((r["messages"][-1].content, r["citations"], r["footnote_hops"])
                     for r in runs)  # fmt: skip
    assert first == second


@pytest.mark.parametrize(
    "limits",
    [{"max_retrieval_attempts": 1}, {"max_searches_per_turn": 1}],
    ids=["rounds", "searches"],
)
def test_a_hop_stays_within_the_parts_budget(handbook_index: Path, limits: dict[str, int]) -> None:
    out = ask(TWO_HOP, handbook_index, user_groups=["engineering"], **limits)
    assert out["footnote_searches"] == 1
    assert "plan_hop:graph" not in out["footnote_route"]
    assert set(cited(out)) == {"sts.md"} and out["footnote_hops"] == []


def test_a_hop_never_reaches_a_document_the_caller_may_not_read(handbook_index: Path) -> None:
    """oncall.md is shared with engineering only: for everyone else the bridge leads nowhere."""
    out = ask(TWO_HOP, handbook_index)
    assert "oncall.md" not in cited(out) and out["footnote_hops"] == []
    assert "oncall" not in repr(out).lower().replace("#oncall", "")


SECRET_MARKER = "QZXRESTRICTEDMARKER"


@pytest.fixture(scope="module")
def restricted_index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A public page that names a team whose own page (title, text) only `secret` may read."""
    from footnote.ingest.pipeline import ingest

    corpus = tmp_path_factory.mktemp("restricted")
    (corpus / "billing.md").write_text(
        "---\ntitle: Billing service\naccess: [everyone]\n---\n# Billing service\n\n"
        "The billing service sends invoices every night. It is owned by Falcon Squad, who "
        "take its pages.\n",
        encoding="utf-8",
    )
    (corpus / "falcon.md").write_text(
        "---\ntitle: Falcon Squad\naccess: [secret]\n---\n# Falcon Squad\n\n"
        f"Falcon Squad answers a page within 12 minutes; its escalation code is {SECRET_MARKER}.\n",
        encoding="utf-8",
    )
    (corpus / "holidays.md").write_text(
        "---\ntitle: Holidays\naccess: [everyone]\n---\n# Holidays\n\n"
        "Everyone gets 27 days of annual leave.\n",
        encoding="utf-8",
    )
    index = corpus / "index"
    summary = ingest([corpus], index)
    assert not summary.failed, summary.failed
    return index


QUESTION = "The team that owns the billing service takes its pages: how fast must they answer one?"


def test_a_hop_reaches_a_restricted_document_only_for_its_group(restricted_index: Path) -> None:
    allowed = ask(QUESTION, restricted_index, user_groups=["secret"])
    assert set(cited(allowed)) == {"billing.md", "falcon.md"}, allowed["messages"][-1].content
    assert allowed["footnote_hops"][0]["entities"] == ["Falcon Squad"]

    for groups in (["everyone"], ["engineering"]):
        out = ask(QUESTION, restricted_index, user_groups=groups)
        assert cited(out) == ["billing.md"] and out["footnote_hops"] == []
        assert SECRET_MARKER not in repr(out) and "12 minutes" not in repr(out)
        assert "falcon.md" not in repr(out)


def test_why_this_answer_shows_the_entities_a_hop_went_through(handbook_index: Path) -> None:
    graph = make_graph(checkpointer=InMemorySaver())
    config: RunnableConfig = {"configurable": {"thread_id": "t"}, "metadata": {"run_id": "r1"}}
    out = graph.invoke(
        {"messages": [{"role": "user", "content": TWO_HOP}]},
        config,
        context={"index_dir": str(handbook_index), "user_groups": ["engineering"]},
    )
    history = [  # as the server's history returns it: JSON, models as their dumps
        {
            "values": json.loads(json.dumps(s.values, default=lambda o: o.model_dump())),
            "next": list(s.next),
            "metadata": dict(s.metadata or {}),
        }
        for s in graph.get_state_history(config)
    ]
    why = answer_record(history, "t", out["messages"][-1].id)["why"]
    assert why["hops"][0]["entities"] == ["On-call"]
    assert why["research"][0]["entities"] == ["On-call"]
    hop_rounds = [r for r in why["rounds"] if r.get("entities")]
    assert len(hop_rounds) == 1 and hop_rounds[0]["strategy"] == "hop"
    assert any(c["kept"] and c["source"] == "oncall.md" for c in hop_rounds[0]["candidates"])


def test_the_residual_question_is_the_clause_the_evidence_leaves_open() -> None:
    evidence = [
        Document(
            page_content="Each service account has exactly one owning team, which is paged "
            "when its tokens are misused.",
            metadata={"title": "Service accounts", "section": "Creating a service account"},
        )
    ]
    assert residual_question(TWO_HOP, evidence) == (
        "how quickly must the on-call engineer acknowledge?"
    )
    assert residual_question("Which team owns a service account?", evidence) == ""
    one_clause = "Where was the owning team of the service account born?"
    assert residual_question(one_clause, evidence) == "born"


def test_with_a_model_plan_hop_is_shown_the_graphs_neighbours(handbook_index: Path) -> None:
    from tests.fakes import prompt_text, role_of
    from tests.test_agentic import scripted

    model = scripted(
        {"action": "search", "questions": [{"question": TWO_HOP, "needs_second_search": True}]},
        relevant={TWO_HOP: "misused"},
        hop="on-call acknowledge a page",
    )
    out = make_graph(chat_model=model).invoke(
        {"messages": [{"role": "user", "content": TWO_HOP}]},
        context={"index_dir": str(handbook_index), "user_groups": ["engineering"]},
    )
    hop_prompts = [prompt_text(call) for call in model.calls if role_of(call) == "hop"]
    assert len(hop_prompts) == 1
    assert "links this evidence to other documents through: On-call." in hop_prompts[0]
    assert "plan_hop:search" in out["footnote_route"] and out["footnote_searches"] == 2

    everyone = scripted(
        {"action": "search", "questions": [{"question": TWO_HOP, "needs_second_search": True}]},
        relevant={TWO_HOP: "misused"},
    )
    make_graph(chat_model=everyone).invoke(
        {"messages": [{"role": "user", "content": TWO_HOP}]},
        context={"index_dir": str(handbook_index)},
    )
    hop_prompts = [prompt_text(call) for call in everyone.calls if role_of(call) == "hop"]
    assert hop_prompts and "entity graph" not in hop_prompts[0], "oncall.md is engineering's"


def test_an_open_clause_is_searched_in_its_own_words(handbook_index: Path) -> None:
    """The onboarding sentence names the security policy, but the open clause asks about a
    production rollout: the hop searches for the clause, not the title, and finds the deploy
    script."""
    question = (
        "In my first week I ship a change to production with my buddy: what has to succeed "
        "before a production rollout?"
    )
    out = ask(question, handbook_index)
    assert {"onboarding.md", "deploy.py"} <= set(cited(out)), out["messages"][-1].content
    assert [hop["entities"] for hop in out["footnote_hops"]] == [[]]
    assert "deploy.py" in out["footnote_hops"][0]["sources"]


def chunk(source: str, n: int) -> Document:
    return Document(page_content=f"{source} {n}", id=f"{source}#{n}", metadata={"source": source})


def test_a_hop_adds_what_ranks_above_a_document_it_already_had() -> None:
    first = [chunk("onboarding.md", 0), chunk("deploy.py", 0)]
    found = [chunk("vpn.md", 0), chunk("deploy.py", 1), chunk("security-policy.txt", 0)]
    added, sources = hop_evidence(first, found)
    assert added == found[:1]
    assert sources == ["vpn.md", "deploy.py"], "the document found again is reported, not added"
    assert hop_evidence(first, found[2:]) == (found[2:], ["security-policy.txt"])
    assert hop_evidence(first, []) == ([], [])


def test_a_hop_that_finds_a_document_the_first_round_kept_adds_nothing_after_it(
    handbook_index: Path,
) -> None:
    """With the rescue, the first round keeps deploy.py beside onboarding.md. The hop is planned
    from onboarding.md alone and its search for the open clause reaches deploy.py again: the
    clause's answer is held, and the chunk ranked after it (security-policy.txt, which does not
    say what has to succeed) is not added."""
    question = (
        "In my first week I ship a change to production with my buddy: what has to succeed "
        "before a production rollout?"
    )
    out = ask(question, handbook_index, offline_grader="judge-rescue")
    assert out["footnote_hops"] == [
        {"part": 0, "entities": [], "query": out["footnote_hops"][0]["query"],
         "sources": ["deploy.py"]}
    ]  # fmt: skip
    assert {"onboarding.md", "deploy.py"} <= set(cited(out))
    assert "security-policy.txt" not in cited(out), out["messages"][-1].content
