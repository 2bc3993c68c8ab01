"""Synthetic scale test of the file backend (FAISS + BM25 files): load, memory, latency, recall.

    nice -n 10 .venv/bin/python benchmarks/scale_files.py --rows 100000 [--json] [--no-peer]

Builds an index of N synthetic chunks through the store's own writer: 384-d vectors drawn
around 1,000 topic centres (like embeddings of text, not uniform noise), texts of realistic
length (40-220 words, Zipf-distributed vocabulary plus the topic's own words), 1,000 sources
under 50 team folders, four access groups (a few chunks with malformed access), dates over
ten years. Then, in a fresh interpreter so its memory is its own, it opens the index the way
`footnote search` does and times each stage per query, mask included, query embedding
excluded (query vectors are precomputed and handed over by a stand-in embedder):

    bm25, dense, pipeline        caller in groups {everyone, engineering}, no filter
    filtered_pipeline            the same caller, source glob `team07/*` (2% of chunks)
    graph                        the pipeline re-ranked by the entity graph's walk

`mask_ms_p50` times that filtered query's mask, asked again per query as a server asks it;
`mask_first_ms_p50` times the first query of each of N (caller, filters) pairs, whose mask
is built from the columns rather than found in the cache.

`recall@10` compares the index's dense top 10 with exact inner-product search (numpy) over
the same vectors. The LangChain peer (`EnsembleRetriever` over `BM25Retriever` + FAISS on the
same chunk texts and vectors, benchmarks/peer_retrieval.py) runs in a third interpreter on
the same queries; `--no-peer` skips it (its BM25 is pure Python: minutes to build at 1M).

With `--json` it prints one object:
{"rows", "build_s", "build_peak_rss_mb" (the building process's peak), "load_s", "rss_mb",
 "mask_ms_p50", "mask_first_ms_p50", "recall@10",
 "stages": {"bm25"|"dense"|"pipeline"|"filtered_pipeline"|"graph": {"p50_ms", "p95_ms"}},
 "peer": {"qps"}, "ours": {"qps"}}   (pipeline queries per second; peer qps null if skipped)
Build time and index details go to stderr.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

DIM = 384
TOPICS = 1000
TEAMS = 50
SOURCES = 1000
GROUPS = ("everyone", "engineering", "finance", "hr")
CALLER_GROUPS = ("everyone", "engineering")
FILTER_SOURCE = "team07/*"
MODEL_ID = "synthetic:clustered-384"
SEED = 7


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def rss_mb() -> float:
    """Resident memory of this process now (Linux /proc), not its peak."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def vocabulary(rng: np.random.Generator, size: int) -> list[str]:
    """Pronounceable made-up words, so stemming and tokenising do real work."""
    syllables = [c + v for c in "bcdfghklmnprstvwz" for v in ("a", "e", "i", "o", "u", "ai", "ou")]
    words: set[str] = set()
    while len(words) < size:
        n = int(rng.integers(2, 5))
        words.add("".join(syllables[i] for i in rng.integers(0, len(syllables), n)))
    return sorted(words)


