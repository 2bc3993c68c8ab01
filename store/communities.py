"""Communities of the entity graph: groups of entities that occur together, and the chunks
that are mostly about them, computed when a version is published (on PostgreSQL from its
graph tables, into tables: store/graph_postgres.py). On the files backend:

    graph/communities.entity.npy      int32 per entity: its community, -1 for none (an
                                      entity in one chunk only, or a hub)
    graph/communities.chunk.npy       int32 per chunk row: the community most of its mention
                                      weight falls in, -1 for none
    graph/communities.centrality.npy  float32 per chunk row: how central the chunk is to its
                                      community (its summary's sentences come from the most
                                      central chunks a caller may read)
    graph/communities.json            the method, its seed, resolution and passes, and how many
                                      communities there are

Leiden (leidenalg over igraph, modularity with a fixed seed and a fixed number of passes)
runs on the entity co-occurrence graph, vertices in entity-id order and edges sorted: entity
ids are positions of sorted key hashes, so the partition is a function of the chunks alone,
and `add`, `remove`, `sync` and a rebuild give the same communities. No text is stored
here: names, summaries and reports are made at query time from the chunks the caller may
read (tools/communities.py), so nothing in these files can carry a restricted document's
words to anyone.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from footnote.store.entities import KINDS

COMMUNITY_FORMAT = "footnote-communities-v1"
PARTS = (
    "graph/communities.entity.npy",
    "graph/communities.chunk.npy",
    "graph/communities.centrality.npy",
    "graph/communities.json",
)
SEED = 20240917
RESOLUTION = 1.0
MIN_CHUNKS = 2
"""An entity needs this many chunks to join a community (one in a single chunk links
nothing), except a document's title: every document can be summarised."""
LEIDEN_PASSES = 2
"""Leiden's passes over the graph (leidenalg's own default). Running until a pass improves
nothing (-1) took 21 to 24 passes and most of an incremental sync's time on a 13,000-chunk
repository (8.2 s of 14 s) for a modularity 0.004 higher; a fixed count keeps the partition a
function of the chunks alone. docs/connectors.md gives the figures, and the global route's
benchmark what it changes."""
HUB_SHARE = 0.05
HUB_MIN = 20
"""An entity in more than HUB_SHARE of the chunks (and more than HUB_MIN) links everything
to everything: it joins no community (the graph stage's own hub rule), unless it is a
title (a long document's chunks belong together)."""


def build_communities(directory: Path, arrays: dict[str, np.ndarray], rows: int) -> dict[str, Any]:
    """Write the community files beside the graph's arrays; returns their summary figures."""
    found = compute_communities(arrays, rows, rows)
    directory.mkdir(exist_ok=True)
    np.save(directory / "communities.entity.npy", found.entity, allow_pickle=False)
    np.save(directory / "communities.chunk.npy", found.chunk, allow_pickle=False)
    np.save(directory / "communities.centrality.npy", found.centrality, allow_pickle=False)
    (directory / "communities.json").write_text(json.dumps(found.info, indent=1), encoding="utf-8")
    return found.info


