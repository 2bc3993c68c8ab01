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

import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from footnote.store.entities import STOPWORDS, entity_key, key_hash
from footnote.store.types import Hit, Ranked

SEED_CHUNKS = 5
"""Pipeline chunks that seed the walk (weighted by rank)."""
CANDIDATE_DEPTH = 50
"""Pipeline chunks whose ranking is blended with the walk's."""
DAMPING = 0.9
"""Chance of following an edge rather than jumping back to a seed. HippoRAG uses 0.5; on
2WikiMultiHopQA 0.9 solves more (0.5: 0.75, 0.8: 0.96, 0.9: 0.98 of 51; benchmarks/
multihop.py, docs/evaluation.md), as the second document sits two edges from the first."""
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
    retriever: Any, question: str, k: int, mask: Any, pipeline: Callable[[str, int], list[Hit]]
) -> list[Hit]:
    """The graph stage over a retriever: the pipeline's candidates re-ranked by the walk; an
    index built without a graph (or a backend that holds none) ranks as the pipeline."""
    candidates = pipeline(question, max(k, CANDIDATE_DEPTH))
    graph_of = getattr(retriever.reader, "graph", None)
    graph = graph_of() if graph_of is not None else None
    if graph is None:
        return candidates[:k]
    with retriever.reader.snapshot():
        return graph_rank(graph, question, k, mask, candidates, retriever.read)


def graph_rank(
    graph: Any,
    question: str,
    k: int,
    mask: np.ndarray,
    pipeline: list[Hit],
    read: Callable[[list[Ranked]], list[Hit]],
) -> list[Hit]:
    """The top k visible chunks by walk score blended with the pipeline's score."""
    m = np.asarray(mask, dtype=np.float64)
    visible = float(m.sum())
    if visible == 0 or graph.entities == 0:
        return pipeline[:k]
    matrix = graph.matrix(EDGE_POWER)
    binary = graph.binary()
    df = binary.T @ m  # visible chunks per entity
    idf = np.where(df > 0, np.log1p(visible / np.maximum(df, 1.0)), 0.0)
    idf[(df > HUB_MIN) & (df > HUB_SHARE * visible)] = 0.0
    rowsum = m * (matrix @ idf)
    colsum = idf * (matrix.T @ m)
    inv_row = np.divide(1.0, rowsum, out=np.zeros_like(rowsum), where=rowsum > 0)
    inv_col = np.divide(1.0, colsum, out=np.zeros_like(colsum), where=colsum > 0)

    seed_c = np.zeros(graph.rows)
    for rank, hit in enumerate(pipeline[:SEED_CHUNKS]):
        if mask[hit.row]:
            seed_c[hit.row] += 1.0 / (rank + 1)
    seed_e = np.zeros(graph.entities)
    seeds = question_entity_hashes(question)
    ids = graph.lookup([h for h, _ in seeds]) if seeds else np.zeros(0, dtype=np.int64)
    for entity, (_, weight) in zip(ids.tolist(), seeds, strict=True):
        if entity >= 0:
            seed_e[entity] = max(seed_e[entity], weight * idf[entity])
    seed_c, seed_e = _restart(seed_c, seed_e)
    if seed_c.sum() + seed_e.sum() == 0:
        return pipeline[:k]

    c, e = seed_c.copy(), seed_e.copy()
    for _ in range(ITERATIONS):
        to_chunks = m * (matrix @ (idf * e * inv_col))
        to_entities = idf * (matrix.T @ (m * c * inv_row))
        c = (1 - DAMPING) * seed_c + DAMPING * to_chunks
        e = (1 - DAMPING) * seed_e + DAMPING * to_entities
    c *= m
    walk = _scaled(c)
    blended = walk.copy()
    if pipeline:
        scores = np.array([h.score for h in pipeline])
        low, high = float(scores.min()), float(scores.max())
        span = high - low or 1.0
        for hit in pipeline:
            blended[hit.row] += PIPELINE_WEIGHT * (hit.score - low) / span
    rows = np.flatnonzero((blended > 0) & mask)
    order = rows[np.lexsort((rows, -blended[rows]))][:k]
    return read([Ranked(int(r), float(blended[r]), 0) for r in order])


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


def _scaled(values: np.ndarray) -> np.ndarray:
    top = float(values.max()) if len(values) else 0.0
    return values / top if top > 0 and math.isfinite(top) else values