class Corpus:
    """The synthetic chunks, generated deterministically in blocks (same seed, same corpus)."""

    def __init__(self, rows: int) -> None:
        rng = np.random.default_rng(SEED)
        self.rows = rows
        self.words = np.array(vocabulary(rng, 20_000), dtype=object)
        zipf = 1.0 / np.arange(1, len(self.words) + 1)
        self.word_p = zipf / zipf.sum()
        self.word_cdf = np.cumsum(self.word_p)
        self.centres = rng.standard_normal((TOPICS, DIM)).astype(np.float32)
        self.topic_words = rng.integers(0, len(self.words), (TOPICS, 30))
        self.row_topic = rng.integers(0, TOPICS, rows)
        # Sources hold consecutive rows; access is per source, as front matter gives it.
        self.row_source = np.sort(rng.integers(0, SOURCES, rows))
        self.source_access = rng.choice(5, SOURCES, p=[0.4, 0.3, 0.15, 0.1, 0.05])
        self.source_date = rng.integers(0, 3650, SOURCES)
        self.lengths = np.clip(rng.lognormal(4.6, 0.45, rows), 40, 220).astype(int)

    def source(self, s: int) -> str:
        return f"team{s % TEAMS:02d}/doc{s:04d}.md"

    def access(self, s: int, row: int) -> list[str] | None:
        if row % 5000 == 4999:
            return None  # malformed: only admin sees it
        kind = int(self.source_access[s])
        return [["everyone"], ["engineering"], ["finance"], ["hr"], ["engineering", "finance"]][
            kind
        ]

    def vectors(self, start: int, stop: int) -> np.ndarray:
        """Rows start..stop, the same whichever range they are asked for in."""
        return _aligned(self._vector_block, start, stop, self.rows)

    def texts(self, start: int, stop: int) -> list[str]:
        return [t for part in _blocks(start, stop, self.rows, self._text_block) for t in part]

    def _vector_block(self, start: int, stop: int) -> np.ndarray:
        rng = np.random.default_rng([SEED, start])
        block = self.centres[self.row_topic[start:stop]] + 0.9 * rng.standard_normal(
            (stop - start, DIM)
        ).astype(np.float32)
        return block / np.linalg.norm(block, axis=1, keepdims=True)

    def _text_block(self, start: int, stop: int) -> list[str]:
        rng = np.random.default_rng([SEED, start, 1])
        lengths = self.lengths[start:stop]
        # Every word drawn at once: 80% from the Zipf vocabulary, 20% from the row's topic.
        common = np.searchsorted(self.word_cdf, rng.random(int(lengths.sum())))
        topical = self.topic_words[
            np.repeat(self.row_topic[start:stop], lengths), rng.integers(0, 30, len(common))
        ]
        ids = np.where(rng.random(len(common)) < 0.8, common, topical)
        words = self.words[np.minimum(ids, len(self.words) - 1)].tolist()
        out, at = [], 0
        for n in lengths.tolist():
            out.append(" ".join(words[at : at + n]).capitalize() + ".")
            at += n
        return out

    def chunk_dicts(
        self, start: int, stop: int, texts: list[str] | None = None
    ) -> list[dict[str, Any]]:
        """Rows start..stop as chunk dicts (`texts`: theirs, if already generated)."""
        texts = self.texts(start, stop) if texts is None else texts
        out = []
        for row, text in zip(range(start, stop), texts, strict=True):
            s = int(self.row_source[row])
            day = int(self.source_date[s])
            section = f"Part {row % 7} > Topic {int(self.row_topic[row])}"
            out.append(
                {
                    "id": f"{self.source(s)}#part-{row % 7}:{row}",
                    "text": text,
                    "source": self.source(s),
                    "title": f"Document {s}",
                    "section": section,
                    "url": f"{self.source(s)}#part-{row % 7}",
                    "lines": [row % 400 + 1, row % 400 + 12],
                    "date": (np.datetime64("2015-01-01") + day).astype(str),
                    "access": self.access(s, row),
                    "metadata": {"team": f"team{s % TEAMS:02d}"},
                }
            )
        return out

    def queries(self, n: int) -> tuple[list[str], np.ndarray]:
        """Query texts (a few topic and common words) and vectors near the same topics."""
        rng = np.random.default_rng([SEED, 99])
        topics = rng.integers(0, TOPICS, n)
        texts, vectors = [], []
        for i, topic in enumerate(topics):
            words = self.words[self.topic_words[topic, rng.integers(0, 30, 3)]].tolist()
            words += self.words[rng.choice(len(self.words), 2, p=self.word_p)].tolist()
            texts.append(f"q{i} " + " ".join(words))
            v = self.centres[topic] + 0.9 * rng.standard_normal(DIM).astype(np.float32)
            vectors.append(v / np.linalg.norm(v))
        return texts, np.asarray(vectors, dtype=np.float32)


BLOCK = 50_000
"""Rows are generated in blocks of this many, each from its own seed: a row is the same
whether the writer, the exact search or the peer asks for it."""


