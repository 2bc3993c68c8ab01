"""Contextual retrieval on pyfaq-core and debfaq: chunks with and without document context.

    python benchmarks/build_pyfaq.py --only faq tutorial reference using extending \\
        --out benchmarks/data/pyfaq-core
    python benchmarks/build_debfaq.py
    nice -n 10 python benchmarks/contextual.py benchmarks/data/pyfaq-core benchmarks/data/debfaq \\
        [--variants none offline] [--json out.json]

`footnote eval` writes each passage as its own file, so a passage has no document around it
and a document-aware context would have nothing to say. Here each corpus page (the part of a
passage id before `#`) is one document again, its passages its sections in corpus order,
with no headings (the builders strip them, since an FAQ heading is its own query) and the
page title as the title. Without context a chunk's embedded text is then exactly what
`footnote eval` embeds (title, then text); each variant differs only in the context
(`ingest.context`). Every variant is ingested into its own index in the dataset folder
(`.footnote-contextual/VARIANT`, cached: a second run re-embeds nothing; a new one starts
with the vectors its siblings embedded, so a BM25-only variant embeds nothing), timed, then every
retrieval stage is run over every judged query and scored with ranx: MRR@10, recall@10 and
the top-20 failure rate (1 - recall@20), Anthropic's measure. A passage ranks where its
best chunk ranks.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sqlite3
import sys
import time
import warnings
from collections import defaultdict
from pathlib import Path
from typing import Any

from footnote.evaluation.retrieval import BeirDataset, default_runners, load_beir
from footnote.ingest.candidates import Candidate
from footnote.ingest.context import ContextSettings
from footnote.ingest.documents import ParsedDocument, Section
from footnote.ingest.options import DEFAULT_MAX_SECONDS, FileLimits, IngestOptions, RunScope
from footnote.ingest.pipeline import update_index
from footnote.ingest.roots import SourceRoot
from footnote.store.embedding_cache import CACHE_FILE
from footnote.tools.retrieval import Retriever
from footnote.tools.stages import STAGES

REPO = Path(__file__).resolve().parents[1]
DEPTH = 100
METRICS = ("mrr@10", "recall@10", "recall@20")
VARIANTS: dict[str, ContextSettings] = {
    "none": ContextSettings(kind="none"),
    "offline": ContextSettings(kind="offline"),
    "offline-summary": ContextSettings(kind="offline", neighbour_terms=0),
    "offline-neighbours": ContextSettings(kind="offline", summary_sentences=0),
    "offline-terms": ContextSettings(
        kind="offline", summary_sentences=0, neighbour_terms=0, document_terms=8
    ),
    "offline-keywords": ContextSettings(kind="offline", fields="keywords"),
    "neighbours-keywords": ContextSettings(kind="offline", summary_sentences=0, fields="keywords"),
    "summary-keywords": ContextSettings(kind="offline", neighbour_terms=0, fields="keywords"),
    "terms-keywords": ContextSettings(
        kind="offline", summary_sentences=0, neighbour_terms=0, document_terms=8, fields="keywords"
    ),
    "short-summary-keywords": ContextSettings(
        kind="offline", neighbour_terms=0, summary_max_chunks=8, fields="keywords"
    ),
    "chunk-specific-keywords": ContextSettings(
        kind="offline", summary_max_chunks=8, new_terms_only=True, fields="keywords"
    ),
    "chunk-specific": ContextSettings(kind="offline", summary_max_chunks=8, new_terms_only=True),
    "previous-keywords": ContextSettings(
        kind="offline", summary_sentences=0, neighbour_terms=0, previous_words=25, fields="keywords"
    ),
    "previous": ContextSettings(
        kind="offline", summary_sentences=0, neighbour_terms=0, previous_words=25
    ),
    "summary-previous-keywords": ContextSettings(
        kind="offline", neighbour_terms=0, previous_words=25, fields="keywords"
    ),
}
"""`offline` is what `--context offline` builds; the others take it apart, and the
`-keywords` ones put the context in BM25 only (their vectors are those of `none`)."""


MODEL_SECONDS = 3600.0
"""A page's time budget when a model writes its contexts (SmolLM2 on two shared cores)."""
SMOLLM2 = ContextSettings(kind="model", model="openai:smollm2")
"""The real local model of the test set-up (tests/llama_server.py), on a sample (--sample-pages)."""


