"""The entity graph (store/entities.py, store/graph_files.py) and the graph stage
(tools/graph_search.py): what it extracts, that incremental ingest gives the graph a rebuild
gives, that a tampered graph file is refused, that the walk follows a title link
deterministically, and that nothing a caller may not read moves or reaches them through it.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from footnote.ingest.pipeline import ingest
from footnote.store.entities import TitleMatcher, chunk_mentions, noun_phrases
from footnote.store.files import load_index
from footnote.store.graph_files import GRAPH_ENV, canonical
from footnote.store.types import Caller, IndexCorrupt, Ranked
from footnote.tools.graph_search import graph_rank
from footnote.tools.retrieval import Retriever
from footnote.tools.search import run_stage

EVERYONE = Caller(groups=frozenset({"everyone"}))
SECRET = "Nightjar Zephyrine"
"""The restricted document's title: a marker that must never reach an `everyone` caller."""

DOCS = {
    "alpha-film.md": "# Alpha Film\n\nAlpha Film is a 1990 drama directed by Bruno Kessler. "
    "It was shot in the mountains over one winter.\n",
    "bruno-kessler.md": "# Bruno Kessler\n\nBruno Kessler is a film director. He was born "
    "in Trento and studied painting before film.\n",
    "trento.md": "# Trento\n\nTrento is a city in northern Italy on the Adige river.\n",
    "teams.md": "# Teams\n\n## Platform\n\nThe Platform Team owns the `deploy_service` tool "
    "and every service account.\n",
    "paging.md": "# Paging\n\nWhen a service account is misused the Platform Team is paged "
    "and must acknowledge within five minutes.\n",
}
RESTRICTED = (
    "---\naccess: [secret]\n---\n# Nightjar Zephyrine\n\nNightjar Zephyrine is the code name "
    "of a project led by Bruno Kessler; its budget is held by the Platform Team.\n"
)


