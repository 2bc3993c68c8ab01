"""The entity graph on both backends (store/graph_files.py, store/graph_postgres.py): the same
graph, the same communities and the same walk from the same corpus, incremental ingest equal
to a rebuild, the graph published with its version, damaged graph tables refused, and
nothing restricted reaching a caller through `footnote graph` or the global route on
PostgreSQL.

PostgreSQL is a real server (tests/pg_fixture.py); it must start, never skip.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from footnote.graph.graph import make_graph
from footnote.ingest.pipeline import ingest
from footnote.store.backends import open_reader
from footnote.store.communities import canonical_communities
from footnote.store.graph_files import canonical
from footnote.store.types import Caller, IndexCorrupt, Ranked
from footnote.tools.graph_search import graph_rank
from footnote.tools.graph_view import GraphView
from footnote.tools.retrieval import get_retriever
from footnote.tools.search import SearchRequest, run_stage, search
from tests.conftest import Locate, RunCli
from tests.pg_fixture import PgServer
from tests.test_communities import DOCS as TEAM_DOCS
from tests.test_communities import MARKERS
from tests.test_communities import RESTRICTED as TEAM_SECRET
from tests.test_entity_graph import DOCS, EVERYONE, RESTRICTED, SECRET, write_docs

ADMIN = Caller(groups=frozenset(), admin=True)
MULTI_HOP = [  # (question, the documents a good answer needs)
    ("Where was the director of Alpha Film born?", {"alpha-film.md", "bruno-kessler.md"}),
    (
        "Which team is paged when a service account is misused, and what tool does it own?",
        {"paging.md", "teams.md"},
    ),  # fmt: skip
]
HANDBOOK_QUESTIONS = [
    "How often do I have to change my API key?",
    "The team that owns a misused service account gets paged: how quickly must the on-call "
    "engineer acknowledge?",
    "Who approves expenses?",
]


def canonical_of(location: str) -> dict[str, Any]:
    """The live version's graph and communities by chunk id and entity name, whatever the
    backend's rows."""
    reader = open_reader(location)
    graph = reader.graph()  # type: ignore[attr-defined]
    assert graph is not None
    rows = [int(r) for r in graph.row_mask(reader.select(ADMIN)).nonzero()[0]]
    ids = [f"<no chunk {r}>" for r in range(graph.rows)]
    for row, chunk in zip(rows, reader.chunks(rows), strict=True):
        ids[row] = chunk.id
    found = canonical(graph, ids)
    empty = {k for k in found["mentions"] if k.startswith("<no chunk")}
    assert all(found["mentions"][k] == [] for k in empty)  # a row that is no chunk has no edge
    found["mentions"] = {k: v for k, v in found["mentions"].items() if k not in empty}
    assert graph.communities is not None
    found["communities"] = canonical_communities(graph.communities, graph.names(), ids)
    assert not any(c.startswith("<no chunk") for cm in found["communities"]
                   for c, _ in cm["chunks"])  # fmt: skip
    return found


def walk(location: str, question: str, candidates: list[str]) -> list[str]:
    """The graph walk for `everyone` from the given candidate chunks (by id, in order)."""
    retriever = get_retriever(location)
    reader = retriever.reader
    graph = reader.graph()  # type: ignore[attr-defined]
    mask = graph.row_mask(reader.select(EVERYONE))
    rows = [int(r) for r in mask.nonzero()[0]]
    row_of = {c.id: r for r, c in zip(rows, reader.chunks(rows), strict=True)}
    ranked = [Ranked(row_of[c], 1.0 / (i + 1), 0) for i, c in enumerate(candidates)]
    return [h.chunk.id for h in graph_rank(graph, question, 10, mask, ranked, retriever.read)]


