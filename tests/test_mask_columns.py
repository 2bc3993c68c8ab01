"""Mask columns agree with the per-chunk reference checks, and filtered approximate dense
search stays exact-complete (falls back to an exact pass when the approximate one is short)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import faiss
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from footnote.store import files as store
from footnote.store.columns import CACHED_MASKS, MaskColumns, build_columns
from footnote.store.files import FilesReader, dense_search, load_index, write_index
from footnote.store.types import Caller, Chunk, Filters

GROUPS = ["everyone", "engineering", "finance", "hr"]
SOURCES = ["a/x.md", "a/y.md", "b/x.md", "b/[1].md", "notes.txt", "A/X.MD", "a?b.md", ""]
SECTIONS = ["", "Intro", "Payments > Refunds", "payments > REFUNDS > Edge", "Ünïcode > Straße"]
DATES = [None, "", "2024-05-01", "2024-05-01T10:00:00Z", "2023-12-31", "2024-13-01", "May"]
JSON_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-2, 2),
    st.floats(-2, 2, allow_nan=False),
    st.sampled_from(["payments", "platform", "", "1"]),
)
JSON_VALUES = st.one_of(JSON_SCALARS, st.lists(JSON_SCALARS, max_size=2))
ACCESS = st.one_of(
    st.lists(st.sampled_from(GROUPS), min_size=1, max_size=3),
    st.sampled_from([None, [], [""], [1], "engineering", [None], {"a": 1}, ["hr", 2], 0]),
)

chunks_strategy = st.lists(
    st.builds(
        dict,
        access=ACCESS,
        source=st.sampled_from(SOURCES),
        section=st.sampled_from(SECTIONS),
        date=st.sampled_from(DATES),
        metadata=st.dictionaries(st.sampled_from(["team", "kind", "n"]), JSON_VALUES, max_size=2),
    ),
    min_size=1,
    max_size=40,
)
filters_strategy = st.builds(
    Filters,
    source=st.one_of(st.none(), st.sampled_from(["", "a/*", "*.md", "?/x.md", "b/[[]1].md", "*"])),
    section=st.one_of(st.none(), st.sampled_from(["", "refunds", "PAYMENTS", "straße", ">"])),
    date_from=st.one_of(st.none(), st.dates().map(lambda d: d.isoformat())),
    date_to=st.one_of(st.none(), st.dates().map(lambda d: d.isoformat())),
    metadata=st.dictionaries(st.sampled_from(["team", "kind", "n"]), JSON_VALUES, max_size=2),
)
callers_strategy = st.builds(
    Caller, groups=st.frozensets(st.sampled_from([*GROUPS, ""])), admin=st.booleans()
)


def make_chunks(fields: list[dict[str, Any]]) -> list[Chunk]:
    """Chunks as the index stores them: through JSON, like every row read back."""
    return [
        Chunk.from_dict(
            json.loads(json.dumps({"id": f"doc{i}#s:{i % 3}", "text": "t", "title": "T", **f}))
        )
        for i, f in enumerate(fields)
    ]


def reference(chunks: list[Chunk], caller: Caller, filters: Filters | None) -> list[bool]:
    return [caller.may_see(c) and (filters is None or filters.matches(c)) for c in chunks]


def columns_for(chunks: list[Chunk]) -> MaskColumns:
    arrays, dictionary = build_columns(chunks)
    return MaskColumns(arrays, lambda name: [json.loads(v) for v in dictionary[name]])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    fields=chunks_strategy,
    callers=st.lists(callers_strategy, min_size=1, max_size=4),
    filters=st.lists(st.one_of(st.none(), filters_strategy), min_size=1, max_size=4),
)
def test_mask_agrees_with_the_per_chunk_check(
    fields: list[dict[str, Any]], callers: list[Caller], filters: list[Filters | None]
) -> None:
    """Every caller x filter combination, asked repeatedly (cached tables must not go stale
    or leak between callers), gives exactly the rows the reference check allows."""
    chunks = make_chunks(fields)
    columns = columns_for(chunks)
    for caller in callers:
        for condition in filters:
            expected = reference(chunks, caller, condition)
            assert columns.mask(caller, condition).tolist() == expected
            assert columns.mask(caller, condition).tolist() == expected


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fields=chunks_strategy, caller=callers_strategy, filters=filters_strategy)
def test_loaded_index_mask_agrees_with_the_per_chunk_check(
    tmp_path_factory: pytest.TempPathFactory,
    fields: list[dict[str, Any]],
    caller: Caller,
    filters: Filters,
) -> None:
    """The same through the writer and the loader (npy columns, JSON values, SQLite rows)."""
    chunks = make_chunks(fields)
    root = tmp_path_factory.mktemp("columns") / "index"
    write_index(root, chunks=chunks, vectors=unit_rows(len(chunks), 8), files={},
                manifest=manifest(8))  # fmt: skip
    index = load_index(root)
    loaded = list(index.chunks)
    assert [c.to_dict() for c in loaded] == [c.to_dict() for c in chunks]
    assert index.columns.mask(caller, filters).tolist() == reference(loaded, caller, filters)
    assert index.columns.mask(caller).tolist() == reference(loaded, caller, None)


def test_a_mask_is_built_once_per_caller_and_filters_and_is_read_only() -> None:
    """Repeat queries share one read-only mask (no per-query copy); other pairs get their
    own, and more pairs than the cache holds are rebuilt correctly."""
    chunks = make_chunks([{"access": [GROUPS[i % 4]], "source": SOURCES[i % 3], "section": ""}
                          for i in range(40)])  # fmt: skip
    columns = columns_for(chunks)
    caller = Caller(groups=frozenset({"engineering"}))
    first = columns.mask(caller, Filters(source="a/*"))
    assert columns.mask(caller, Filters(source="a/*")) is first
    with pytest.raises(ValueError):
        first[0] = True
    for i in range(CACHED_MASKS + 5):
        glob = f"{'ab'[i % 2]}/*"
        expected = reference(chunks, caller, Filters(source=glob, section=str(i)))
        assert columns.mask(caller, Filters(source=glob, section=str(i))).tolist() == expected
    assert columns.mask(caller, Filters(source="a/*")).tolist() == first.tolist()


def test_malformed_access_is_visible_to_admin_only() -> None:
    chunks = make_chunks(
        [{"access": value, "source": "s.md", "section": ""} for value in
         [None, [], [""], [1], "engineering", [None], {"engineering": 1}, ["engineering"]]]
    )  # fmt: skip
    columns = columns_for(chunks)
    everyone = Caller(groups=frozenset(GROUPS))
    assert columns.mask(everyone).tolist() == [False] * 7 + [True]
    assert columns.mask(Caller(groups=frozenset(), admin=True)).all()


def test_a_malformed_filter_date_is_an_error() -> None:
    columns = columns_for(make_chunks([{"access": ["hr"], "source": "s", "section": ""}]))
    with pytest.raises(ValueError, match="not an ISO date"):
        columns.mask(Caller(groups=frozenset({"hr"})), Filters(date_to="soon"))


# --- approximate dense search ---------------------------------------------------------------


def unit_rows(n: int, dim: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((20, dim))
    rows = centres[rng.integers(0, 20, n)] + 0.3 * rng.standard_normal((n, dim))
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def manifest(dim: int) -> dict[str, Any]:
    return {
        "embedding": {"model": "test:vectors", "dimension": dim, "max_tokens": 256},
        "chunking": {},
        "default_access": ["everyone"],
    }


@pytest.fixture(scope="module")
def ivf_reader(tmp_path_factory: pytest.TempPathFactory) -> tuple[FilesReader, np.ndarray]:
    vectors = unit_rows(3000, 16, seed=3)
    chunks = make_chunks([{"access": ["everyone"], "source": f"d{i}.md", "section": ""}
                          for i in range(len(vectors))])  # fmt: skip
    root = tmp_path_factory.mktemp("ivf") / "index"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(store, "DENSE_IVF_FROM", 1000)
        write_index(root, chunks=chunks, vectors=vectors, files={}, manifest=manifest(16))
    return FilesReader(load_index(root)), vectors


def exact_top(vectors: np.ndarray, query: np.ndarray, mask: np.ndarray, k: int) -> list[int]:
    scores = np.where(mask, vectors @ query, -np.inf)
    return [int(r) for r in np.argsort(-scores, kind="stable")[:k] if np.isfinite(scores[r])]


def test_large_index_is_ivf_with_its_parameters_in_the_manifest(
    ivf_reader: tuple[FilesReader, np.ndarray],
) -> None:
    reader, _ = ivf_reader
    dense = reader.index.manifest["dense"]
    assert dense["kind"] == "ivf" and reader.dense_kind == "ivf"
    assert isinstance(reader.index.vectors, faiss.IndexIVFFlat)
    assert reader.index.vectors.nlist == dense["nlist"]
    assert reader.index.vectors.nprobe == min(dense["nprobe"], dense["nlist"])


def test_filtered_ivf_search_falls_back_to_exact_when_the_lists_it_scans_are_short(
    ivf_reader: tuple[FilesReader, np.ndarray],
) -> None:
    """Allowed rows only in lists the approximate pass does not scan: it finds none of
    them, so the search re-runs exactly and returns the true top k."""
    reader, vectors = ivf_reader
    ivf = reader.index.vectors
    query = vectors[7]
    _, probed = ivf.quantizer.search(query[None, :], ivf.nprobe)
    _, lists = ivf.quantizer.search(vectors, 1)
    mask = ~np.isin(lists[:, 0], probed[0])
    assert mask.sum() * ivf.nprobe / ivf.nlist >= 4 * 10, "the approximate pass is tried"
    bits = np.packbits(mask, bitorder="little")
    _, approximate_rows = dense_search(ivf, query[None, :], 10, bits, ivf.nprobe)
    assert len(approximate_rows) < 10, "the approximate pass alone comes back short"

    hits = reader.dense(query, 10, mask)
    assert [h.row for h in hits] == exact_top(vectors, query, mask, 10)


@pytest.mark.parametrize("share", [0.005, 0.02, 0.3, 1.0])
def test_ivf_search_returns_k_allowed_rows_for_any_selectivity(
    ivf_reader: tuple[FilesReader, np.ndarray], share: float
) -> None:
    reader, vectors = ivf_reader
    rng = np.random.default_rng(int(share * 1000))
    mask = rng.random(len(vectors)) < share
    for query in vectors[:20]:
        hits = reader.dense(query, 10, mask)
        assert len(hits) == min(10, int(mask.sum()))
        assert all(mask[h.row] for h in hits)
        if share < 0.05:  # too selective for the approximate pass: exact
            assert [h.row for h in hits] == exact_top(vectors, query, mask, 10)


def test_ivf_recall_against_exact_search(ivf_reader: tuple[FilesReader, np.ndarray]) -> None:
    reader, vectors = ivf_reader
    everything = np.ones(len(vectors), dtype=bool)
    queries = unit_rows(50, 16, seed=11)
    recall = np.mean([
        len({h.row for h in reader.dense(q, 10, everything)}
            & set(exact_top(vectors, q, everything, 10))) / 10
        for q in queries
    ])  # fmt: skip
    assert recall >= 0.95


def test_path_like_a_flat_index_below_the_threshold(tmp_path: Path) -> None:
    vectors = unit_rows(50, 8)
    chunks = make_chunks([{"access": ["everyone"], "source": "d.md", "section": ""}] * 50)
    write_index(tmp_path / "i", chunks=chunks, vectors=vectors, files={}, manifest=manifest(8))
    index = load_index(tmp_path / "i")
    assert index.manifest["dense"] == {"kind": "flat"}
    assert isinstance(index.vectors, faiss.IndexFlatIP)
    np.testing.assert_allclose(index.vectors_at(np.array([3, 1])), vectors[[3, 1]], rtol=1e-6)


WORDS = ["refund", "payment", "key", "rotate", "token", "deploy", "policy", "leave"]


@pytest.fixture(scope="module")
def keyword_reader(tmp_path_factory: pytest.TempPathFactory) -> FilesReader:
    rng = np.random.default_rng(5)
    chunks = [
        Chunk.from_dict({
            "id": f"d{i}.md#s:0", "title": "T", "source": f"d{i}.md", "section": "",
            "access": ["everyone"],
            "text": " ".join(rng.choice(WORDS, size=int(rng.integers(1, 12)))),
        })
        for i in range(300)
    ]  # fmt: skip
    root = tmp_path_factory.mktemp("keyword") / "index"
    write_index(root, chunks=chunks, vectors=unit_rows(300, 8), files={}, manifest=manifest(8))
    return FilesReader(load_index(root))


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    words=st.lists(st.sampled_from([*WORDS, "absent"]), min_size=1, max_size=6),
    k=st.integers(1, 40),
    share=st.floats(0, 1),
    seed=st.integers(0, 2**16),
)
def test_keyword_search_from_postings_equals_scoring_every_row(
    keyword_reader: FilesReader, words: list[str], k: int, share: float, seed: int
) -> None:
    """Summing only the query words' postings gives the rows, order and scores that scoring
    every row with bm25s and masking gives (ties broken by row), under any selection."""
    reader = keyword_reader
    selection = np.random.default_rng(seed).random(300) < share
    query = " ".join(words)
    tokens = [t for t in store.keyword_tokens(query) if t in reader.index.bm25.vocab_dict]
    if tokens:
        every = np.asarray(reader.index.bm25.get_scores(tokens), dtype=np.float32)
        candidates = np.flatnonzero(selection & (every > 0))
        order = candidates[np.lexsort((candidates, -every[candidates]))][:k]
    else:
        order = np.zeros(0, dtype=np.int64)
    found = reader.keyword(query, k, selection)
    assert [r.row for r in found] == order.tolist()
    np.testing.assert_allclose([r.score for r in found], every[order] if tokens else [], rtol=1e-5)