def compute_communities(arrays: dict[str, np.ndarray], rows: int, chunks: int) -> Communities:
    """The communities of a graph given as store/graph_files.py's arrays over `rows` chunk
    rows, `chunks` of which are chunks (every row on the files backend; PostgreSQL's row ids
    leave gaps): both backends partition their graph here, so one corpus gets one partition."""
    igraph, leidenalg = _leiden_modules()
    entities = len(arrays["entities.keys"])
    indptr = np.asarray(arrays["mentions.indptr"], dtype=np.int64)
    entity_of_edge = np.asarray(arrays["mentions.entity"], dtype=np.int64)
    weight = np.asarray(arrays["mentions.weight"], dtype=np.float64)
    row_of_edge = np.repeat(np.arange(rows, dtype=np.int64), np.diff(indptr))
    df = np.bincount(entity_of_edge, minlength=entities)
    title = np.asarray(arrays["entities.kind"]) == KINDS.index("title")
    hub = (df > HUB_MIN) & (df > HUB_SHARE * max(chunks, 1))
    member = title | ((df >= MIN_CHUNKS) & ~hub)

    left = np.asarray(arrays["pairs.left"], dtype=np.int64)
    right = np.asarray(arrays["pairs.right"], dtype=np.int64)
    count = np.asarray(arrays["pairs.count"], dtype=np.float64)
    keep = member[left] & member[right] if len(left) else np.zeros(0, dtype=bool)
    left, right, count = left[keep], right[keep], count[keep]
    # one edge per pair, its counts summed over access values, in sorted order
    span = max(entities, 1)
    unique, inverse = np.unique(left * span + right, return_inverse=True)
    summed = np.bincount(inverse.ravel(), weights=count) if len(left) else np.zeros(0)

    vertices = np.flatnonzero(member)
    local = np.full(entities, -1, dtype=np.int64)
    local[vertices] = np.arange(len(vertices))
    graph = igraph.Graph(n=len(vertices), edges=np.column_stack(
        [local[unique // span], local[unique % span]]).tolist())  # fmt: skip
    graph.es["weight"] = summed.tolist()
    partition = leidenalg.find_partition(
        graph,
        leidenalg.RBConfigurationVertexPartition,
        weights="weight",
        resolution_parameter=RESOLUTION,
        seed=SEED,
        n_iterations=LEIDEN_PASSES,
    )
    community = np.full(entities, -1, dtype=np.int64)
    community[vertices] = np.asarray(partition.membership, dtype=np.int64)

    chunk_community, centrality = _assign_chunks(
        community, row_of_edge, entity_of_edge, weight, rows
    )
    community, chunk_community, count_communities = _renumber(community, chunk_community)
    return Communities(
        community.astype(np.int32),
        chunk_community.astype(np.int32),
        centrality.astype(np.float32),
        community_info(count_communities),
    )


def _leiden_modules() -> tuple[Any, Any]:
    """igraph and leidenalg. igraph's drawing code imports matplotlib.pyplot when it is
    installed (the eval extra installs it): 0.26 s of the 0.31 s igraph takes to load, paid by
    every `sync` that publishes. Footnote never draws a graph, so unless this process has
    already loaded matplotlib, igraph is imported with it hidden (igraph then keeps a stand-in
    that says matplotlib is missing if drawing is ever asked for)."""
    hide = "igraph" not in sys.modules and "matplotlib" not in sys.modules
    if hide:
        sys.modules["matplotlib"] = None  # type: ignore[assignment]  # import raises ImportError
    try:
        import igraph
        import leidenalg
    finally:
        if hide:
            del sys.modules["matplotlib"]
    return igraph, leidenalg


def community_info(count: int) -> dict[str, Any]:
    """What a version records of how its communities were found, and how many there are."""
    return {
        "format": COMMUNITY_FORMAT,
        "method": "leiden-modularity",
        "seed": SEED,
        "resolution": RESOLUTION,
        "passes": LEIDEN_PASSES,
        "communities": count,
    }


def _assign_chunks(
    community: np.ndarray,
    row_of_edge: np.ndarray,
    entity_of_edge: np.ndarray,
    weight: np.ndarray,
    rows: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Each chunk's community (the one its mention weight falls in most, the lowest id on a
    tie) and its centrality there: the summed weight of its mentions of the community's
    entities, each weighed by log(1 + the community's chunks that mention it)."""
    from scipy.sparse import csr_matrix

    of_edge = community[entity_of_edge] if len(entity_of_edge) else np.zeros(0, np.int64)
    inside = of_edge >= 0
    chunk_community = np.full(rows, -1, dtype=np.int64)
    centrality = np.zeros(rows, dtype=np.float64)
    if not inside.any():
        return chunk_community, centrality
    labels = int(of_edge.max()) + 1
    by_row = csr_matrix(
        (weight[inside], (row_of_edge[inside], of_edge[inside])), shape=(rows, labels)
    )
    dense_rows = np.flatnonzero(np.diff(by_row.indptr) > 0)
    best = np.asarray(by_row[dense_rows].argmax(axis=1)).ravel()
    chunk_community[dense_rows] = best
    # an entity's spread in its community: how many of the community's chunks mention it
    same = inside & (chunk_community[row_of_edge] == of_edge)
    spread = np.bincount(entity_of_edge[same], minlength=len(community)).astype(np.float64)
    centrality += np.bincount(
        row_of_edge[same],
        weights=weight[same] * np.log1p(spread[entity_of_edge[same]]),
        minlength=rows,
    )
    return chunk_community, centrality


def _renumber(
    community: np.ndarray, chunk_community: np.ndarray
) -> tuple[np.ndarray, np.ndarray, int]:
    """Community ids by size: most chunks first, then the lowest entity id. Communities that
    no chunk falls in are dropped (their entities keep -1)."""
    labels = int(max(community.max(initial=-1), chunk_community.max(initial=-1))) + 1
    chunks = np.bincount(chunk_community[chunk_community >= 0], minlength=labels)
    first = np.full(labels, len(community), dtype=np.int64)
    members = np.flatnonzero(community >= 0)
    np.minimum.at(first, community[members], members)
    kept = [c for c in range(labels) if chunks[c] > 0]
    kept.sort(key=lambda c: (-int(chunks[c]), int(first[c])))
    new = np.full(labels + 1, -1, dtype=np.int64)  # new[-1] stays -1 for "none"
    for position, label in enumerate(kept):
        new[label] = position
    return new[community], new[chunk_community], len(kept)


@dataclass
class Communities:
    """A version's communities, memory-mapped and checked at load."""

    entity: np.ndarray
    chunk: np.ndarray
    centrality: np.ndarray
    info: dict[str, Any]

    @property
    def count(self) -> int:
        return int(self.info["communities"])


def load_communities(directory: Path, rows: int, entities: int) -> Communities:
    """The community files, checked against the graph: wrong types or shapes, ids out of
    range or a negative centrality are damage (ValueError)."""
    info = json.loads((directory / "communities.json").read_bytes())
    if not isinstance(info, dict) or info.get("format") != COMMUNITY_FORMAT:
        raise ValueError(f"graph/communities.json is not {COMMUNITY_FORMAT}")
    count = info.get("communities")
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise ValueError("graph/communities.json does not say how many communities there are")
    loaded = {}
    for name, dtype, length in (("entity", np.int32, entities), ("chunk", np.int32, rows),
                                ("centrality", np.float32, rows)):  # fmt: skip
        array = np.load(directory / f"communities.{name}.npy", mmap_mode="r", allow_pickle=False)
        if array.dtype != np.dtype(dtype) or array.shape != (length,):
            raise ValueError(f"graph/communities.{name}.npy is not {length} {np.dtype(dtype)}")
        loaded[name] = array
    return check_communities(Communities(loaded["entity"], loaded["chunk"],
                                         loaded["centrality"], info))  # fmt: skip


def check_communities(
    communities: Communities, held_in: dict[str, str] | None = None
) -> Communities:
    """Ids out of range or a negative centrality are damage (ValueError, naming where the
    array is held: `held_in` by array name, else the files): shared by both backends."""
    where = held_in or {name: f"graph/communities.{name}.npy"
                        for name in ("entity", "chunk", "centrality")}  # fmt: skip
    for name in ("entity", "chunk"):
        ids = getattr(communities, name)
        if len(ids) and (ids.min() < -1 or ids.max() >= communities.count):
            raise ValueError(f"{where[name]} names a community out of range")
    centrality = communities.centrality
    if len(centrality) and not (np.isfinite(centrality).all() and centrality.min() >= 0):
        raise ValueError(f"{where['centrality']} holds a negative or non-finite value")
    return communities


def canonical_communities(
    communities: Communities, names: list[str], chunk_ids: list[str]
) -> list[dict[str, Any]]:
    """The communities by entity name and chunk id, independent of row order: a rebuild and
    an incrementally updated version hold the same communities when these are equal."""
    out = []
    for cid in range(communities.count):
        entities = sorted(names[e] for e in np.flatnonzero(np.asarray(communities.entity) == cid))
        rows = np.flatnonzero(np.asarray(communities.chunk) == cid)
        chunks = sorted((chunk_ids[r], round(float(communities.centrality[r]), 5)) for r in rows)
        out.append({"id": cid, "entities": entities, "chunks": chunks})
    return out