def write_docs(folder: Path, docs: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob("*.md"):
        if stale.name not in docs:
            stale.unlink()
    for name, text in docs.items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def graph_of(index: Path) -> dict:
    loaded = load_index(index)
    graph = loaded.graph()
    assert graph is not None
    return canonical(graph, loaded.chunk_ids())


def rebuilt(tmp: Path, docs: dict[str, str], name: str) -> dict:
    folder = write_docs(tmp / f"{name}-docs", docs)
    index = tmp / f"{name}-index"
    ingest([folder], index)
    # the rebuild reads the same root path as the incremental index, so chunk ids agree
    return graph_of(index)


def test_extraction_finds_titles_names_codes_headings_and_phrases() -> None:
    matcher = TitleMatcher(["Bruno Kessler", "Trento", "Keys"])
    found = chunk_mentions(
        "Alpha Film",
        "Alpha Film > Cast",
        "Directed by Bruno Kessler, born in Trento; see `deploy_service` and SEV-1 for the "
        "Platform Team. Your keys rotate every service account.",
        matcher,
    )
    kinds = {key: m.name for key, m in found.items()}
    assert found["alpha film"].kind == 0  # its own title
    assert {found["bruno kessler"].kind, found["trento"].kind} == {1}  # links
    assert found["cast"].kind == 2
    assert found["platform team"].kind == 3
    assert found["deploy_service"].kind == 4 and found["sev 1"].kind == 4
    assert found["service account"].kind == 5
    assert "keys" not in kinds  # a one-word title is matched only where capitalised
    assert noun_phrases("the on-call engineer must acknowledge a page") == ["on-call engineer"]


def test_incremental_add_change_remove_equals_a_rebuild(tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    index = tmp_path / "index"
    docs = {k: DOCS[k] for k in ("alpha-film.md", "trento.md", "teams.md")}
    ingest([write_docs(folder, docs)], index)
    steps = [
        {**docs, "bruno-kessler.md": DOCS["bruno-kessler.md"]},  # add: links appear
        {**docs, "bruno-kessler.md": DOCS["bruno-kessler.md"].replace("Trento", "Bolzano")},
        {k: v for k, v in DOCS.items() if k != "trento.md"},  # remove one, add another
    ]
    for number, state in enumerate(steps):
        ingest([write_docs(folder, state)], index)
        incremental = graph_of(index)
        fresh_dir = tmp_path / f"fresh-{number}"
        shutil.rmtree(fresh_dir, ignore_errors=True)
        fresh_index = tmp_path / f"fresh-index-{number}"
        shutil.copytree(folder, fresh_dir)
        shutil.move(str(folder), str(tmp_path / "held"))
        shutil.move(str(fresh_dir), str(folder))  # same root path, so the same chunk ids
        ingest([folder], fresh_index)
        assert graph_of(fresh_index) == incremental
        shutil.rmtree(folder)
        shutil.move(str(tmp_path / "held"), str(folder))
    mentions = graph_of(index)["mentions"]
    alpha = next(v for k, v in mentions.items() if k.startswith("alpha-film.md"))
    assert ("Bruno Kessler", 1.0) in alpha  # the title link, added when its document came
    assert not any(name == "Trento" for chunk in mentions.values() for name, _ in chunk)


def test_graph_can_be_left_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(GRAPH_ENV, "0")
    ingest([write_docs(tmp_path / "docs", DOCS)], tmp_path / "index")
    loaded = load_index(tmp_path / "index")
    assert loaded.graph() is None and "graph" not in loaded.manifest
    retriever = Retriever.open(tmp_path / "index")
    mask = retriever.mask(EVERYONE)
    question = "Where was the director of Alpha Film born?"
    graph_hits = run_stage(retriever, question, 3, mask, "graph")
    pipeline_hits = run_stage(retriever, question, 3, mask, "pipeline")
    assert [h.chunk.id for h in graph_hits] == [h.chunk.id for h in pipeline_hits]


@pytest.fixture(scope="module")
def graph_index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("graph")
    index = tmp / "index"
    ingest([write_docs(tmp / "docs", DOCS)], index)
    return index


def _rehash(vdir: Path, name: str) -> None:
    path = vdir / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["checksums"][name] = hashlib.sha256((vdir / name).read_bytes()).hexdigest()
    path.write_text(json.dumps(manifest))


def test_tampered_graph_files_are_refused(graph_index: Path, tmp_path: Path) -> None:
    def copy() -> tuple[Path, Path]:
        index = tmp_path / f"copy-{len(list(tmp_path.iterdir()))}"
        shutil.copytree(graph_index, index)
        return index, index / "versions" / (index / "CURRENT").read_text().strip()

    index, vdir = copy()  # one byte of an entity name changed
    names = vdir / "graph" / "entities.names.json"
    names.write_text(names.read_text().replace("Bruno", "Bruna", 1))
    with pytest.raises(IndexCorrupt, match="graph/entities.names.json does not match"):
        load_index(index)

    index, vdir = copy()  # a consistent forgery: an edge to an entity that does not exist
    entity = vdir / "graph" / "mentions.entity.npy"
    array = np.load(entity)
    array[0] = 10**6
    np.save(entity, array)
    _rehash(vdir, "graph/mentions.entity.npy")
    with pytest.raises(IndexCorrupt, match="mentions.entity.npy names ids outside"):
        load_index(index).graph()

    index, vdir = copy()  # the manifest stops listing a graph part
    manifest = json.loads((vdir / "manifest.json").read_text())
    del manifest["checksums"]["graph/pairs.count.npy"]
    (vdir / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(IndexCorrupt, match="no checksum for graph/pairs.count.npy"):
        load_index(index)


def test_graph_stage_follows_a_title_link_deterministically(graph_index: Path) -> None:
    retriever = Retriever.open(graph_index)
    mask = retriever.mask(EVERYONE)
    question = "Where was the director of Alpha Film born?"
    first = run_stage(retriever, question, 3, mask, "graph")
    sources = [h.chunk.source for h in first[:2]]
    assert sorted(sources) == ["alpha-film.md", "bruno-kessler.md"]
    again = run_stage(retriever, question, 3, mask, "graph")
    assert [(h.chunk.id, h.score) for h in again] == [(h.chunk.id, h.score) for h in first]


def _walk(index: Path, question: str, candidate_ids: list[str]) -> list[tuple[str, float]]:
    """The graph walk for an `everyone` caller from the given candidate chunks (by id)."""
    retriever = Retriever.open(index)
    loaded = retriever.reader.index
    mask = retriever.mask(EVERYONE)
    rows = [loaded.row(cid) for cid in candidate_ids]
    ranked_rows = [Ranked(r, 1.0 / (i + 1), 0) for i, r in enumerate(rows) if r is not None]
    ranked = graph_rank(loaded.graph(), question, 10, mask, ranked_rows, retriever.read)
    return [(h.chunk.id, round(h.score, 9)) for h in ranked]


def test_restricted_documents_move_nothing_through_the_graph(
    graph_index: Path, tmp_path: Path
) -> None:
    """With a restricted document that names visible ones (and is named by the question),
    an `everyone` caller's walk is exactly the walk over an index without it: no edge,
    entity or weight of it reaches them, and its text never comes back."""
    folder = write_docs(tmp_path / "docs", {**DOCS, "nightjar.md": RESTRICTED})
    with_secret = tmp_path / "index"
    ingest([folder], with_secret)
    without = tmp_path / "plain"
    shutil.copytree(folder, tmp_path / "plain-docs")
    (tmp_path / "plain-docs" / "nightjar.md").unlink()
    shutil.move(str(folder), str(tmp_path / "held"))
    shutil.move(str(tmp_path / "plain-docs"), str(folder))
    ingest([folder], without)
    secret_graph = load_index(with_secret).graph()
    assert secret_graph is not None and SECRET in secret_graph.names()  # it is in the graph
    for question in (
        f"Who leads {SECRET} and who holds its budget?",
        "Who directed Alpha Film and which team owns the deploy_service tool?",
    ):
        plain = Retriever.open(without)
        candidates = [
            h.chunk.id for h in run_stage(plain, question, 5, plain.mask(EVERYONE), "pipeline")
        ]
        walked = _walk(with_secret, question, candidates)
        assert walked == _walk(without, question, candidates)
        assert not any(cid.startswith("nightjar.md") for cid, _ in walked)
        secret = Retriever.open(with_secret)
        for hit in run_stage(secret, question, 10, secret.mask(EVERYONE), "graph"):
            assert SECRET not in hit.chunk.text and SECRET not in hit.chunk.title


def test_graph_view_shows_no_restricted_name_title_or_neighbour(tmp_path: Path) -> None:
    """`footnote graph` for an `everyone` caller: the restricted document's title, the names
    only it holds, and its co-occurrences with visible entities never appear; for a caller
    in its group they do (so the markers are really in the graph)."""
    from footnote.store.backends import open_reader
    from footnote.tools.graph_view import GraphView

    index = tmp_path / "index"
    ingest([write_docs(tmp_path / "docs", {**DOCS, "nightjar.md": RESTRICTED})], index)
    reader = open_reader(index)
    everyone = GraphView(reader, EVERYONE)
    insider = GraphView(reader, Caller(groups=frozenset({"everyone", "secret"})))
    shown = json.dumps([everyone.figures(), everyone.top(10_000),
                        everyone.entity("Bruno Kessler", 10_000),
                        everyone.entity("Platform Team", 10_000)])  # fmt: skip
    assert "Nightjar" not in shown and "Zephyrine" not in shown and "budget" not in shown
    assert everyone.entity(SECRET) is None
    assert everyone.entity("code name") is None  # a phrase only the secret text holds
    inside = insider.entity("Bruno Kessler", 10_000)
    assert inside is not None and SECRET in json.dumps(inside)
    assert insider.entity(SECRET) is not None