def sampled(dataset_dir: Path, sample_pages: int | None) -> tuple[dict[str, Any], set[str]]:
    """The corpus by page (the first `sample_pages` pages holding a judged answer, or all),
    and the judged queries whose answer is among them."""
    dataset = load_beir(dataset_dir)
    pages: dict[str, list[tuple[str, dict[str, str]]]] = defaultdict(list)
    for doc_id, passage in dataset.corpus.items():
        pages[doc_id.split("#", 1)[0]].append((doc_id, passage))
    if sample_pages:
        judged = {d.split("#", 1)[0] for q in dataset.qrels.values() for d in q}
        kept = [p for p in pages if p in judged][:sample_pages]
        pages = defaultdict(list, {p: pages[p] for p in kept})
    ids = {doc_id for passages in pages.values() for doc_id, _ in passages}
    queries = {q for q, judged in dataset.qrels.items() if set(judged) <= ids}
    return pages, queries


def page_documents(
    dataset_dir: Path, sample_pages: int | None = None
) -> tuple[list[Candidate], dict[tuple[str, str], str]]:
    """One candidate per corpus page, and (page, section anchor) -> corpus id."""
    pages, _ = sampled(dataset_dir, sample_pages)
    root = "documents:contextual-benchmark"
    back: dict[tuple[str, str], str] = {}
    candidates = []
    for page, passages in pages.items():
        title = " ".join(passages[0][1]["title"].split()) or page
        sections = []
        for i, (doc_id, passage) in enumerate(passages):
            anchor = f"p{i}"
            back[(page, anchor)] = doc_id
            sections.append(Section(text=passage["text"], anchor=anchor))
        data = json.dumps([title, [s.text for s in sections]]).encode("utf-8")
        document = ParsedDocument(source=page, title=title, sections=sections)
        candidates.append(
            Candidate(
                root=root,
                origin=page,
                name=page,
                label="bench",
                read=lambda data=data: data,  # type: ignore[misc]
                parse=lambda _data, _source, document=document: document,  # type: ignore[misc]
                mtime=lambda: 0.0,
            )
        )
    return candidates, back


def ingest_variant(
    dataset_dir: Path, variant: str, candidates: list[Candidate], fresh: bool, sample: int | None
) -> dict[str, Any]:
    index = (
        dataset_dir / ".footnote-contextual" / (f"{variant}-sample{sample}" if sample else variant)
    )
    if fresh and index.exists():
        shutil.rmtree(index)
    elif not index.exists():
        seed_cache(index)
    root = SourceRoot(id=candidates[0].root, kind="documents", label="bench")
    started = time.perf_counter()
    # A slow local model writes a page's contexts for longer than a file's ingest budget.
    budget = MODEL_SECONDS if VARIANTS[variant].kind == "model" else DEFAULT_MAX_SECONDS
    summary = update_index(
        index,
        [root],
        IngestOptions(context=VARIANTS[variant], limits=FileLimits(max_seconds=budget)),
        RunScope(documents={root.id: candidates}),
    )
    seconds = time.perf_counter() - started
    if summary.failed:
        raise SystemExit(f"{variant}: {len(summary.failed)} pages failed: {summary.failed}")
    return {
        "index": str(index),
        "chunks": summary.chunks,
        "embedded_texts": summary.embedded_texts,
        "ingest_seconds": round(seconds, 1),
        **({"context_model": summary.context.to_dict()} if summary.context else {}),
    }


def seed_cache(index: Path) -> None:
    """A new variant's index starts with the vectors its siblings already embedded (the
    embedding cache is keyed by exact text), so only texts no variant made are embedded;
    `--fresh` skips this to time a whole ingest."""
    siblings = [p / CACHE_FILE for p in index.parent.glob("*") if (p / CACHE_FILE).is_file()]
    if not siblings:
        return
    index.mkdir(parents=True)
    shutil.copyfile(siblings[0], index / CACHE_FILE)
    with sqlite3.connect(index / CACHE_FILE) as db:
        for other in siblings[1:]:
            db.execute("ATTACH DATABASE ? AS other", (str(other),))
            db.execute("INSERT OR IGNORE INTO entries SELECT * FROM other.entries")
            db.commit()
            db.execute("DETACH DATABASE other")


