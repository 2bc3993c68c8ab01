"""Filters and access control: pre-filtering never comes back short, and nobody sees a chunk
they are not allowed to, through the tool or through the whole graph."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from footnote.graph.graph import make_graph
from footnote.ingest.pipeline import ingest
from footnote.models.embeddings import load_embeddings
from footnote.store.files import FilesReader, load_index, write_index
from footnote.store.types import Caller, Chunk, Filters, caller_groups
from footnote.tools.documents import retrieve_documents
from footnote.tools.retrieval import STAGES, Retriever
from footnote.tools.search import SearchRequest, run_stage

GROUPS = ["everyone", "engineering", "finance", "hr", "admins"]
WORDS = [
    "key",
    "rotation",
    "expense",
    "vpn",
    "laptop",
    "token",
    "deploy",
    "leave",
    "budget",
    "invoice",
    "policy",
]
MALFORMED: list[Any] = [None, [], [""], [1], "engineering", [None]]


def build_index(root: Path, chunks: list[Chunk]) -> Retriever[np.ndarray]:
    """An index from given chunks, embedded for real (the texts are tiny)."""
    model = load_embeddings("")
    vectors = model.embed_array([c.text for c in chunks])
    write_index(
        root,
        chunks=chunks,
        vectors=vectors,
        files={},
        manifest={
            "embedding": {"model": model.model_id, "dimension": model.dimension, "max_tokens": 256},
            "chunking": {},
            "default_access": ["everyone"],
        },
    )
    return Retriever(FilesReader(load_index(root)), model)


def chunk(i: int, text: str, access: Any, **extra: Any) -> Chunk:
    return Chunk(
        id=f"doc{i}.md#top:0",
        text=text,
        source=extra.pop("source", f"doc{i}.md"),
        title=f"Doc {i}",
        section=extra.pop("section", ""),
        access=access,
        **extra,
    )


@pytest.fixture(scope="module")
def filtered_corpus(tmp_path_factory: pytest.TempPathFactory) -> Retriever[np.ndarray]:
    """500 chunks, 10 of them (2%) under `rare/`, dated 2024, with team=payments."""
    chunks = []
    for i in range(500):
        rare = i % 50 == 0
        words = " ".join(WORDS[(i + j) % len(WORDS)] for j in range(6))
        chunks.append(
            chunk(
                i,
                f"Note {i} about {words}.",
                ["everyone"],
                source=f"rare/doc{i}.md" if rare else f"common/doc{i}.md",
                section="Payments > Refunds" if rare else "General",
                date="2024-05-01" if rare else "2026-01-01",
                metadata={"team": "payments" if rare else "platform"},
            )
        )
    return build_index(tmp_path_factory.mktemp("filtered") / "index", chunks)


@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize(
    "filters",
    [
        Filters(source="rare/*"),
        Filters(section="refunds"),
        Filters(date_from="2024-01-01", date_to="2024-12-31"),
        Filters(metadata={"team": "payments"}),
    ],
    ids=["source-glob", "section", "date-range", "metadata"],
)
def test_selective_filter_returns_k(
    filtered_corpus: Retriever, stage: Any, filters: Filters
) -> None:
    """A filter matching 2% of chunks still returns k results: filtering happens before top-k."""
    mask = filtered_corpus.mask(Caller(groups=frozenset({"everyone"})), filters)
    assert mask.sum() == 10
    query = "rotation expense vpn" if stage != "bm25" else "note rotation"
    hits = run_stage(filtered_corpus, query, 5, mask, stage)
    assert len(hits) == 5
    assert all(filters.matches(h.chunk) for h in hits)


def test_filter_with_fewer_matches_than_k_returns_all(filtered_corpus: Retriever) -> None:
    mask = filtered_corpus.mask(Caller(groups=frozenset({"everyone"})), Filters(source="rare/*"))
    assert len(filtered_corpus.dense("rotation", 50, mask)) == 10


def test_bad_date_filter_is_an_error(filtered_corpus: Retriever) -> None:
    with pytest.raises(ValueError, match="not an ISO date"):
        filtered_corpus.mask(Caller(groups=frozenset({"everyone"})), Filters(date_from="May"))


@pytest.mark.parametrize("access", MALFORMED, ids=repr)
def test_missing_or_malformed_access_is_invisible(access: Any) -> None:
    target = chunk(0, "secret rotation", access)
    assert not Caller(groups=frozenset(GROUPS)).may_see(target)
    assert Caller(groups=frozenset(), admin=True).may_see(target)


def test_front_matter_access_reaches_chunks(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "open.md").write_text("# Open\n\nAnyone may read about key rotation.\n")
    (docs / "eng.md").write_text(
        "---\naccess: [engineering]\n---\n# Eng\n\nKey rotation runbook.\n"
    )
    (docs / "bad.md").write_text("---\naccess: 42\n---\n# Bad\n\nKey rotation secrets.\n")
    summary = ingest([docs], tmp_path / "index", default_access=["staff"])
    assert not summary.failed
    index = load_index(tmp_path / "index")
    access = {c.source: c.access for c in index.chunks}
    assert access == {"open.md": ["staff"], "eng.md": ["engineering"], "bad.md": None}
    assert index.manifest["default_access"] == ["staff"]


corpus_strategy = st.lists(
    st.tuples(
        st.lists(st.sampled_from(WORDS), min_size=2, max_size=6),
        st.one_of(
            st.lists(st.sampled_from(GROUPS), min_size=1, max_size=3),
            st.sampled_from(MALFORMED),
        ),
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    corpus=corpus_strategy,
    groups=st.lists(st.sampled_from(GROUPS), max_size=3),
    query=st.lists(st.sampled_from(WORDS), min_size=1, max_size=4).map(" ".join),
)
def test_no_leaks_through_the_tool(
    corpus: list[tuple[list[str], Any]], groups: list[str], query: str
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        chunks = [chunk(i, " ".join(words), access) for i, (words, access) in enumerate(corpus)]
        build_index(Path(tmp) / "index", chunks)
        allowed = {
            c.id
            for c in chunks
            if isinstance(c.access, list)
            and all(isinstance(g, str) and g for g in c.access)
            and set(c.access) & set(groups)
        }
        request = SearchRequest(
            query=query,
            index_dir=Path(tmp) / "index",
            caller=Caller(groups=frozenset(groups)),
            k=50,
        )
        found = {d.metadata["chunk_id"] for d in retrieve_documents(request)}
        assert found == allowed, "exactly the visible chunks: none leaked, none lost"
        retriever = Retriever(FilesReader(load_index(Path(tmp) / "index")), load_embeddings(""))
        mask = retriever.mask(Caller(groups=frozenset(groups)))
        for stage in STAGES:
            assert {h.chunk.id for h in run_stage(retriever, query, 50, mask, stage)} <= allowed


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    corpus=corpus_strategy,
    groups=st.lists(st.sampled_from(GROUPS), max_size=2),
    query=st.lists(st.sampled_from(WORDS), min_size=1, max_size=3).map(" ".join),
)
def test_no_leaks_through_the_graph(
    corpus: list[tuple[list[str], Any]], groups: list[str], query: str
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        chunks = [chunk(i, " ".join(words), access) for i, (words, access) in enumerate(corpus)]
        build_index(Path(tmp) / "index", chunks)
        # An embedded caller is in `everyone` too, as on every other surface.
        caller = Caller(groups=frozenset(caller_groups(groups)))
        visible = {c.id for c in chunks if caller.may_see(c)}
        out = make_graph().invoke(
            {"messages": [{"role": "user", "content": f"What about {query}?"}]},
            context={
                "index_dir": str(Path(tmp) / "index"),
                "user_groups": groups,
                "grade_threshold": 0.0,
            },
        )
        cited = {c["chunk_id"] for c in out["citations"]}
        assert cited <= visible
        answer = out["messages"][-1].content
        visible_texts = [c.text for c in chunks if c.id in visible]
        hidden_texts = {
            c.text
            for c in chunks
            if c.id not in visible and not any(c.text in v for v in visible_texts)
        }
        assert not any(text in answer for text in hidden_texts)


def test_groups_come_from_context_not_tool_arguments(handbook_index: Path) -> None:
    """The tool's schema offers the model only a query: no way to name groups."""
    from footnote.graph.search_tool import search_documents

    assert set(search_documents.tool_call_schema.model_json_schema()["properties"]) == {"query"}
    out = make_graph().invoke(
        {"messages": [{"role": "user", "content": "How do I acknowledge a page when on call?"}]},
        context={"index_dir": str(handbook_index), "user_groups": ["everyone"]},
    )
    assert all(c["source"] != "oncall.md" for c in out["citations"])
    out = make_graph().invoke(
        {"messages": [{"role": "user", "content": "How do I acknowledge a page when on call?"}]},
        context={"index_dir": str(handbook_index), "user_groups": ["engineering"]},
    )
    assert out["citations"] and out["citations"][0]["source"] == "oncall.md"
