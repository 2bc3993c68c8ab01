"""FAISS + BM25 files next to PostgreSQL + pgvector on the same chunks and vectors.

    python benchmarks/postgres_compare.py [--url postgresql://...] [--limit-queries N] [--json]

Reads the pyfaq index that benchmarks/eval_pyfaq.py builds (read-only: it must exist), writes
the same chunks and vectors to a PostgreSQL index (a throwaway embedded server unless --url),
and reports write throughput (chunks/s, embedding excluded: it is the same on both), query
latency p50/p95 per stage, and the retrieval metrics of footnote eval for both backends.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from footnote.evaluation.retrieval import (  # noqa: E402
    CACHE_DIR,
    INDEX_DIR,
    PreparedIndex,
    default_runners,
    evaluate_stages,
    load_beir,
    markdown_table,
)
from footnote.ingest.pipeline import IngestSummary  # noqa: E402
from footnote.store.backends import open_writer  # noqa: E402
from footnote.store.files import load_index, write_index  # noqa: E402
from footnote.store.types import Hit  # noqa: E402
from footnote.tools.retrieval import get_retriever  # noqa: E402

DATASET = HERE / "data" / "pyfaq"
STAGES = ("bm25", "dense", "hybrid", "pipeline")


def timed(runner: Callable[[str], Sequence[Hit]], into: list[float]) -> Callable[[str], Any]:
    def run(query: str) -> Sequence[Hit]:
        started = time.perf_counter()
        hits = runner(query)
        into.append(time.perf_counter() - started)
        return hits

    return run


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))] * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", type=Path, default=DATASET)
    parser.add_argument("--url", default=None, help="PostgreSQL URL (default: embedded server)")
    parser.add_argument("--limit-queries", type=int, default=None, metavar="N")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    faiss_dir = args.dataset / INDEX_DIR
    index = load_index(faiss_dir)
    vectors = index.all_vectors()
    chunks = list(index.chunks)
    entries = list(zip(chunks, vectors, strict=True))
    server = None
    if args.url is None:
        sys.path.insert(0, str(HERE.parent / "tests"))
        from pg_fixture import start_server

        server = start_server()
        args.url = server.url
    url = f"{args.url}{'&' if '?' in args.url else '?'}index=bench_pyfaq"
    out: dict[str, Any] = {"chunks": len(entries)}
    try:
        scratch = Path(tempfile.mkdtemp(prefix="footnote-bench-"))
        started = time.perf_counter()
        write_index(
            scratch / "faiss",
            chunks=chunks,
            vectors=vectors,
            files=index.files,
            manifest=index.manifest,
        )
        out["faiss_write_chunks_per_s"] = len(entries) / (time.perf_counter() - started)
        shutil.rmtree(scratch, ignore_errors=True)
        started = time.perf_counter()
        open_writer(url).publish(
            entries=entries,
            files=index.files,
            manifest={k: index.manifest[k] for k in ("embedding", "chunking", "default_access")},
            embedding_dimension=index.dimension,
        )
        out["postgres_write_chunks_per_s"] = len(entries) / (time.perf_counter() - started)

        dataset = load_beir(args.dataset)
        sources = json.loads((args.dataset / CACHE_DIR / "sources.json").read_text("utf-8"))
        prepared = PreparedIndex(
            dataset=dataset,
            index_dir=faiss_dir,
            source_to_id=sources,
            summary=IngestSummary(chunks=len(entries)),
        )
        seconds: dict[str, list[float]] = {}
        runners: dict[str, Any] = {}
        for label, location in (("faiss", str(faiss_dir)), ("postgres", url)):
            for stage, runner in default_runners(get_retriever(location), STAGES).items():
                name = f"{label}:{stage}"
                runners[name] = timed(runner, seconds.setdefault(name, []))
        result = evaluate_stages(
            args.dataset,
            stages=list(runners),
            runners=runners,
            prepared=prepared,
            limit_queries=args.limit_queries,
            progress=False,
        )
        for name, values in seconds.items():
            values.pop(0)  # the warm-up call
            result["stages"][name]["p50_ms"] = percentile(values, 0.5)
            result["stages"][name]["p95_ms"] = percentile(values, 0.95)
        out["eval"] = result
    finally:
        if server is not None:
            from pg_fixture import stop_server

            stop_server(server)
    if args.json:
        print(json.dumps(out, indent=2, default=str))
        return 0
    print(
        f"{out['chunks']} chunks; write (no embedding): FAISS files "
        f"{out['faiss_write_chunks_per_s']:.0f} chunks/s, PostgreSQL "
        f"{out['postgres_write_chunks_per_s']:.0f} chunks/s\n"
    )
    print(markdown_table(out["eval"]))
    print("\n| stage | p50 ms | p95 ms |\n|---|---:|---:|")
    for name, scores in out["eval"]["stages"].items():
        print(f"| {name} | {scores['p50_ms']:.1f} | {scores['p95_ms']:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
