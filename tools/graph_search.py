"""The `graph` stage: personalized PageRank over the chunk-entity graph (HippoRAG 2 style),
seeded from the question's entities and the pipeline's top chunks, blended with the
pipeline's ranking.

A question that needs two documents ("Where was the director of film X born?") finds the
first by its words; that chunk names the second document's title (an entity both share),
and the walk carries the first chunk's mass to the second. Only the caller's visible chunks
take part: every edge is read through the caller's row mask, entity weights (idf) count
visible chunks only, so nothing a caller may not read moves any score. Deterministic: a fixed
number of iterations, ties broken by row.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np

from footnote.store.base import EntityGraph
from footnote.store.entities import STOPWORDS, entity_key, key_hash
from footnote.store.types import Hit, Ranked

SEED_CHUNKS = 5
"""Pipeline chunks that seed the walk (weighted by rank)."""
CANDIDATE_DEPTH = 50
"""Pipeline chunks whose ranking is blended with the walk's."""
DAMPING = 0.9
"""Chance of following an edge rather than jumping back to a seed. HippoRAG uses 0.5; on
2WikiMultiHopQA 0.9 solved more (0.5: 0.75, 0.8: 0.96, 0.9: 0.98 of 51 before a title fix
took it to 1.00; benchmarks/multihop.py, docs/evaluation.md), as the second document sits two
edges from the first."""
ITERATIONS = 20
"""Power iterations; the ranking measured the same at 8, 16 and 40."""
ENTITY_SEED_SHARE = 0.5
"""Share of the restart mass on the question's entities (the rest on the pipeline's chunks)."""
PIPELINE_WEIGHT = 0.1
"""Weight of the pipeline's normalised score beside the walk's in the final ranking (0.3
let the pipeline's near misses push the linked documents out of the top 8)."""
HUB_SHARE = 0.05
"""Entities in more than this share of the visible chunks (and more than HUB_MIN of them)
carry no walk: they link everything to everything."""
HUB_MIN = 20
MAX_QUERY_WORDS = 8
EXPAND_CHUNKS = 1000
"""An entity in more chunks than this adds none of them to the walk's neighbourhood (it
passes each at most a thousandth of its mass)."""
NEIGHBOURHOOD_ROWS = 5_000
"""Most chunks a walk runs over, whatever the corpus's size."""
EDGE_POWER = 3.0
"""Mention weights (by kind, store/entities.py) are raised to this power in the walk, so a
title link carries far more than a noun phrase."""
LOWERCASE_SEED = 0.1
"""Seed weight of a question's all-lower-case word run ("place of birth"), against one
with a capital ("Changed It"): titles and names are written with capitals."""


def question_entity_hashes(question: str) -> list[tuple[int, float]]:
    """(key hash, seed weight) of every word run in the question that could name an entity:
    runs of up to MAX_QUERY_WORDS words not made of stopwords alone; a lone word only if
    capitalised or code-like (so "film" does not seed the document titled "Film"); a run
    without a capital weighs LOWERCASE_SEED."""
    words = re.findall(r"\w+", question)
    found: dict[str, float] = {}
    for i in range(len(words)):
        for j in range(i + 1, min(i + MAX_QUERY_WORDS, len(words)) + 1):
            run = words[i:j]
            if all(w.lower() in STOPWORDS for w in run):
                continue
            capital = any(w[:1].isupper() for w in run)
            if len(run) == 1 and not (capital or "_" in run[0]):
                continue
            key = entity_key(" ".join(run))
            found[key] = max(found.get(key, 0.0), 1.0 if capital else LOWERCASE_SEED)
    return [(key_hash(key), weight) for key, weight in found.items() if key]


def graph_search(
    retriever: Any, question: str, k: int, mask: Any, pipeline: Callable[[str, int], list[Ranked]]
) -> list[Hit]:
    """The graph stage over a retriever: the pipeline's candidates (rows and scores, no
    chunk read) re-ranked by the walk; an index built without a graph (or a backend that
    holds none) ranks as the pipeline."""
    with retriever.reader.snapshot():
        candidates = pipeline(question, max(k, CANDIDATE_DEPTH))
        graph_of = getattr(retriever.reader, "graph", None)
        graph = graph_of() if graph_of is not None else None
        if graph is None:
            return retriever.read(candidates[:k])
        return graph_rank(graph, question, k, graph.row_mask(mask), candidates, retriever.read)


