"""Access control through the entity graph, served: on both runtimes (`langgraph dev`, and Aegra
on PostgreSQL + Redis) with the operator's FOOTNOTE_SEARCH_STAGE=graph, more than 1,000 probes
(MCP search and ask, as every user of the team, whole-corpus questions answered from the
graph's communities among them, with the thread state and "why" that keep those communities)
find no restricted marker, whether it sits in a document's title, in the names and codes the
graph makes entities of, in a community's summary or in its text; and no caller can choose
another ranking. The served leak pattern of tests/served.py, with a restricted document that
the graph links to public ones (it names their title, team and phrases), and an `[hr]` one
whose long title public documents name by its first words only: its restricted words come
after those, where a link named by the whole title would carry them to everyone.

The server has no served form of `footnote graph`; its communities view (the summaries) is
checked here for each user of the team, the entity view per caller in
tests/test_graph_backends.py and tests/test_entity_graph.py.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from footnote.graph.context import Context, ContextError
from footnote.ingest.pipeline import ingest
from footnote.server.langgraph_dev import ServerFailed, running_server
from footnote.server.production import ProductionError, running_deployment
from footnote.server.settings import ServerSettings, SettingsError
from footnote.store.entities import entity_key
from footnote.store.types import Caller
from footnote.tools.search import SearchRequest, search
from tests.conftest import RunCli
from tests.served import GRAPH_ID, RESTRICTED, USERS, Restricted, api_key_team, build_corpus
from tests.test_mcp_openai import Served, mcp_session, structured

pytestmark = pytest.mark.integration

QUILL = Restricted(
    "quill.md",
    "finance",
    ("Quillfeather", "Ostrander", "Marrowgate", "quill_ledger_sync", "every quarter"),
    ("Who pays the vendor of the ledger job?", "Which vendor does the ledger sync job pay?"),
)
QUILL_TEXT = """---
title: Project Quillfeather Ostrander
access: [finance]
---
# Project Quillfeather Ostrander

## Vendor Marrowgate Holdings

Project Quillfeather Ostrander pays Marrowgate Holdings every quarter through the
`quill_ledger_sync` job. The Platform Team runs the job under a service account, and its
API keys rotate as Keys says.
"""
"""Markers in its title, in a heading, in names, in a code identifier and in plain text; it
names a public document's title (Keys), a public team and public phrases, so the graph holds
edges and co-occurrences between it and what everyone reads."""
MOVE = Restricted(
    "move.md",
    "hr",
    ("QUOKKA", "Quokka", "quokka", "Layoffs", "layoffs"),
    ("Who is let go after the office move?", "What follows the move of the service accounts?"),
)
MOVE_TITLE = (
    "Office Move Plan for the Platform Team and the Service Account Owners in Building Four "
    "with QUOKKA-5521 Layoffs"
)
MATCHED = "office move plan for the Platform Team and the service account owners"
"""The title's first MAX_TITLE_WORDS words (store/entities.py), all a public text names of it:
its restricted words come after them, so a link named by the title it matched would carry
them to every caller who may read the public text."""
MOVE_TEXT = f"""---
title: {MOVE_TITLE}
access: [hr]
---
# Office move

The Platform Team moves its service accounts to Building Four in spring. QUOKKA-5521 Layoffs
follow the move; Quokka layoffs are told to each team lead first.
"""
PUBLIC_MENTIONS = {  # two public documents name the long title (a link in two chunks: it
    # joins a community, so the global route and the communities view show it)
    "facilities.md": f"""# Facilities

The {MATCHED} is kept by the facilities desk. The Platform Team keeps its service account
keys in the vault during the move.
""",
    "building.md": f"""# New building