def measure(
    dataset_dir: Path,
    index: str,
    variant: str,
    back: dict[tuple[str, str], str],
    limit: int | None,
    stages: list[str],
    judged: set[str],
) -> dict[str, dict[str, Any]]:
    from ranx import Qrels, Run, evaluate

    dataset = load_beir(dataset_dir)
    retriever = Retriever.open(index, context=VARIANTS[variant])
    runners = default_runners(retriever, stages, DEPTH)
    queries = [(q, text) for q, text in dataset.queries.items() if q in judged][:limit]
    qrels = Qrels({qid: dataset.qrels[qid] for qid, _ in queries})
    out: dict[str, dict[str, Any]] = {}
    for stage, runner in runners.items():
        run: dict[str, dict[str, float]] = {}
        for qid, query in queries:
            ranked: dict[str, float] = {}
            for hit in runner(query):
                doc_id = back.get((hit.chunk.source, hit.chunk.anchor or ""))
                if doc_id is not None and doc_id not in ranked:
                    ranked[doc_id] = float(DEPTH - len(ranked))
            run[qid] = ranked or {"(nothing)": 0.0}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            scores = evaluate(qrels, Run(run), list(METRICS), make_comparable=True)
        assert isinstance(scores, dict)
        out[stage] = {
            "mrr@10": round(float(scores["mrr@10"]), 4),
            "recall@10": round(float(scores["recall@10"]), 4),
            "failure@20": round(1 - float(scores["recall@20"]), 4),
            "misses": misses(run, dataset.qrels),
        }
    return out


def misses(run: dict[str, dict[str, float]], qrels: dict[str, dict[str, int]]) -> dict[str, Any]:
    """The queries whose answer is not in the top 10: where it ranked (None: not in the top
    DEPTH) and the three passages ranked first instead, for `--misses`."""
    out: dict[str, Any] = {}
    for qid, scored in run.items():
        ranked = sorted(scored, key=lambda d: -scored[d])
        rank = next((i + 1 for i, d in enumerate(ranked) if qrels[qid].get(d, 0) > 0), None)
        if rank is None or rank > 10:
            out[qid] = {"rank": rank, "instead": ranked[:3]}
    return out


def misses_report(results: list[dict[str, Any]], datasets: list[Path]) -> str:
    """Each variant's queries out of the top 10 per stage, beside `none`'s: the query, where
    its answer ranked, its page title and opening, and what ranked first instead."""
    folders = {d.resolve().name: d for d in datasets}
    lines = []
    for result in results:
        dataset = load_beir(folders[result["dataset"]])
        base = result["variants"].get("none", {}).get("stages", {})
        for stage in result["stages"]:
            for variant, measured in result["variants"].items():
                missed = measured["stages"].get(stage, {}).get("misses")
                if missed is None:
                    continue
                before = base.get(stage, {}).get("misses", {})
                lines.append(f"## {result['dataset']} {stage} {variant}: {len(missed)} missed")
                for qid in sorted({*missed, *(before if variant != "none" else ())}):
                    rank = missed[qid]["rank"] if qid in missed else "<=10"
                    was = before[qid]["rank"] if qid in before else "<=10"
                    gold = next(iter(dataset.qrels[qid]))
                    lines.append(f"- {qid} rank {rank} (none: {was}): {dataset.queries[qid]}")
                    lines.append(f"    answer:  {passage(dataset, gold)}")
                    for doc_id in missed.get(qid, {}).get("instead", []):
                        lines.append(f"    instead: {passage(dataset, doc_id)}")
                lines.append("")
    return "\n".join(lines)


def passage(dataset: BeirDataset, doc_id: str) -> str:
    """A passage in one line: its id, page title and opening words."""
    found = dataset.corpus.get(doc_id, {})
    title = " ".join(found.get("title", "").split())
    return f"{doc_id} [{title}] {' '.join(found.get('text', '').split())[:90]}"