def _blocks(start: int, stop: int, rows: int, make: Callable[[int, int], Any]) -> list[Any]:
    parts = []
    for begin in range(start - start % BLOCK, stop, BLOCK):
        block = make(begin, min(begin + BLOCK, rows))
        parts.append(block[max(start - begin, 0) : stop - begin])
    return parts


def _aligned(
    make: Callable[[int, int], np.ndarray], start: int, stop: int, rows: int
) -> np.ndarray:
    parts = _blocks(start, stop, rows, make)
    return np.concatenate(parts) if parts else np.zeros((0, DIM), dtype=np.float32)


class PrecomputedEmbeddings(Embeddings):
    """Stands in for the embedder: returns each query's precomputed vector, so the timings
    measure search, not the model. Speaks both Footnote's and LangChain's embedding calls."""

    model_id = MODEL_ID
    dimension = DIM
    max_tokens = 256

    def __init__(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        self._vectors = {t: v for t, v in zip(texts, vectors, strict=True)}

    def embed_array(self, texts: Sequence[str]) -> np.ndarray:
        return np.asarray([self._vectors[t] for t in texts], dtype=np.float32)

    def embed_query(self, text: str) -> list[float]:
        return self._vectors[text].tolist()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.embed_array(texts).tolist()

    def count_tokens(self, text: str) -> int:
        return len(text.split()) + 2


# --- the index, through the store's own code ------------------------------------------------


def build(corpus: Corpus, index_dir: Path) -> None:
    """Hands the writer a batch of the writer's size at a time, as a long ingest would:
    neither side holds the whole corpus (this side holds one generated block's texts and
    vectors)."""
    from footnote.store.files import write_batch_rows, write_index_batches
    from footnote.store.types import Chunk, FileRecord

    files: dict[str, FileRecord] = {}
    step = write_batch_rows()

    def batches() -> Iterator[tuple[list[Chunk], np.ndarray]]:
        for block in range(0, corpus.rows, BLOCK):
            texts = corpus.texts(block, min(block + BLOCK, corpus.rows))
            vectors = corpus.vectors(block, min(block + BLOCK, corpus.rows))
            for start in range(block, block + len(texts), step):
                stop = min(start + step, block + len(texts))
                dicts = corpus.chunk_dicts(start, stop, texts[start - block : stop - block])
                chunks = [Chunk.from_dict(d) for d in dicts]
                for chunk in chunks:
                    record = files.setdefault(
                        chunk.source, FileRecord(sha256="0" * 64, chunk_ids=[], size=0, mtime=0.0)
                    )
                    record.chunk_ids.append(chunk.id)
                yield chunks, vectors[start - block : stop - block]

    write_index_batches(
        index_dir,
        batches=batches(),
        files=files,  # filled as the batches go: the writer reads it after the last one
        manifest={
            "embedding": {"model": MODEL_ID, "dimension": DIM, "max_tokens": 256},
            "chunking": {},
            "default_access": ["everyone"],
        },
    )


def open_retriever(index_dir: Path, embeddings: PrecomputedEmbeddings) -> Any:
    from footnote.store.files import FilesReader, load_index
    from footnote.tools.retrieval import Retriever

    return Retriever(FilesReader(load_index(index_dir)), embeddings)


def exact_top10(corpus: Corpus, queries: np.ndarray) -> np.ndarray:
    """Exact inner-product top 10 of every query, over all rows (blockwise, bounded memory)."""
    best_scores = np.full((len(queries), 10), -np.inf, dtype=np.float32)
    best_rows = np.zeros((len(queries), 10), dtype=np.int64)
    for start in range(0, corpus.rows, BLOCK):
        stop = min(start + BLOCK, corpus.rows)
        scores = queries @ corpus.vectors(start, stop).T
        scores = np.concatenate([best_scores, scores], axis=1)
        rows = np.concatenate(
            [best_rows, np.broadcast_to(np.arange(start, stop), (len(queries), stop - start))],
            axis=1,
        )
        top = np.argpartition(-scores, 9, axis=1)[:, :10]
        best_scores = np.take_along_axis(scores, top, axis=1)
        best_rows = np.take_along_axis(rows, top, axis=1)
    return best_rows


# --- phases, each in its own interpreter ----------------------------------------------------


def percentiles(seconds: list[float]) -> dict[str, float]:
    ms = np.asarray(seconds) * 1000
    return {"p50_ms": float(np.percentile(ms, 50)), "p95_ms": float(np.percentile(ms, 95))}


CPU_SECONDS: dict[int, list[float]] = {}
"""Process CPU seconds of each timed call, by id of its wall-seconds list: on a machine
shared with other jobs, wall time includes waiting for a core, CPU time does not."""


def timed(run: Callable[[int], Any], n: int, warmup: int = 3) -> tuple[list[float], list[Any]]:
    for i in range(min(warmup, n)):
        run(i)
    seconds: list[float] = []
    cpu: list[float] = []
    results = []
    for i in range(n):
        started, started_cpu = time.perf_counter(), time.process_time()
        results.append(run(i))
        cpu.append(time.process_time() - started_cpu)
        seconds.append(time.perf_counter() - started)
    CPU_SECONDS[id(seconds)] = cpu
    return seconds, results


def cpu_percentiles(seconds: list[float]) -> dict[str, float]:
    return percentiles(CPU_SECONDS[id(seconds)])


def phase_build(args: argparse.Namespace) -> dict[str, Any]:
    corpus = Corpus(args.rows)
    started, cpu = time.perf_counter(), time.process_time()
    build(corpus, args.work / "index")
    build_s, build_cpu_s = time.perf_counter() - started, time.process_time() - cpu
    texts, vectors = corpus.queries(args.queries)
    np.save(args.work / "query_vectors.npy", vectors)
    (args.work / "queries.json").write_text(json.dumps(texts))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: kB
    return {"build_s": build_s, "build_cpu_s": build_cpu_s, "rows": args.rows,
            "build_peak_rss_mb": peak}  # fmt: skip


def phase_exact(args: argparse.Namespace) -> dict[str, Any]:
    """Exact inner-product top 10 of every query, for recall (not timed)."""
    corpus = Corpus(args.rows)
    vectors = np.load(args.work / "query_vectors.npy")
    np.save(args.work / "exact_top10.npy", exact_top10(corpus, vectors))
    return {}


def phase_ours(args: argparse.Namespace) -> dict[str, Any]:
    from footnote.store.types import Caller, Filters
    from footnote.tools.search import run_stage

    texts = json.loads((args.work / "queries.json").read_text())
    vectors = np.load(args.work / "query_vectors.npy")
    exact = np.load(args.work / "exact_top10.npy")
    embeddings = PrecomputedEmbeddings(texts, vectors)
    started = time.perf_counter()
    import bm25s  # noqa: F401  (imported once per process, as a server has them: not load)
    import faiss  # noqa: F401

    import_s = time.perf_counter() - started
    started = time.perf_counter()
    retriever = open_retriever(args.work / "index", embeddings)
    load_s = time.perf_counter() - started
    resident = rss_mb()
    index = retriever.reader.index
    started = time.perf_counter()
    index.checksums.wait()  # the large parts, hashed in the background: not during timings
    deferred = {"parts": index.checksums.names, "hash_s": index.checksums.seconds,
                "waited_after_load_s": time.perf_counter() - started}  # fmt: skip
    hash_all_s = checksum_seconds(args.work / "index")
    caller = Caller(groups=frozenset(CALLER_GROUPS))
    selective = Filters(source=FILTER_SOURCE)
    n = len(texts)

    def bm25(i: int) -> Any:
        return retriever.bm25(texts[i], 10, retriever.mask(caller))

    def dense(i: int) -> Any:
        return retriever.dense(vectors[i], 10, retriever.mask(caller))

    def pipeline(i: int) -> Any:
        return run_stage(retriever, texts[i], 10, retriever.mask(caller), "pipeline")

    def graph(i: int) -> Any:
        return run_stage(retriever, texts[i], 10, retriever.mask(caller), "graph")

    def filtered(i: int) -> Any:
        return run_stage(retriever, texts[i], 10, retriever.mask(caller, selective), "pipeline")

    # A (caller, filters) pair's first query builds its mask; repeats reuse it (read-only).
    pairs = [(Caller(groups=frozenset(CALLER_GROUPS[: 1 + (i // TEAMS) % 2])),
              Filters(source=f"team{i % TEAMS:02d}/*")) for i in range(n)]  # fmt: skip
    first_s, _ = timed(lambda i: retriever.mask(*pairs[i]), n, warmup=0)
    mask_s, masks = timed(lambda i: retriever.mask(caller, selective), n)
    selectivity = float(np.mean(masks[0]))
    stages: dict[str, Any] = {}
    stages_cpu: dict[str, Any] = {}
    short = 0
    for name, run in [("bm25", bm25), ("dense", dense), ("pipeline", pipeline),
                      ("filtered_pipeline", filtered), ("graph", graph)]:  # fmt: skip
        seconds, results = timed(run, n)
        stages[name] = percentiles(seconds)
        stages_cpu[name] = cpu_percentiles(seconds)
        if name == "pipeline":
            qps = n / sum(seconds)
            pipeline_s = seconds
        if name == "filtered_pipeline":
            short = sum(len(hits) < 10 for hits in results)
    everything = np.ones(retriever_rows(retriever), dtype=bool)
    found = [{h.row for h in retriever.dense(vectors[i], 10, everything)} for i in range(n)]
    recall = float(np.mean([len(found[i] & set(exact[i].tolist())) / 10 for i in range(n)]))
    return {
        "load_s": load_s,
        "import_s": import_s,
        "deferred_checksums": deferred,
        "hashing_every_part_s": hash_all_s,
        "rss_mb": resident,
        "rss_after_queries_mb": rss_mb(),
        "mask_ms_p50": percentiles(mask_s)["p50_ms"],
        "mask_cpu_ms_p50": cpu_percentiles(mask_s)["p50_ms"],
        "mask_first_ms_p50": percentiles(first_s)["p50_ms"],
        "mask_first_cpu_ms_p50": cpu_percentiles(first_s)["p50_ms"],
        "stages_cpu": stages_cpu,
        "qps_cpu": n / sum(CPU_SECONDS[id(pipeline_s)]),
        "recall@10": recall,
        "stages": stages,
        "qps": qps,
        "filter_selectivity": selectivity,
        "filtered_short_results": short,
        "index_kind": retriever.reader.dense_kind,
    }


def checksum_seconds(root: Path) -> float:
    """What a sha256 of every part at load would cost (files in the page cache), which the
    loader avoids by hashing the large parts in the background."""
    import hashlib

    version = (root / "CURRENT").read_text().strip()
    started = time.perf_counter()
    for path in sorted((root / "versions" / version).rglob("*")):
        if path.is_file() and path.name != "manifest.json":
            digest = hashlib.sha256()
            with path.open("rb") as handle:
                for block in iter(lambda h=handle: h.read(1 << 20), b""):
                    digest.update(block)
    return time.perf_counter() - started


def retriever_rows(retriever: Any) -> int:
    return int(retriever.reader.index.vectors.ntotal)


def phase_peer(args: argparse.Namespace) -> dict[str, Any]:
    from peer_retrieval import langchain_peer_from

    from footnote.store.text import embedding_text
    from footnote.store.types import Chunk

    corpus = Corpus(args.rows)
    texts = json.loads((args.work / "queries.json").read_text())
    vectors = np.load(args.work / "query_vectors.npy")
    chunk_texts = [embedding_text(Chunk.from_dict(d)) for d in corpus.chunk_dicts(0, corpus.rows)]
    started = time.perf_counter()
    run = langchain_peer_from(
        chunk_texts, corpus.vectors(0, corpus.rows), PrecomputedEmbeddings(texts, vectors), k=10
    )
    build_s = time.perf_counter() - started
    n = min(len(texts), args.peer_queries)
    seconds, _ = timed(lambda i: run(texts[i]), n, warmup=1)
    return {"qps": n / sum(seconds), "qps_cpu": n / sum(CPU_SECONDS[id(seconds)]),
            "build_s": build_s, "queries": n, **percentiles(seconds)}  # fmt: skip


PHASES: dict[str, Callable[[argparse.Namespace], dict[str, Any]]] = {
    "build": phase_build,
    "exact": phase_exact,
    "ours": phase_ours,
    "peer": phase_peer,
}


def run_phase(name: str, args: argparse.Namespace) -> dict[str, Any]:
    command = [sys.executable, __file__, "--phase", name, "--work", str(args.work),
               "--rows", str(args.rows), "--queries", str(args.queries),
               "--peer-queries", str(args.peer_queries)]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    sys.stderr.write(result.stderr)
    if result.returncode != 0:
        raise SystemExit(f"phase {name} failed (exit {result.returncode})")
    return dict(json.loads(result.stdout.splitlines()[-1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--no-peer", action="store_true", help="skip the LangChain peer")
    parser.add_argument(
        "--peer-queries", type=int, default=20, help="queries timed on the (slow) peer"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--keep", type=Path, help="build the index here and keep it (reused if built before)"
    )
    parser.add_argument("--phase", choices=PHASES, help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.phase:
        print(json.dumps(PHASES[args.phase](args)))
        return 0

    args.work = args.keep or Path(tempfile.mkdtemp(prefix="footnote-scale-"))
    args.work.mkdir(parents=True, exist_ok=True)
    try:
        built_file = args.work / "built.json"
        if built_file.exists() and json.loads(built_file.read_text())["rows"] == args.rows:
            built = json.loads(built_file.read_text())
            log(f"reusing the {args.rows:,}-chunk index in {args.work}")
        else:
            log(f"building {args.rows:,} chunks in {args.work} ...")
            built = run_phase("build", args)
            built_file.write_text(json.dumps(built))
        run_phase("exact", args)
        log(f"built in {built['build_s']:.1f} s; searching ...")
        ours = run_phase("ours", args)
        peer = None
        if not args.no_peer:
            log("running the LangChain peer ...")
            peer = run_phase("peer", args)
    finally:
        if args.keep is None:
            shutil.rmtree(args.work, ignore_errors=True)
    log(json.dumps({"build_s": built["build_s"], "ours": ours, "peer": peer}, indent=1))
    result = {
        "rows": args.rows,
        "build_s": built["build_s"],
        "build_peak_rss_mb": built.get("build_peak_rss_mb"),
        "load_s": ours["load_s"],
        "rss_mb": ours["rss_mb"],
        "mask_ms_p50": ours["mask_ms_p50"],
        "mask_first_ms_p50": ours["mask_first_ms_p50"],
        "recall@10": ours["recall@10"],
        "stages": ours["stages"],
        "peer": {"qps": peer["qps"] if peer else None},
        "ours": {"qps": ours["qps"]},
    }
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(markdown(result, ours, peer, built))
    return 0


def markdown(
    r: dict[str, Any], ours: dict[str, Any], peer: dict[str, Any] | None, built: dict[str, Any]
) -> str:
    lines = [
        f"rows {r['rows']:,}; dense index {ours['index_kind']}; build {built['build_s']:.0f} s "
        f"(writer process peak RSS {built.get('build_peak_rss_mb', float('nan')):.0f} MB); "
        f"load {r['load_s']:.2f} s; RSS {r['rss_mb']:.0f} MB; mask p50 {r['mask_ms_p50']:.2f} ms "
        f"(first query of a caller and filters {r['mask_first_ms_p50']:.2f} ms); "
        f"recall@10 {r['recall@10']:.3f}",
        "",
        "| stage | p50 ms | p95 ms | CPU p50 ms | CPU p95 ms |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, t in r["stages"].items():
        c = ours["stages_cpu"][name]
        lines.append(
            f"| {name} | {t['p50_ms']:.1f} | {t['p95_ms']:.1f} | {c['p50_ms']:.1f} "
            f"| {c['p95_ms']:.1f} |"
        )
    lines.append("")
    lines.append(f"pipeline queries/s: ours {r['ours']['qps']:.1f}" + (
        f", LangChain peer {peer['qps']:.2f} ({r['ours']['qps'] / peer['qps']:.0f}x)"
        if peer else ""
    ))  # fmt: skip
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
