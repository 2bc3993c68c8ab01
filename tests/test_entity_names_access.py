"""An entity's displayed name comes only from text the caller may read (store/entities.py).

Titles are matched in text on their first MAX_TITLE_WORDS words; the link entity a match makes
is named by the words matched, never by the whole title. Here an `[hr]` document's title is
longer than that, its restricted words after the matched ones, and a public document names
its first words: no other user finds those words in `footnote graph` (entities, one entity,
communities; JSON and text), in the global route's answer, communities and thread state, or
in the "why" record made from its history; an `hr` reader does (so they are in the graph).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from footnote.feedback.why import answer_record
from footnote.graph.graph import make_graph
from footnote.ingest.pipeline import ingest
from footnote.store.backends import open_reader
from footnote.store.entities import MAX_TITLE_WORDS, TitleMatcher, entity_key, key_hash
from footnote.store.files import load_index
from footnote.store.graph_files import GraphArrays
from footnote.store.types import Caller
from footnote.tools.communities import CommunityView
from footnote.tools.graph_view import GraphView
from tests.conftest import RunCli
from tests.pg_fixture import PgServer
from tests.test_communities import DOCS, write_docs

TITLE = "Office Move Plan for the Platform Team and the Key Vault in 2025: QUOKKA-5521 Layoffs"
MATCHED = " ".join(entity_key(TITLE).split()[:MAX_TITLE_WORDS])
"""What a public document names of the title: its first MAX_TITLE_WORDS words."""
MARKERS = ("quokka", "layoffs")
"""Words of the title after MAX_TITLE_WORDS (compared with the shown text lower-cased)."""
MOVE = (
    f"---\ntitle: {TITLE}\naccess: [hr]\n---\n# Office move\n\nThe Platform Team moves the key "
    "vault in spring. QUOKKA-5521 Layoffs follow the move for the People Team.\n"
)
FACILITIES = (
    "# Facilities\n\nThe office move plan for the Platform Team and the key vault in the new "
    "building is kept by the People Team. The Platform Team keeps the key vault during the "
    "move.\n"
)
BUILDING = (
    "# New building\n\nThe new building opens in spring. Read the office move plan for the "
    "Platform Team and the key vault in the facilities pages before the People Team moves.\n"
)
EVERYONE = Caller(groups=frozenset({"everyone"}))
HR = Caller(groups=frozenset({"everyone", "hr"}))


def leaked(shown: Any) -> list[str]:
    text = (shown if isinstance(shown, str) else json.dumps(shown, default=str)).lower()
    return [m for m in MARKERS if m in text]


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("entity-names")
    docs = {**DOCS, "facilities.md": FACILITIES, "building.md": BUILDING, "move.md": MOVE}
    built = tmp / "index"
    summary = ingest([write_docs(tmp / "docs", docs)], built)
    assert not summary.failed, summary.failed
    return built


def test_the_words_after_the_matched_ones_are_words_of_the_title_only() -> None:
    assert all(m not in (FACILITIES + BUILDING + "".join(DOCS.values())).lower() for m in MARKERS)
    assert all(m in TITLE.lower() for m in MARKERS)
    assert len(entity_key(TITLE).split()) > MAX_TITLE_WORDS


def test_a_link_is_named_by_the_words_it_matched() -> None:
    """The mention a long title's match makes holds what the text says, not the title."""
    text = "See the office move plan for the Platform Team and the key vault in March."
    (link,) = TitleMatcher([TITLE]).find(text)
    assert link.key == MATCHED
    assert link.name == "office move plan for the Platform Team and the key vault in"
    assert entity_key(link.name) == link.key


def test_the_graph_view_shows_no_word_of_the_title_beyond_the_match(index: Path) -> None:
    reader = open_reader(index)
    everyone = GraphView(reader, EVERYONE)
    link = everyone.entity(MATCHED, 10_000)
    assert link is not None and "facilities.md" in link["documents"]  # the link is visible
    shown = [
        everyone.figures(),
        everyone.top(10_000),
        link,
        everyone.entity("Platform Team", 10_000),
        everyone.entity("key vault", 10_000),
    ]
    assert not leaked(shown), leaked(shown)
    assert everyone.entity(TITLE) is None and everyone.entity("QUOKKA-5521") is None
    inside = GraphView(reader, HR)
    assert inside.entity(TITLE) is not None and inside.entity("QUOKKA-5521") is not None


def test_communities_show_no_word_of_the_title_beyond_the_match(index: Path) -> None:
    reader = open_reader(index)
    view = CommunityView(reader, reader.select(EVERYONE))
    shown = [view.summarise(c).to_dict(entities=10_000) for c in view.communities()]
    assert shown and not leaked(shown), leaked(shown)
    assert any(MATCHED in map(entity_key, c["entities"]) for c in shown)  # in a community
    inside = CommunityView(reader, reader.select(HR))
    assert leaked([inside.summarise(c).to_dict(entities=10_000) for c in inside.communities()])