def table(result: dict[str, Any]) -> str:
    variants = list(result["variants"])
    base = result["variants"].get("none")
    lines = [
        f"{result['dataset']}: {result['queries']} queries",
        "",
        "| stage | context | MRR@10 | R@10 | top-20 failures | failures cut (vs none) |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for stage in result["stages"]:
        for variant in variants:
            if stage not in result["variants"][variant]["stages"]:
                continue
            s = result["variants"][variant]["stages"][stage]
            cut = ""
            if base is not None and variant != "none" and stage in base["stages"]:
                before = base["stages"][stage]["failure@20"]
                cut = f"{(before - s['failure@20']) / before:.0%}" if before else ""
            lines.append(
                f"| {stage} | {variant} | {s['mrr@10']:.3f} | {s['recall@10']:.3f} | "
                f"{s['failure@20']:.3f} | {cut} |"
            )
    lines += [
        "",
        "| context | chunks | texts embedded | ingest s | model requests | model tokens in / out |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for variant in variants:
        v = result["variants"][variant]["ingest"]
        used = v.get("context_model") or {}
        tokens = f"{used['input_tokens']} / {used['output_tokens']}" if used else "0"
        lines.append(
            f"| {variant} | {v['chunks']} | {v['embedded_texts']} | {v['ingest_seconds']} | "
            f"{used.get('requests', 0)} | {tokens} |"
        )
    return "\n".join(lines)


def merged_results(paths: list[Path]) -> list[dict[str, Any]]:
    """Earlier --json results by dataset, variants run apart merged, `none` first."""
    merged: dict[str, dict[str, Any]] = {}
    for path in paths:
        for result in json.loads(path.read_text(encoding="utf-8")):
            into = merged.setdefault(result["dataset"], {**result, "variants": {}})
            into["stages"] = [s for s in STAGES if s in {*into["stages"], *result["stages"]}]
            for name, variant in result["variants"].items():
                # A variant measured again for more stages keeps its first ingest.
                known = into["variants"].setdefault(name, variant)
                known["stages"] = {**variant["stages"], **known["stages"]}
    for result in merged.values():
        order = ["none", *(v for v in result["variants"] if v != "none")]
        found = result["variants"]
        result["variants"] = {v: found[v] for v in order if v in found}
    return list(merged.values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("datasets", nargs="*", type=Path, help="BEIR folders")
    parser.add_argument(
        "--variants", nargs="+", default=["none", "offline"], choices=list(VARIANTS)
    )
    parser.add_argument("--limit-queries", type=int, default=None, metavar="N")
    parser.add_argument(
        "--sample-pages",
        type=int,
        default=None,
        metavar="N",
        help="only the first N pages holding an answer, and their queries (for a slow model)",
    )
    parser.add_argument(
        "--smollm2",
        action="store_true",
        help="also the `smollm2` variant: SmolLM2-135M in llama.cpp (tests/llama_server.py)",
    )
    parser.add_argument("--stages", nargs="+", default=list(STAGES), choices=list(STAGES))
    parser.add_argument(
        "--fresh", action="store_true", help="delete the cached indexes first (times a full ingest)"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    parser.add_argument(
        "--tables",
        nargs="+",
        type=Path,
        default=None,
        metavar="JSON",
        help="print the tables of earlier --json results (variants run apart are merged)",
    )
    parser.add_argument(
        "--misses",
        nargs="+",
        type=Path,
        default=None,
        metavar="JSON",
        help="list the queries out of the top 10 in earlier --json results (give the datasets)",
    )
    args = parser.parse_args(argv)
    if args.tables:
        for result in merged_results(args.tables):
            print(table(result) + "\n")
        return 0
    if args.misses:
        print(misses_report(merged_results(args.misses), args.datasets))
        return 0
    server = None
    if args.smollm2:
        sys.path.insert(0, str(REPO))
        from tests.llama_server import start_server

        server = start_server(threads=2, n_ctx=4096)
        os.environ.update(OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY="local")
        # SmolLM2 reads 4,096 tokens: a page longer than ~8,000 characters goes as its
        # outline and the chunk's neighbours.
        os.environ.setdefault("FOOTNOTE_CONTEXT_DOCUMENT_CHARS", "8000")
        os.environ.setdefault("FOOTNOTE_EMBED_CONCURRENCY", "1")
        # Under load one SmolLM2 reply has taken longer than the provider default timeout.
        os.environ.setdefault("FOOTNOTE_EMBED_TIMEOUT", "600")
        VARIANTS["smollm2"] = SMOLLM2
        args.variants.append("smollm2")
    try:
        return run(args)
    finally:
        if server is not None:
            from tests.llama_server import stop_server

            stop_server(server)


def run(args: argparse.Namespace) -> int:
    results = []
    for dataset_dir in args.datasets:
        candidates, back = page_documents(dataset_dir, args.sample_pages)
        _, judged = sampled(dataset_dir, args.sample_pages)
        result: dict[str, Any] = {
            "dataset": dataset_dir.resolve().name
            + (f" (sample: {args.sample_pages} pages)" if args.sample_pages else ""),
            "queries": len(list(judged)[: args.limit_queries]),
            "pages": len(candidates),
            "stages": args.stages,
            "variants": {},
        }
        for variant in args.variants:
            print(f"{result['dataset']}: ingest with context {variant}", file=sys.stderr)
            ingested = ingest_variant(
                dataset_dir, variant, candidates, args.fresh, args.sample_pages
            )
            stages = measure(
                dataset_dir,
                ingested["index"],
                variant,
                back,
                args.limit_queries,
                args.stages,
                judged,
            )
            result["variants"][variant] = {
                "settings": dataclasses.asdict(VARIANTS[variant]),
                "ingest": ingested,
                "stages": stages,
            }
        results.append(result)
        print(table(result) + "\n", flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