def graph_rank(
    graph: EntityGraph,
    question: str,
    k: int,
    mask: np.ndarray,
    pipeline: list[Ranked],
    read: Callable[[list[Ranked]], list[Hit]],
) -> list[Hit]:
    """The top k visible chunks by walk score blended with the pipeline's score.

    The walk runs on the seeds' neighbourhood: the visible chunks one entity away from a
    seed chunk or a question entity (rarest entities first, at most NEIGHBOURHOOD_ROWS
    chunks, through entities in at most EXPAND_CHUNKS chunks). Normalisations are the whole
    graph's for this caller (`GraphArrays.visible_weights`), so mass that would leave the
    neighbourhood is dropped rather than kept: a query costs the neighbourhood's edges, not
    the corpus's."""
    mask = np.asarray(mask, dtype=bool)
    if graph.entities == 0 or not mask.any():
        return read(pipeline[:k])
    matrix = graph.matrix(EDGE_POWER)
    df, column_mass, idf = graph.visible_weights(mask, EDGE_POWER, HUB_SHARE, HUB_MIN)

    seed_rows: dict[int, float] = {}
    for rank, hit in enumerate(pipeline[:SEED_CHUNKS]):
        if mask[hit.row]:
            seed_rows[hit.row] = seed_rows.get(hit.row, 0.0) + 1.0 / (rank + 1)
    seed_entities: dict[int, float] = {}
    seeds = question_entity_hashes(question)
    ids = graph.lookup([h for h, _ in seeds]) if seeds else np.zeros(0, dtype=np.int64)
    for entity, (_, weight) in zip(ids.tolist(), seeds, strict=True):
        if entity >= 0 and idf[entity] > 0:
            seed_entities[entity] = max(seed_entities.get(entity, 0.0), weight * idf[entity])
    if not seed_rows and not seed_entities:
        return read(pipeline[:k])

    rows = _neighbourhood(graph, matrix, idf, df, mask, seed_rows, seed_entities)
    sub = matrix[rows]
    columns, local = np.unique(sub.indices, return_inverse=True)
    from scipy.sparse import csr_matrix

    sub = csr_matrix((sub.data, local.ravel(), sub.indptr), shape=(len(rows), len(columns)))
    weight = idf[columns]
    rowsum = sub @ weight
    colsum = weight * column_mass[columns]
    inv_row = np.divide(1.0, rowsum, out=np.zeros_like(rowsum), where=rowsum > 0)
    inv_col = np.divide(1.0, colsum, out=np.zeros_like(colsum), where=colsum > 0)
    seed_c = np.zeros(len(rows))
    seed_c[np.searchsorted(rows, list(seed_rows))] = list(seed_rows.values())
    seed_e = np.zeros(len(columns))
    if seed_entities:
        seed_e[np.searchsorted(columns, list(seed_entities))] = list(seed_entities.values())
    seed_c, seed_e = _restart(seed_c, seed_e)

    c, e = seed_c.copy(), seed_e.copy()
    transposed = sub.T.tocsr()
    for _ in range(ITERATIONS):
        to_chunks = sub @ (weight * e * inv_col)
        to_entities = weight * (transposed @ (c * inv_row))
        c = (1 - DAMPING) * seed_c + DAMPING * to_chunks
        e = (1 - DAMPING) * seed_e + DAMPING * to_entities
    top = float(c.max()) if len(c) else 0.0
    blended = dict(zip(rows.tolist(), (c / top if top > 0 else c).tolist(), strict=True))
    if pipeline:
        scores = np.array([h.score for h in pipeline])
        low, high = float(scores.min()), float(scores.max())
        span = high - low or 1.0
        for hit in pipeline:
            blended[hit.row] = (
                blended.get(hit.row, 0.0) + PIPELINE_WEIGHT * (hit.score - low) / span
            )
    ranked = sorted(
        ((row, score) for row, score in blended.items() if score > 0 and mask[row]),
        key=lambda item: (-item[1], item[0]),
    )[:k]
    return read([Ranked(row, float(score), 0) for row, score in ranked])


def _neighbourhood(
    graph: Any,
    matrix: Any,
    idf: np.ndarray,
    df: np.ndarray,
    mask: np.ndarray,
    seed_rows: dict[int, float],
    seed_entities: dict[int, float],
) -> np.ndarray:
    """Sorted visible rows: the seed chunks and the chunks of the entities one step from
    them, rarest entity first, within the budgets."""
    found = [np.asarray(list(seed_rows), dtype=np.int64)]
    near = [matrix.indices[matrix.indptr[r] : matrix.indptr[r + 1]] for r in seed_rows]
    entities = np.unique(np.concatenate([*near, np.asarray(list(seed_entities), np.int64)]))
    entities = entities[(idf[entities] > 0) & (df[entities] <= EXPAND_CHUNKS)]
    order = entities[np.lexsort((entities, df[entities]))]
    by_entity = graph.by_entity()
    total = len(seed_rows)
    for entity in order.tolist():
        members = by_entity.indices[by_entity.indptr[entity] : by_entity.indptr[entity + 1]]
        members = members[mask[members]]
        if total + len(members) > NEIGHBOURHOOD_ROWS:
            break
        found.append(members.astype(np.int64))
        total += len(members)
    return np.unique(np.concatenate(found))


def _restart(seed_c: np.ndarray, seed_e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The restart distribution: the two seed sets, each normalised, shared as configured
    (all on whichever set is the only one given)."""
    total_c, total_e = float(seed_c.sum()), float(seed_e.sum())
    share_e = ENTITY_SEED_SHARE if total_c and total_e else (1.0 if total_e else 0.0)
    if total_e:
        seed_e = seed_e * (share_e / total_e)
    if total_c:
        seed_c = seed_c * ((1 - share_e) / total_c)
    return seed_c, seed_e