@pytest.fixture(scope="module")
def pair(pg_server: PgServer, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """The small multi-hop corpus plus a restricted document, on both backends."""
    docs = {**DOCS, "nightjar.md": RESTRICTED}
    return on_both_backends(pg_server, tmp_path_factory.mktemp("graph-pair"), docs, "graph_pair")


@pytest.fixture(scope="module")
def handbook_pair(pg_server: PgServer, handbook_index: Path, handbook_dir: Path) -> tuple[str, str]:
    url = f"{pg_server.url}?index=graph_handbook"
    assert not ingest([handbook_dir], url).failed
    return str(handbook_index), url


@pytest.fixture(scope="module")
def team_pair(pg_server: PgServer, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """tests/test_communities.py's corpus, whose restricted document shares the Platform
    Team's community, on both backends."""
    docs = {**TEAM_DOCS, "nightjar.md": TEAM_SECRET}
    return on_both_backends(pg_server, tmp_path_factory.mktemp("team-pair"), docs, "graph_team")


def on_both_backends(
    pg_server: PgServer, tmp: Path, docs: dict[str, str], name: str
) -> tuple[str, str]:
    """`docs` written under `tmp` and ingested into a files index and a PostgreSQL one."""
    folder = write_docs(tmp / "docs", docs)
    files, url = str(tmp / "index"), f"{pg_server.url}?index={name}"
    for location in (files, url):
        assert not ingest([folder], location).failed
    return files, url


def test_both_backends_hold_the_same_graph(
    pair: tuple[str, str], handbook_pair: tuple[str, str], team_pair: tuple[str, str]
) -> None:
    """The same mentions, pairs and kinds, and the same communities: the same partition of
    the entities, the same chunks in each, as central (canonical_of holds both)."""
    for files, url in (pair, handbook_pair, team_pair):
        held = canonical_of(url)
        assert held == canonical_of(files)
        assert len(held["communities"]) >= 2
        graph = open_reader(url).manifest["graph"]  # type: ignore[attr-defined]
        assert graph["entities"] > 0 and graph["mentions"] > 0 and graph["pairs"] > 0
        assert graph["communities"] == len(held["communities"])


def test_the_global_route_on_postgres_cites_across_communities_and_leaks_nothing(
    team_pair: tuple[str, str], handbook_pair: tuple[str, str], run_cli: RunCli
) -> None:
    """On PostgreSQL the global route answers from the graph's communities (ids, not the
    documents the fallback groups by), citing more than one of them; an `everyone` caller
    sees no word of the restricted document in the answer, its citations, the communities
    used or `footnote graph --communities`, while an insider's answer reaches it."""
    files, url = team_pair
    for question, least in (("Summarize everything.", 2),
                            ("Which documents mention the key vault?", 1)):  # fmt: skip
        out, twin = (
            make_graph().invoke({"messages": [{"role": "user", "content": question}]},
                                context={"index_dir": location})
            for location in (url, files)
        )  # fmt: skip
        assert "plan_turn:global:1" in out["footnote_route"]
        used = out["footnote_communities"]
        assert len(used) >= least and all(isinstance(c["id"], int) for c in used), used
        assert [c["id"] for c in used] == [c["id"] for c in twin["footnote_communities"]]
        assert len({c["source"] for c in out["citations"]}) >= 2
        shown = json.dumps([out["messages"][-1].content, out["citations"], used])
        assert not any(m in shown for m in MARKERS) and "nightjar.md" not in shown
        inside = make_graph().invoke(
            {"messages": [{"role": "user", "content": question}]},
            context={"index_dir": url, "user_groups": ["secret"]},
        )
        assert "nightjar.md" in json.dumps(inside["citations"])  # really reachable
    listed = run_cli("graph", "--index", url, "--communities", "--json")
    assert listed.returncode == 0, listed.stderr
    communities = json.loads(listed.stdout)["communities"]
    assert len(communities) >= 2 and all(c["summary"] for c in communities)
    assert not any(m in listed.stdout for m in MARKERS)
    inside = run_cli("graph", "--index", url, "--communities", "--groups", "secret")
    assert "Nightjar" in inside.stdout
    files, url = handbook_pair
    for location in (files, url):
        out = make_graph().invoke(
            {"messages": [{"role": "user", "content": "What does the handbook cover?"}]},
            context={"index_dir": location, "user_groups": ["engineering"]},
        )
        sources = {c["source"] for c in out["citations"]}
        assert sources >= {"keys.md", "expenses.md", "holidays.md", "vpn.md", "oncall.md"}
        assert all(isinstance(c["id"], int) for c in out["footnote_communities"])


def test_the_walk_ranks_alike_on_both_backends(
    pair: tuple[str, str], handbook_pair: tuple[str, str]
) -> None:
    """From the same candidates (the dense stage's, the same on both backends), the walk
    gives the same ranking; and `--stage graph` answers the multi-hop questions on both."""
    for (files, url), questions in (
        (pair, [q for q, _ in MULTI_HOP]),
        (handbook_pair, HANDBOOK_QUESTIONS),
    ):
        for question in questions:
            retriever = get_retriever(files)
            dense = run_stage(retriever, question, 10, retriever.mask(EVERYONE), "dense")
            candidates = [h.chunk.id for h in dense]
            assert walk(url, question, candidates) == walk(files, question, candidates)
    files, url = pair
    for question, needed in MULTI_HOP:
        for location in (files, url):
            hits = search(SearchRequest(query=question, index_dir=location, k=3, stage="graph"))
            assert needed <= {h.chunk.source for h in hits}, (location, question)
            assert not any(h.chunk.source == "nightjar.md" for h in hits)
    files, url = handbook_pair
    for location in (files, url):
        hits = search(SearchRequest(query=HANDBOOK_QUESTIONS[0], index_dir=location,
                                    stage="graph"))  # fmt: skip
        assert hits[0].chunk.source == "keys.md"


def test_incremental_ingest_equals_a_rebuild_on_both_backends(
    locate: Locate, tmp_path: Path
) -> None:
    """add (a document whose title others name), change, remove, re-ingest: after each step
    the graph is the graph a fresh index of the same documents holds."""
    folder = tmp_path / "docs"
    docs = {k: DOCS[k] for k in ("alpha-film.md", "trento.md", "teams.md")}
    location = locate()
    ingest([write_docs(folder, docs)], location)
    steps = [
        {**docs, "bruno-kessler.md": DOCS["bruno-kessler.md"]},  # add: links appear
        {**docs, "bruno-kessler.md": DOCS["bruno-kessler.md"].replace("Trento", "Bolzano")},
        {**{k: v for k, v in DOCS.items() if k != "trento.md"}, "nightjar.md": RESTRICTED},
        {k: v for k, v in DOCS.items() if k != "alpha-film.md"},  # a title goes
        {k: v for k, v in DOCS.items() if k != "alpha-film.md"},  # nothing changed
    ]
    for state in steps:
        ingest([write_docs(folder, state)], location)
        held = tmp_path / "held"
        shutil.copytree(folder, held)
        fresh = locate()
        ingest([folder], fresh)  # same root path, so the same chunk ids
        assert canonical_of(location) == canonical_of(fresh)
        shutil.rmtree(held)
    mentions = canonical_of(location)["mentions"]
    film = [v for k, v in mentions.items() if k.startswith("bruno-kessler.md")]
    assert film and not any(name == "Alpha Film" for chunk in film for name, _ in chunk)


def test_graph_is_published_with_its_version(
    pg_server: PgServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader opened before an ingest loads no graph of the next version: it is told to
    search again; one opened after reads the new graph. Without the graph the tables go."""
    from footnote.store.postgres import PostgresReader
    from footnote.store.types import IndexError_

    folder = write_docs(tmp_path / "docs", {k: DOCS[k] for k in ("alpha-film.md", "teams.md")})
    url = f"{pg_server.url}?index=graph_versions"
    ingest([folder], url)
    before = PostgresReader(url)
    write_docs(folder, {k: DOCS[k] for k in ("alpha-film.md", "teams.md", "bruno-kessler.md")})
    ingest([folder], url)
    with pytest.raises(IndexError_, match="search again"):
        before.graph()
    after = PostgresReader(url).graph()
    assert after is not None and "Bruno Kessler" in after.names()
    monkeypatch.setenv("FOOTNOTE_GRAPH", "0")
    write_docs(folder, {k: DOCS[k] for k in ("alpha-film.md", "teams.md")})
    ingest([folder], url)
    reader = PostgresReader(url)
    assert reader.graph() is None and "graph" not in reader.manifest
    hits = search(SearchRequest(query=MULTI_HOP[0][0], index_dir=url, k=3, stage="graph"))
    pipeline = search(SearchRequest(query=MULTI_HOP[0][0], index_dir=url, k=3))
    assert [h.chunk.id for h in hits] == [h.chunk.id for h in pipeline]
    monkeypatch.delenv("FOOTNOTE_GRAPH")
    ingest([write_docs(folder, DOCS)], url)  # back on: built in full over the kept rows
    assert canonical_of(url) == canonical_of(_files_twin(folder, tmp_path))


def test_a_postgres_index_published_before_communities_is_read_without_them(
    pg_server: PgServer, tmp_path: Path
) -> None:
    """A manifest whose graph entry counts no communities (published before them) is read
    without them, as on the files backend (the global route groups hits by document), and
    the next ingest adds them."""
    import psycopg

    from footnote.store.postgres import PostgresReader
    from footnote.tools.communities import CommunityView

    folder = write_docs(tmp_path / "docs", TEAM_DOCS)
    url = f"{pg_server.url}?index=graph_before_communities"
    ingest([folder], url)
    with psycopg.connect(pg_server.url, autocommit=True) as conn:
        conn.execute("UPDATE footnote_indexes SET manifest = manifest #- '{graph,communities}' "
                     "WHERE name = 'graph_before_communities'")  # fmt: skip
    reader = PostgresReader(url)
    graph = reader.graph()
    assert graph is not None and graph.communities is None
    assert not CommunityView(reader, reader.select(EVERYONE)).available
    ingest([write_docs(folder, {**TEAM_DOCS, "nightjar.md": TEAM_SECRET})], url)
    republished = PostgresReader(url).graph()
    assert republished is not None and republished.communities is not None
    assert republished.communities.count >= 2


def _files_twin(folder: Path, tmp_path: Path) -> str:
    index = tmp_path / "twin"
    shutil.rmtree(index, ignore_errors=True)
    ingest([folder], index)
    return str(index)


def test_damaged_graph_tables_are_refused(pg_server: PgServer, tmp_path: Path) -> None:
    """A graph row removed or added behind Footnote's back, an edge to an entity that is
    not there, an unknown kind or a count below one: the reader refuses the graph as
    damage (IndexCorrupt), as the files backend refuses a tampered graph file."""
    import psycopg

    from footnote.store.postgres import PostgresReader

    folder = write_docs(tmp_path / "docs", DOCS)
    url = f"{pg_server.url}?index=graph_damage"
    conninfo = pg_server.url
    damage = [
        ("DELETE FROM {m} WHERE ctid = (SELECT min(ctid) FROM {m})", "expected"),
        ("UPDATE {m} SET key = 12345 WHERE ctid = (SELECT min(ctid) FROM {m})", "unknown entity"),
        ("UPDATE {e} SET kind = 42 WHERE ctid = (SELECT min(ctid) FROM {e})", "unknown kind"),
        ("UPDATE {p} SET count = 0 WHERE ctid = (SELECT min(ctid) FROM {p})", "below one"),
        ("UPDATE {m} SET weight = -1 WHERE ctid = (SELECT min(ctid) FROM {m})", "negative"),
        ("UPDATE {c} SET community = 10000 WHERE ctid = (SELECT min(ctid) FROM {c})",
         "out of range"),
        ("UPDATE {c} SET centrality = -1 WHERE ctid = (SELECT min(ctid) FROM {c})", "negative"),
        ("UPDATE {ec} SET key = 12345 WHERE ctid = (SELECT min(ctid) FROM {ec})",
         "unknown entity"),
    ]  # fmt: skip
    for statement, reason in damage:
        ingest([folder], url)
        assert PostgresReader(url).graph() is not None
        with psycopg.connect(conninfo, autocommit=True) as conn:
            tables = {k: f"footnote_graph_damage_{v}" for k, v in (
                ("m", "mentions"), ("e", "entities"), ("p", "pairs"),
                ("c", "chunk_communities"), ("ec", "entity_communities"))}  # fmt: skip
            conn.execute(statement.format(**tables))
        with pytest.raises(IndexCorrupt, match="modified or damaged") as caught:
            PostgresReader(url).graph()
        assert reason in str(caught.value)
        from footnote.store.postgres import drop_index

        drop_index(url)


def test_graph_view_on_postgres_shows_no_restricted_name(
    pair: tuple[str, str], run_cli: RunCli
) -> None:
    """`footnote graph` over PostgreSQL: what the files backend shows, and for `everyone`
    nothing of the restricted document (its title, its names, its co-occurrences)."""
    files, url = pair
    views = {loc: GraphView(open_reader(loc), EVERYONE) for loc in (files, url)}
    shown = {
        loc: [v.top(10_000), v.entity("Bruno Kessler", 10_000), v.entity("Platform Team", 10_000)]
        for loc, v in views.items()
    }
    assert shown[url] == shown[files]
    text = json.dumps(shown[url])
    assert "Nightjar" not in text and "Zephyrine" not in text and "budget" not in text
    assert views[url].entity(SECRET) is None
    insider = GraphView(open_reader(url), Caller(groups=frozenset({"everyone", "secret"})))
    inside = insider.entity("Bruno Kessler", 10_000)
    assert inside is not None and SECRET in json.dumps(inside)
    done = run_cli("graph", "Bruno Kessler", "--index", url, "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["graph"] is True and out["entity"]["documents"] == shown[files][1]["documents"]
    assert "Nightjar" not in done.stdout


def test_postgres_ingest_works_out_only_what_changed(
    pg_server: PgServer, handbook_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Adding a document computes edges for its chunks and for the kept chunks that name its
    title, nothing else; removing it computes none; and the graph equals a rebuild's."""
    from footnote.store import graph_postgres

    corpus = tmp_path / "corpus"
    shutil.copytree(handbook_dir, corpus)
    url = f"{pg_server.url}?index=graph_scope"
    first = ingest([corpus], url)
    computed: list[int] = []
    real_add = graph_postgres.GraphUpdate._add

    def counting(self: Any, rows: list[int], matcher: Any) -> None:
        computed.extend(rows)
        real_add(self, rows, matcher)

    monkeypatch.setattr(graph_postgres.GraphUpdate, "_add", counting)
    (corpus / "zebra.md").write_text("# Zebra Crossing\n\nZebra Crossing is a test doc.\n")
    added = ingest([corpus], url)
    assert 0 < len(computed) == added.chunks - first.chunks  # no kept chunk names it
    computed.clear()
    (corpus / "zebra.md").write_text("# Service Accounts\n\nWho owns each service account.\n")
    ingest([corpus], url)
    reader = open_reader(url)
    named = [c for c in reader.chunks(computed) if c.source != "zebra.md"]
    assert named and all(_names_both(c.text) for c in named)  # candidates by the title's terms
    assert len(computed) < first.chunks / 2
    assert canonical_of(url) == canonical_of(_files_twin(corpus, tmp_path))
    computed.clear()
    (corpus / "zebra.md").unlink()
    ingest([corpus], url)
    assert all(_names_both(c.text) for c in open_reader(url).chunks(computed))
    assert canonical_of(url) == canonical_of(_files_twin(corpus, tmp_path / "again"))


def _names_both(text: str) -> bool:
    lowered = text.lower()
    return "service" in lowered and "account" in lowered
