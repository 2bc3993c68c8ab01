"""Feedback storage (SQLite and PostgreSQL, schema migrations), the "why" read from a run's
checkpoints, the BEIR export, and LangSmith: sent when tracing is on, nothing otherwise."""

from __future__ import annotations

import itertools
import json
import sqlite3
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from footnote.evaluation.retrieval import load_beir
from footnote.feedback.records import (
    MIGRATIONS,
    SCHEMA_VERSION,
    FeedbackError,
    FeedbackStore,
    Filters,
    check_comment,
    check_flags,
    check_rating,
    export_beir,
    feedback_location,
    send_to_langsmith,
    tracing_on,
)
from footnote.feedback.why import AnswerNotFound, answer_record, field, shown
from footnote.graph.graph import make_graph
from footnote.graph.prompts import NOT_COVERED
from tests.pg_fixture import PgServer

_databases = itertools.count()


@pytest.fixture(params=["sqlite", "postgres"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty store location on each backend (a new database on the server)."""
    if request.param == "sqlite":
        return str(tmp_path / "feedback.sqlite3")
    import psycopg

    server: PgServer = request.getfixturevalue("pg_server")
    name = f"feedback{next(_databases)}"
    with psycopg.connect(server.url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return server.url.rsplit("/", 1)[0] + f"/{name}"


def answer(
    message_id: str = "m1",
    *,
    thread_id: str = "t1",
    not_covered: bool = False,
    question: str = "How often do I rotate keys?",
) -> dict[str, Any]:
    citations = (
        []
        if not_covered
        else [
            {"n": 1, "chunk_id": "keys.md#rotation:0", "source": "keys.md"},
            {"n": 2, "chunk_id": "keys.md#scopes:0", "source": "keys.md"},
        ]
    )
    return {
        "thread_id": thread_id,
        "message_id": message_id,
        "run_id": "00000000-0000-0000-0000-000000000001",
        "question": question,
        "answer": NOT_COVERED if not_covered else "Every 90 days. [1] Scoped. [2]",
        "not_covered": not_covered,
        "citations": citations,
        "why": {
            "route": None,
            "path": ["new_question"],
            "passages": {
                "keys.md#rotation:0": {"title": "API keys > Rotation", "text": "every 90 days"},
                "keys.md#scopes:0": {"title": "API keys > Scopes", "text": "keys have scopes"},
                "oncall.md#paging:0": {"title": "On call > Paging", "text": "within 5 min"},
            },
        },
    }


def test_record_edit_and_list_own_and_everyone(location: str) -> None:
    store = FeedbackStore(location)
    assert store.version() == SCHEMA_VERSION
    first = store.record(user="alice", answer=answer("m1"), rating=1, comment="good")
    again = store.record(user="alice", answer=answer("m1"), rating=-1, comment="changed my mind")
    assert again.id == first.id and again.rating == -1 and again.comment == "changed my mind"
    store.record(user="bob", answer=answer("m1"), rating=1)
    store.record(user="bob", answer=answer("m2", not_covered=True), rating=None)

    assert [r.user_id for r in store.search(Filters(user="alice"))] == ["alice"]
    everyone = store.search(Filters(user=None))
    assert [r.message_id for r in everyone] == ["m2", "m1", "m1"]  # newest first
    review = store.search(Filters(user=None, review=True))
    assert {(r.user_id, r.message_id) for r in review} == {("alice", "m1"), ("bob", "m2")}
    assert [r.user_id for r in store.search(Filters(user=None, rating=1))] == ["bob"]

    edited = store.update(first.id, {"wrong_citations": [2], "rating": None})
    assert edited.wrong_citations == [2] and edited.rating is None
    assert edited.updated_at > first.updated_at
    gap = store.update(everyone[0].id, {"should_cover": True, "reviewed_by": "root"})
    assert gap.should_cover is True and gap.reviewed_by == "root"
    assert store.get(first.id) == edited
    assert store.get(10_000) is None
    assert len(store.for_answer("t1", "m1")) == 2


def test_migrations_upgrade_a_version_1_store_keeping_its_rows(location: str) -> None:
    old = FeedbackStore.__new__(FeedbackStore)  # a store as version 1 of the code left it
    old.location, old.postgres = location, location.startswith("postgresql")
    assert old.migrate(target=1) == 1
    with old._conn() as conn:
        conn.execute(
            old._sql(
                "INSERT INTO footnote_feedback (created_at, updated_at, user_id, thread_id, "
                "message_id, question, answer, rating) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
            ),
            ("2026-01-01T00:00:00", "2026-01-01T00:00:00", "alice", "t", "m", "q?", "a.", 1),
        )

    store = FeedbackStore(location)  # opening migrates
    assert store.version() == SCHEMA_VERSION == len(MIGRATIONS)
    (row,) = store.all()
    assert (row.user_id, row.question, row.rating) == ("alice", "q?", 1)
    assert row.should_cover is None and row.reviewed_by == ""
    assert len(row.id) == 32 and store.get(row.id) == row  # an older row gets a random id
    assert row.access_scope is None  # unknown: served to admins only (fails closed)
    assert FeedbackStore(location).version() == SCHEMA_VERSION  # idempotent


def test_ids_are_random_and_rows_keep_the_access_they_were_rated_under(location: str) -> None:
    store = FeedbackStore(location)
    rows = [
        store.record(user=user, answer=answer(f"m{n}"), rating=1, access_scope="everyone,hr")
        for n, user in enumerate(("alice", "bob", "alice"))
    ]
    ids = [r.id for r in rows]
    assert len(set(ids)) == 3 and not any(i.isdigit() for i in ids)
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in ids)
    assert "row" not in rows[0].public() and "access_scope" not in rows[0].public()
    mine = Filters(user="alice", access_scope="everyone,hr")
    assert [r.id for r in store.search(mine)] == [ids[2], ids[0]]
    assert store.search(Filters(user="alice", access_scope="everyone,sales")) == []
    older = Filters(user="alice", access_scope="everyone,hr", before_id=ids[2])
    assert [r.id for r in store.search(older)] == [ids[0]]


def test_the_store_and_its_exports_are_private_to_their_owner(tmp_path: Path) -> None:
    import stat

    def mode(path: Path) -> int:
        return stat.S_IMODE(path.stat().st_mode)

    location = tmp_path / "new" / "feedback.sqlite3"
    store = FeedbackStore(str(location))
    store.record(user="alice", answer=answer("m1"), rating=1)
    assert (mode(location), mode(location.parent)) == (0o600, 0o700)
    older = tmp_path / "older.sqlite3"
    older.touch(mode=0o644)
    older.chmod(0o644)
    FeedbackStore(str(older))
    assert mode(older) == 0o600  # a store made before the rule is closed on open
    golden = tmp_path / "golden"
    (golden / "qrels").mkdir(parents=True)
    (golden / "corpus.jsonl").write_text("stale")
    (golden / "corpus.jsonl").chmod(0o644)
    export_beir(store.all(), golden)
    fresh = tmp_path / "fresh"
    export_beir(store.all(), fresh)
    for folder in (golden, fresh):
        for name in ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv", "gaps.jsonl"):
            assert mode(folder / name) == 0o600, (folder, name)
    assert (mode(fresh), mode(fresh / "qrels")) == (0o700, 0o700)


def test_feedback_is_served_under_the_threads_rule() -> None:
    from footnote.server.credentials import Identity
    from footnote.server.feedback_routes import readable

    row = Feedback_row(user_id="api_key:alice", access_scope="everyone,hr")
    alice = Identity(user="alice", groups=("everyone", "hr"), method="api_key")
    assert readable(row, alice)
    moved = Identity(user="alice", groups=("everyone", "sales"), method="api_key")
    assert not readable(row, moved)  # her groups changed: 404, as her thread is
    bob = Identity(user="bob", groups=("everyone", "hr"), method="api_key")
    assert not readable(row, bob)
    assert readable(row, Identity(user="root", admin=True, method="api_key"))
    assert not readable(Feedback_row(user_id="api_key:alice", access_scope=None), alice)


def Feedback_row(**fields: Any) -> Any:  # noqa: N802 - reads as the row it stands for
    from types import SimpleNamespace

    return SimpleNamespace(**fields)


def test_a_store_from_a_newer_footnote_is_refused(tmp_path: Path) -> None:
    location = str(tmp_path / "feedback.sqlite3")
    FeedbackStore(location)
    with sqlite3.connect(location) as conn:
        conn.execute("INSERT INTO footnote_feedback_schema VALUES (?)", (SCHEMA_VERSION + 1,))
    with pytest.raises(FeedbackError, match="newer than this Footnote"):
        FeedbackStore(location)


def test_input_is_validated_and_bounded() -> None:
    assert check_rating(1) == 1 and check_rating(-1) == -1 and check_rating(None) is None
    for bad in (0, 2, True, "1", 1.0):
        with pytest.raises(FeedbackError):
            check_rating(bad)
    assert check_comment("  fine ") == "fine"
    with pytest.raises(FeedbackError):
        check_comment("x" * 2001)
    with pytest.raises(FeedbackError):
        check_comment(["<b>"])
    citations = answer()["citations"]
    assert check_flags([2, 1, 2], citations) == [1, 2]
    for bad in ([3], ["1"], [True], "1", list(range(60))):
        with pytest.raises(FeedbackError):
            check_flags(bad, citations)


def test_the_store_lives_beside_the_index_unless_told(tmp_path: Path) -> None:
    index = tmp_path / "team" / "index"
    assert feedback_location({}, str(index)) == str(tmp_path / "team" / "feedback.sqlite3")
    assert feedback_location({"FOOTNOTE_INDEX": str(index)}) == str(
        tmp_path / "team" / "feedback.sqlite3"
    )
    pg = "postgresql://u@h/db"
    assert feedback_location({"FOOTNOTE_CHECKPOINT_URL": pg}, str(index)) == pg
    assert feedback_location({"FOOTNOTE_INDEX": pg + "?index=x"}) == pg + "?index=x"
    assert feedback_location({"FOOTNOTE_FEEDBACK_DB": "/srv/fb.db", "FOOTNOTE_INDEX": pg}) == (
        "/srv/fb.db"
    )


# ---------------------------------------------------------------- why


def _doc(chunk_id: str, source: str = "keys.md") -> dict[str, Any]:
    return {
        "id": chunk_id,
        "page_content": f"text of {chunk_id}",
        "metadata": {"source": source, "section": "API keys", "title": "Keys", "kind": "document"},
        "type": "Document",
    }


def _legacy_history() -> list[dict[str, Any]]:
    """A thread's checkpoints as the server returns them (newest first): two runs of the
    older single-part graph, which graded in the root graph."""
    run1, run2 = "run-1", "run-2"
    q1 = {"type": "human", "id": "h1", "content": "How often?"}
    a1 = {"type": "ai", "id": "a1", "content": "Every 90 days. [1]"}
    q2 = {"type": "human", "id": "h2", "content": "And parental leave?"}
    a2 = {"type": "ai", "id": "a2", "content": NOT_COVERED}
    candidates = [
        {"document": _doc("keys.md#rotation:0"), "evidence": {"dense": 0.8, "coverage": 0.6}},
        {
            "document": _doc("oncall.md#paging:0", "oncall.md"),
            "evidence": {"dense": 0.2, "coverage": 0.0},
        },
    ]
    steps = [
        (run1, 0, ["rewrite_query"], {"messages": [q1]}),
        (
            run1,
            1,
            ["grade_documents"],
            {
                "messages": [q1],
                "query": "how often",
                "strategy": "as_asked",
                "candidates": candidates,
            },
        ),
        (run1, 2, ["generate"], {"messages": [q1], "documents": [_doc("keys.md#rotation:0")]}),
        (
            run1,
            3,
            [],
            {
                "messages": [q1, a1],
                "question": "How often?",
                "route": ["new_question", "grade_documents:1/2", "generate"],
                "notices": ["HyDE needs a chat model; it is unavailable offline."],
                "citations": [{"n": 1, "chunk_id": "keys.md#rotation:0", "source": "keys.md"}],
                "invalid_citations": [3],
                "unsupported_claims": [],
                "footnote:searches": [{"query": "how often", "stage": "pipeline"}],
            },
        ),
        (
            run2,
            4,
            ["grade_documents"],
            {"messages": [q1, a1, q2], "query": "parental leave", "candidates": []},
        ),
        (
            run2,
            5,
            [],
            {"messages": [q1, a1, q2, a2], "question": "And parental leave?", "citations": []},
        ),
    ]
    history = [
        {"values": values, "next": nxt, "metadata": {"run_id": run, "step": step, "source": "loop"}}
        for run, step, nxt, values in steps
    ]
    return history[::-1]


def _history() -> list[dict[str, Any]]:
    """Two runs of the agentic graph (newest first): grading happened in the research
    subgraph, so the root checkpoints hold only each part's finding with its round trace."""
    run1, run2 = "run-1", "run-2"
    q1 = {"type": "human", "id": "h1", "content": "How often, and who pages?"}
    a1 = {"type": "ai", "id": "a1", "content": "Every 90 days. [1]\n\nThe on-call lead. [2]"}
    q2 = {"type": "human", "id": "h2", "content": "And parental leave?"}
    a2 = {"type": "ai", "id": "a2", "content": NOT_COVERED}

    def graded(chunk_id: str, dense: float, coverage: float, grade: float, reason: str) -> dict:
        return {
            "chunk_id": chunk_id,
            "source": chunk_id.split("#")[0],
            "section": "API keys",
            "dense": dense,
            "coverage": coverage,
            "grade": grade,
            "kept": reason == "kept",
            "reason": reason,
        }

    def round_(query: str, strategy: str, *candidates: dict) -> dict:
        return {
            "query": query,
            "strategy": strategy,
            "method": "offline",
            "threshold": 0.5,
            "keep_k": 4,
            "candidates": list(candidates),
        }

    rotation, paging = _doc("keys.md#rotation:0"), _doc("oncall.md#paging:0", "oncall.md")
    findings = [  # in the order the parallel branches finished, not plan order
        {
            "index": 1,
            "question": "Who pages?",
            "documents": [paging],
            "searches": 2,
            "model_calls": 0,
            "rounds": [
                round_(
                    "who pages",
                    "split",
                    graded("keys.md#scopes:0", 0.3, 0.1, 0.2, "below threshold"),
                ),
                round_(
                    "who pages on-call", "prf", graded("oncall.md#paging:0", 0.7, 0.8, 0.9, "kept")
                ),
            ],
        },
        {
            "index": 0,
            "question": "How often?",
            "documents": [rotation],
            "searches": 1,
            "model_calls": 0,
            "rounds": [
                round_(
                    "how often",
                    "split",
                    graded("keys.md#rotation:0", 0.8, 0.6, 0.7, "kept"),
                    graded("keys.md#other:0", 0.6, 0.5, 0.6, "beyond keep_k"),
                )
            ],
        },
    ]
    steps = [
        (run1, 0, ["plan_turn"], {"messages": [q1], "findings": []}),
        (run1, 1, ["research", "research"], {"messages": [q1], "findings": []}),
        (run1, 2, ["generate"], {"messages": [q1], "findings": findings}),
        (
            run1,
            3,
            [],
            {
                "messages": [q1, a1],
                "question": "How often, and who pages?",
                "findings": findings,
                "documents": [rotation, paging],
                "footnote_route": ["new_question", "plan_turn:search:2", "grade_documents:1/2"],
                "footnote_notices": ["HyDE needs a chat model; it is unavailable offline."],
                "citations": [
                    {"n": 1, "chunk_id": "keys.md#rotation:0", "source": "keys.md"},
                    {"n": 2, "chunk_id": "oncall.md#paging:0", "source": "oncall.md"},
                ],
                "footnote_invalid_citations": [3],
                "footnote_unsupported_claims": [],
                "footnote_searches": 3,
                "parts": [
                    {"question": "How often?", "covered": True, "citations": [1]},
                    {"question": "Who pages?", "covered": True, "citations": [2]},
                ],
            },
        ),
        (
            run2,
            4,
            [],
            {
                "messages": [q1, a1, q2, a2],
                "question": "And parental leave?",
                "citations": [],
                "findings": [
                    {
                        "index": 0,
                        "question": "And parental leave?",
                        "documents": [],
                        "searches": 1,
                        "model_calls": 0,
                        "rounds": [round_("parental leave", "as_asked")],
                    },
                ],
            },
        ),
    ]
    history = [
        {"values": values, "next": nxt, "metadata": {"run_id": run, "step": step, "source": "loop"}}
        for run, step, nxt, values in steps
    ]
    return history[::-1]


def test_why_reads_each_parts_rounds_from_its_finding() -> None:
    record = answer_record(_history(), "thread", "a1")
    assert record["run_id"] == "run-1" and record["question"] == "How often, and who pages?"
    assert not record["not_covered"]
    why = record["why"]
    # Rounds in plan order, each naming its part and the part's question.
    assert [(r["part"], r["part_question"], r["query"], r["strategy"]) for r in why["rounds"]] == [
        (0, "How often?", "how often", "split"),
        (1, "Who pages?", "who pages", "split"),
        (1, "Who pages?", "who pages on-call", "prf"),
    ]
    first = why["rounds"][0]
    assert (first["method"], first["threshold"], first["keep_k"]) == ("offline", 0.5, 4)
    assert [(c["chunk_id"], c["kept"], c["reason"], c["grade"]) for c in first["candidates"]] == [
        ("keys.md#rotation:0", True, "kept", 0.7),
        ("keys.md#other:0", False, "beyond keep_k", 0.6),
    ]
    assert first["candidates"][0]["evidence"] == {"dense": 0.8, "coverage": 0.6}
    assert why["rounds"][1]["candidates"][0]["reason"] == "below threshold"
    assert why["research"] == [
        {"part": 0, "question": "How often?", "searches": 1, "model_calls": 0, "kept": 1},
        {"part": 1, "question": "Who pages?", "searches": 2, "model_calls": 0, "kept": 1},
    ]
    assert why["searches"] == 3 and [p["covered"] for p in why["parts"]] == [True, True]
    assert why["route"] == "search"
    assert why["path"][:2] == ["new_question", "plan_turn:search:2"]
    assert why["invalid_citations"] == [3]
    assert why["notices"] == ["HyDE needs a chat model; it is unavailable offline."]
    # The export's corpus: every kept chunk, with its text (the trace carries none).
    assert why["passages"]["oncall.md#paging:0"] == {
        "title": "Keys > API keys",
        "text": "text of oncall.md#paging:0",
    }
    assert set(why["passages"]) == {"keys.md#rotation:0", "oncall.md#paging:0"}

    later = answer_record(_history(), "thread", "a2")
    assert later["not_covered"] and later["run_id"] == "run-2" and later["citations"] == []
    (empty,) = later["why"]["rounds"]
    assert empty["query"] == "parental leave" and empty["candidates"] == []
    assert later["why"]["passages"] == {}
    with pytest.raises(AnswerNotFound):
        answer_record(_history(), "thread", "h1")  # a question is not an answer


def _as_served(snapshot: Any) -> dict[str, Any]:
    """A state snapshot as the server's history returns it: JSON, models as their dumps."""
    values = json.loads(json.dumps(snapshot.values, default=lambda o: o.model_dump()))
    return {"values": values, "next": list(snapshot.next), "metadata": dict(snapshot.metadata)}


def test_a_thread_whose_state_a_client_wrote_gives_no_answer_to_rate() -> None:
    """A forged `POST /threads/{id}/state` (an answer citing a real chunk id, a fake
    passage) leaves a checkpoint of source `update`: neither it nor any later answer of the
    thread is taken as a run's record."""
    forged = {
        "values": {
            "messages": [
                {"type": "human", "id": "h9", "content": "Salaries?"},
                {"type": "ai", "id": "fake", "content": "On the 1st. [1]"},
            ],
            "citations": [{"n": 1, "chunk_id": "salaries.md#pay:0", "source": "salaries.md"}],
            "documents": [_doc("salaries.md#pay:0", "salaries.md")],
        },
        "next": [],
        "metadata": {"source": "update", "step": 9, "run_id": "run-2"},
    }
    history = [forged, *_history()]
    with pytest.raises(AnswerNotFound):
        answer_record(history, "thread", "fake")
    with pytest.raises(AnswerNotFound):  # a real answer after the write is not vouched for
        answer_record([dict(_history()[0], metadata={"source": "loop", "run_id": "r3"}),
                       forged, *_history()], "thread", "a2")  # fmt: skip
    assert answer_record(_history(), "thread", "a2")["message_id"] == "a2"  # unedited: found
    unsourced = [dict(s, metadata={"run_id": "run-2", "step": 5}) for s in _history()]
    with pytest.raises(AnswerNotFound):  # no source: not known to be a run's own step
        answer_record(unsourced, "thread", "a2")


def test_why_of_a_real_multi_part_run_shows_every_parts_searches(handbook_index: Path) -> None:
    graph = make_graph(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t"}, "metadata": {"run_id": "r1"}}
    question = "What is the parental leave policy and how do I rotate an API key?"
    out = graph.invoke(
        {"messages": [{"role": "user", "content": question}]},
        config,
        context={"index_dir": str(handbook_index)},
    )
    history = [_as_served(s) for s in graph.get_state_history(config)]
    record = answer_record(history, "t", out["messages"][-1].id)
    why = record["why"]
    plan = [p["question"] for p in out["parts"]]
    assert len(plan) == 2 and [r["question"] for r in why["research"]] == plan
    assert [r["part"] for r in why["rounds"]] == sorted(r["part"] for r in why["rounds"])
    assert {r["part_question"] for r in why["rounds"]} == set(plan)
    # Every search the turn made is shown: one round per search (no hops offline).
    assert len(why["rounds"]) == why["searches"] == out["footnote_searches"]
    for round_ in why["rounds"]:
        assert round_["query"] and round_["candidates"]
        for c in round_["candidates"]:
            assert {"dense", "coverage"} <= set(c["evidence"]) and 0 <= c["grade"] <= 1
            assert (
                c["reason"] == "kept"
                if c["kept"]
                else c["reason"]
                in (
                    "below threshold",
                    "beyond keep_k",
                )
            )
    kept = {c["chunk_id"] for r in why["rounds"] for c in r["candidates"] if c["kept"]}
    cited = {c["chunk_id"] for c in out["citations"]}
    assert cited and cited <= kept and cited <= set(why["passages"])
    assert all(why["passages"][chunk]["text"] for chunk in cited)


def test_why_of_an_older_run_is_read_from_the_root_checkpoints() -> None:
    record = answer_record(_legacy_history(), "thread", "a1")
    assert record["run_id"] == "run-1" and record["question"] == "How often?"
    assert record["answer"] == "Every 90 days. [1]" and not record["not_covered"]
    why = record["why"]
    (round1,) = why["rounds"]
    assert round1["query"] == "how often" and round1["strategy"] == "as_asked"
    outcome = {c["chunk_id"]: c["kept"] for c in round1["candidates"]}
    assert outcome == {"keys.md#rotation:0": True, "oncall.md#paging:0": False}
    assert round1["candidates"][0]["evidence"] == {"dense": 0.8, "coverage": 0.6}
    assert why["invalid_citations"] == [3]
    assert why["path"] == ["new_question", "grade_documents:1/2", "generate"]
    assert why["route"] is None  # the single-part graph had no planner
    assert why["notices"] == ["HyDE needs a chat model; it is unavailable offline."]
    assert why["searches"] == [{"query": "how often", "stage": "pipeline"}]  # namespaced key
    assert set(why["passages"]) == {"keys.md#rotation:0", "oncall.md#paging:0"}

    later = answer_record(_legacy_history(), "thread", "a2")
    assert later["not_covered"] and later["run_id"] == "run-2" and later["citations"] == []
    with pytest.raises(AnswerNotFound):
        answer_record(_legacy_history(), "thread", "h1")  # a question is not an answer


def test_a_why_recorded_before_path_had_its_name_is_shown_as_today() -> None:
    """Older rows kept the graph's steps under `route`; the page and API read `path`."""
    steps = ["new_question", "plan_turn:global:1", "global_answer:2", "verify_citations"]
    old = {"route": steps, "notices": [], "passages": {"keys.md#rotation:0": {"text": "x"}}}
    assert shown(old) == {"route": "global", "path": steps, "notices": []}
    today = {"route": "reply", "path": ["new_question", "plan_turn:reply:0", "reply"]}
    assert shown(today) == today


def test_fields_are_read_by_name_or_namespaced_name() -> None:
    assert field({"candidates": [1]}, "candidates") == [1]
    assert field({"footnote:candidates": [2]}, "candidates") == [2]
    assert field({"_candidates": [3]}, "candidates") == [3]
    assert field({}, "candidates", "missing") == "missing"


# ---------------------------------------------------------------- export


def test_export_writes_a_beir_set_that_eval_reads(location: str, tmp_path: Path) -> None:
    store = FeedbackStore(location)
    store.record(user="alice", answer=answer("m1"), rating=1)  # both citations relevant
    store.record(
        user="bob", answer=answer("m2", question="Key  scopes?"), rating=1, wrong_citations=[2]
    )
    gap = store.record(
        user="bob", answer=answer("m3", not_covered=True, question="Leave?"), rating=None
    )
    store.update(gap.id, {"should_cover": True})
    store.record(user="dave", answer=answer("m4", question="Unjudged?"), rating=-1)

    result = export_beir(store.all(), tmp_path / "golden")
    assert (result.queries, result.judgements, result.gaps) == (2, 4, 1)
    dataset = load_beir(tmp_path / "golden")
    assert dataset.queries == {"q1": "How often do I rotate keys?", "q2": "Key  scopes?"}
    assert dataset.qrels == {  # eval keeps the positives; the negative stays in the file
        "q1": {"keys.md#rotation:0": 1, "keys.md#scopes:0": 1},
        "q2": {"keys.md#rotation:0": 1},
    }
    qrels = (tmp_path / "golden" / "qrels" / "test.tsv").read_text().splitlines()
    assert "q2\tkeys.md#scopes:0\t0" in qrels
    assert set(dataset.corpus) == {"keys.md#rotation:0", "keys.md#scopes:0", "oncall.md#paging:0"}
    gaps = [json.loads(line) for line in (tmp_path / "golden" / "gaps.jsonl").open()]
    assert [g["text"] for g in gaps] == ["Leave?"]


# ---------------------------------------------------------------- LangSmith


class LangSmithStub:
    """A loopback stand-in for the LangSmith API: answers 200 to everything and records
    (method, path, JSON body or {}, raw body) of each request."""

    def __init__(self) -> None:
        seen: list[tuple[str, str, dict[str, Any], bytes]] = []
        self.seen = seen

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    data = json.loads(raw or b"{}")
                except ValueError:
                    data = {}
                data = data if isinstance(data, dict) else {}
                seen.append((self.command, self.path, data, raw))
                payload = json.dumps({"id": data.get("id", "x"), **data}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_POST = do_PATCH = do_GET = _answer

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def posts(self, suffix: str) -> list[dict[str, Any]]:
        return [
            data
            for method, path, data, _ in self.seen
            if method == "POST" and path.split("?")[0].endswith(suffix)
        ]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


@pytest.fixture
def langsmith_stub() -> Iterator[LangSmithStub]:
    stub = LangSmithStub()
    try:
        yield stub
    finally:
        stub.close()


def test_langsmith_gets_the_rating_only_when_tracing_is_on(
    tmp_path: Path, langsmith_stub: LangSmithStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    row = FeedbackStore(str(tmp_path / "f.sqlite3")).record(
        user="alice", answer=answer(), rating=-1, comment="wrong", wrong_citations=[1]
    )
    monkeypatch.setenv("LANGSMITH_ENDPOINT", langsmith_stub.url)
    monkeypatch.setenv("LANGSMITH_API_KEY", "lsv2-test")
    monkeypatch.setenv("LANGSMITH_TRACING", "false")
    assert not tracing_on() and send_to_langsmith(row) is False
    assert langsmith_stub.seen == []  # off: nothing leaves

    monkeypatch.setenv("LANGSMITH_TRACING", "true")
    assert tracing_on() and send_to_langsmith(row) is True
    posts = langsmith_stub.posts("/feedback")
    assert posts, langsmith_stub.seen
    data = posts[0]
    assert data["run_id"] == row.run_id and data["key"] == "user_rating"
    assert data["score"] == 0 and data["comment"] == "wrong"
    assert tracing_on({"LANGSMITH_TRACING": "true"}) is False  # no key: off