@pytest.mark.parametrize("form", [["--json"], []])
def test_footnote_graph_shows_no_word_of_the_title_beyond_the_match(
    index: Path, run_cli: RunCli, form: list[str]
) -> None:
    for asked in (["--communities"], [], [MATCHED], ["Platform Team"]):
        shown = run_cli("graph", *asked, "--index", str(index), "--limit", "1000", *form)
        assert shown.returncode == 0, shown.stderr
        assert not leaked(shown.stdout), (asked, form, leaked(shown.stdout))
    inside = run_cli("graph", "--communities", "--index", str(index), "--limit", "1000",
                     "--groups", "hr", *form)  # fmt: skip
    assert leaked(inside.stdout)


@pytest.mark.parametrize(
    "question", ["Summarize everything.", "Which documents mention the office move plan?"]
)
def test_the_global_route_and_its_why_show_no_word_of_the_title_beyond_the_match(
    index: Path, question: str
) -> None:
    out = make_graph().invoke(
        {"messages": [{"role": "user", "content": question}]},
        context={"index_dir": str(index)},
    )
    assert "global_answer:" in " ".join(out["footnote_route"]), out["footnote_route"]
    assert out["footnote_communities"]
    answer = out["messages"][-1]
    values = {
        "messages": [{"type": "human", "id": "h1", "content": question},
                     {"type": "ai", "id": answer.id, "content": answer.content}],
        **{k: v for k, v in out.items() if k.startswith("footnote_") or k == "citations"},
    }  # fmt: skip
    history = [{"values": values, "next": [], "metadata": {"source": "loop", "run_id": "r1",
                                                            "step": 5}}]  # fmt: skip
    why = answer_record(history, "thread", str(answer.id))
    shown = [{k: v for k, v in out.items() if k != "messages"}, answer.content, why]
    assert not leaked(shown), leaked(shown)


def test_an_index_built_before_links_were_named_by_their_match_shows_the_match(
    index: Path, tmp_path: Path
) -> None:
    """A graph written when a link held its whole title as its name: the name is shown as the
    words its key was made of, so such an index leaks nothing either."""
    graph = load_index(index).graph()
    assert isinstance(graph, GraphArrays)
    names = list(graph.names())
    link = int(graph.lookup([key_hash(MATCHED)])[0])
    assert link >= 0 and graph.kind(link) == "link"
    names[link] = TITLE
    old = tmp_path / "graph"
    old.mkdir()
    (old / "entities.names.json").write_text(json.dumps(names), encoding="utf-8")
    before = GraphArrays(directory=old, rows=graph.rows, arrays=graph.arrays)
    shown = before.names()[link]
    assert entity_key(shown) == MATCHED and not leaked(shown)
    assert shown.startswith("Office Move Plan")
    damaged = [*names[:link], "Unrelated Words", *names[link + 1 :]]
    (old / "entities.names.json").write_text(json.dumps(damaged), encoding="utf-8")
    with pytest.raises(ValueError, match="names.json"):
        GraphArrays(directory=old, rows=graph.rows, arrays=graph.arrays).names()


def test_on_postgres_no_caller_sees_the_title_beyond_the_match(
    pg_server: PgServer, tmp_path: Path
) -> None:
    """The same on PostgreSQL, where the entity rows keep each mention's name: `footnote
    graph`'s views and the communities show only the match, and a link row that holds the
    whole title (written before links were named by their match) is shown cut to its key."""
    import psycopg

    docs = {**DOCS, "facilities.md": FACILITIES, "building.md": BUILDING, "move.md": MOVE}
    url = f"{pg_server.url}?index=entity_names"
    ingest([write_docs(tmp_path / "docs", docs)], url)

    def shown() -> list[Any]:
        reader = open_reader(url)
        view = GraphView(reader, EVERYONE)
        communities = CommunityView(reader, reader.select(EVERYONE))
        link = view.entity(MATCHED, 10_000)
        assert link is not None and entity_key(link["name"]) == MATCHED
        return [view.top(10_000), link, [communities.summarise(c).to_dict(entities=10_000)
                                         for c in communities.communities()]]  # fmt: skip

    assert not leaked(shown()), leaked(shown())
    assert GraphView(open_reader(url), HR).entity(TITLE) is not None
    with psycopg.connect(pg_server.url, autocommit=True) as conn:
        conn.execute(
            "UPDATE footnote_entity_names_entities SET name = %s WHERE key = %s",
            (TITLE, key_hash(MATCHED)),
        )
    assert not leaked(shown()), leaked(shown())


def test_a_title_cut_short_by_the_end_of_the_text_is_no_match() -> None:
    """Near the end of a text, the words left may be fewer than a longer title's: they are
    looked up as that title only when they are all there (an IndexError stopped an ingest
    whose text ended in the first words of a title that shares them with a shorter one)."""
    from footnote.store.entities import TitleMatcher

    matcher = TitleMatcher(["Service accounts", "Service accounts and tokens"])
    found = matcher.find("Read about Service accounts")
    assert [m.name for m in found] == ["Service accounts"]