Building Four opens in spring. Read the {MATCHED} before the Platform Team moves its desks.
""",
}
DOCUMENTS = (*RESTRICTED, QUILL, MOVE)
BRIDGES = [  # questions whose graph walk passes entities the restricted document shares
    "What does the Platform Team own?",
    "Which team runs jobs under a service account?",
    "How often do I have to change my API key?",
    "The team that owns a misused service account gets paged: how quickly must the on-call "
    "engineer acknowledge?",
]
QUERIES = [
    *BRIDGES,
    *(q for d in DOCUMENTS for q in d.questions),
    *(m for d in DOCUMENTS for m in d.markers),
    "Project Quillfeather Ostrander",
    "Marrowgate Holdings",
    MATCHED,
    MOVE_TITLE,
]
GLOBAL = [  # whole-corpus questions: the global route, over communities the restricted
    # document shares with public ones (their summaries are made per caller)
    "Summarize everything.",
    "What topics do the documents cover?",
    "Which documents mention the Platform Team?",
    "Which documents mention a vendor or a ledger?",
    "Which documents mention the office move plan?",
]
ASKED = [*BRIDGES, *QUILL.questions, *MOVE.questions, RESTRICTED[0].questions[0], *GLOBAL]


def may_see(user: str, document: Restricted) -> bool:
    spec = USERS[user]
    return bool(spec.get("admin")) or document.group in spec["groups"]


def leaked(user: str, payload: Any) -> list[str]:
    text = payload if isinstance(payload, str) else json.dumps(payload, default=str)
    return [m for d in DOCUMENTS if not may_see(user, d) for m in d.markers if m in text]


def test_the_stage_is_the_operators_setting() -> None:
    assert ServerSettings.from_env({}).search_stage == "pipeline"
    settings = ServerSettings.from_env({"FOOTNOTE_SEARCH_STAGE": "graph"})
    assert settings.run_context({})["search_stage"] == "graph"
    assert settings.run_context({"search_stage": "graph"})["search_stage"] == "graph"
    for chosen in ("pipeline", "bm25", 1, None):
        with pytest.raises(Exception, match="search_stage") as refused:
            settings.run_context({"search_stage": chosen})
        assert getattr(refused.value, "status", None) in (403, 422)
    with pytest.raises(SettingsError, match="FOOTNOTE_SEARCH_STAGE"):
        ServerSettings.from_env({"FOOTNOTE_SEARCH_STAGE": "dense"})
    with pytest.raises(ContextError, match="search_stage"):
        Context(search_stage="walk")


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("graph-served")
    corpus = build_corpus(root)
    (corpus / QUILL.source).write_text(QUILL_TEXT, encoding="utf-8")
    (corpus / MOVE.source).write_text(MOVE_TEXT, encoding="utf-8")
    for name, text in PUBLIC_MENTIONS.items():
        (corpus / name).write_text(text, encoding="utf-8")
    built = root / "index"
    summary = ingest([corpus], built)
    assert not summary.failed, summary.failed
    return built


def test_the_communities_view_shows_each_user_only_what_they_may_read(
    index: Path, run_cli: RunCli
) -> None:
    """`footnote graph --communities` (JSON and text) for each user of the team on this index,
    where the restricted documents share communities with public ones: the summaries the
    global route answers from. No marker of a document the user may not read, and a reader of
    Quillfeather sees its words there (so they are really in a community)."""
    for user, spec in USERS.items():
        if spec.get("admin"):
            continue  # the command has no admin: an admin is the server's caller
        groups = ",".join(spec["groups"])
        for form in (["--json"], []):
            shown = run_cli("graph", "--index", str(index), "--communities", "--limit", "1000",
                            "--groups", groups, *form)  # fmt: skip
            assert shown.returncode == 0, shown.stderr
            assert not leaked(user, shown.stdout), (user, form, leaked(user, shown.stdout))
            if may_see(user, QUILL):
                assert any(m in shown.stdout for m in QUILL.markers), (user, form)
            if form:  # the long title's link is in a community every user sees
                named = {entity_key(e) for c in json.loads(shown.stdout)["communities"]
                         for e in c["entities"]}  # fmt: skip
                assert entity_key(MATCHED) in named, (user, sorted(named))


@pytest.fixture(scope="module", params=["dev", "production"])
def served(
    request: pytest.FixtureRequest, index: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    directory = tmp_path_factory.mktemp(f"graph-{request.param}")
    team = api_key_team(directory)
    env = {**team.env, "FOOTNOTE_SEARCH_STAGE": "graph"}
    try:
        if request.param == "production":
            with running_deployment(
                index_dir=str(index),
                workdir=directory / "production",
                extra_env=env,
                inherit_credentials=False,
            ) as deployment:
                yield Served(deployment.replicas[0], team, index)
        else:
            with running_server(
                index_dir=str(index), log=directory / "server.log", extra_env=env
            ) as server:
                yield Served(server, team, index)
    except (ServerFailed, ProductionError) as exc:
        pytest.fail(str(exc), pytrace=False)


def test_served_search_ranks_by_the_graph_and_callers_cannot_choose(
    served: Served, index: Path
) -> None:
    """The server's searches are the graph stage's (not the pipeline's) for the caller, and
    a run asking for another stage is refused (403) while the operator's own value passes."""

    async def served_ids(question: str) -> list[str]:
        async with mcp_session(served, "root") as session:
            found = structured(await session.call_tool("search", {"query": question, "k": 5}))
            refused = await session.call_tool(
                "search", {"query": question, "k": 5, "stage": "pipeline"}
            )
            assert refused.isError
        return [h["chunk_id"] for h in found["results"]]

    question = BRIDGES[0]
    operator = Caller.operator()
    graph = [h.chunk.id for h in search(SearchRequest(query=question, index_dir=index, k=5,
                                                      stage="graph", caller=operator))]  # fmt: skip
    pipeline = [h.chunk.id for h in search(SearchRequest(query=question, index_dir=index, k=5,
                                                         caller=operator))]  # fmt: skip
    assert graph != pipeline  # so the comparison below tells the stages apart
    assert asyncio.run(served_ids(question)) == graph
    run = {"assistant_id": GRAPH_ID, "input": {"messages": [{"role": "user", "content": question}]}}
    for stage, status in (("pipeline", 403), ("graph", 200)):
        response = httpx.post(
            f"{served.server.url}/runs/wait",
            headers=served.headers("dave"),
            json={**run, "context": {"search_stage": stage}},
            timeout=120,
        )
        assert response.status_code == status, response.text
        assert not leaked("dave", response.text)


def test_nothing_restricted_reaches_a_caller_through_the_graph(served: Served) -> None:
    """Every user, concurrently: MCP searches by the bridge questions, the restricted
    documents' questions and their very markers (k 1 to 20, with and without a filter), and
    cited answers; whole-corpus ones by the global route, read also where its community
    summaries and entities are kept (the thread's state and history, the answer's "why"): at
    least 1,000 probes, no marker of a document the user may not read, and each restricted
    document found by exactly the users who may read it."""
    seen: dict[str, set[str]] = {user: set() for user in USERS}
    summarised: dict[str, list[dict[str, Any]]] = {user: [] for user in USERS}

    async def probe(user: str) -> int:
        count = 0
        async with (
            mcp_session(served, user) as session,
            httpx.AsyncClient(
                base_url=served.server.url, headers=served.headers(user), timeout=120
            ) as api,
        ):

            async def kept(thread_id: str) -> None:
                """The global answer as the server keeps it: the thread's state (its
                communities with their entities, the passages summarised), its history
                and its why."""
                nonlocal count
                state = await api.get(f"/threads/{thread_id}/state")
                assert state.status_code == 200, state.text
                values = state.json()["values"]
                assert not leaked(user, values), (user, thread_id, leaked(user, values))
                history = await api.post(f"/threads/{thread_id}/history", json={"limit": 50})
                assert history.status_code == 200, history.text
                assert history.json(), (user, thread_id)
                assert not leaked(user, history.text), (user, thread_id, leaked(user, history.text))
                summarised[user] += values.get("footnote_communities") or []
                message_id = values["messages"][-1]["id"]
                why = await api.get(
                    "/feedback/why", params={"thread_id": thread_id, "message_id": message_id}
                )
                assert why.status_code == 200, why.text
                assert why.json()["why"]["route"] == "global", why.json()["why"]["path"]
                assert not leaked(user, why.text), (user, thread_id, leaked(user, why.text))
                count += 3

            async def check(tool: str, arguments: dict[str, Any]) -> None:
                nonlocal count
                result = await session.call_tool(tool, arguments)
                answer = {
                    k: v for k, v in (result.structuredContent or {}).items() if k != "query"
                }  # fmt: skip  (the caller's own query, echoed)
                payload = [answer, [c.model_dump() for c in result.content]]
                assert not leaked(user, payload), (user, tool, arguments, leaked(user, payload))
                if not result.isError and tool == "search":
                    seen[user] |= {h["source"] for h in result.structuredContent["results"]}
                if tool == "ask" and arguments["question"] in GLOBAL:  # really the global route
                    assert answer["route"] == "global", (arguments, answer["path"])
                    assert "plan_turn:global:1" in answer["path"], (arguments, answer["path"])
                    await kept(answer["thread_id"])
                count += 1

            for query in QUERIES:
                for k in (1, 8, 20):
                    for filters in (None, {"source": "*.md"}):
                        arguments: dict[str, Any] = {"query": query, "k": k}
                        if filters:
                            arguments["filters"] = filters
                        await check("search", arguments)
            for document in DOCUMENTS:
                await check("search", {"query": document.markers[0], "k": 20,
                                       "filters": {"source": document.source}})  # fmt: skip
            for question in ASKED:
                await check("ask", {"question": question})
        return count

    async def everyone() -> list[int]:
        return list(await asyncio.gather(*(probe(user) for user in USERS)))

    probes = sum(asyncio.run(everyone()))
    for user in USERS:
        for document in DOCUMENTS:
            assert (document.source in seen[user]) == may_see(user, document), (user, document)
        assert summarised[user], user  # the global answers really came from communities
    assert probes >= 1000, probes
